/// The Unigram vocabulary keyed by UTF-8 bytes: one byte blob, and an open-addressing hash table
/// of ids. No `String` comparison anywhere (Swift's would merge canonically equivalent pieces),
/// and no allocation per piece, so a 250k-piece vocabulary loads in a few milliseconds.
struct PieceTable: Sendable {
    private let blob: [UInt8]
    private let starts: [Int32]        // piece id -> its bytes, blob[starts[id]..<starts[id + 1]]
    private let slots: [Int32]         // -1: empty
    private let slotHashes: [UInt64]
    private let mask: Int
    /// The longest piece, in bytes: a lookup never needs to look further.
    let maxPieceBytes: Int

    static let fnvOffset: UInt64 = 0xcbf2_9ce4_8422_2325
    static let fnvPrime: UInt64 = 0x100_0000_01b3

    /// FNV-1a, one byte at a time, so a caller can extend a key and look up each prefix.
    @inline(__always)
    static func hash(_ h: UInt64, _ byte: UInt8) -> UInt64 {
        (h ^ UInt64(byte)) &* fnvPrime
    }

    /// `pieces` in id order; a repeated piece keeps its last id, as tokenizers' vocabulary map does.
    init(pieces: [String]) {
        var blob: [UInt8] = []
        var starts: [Int32] = [0]
        starts.reserveCapacity(pieces.count + 1)
        var longest = 0
        for piece in pieces {
            blob.append(contentsOf: piece.utf8)
            longest = max(longest, blob.count - Int(starts[starts.count - 1]))
            starts.append(Int32(blob.count))
        }
        var capacity = 16
        while capacity < pieces.count * 2 { capacity *= 2 }
        var slots = [Int32](repeating: -1, count: capacity)
        var slotHashes = [UInt64](repeating: 0, count: capacity)
        let mask = capacity - 1
        for id in 0..<pieces.count {
            let range = Int(starts[id])..<Int(starts[id + 1])
            var h = Self.fnvOffset
            for i in range { h = Self.hash(h, blob[i]) }
            var slot = Self.slot(h, mask)
            while slots[slot] >= 0 {
                let other = Int(slots[slot])
                if slotHashes[slot] == h,
                   blob[Int(starts[other])..<Int(starts[other + 1])].elementsEqual(blob[range]) {
                    break  // same bytes: the later id replaces the earlier
                }
                slot = (slot + 1) & mask
            }
            slots[slot] = Int32(id)
            slotHashes[slot] = h
        }
        self.blob = blob
        self.starts = starts
        self.slots = slots
        self.slotHashes = slotHashes
        self.mask = mask
        self.maxPieceBytes = longest
    }

    @inline(__always)
    private static func slot(_ h: UInt64, _ mask: Int) -> Int {
        Int(truncatingIfNeeded: h ^ (h >> 29)) & mask
    }

    /// The id of the piece whose bytes are `bytes[range]` (`h` is their FNV-1a hash), or nil.
    @inline(__always)
    func id(hash h: UInt64, bytes: UnsafeBufferPointer<UInt8>, range: Range<Int>) -> Int32? {
        var slot = Self.slot(h, mask)
        while true {
            let id = slots[slot]
            if id < 0 { return nil }
            if slotHashes[slot] == h {
                let start = Int(starts[Int(id)])
                let end = Int(starts[Int(id) + 1])
                if end - start == range.count {
                    var i = range.lowerBound
                    var j = start
                    while j < end && blob[j] == bytes[i] {
                        i += 1
                        j += 1
                    }
                    if j == end { return id }
                }
            }
            slot = (slot + 1) & mask
        }
    }

    /// The id of the piece with exactly these bytes, or nil.
    func id(of bytes: [UInt8]) -> Int32? {
        var h = Self.fnvOffset
        for b in bytes { h = Self.hash(h, b) }
        return bytes.withUnsafeBufferPointer { id(hash: h, bytes: $0, range: 0..<bytes.count) }
    }
}
