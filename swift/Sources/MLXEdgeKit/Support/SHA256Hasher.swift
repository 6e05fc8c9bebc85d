import Foundation

/// SHA-256 (FIPS 180-4) in pure Swift, so the bundle's file digests can be checked on every
/// platform (CryptoKit is Apple-only). Streaming: feed bytes with ``update(_:)`` in any
/// pieces, then call ``finalize()``.
///
/// Named `SHA256Hasher`, not `SHA256`, so it never clashes with CryptoKit's type in an app
/// that imports both.
public struct SHA256Hasher: Sendable {
    public static let digestByteCount = 32
    static let blockByteCount = 64

    private var state: [UInt32] = [
        0x6a09_e667, 0xbb67_ae85, 0x3c6e_f372, 0xa54f_f53a, 0x510e_527f, 0x9b05_688c, 0x1f83_d9ab, 0x5be0_cd19,
    ]
    /// Bytes of an incomplete block (always fewer than 64).
    private var pending: [UInt8] = []
    private var byteCount: UInt64 = 0

    public init() {
        pending.reserveCapacity(SHA256Hasher.blockByteCount)
    }

    /// Adds `data` to the message.
    public mutating func update<D: DataProtocol>(_ data: D) {
        for region in data.regions {
            region.withUnsafeBytes { update(bufferPointer: $0) }
        }
    }

    /// Adds the bytes of `buffer` to the message.
    public mutating func update(bufferPointer buffer: UnsafeRawBufferPointer) {
        guard let base = buffer.baseAddress, buffer.count > 0 else { return }
        byteCount &+= UInt64(buffer.count)
        var offset = 0
        if !pending.isEmpty {
            let take = min(SHA256Hasher.blockByteCount - pending.count, buffer.count)
            pending.append(contentsOf: UnsafeRawBufferPointer(start: base, count: take))
            offset = take
            guard pending.count == SHA256Hasher.blockByteCount else { return }
            compressPending()
        }
        while buffer.count - offset >= SHA256Hasher.blockByteCount {
            SHA256Hasher.compress(&state, base + offset)
            offset += SHA256Hasher.blockByteCount
        }
        if offset < buffer.count {
            pending.append(contentsOf: UnsafeRawBufferPointer(start: base + offset, count: buffer.count - offset))
        }
    }

    /// The 32-byte digest of everything added so far. The hasher itself is left unchanged.
    public func finalize() -> [UInt8] {
        var copy = self
        let bitLength = byteCount &* 8
        copy.pending.append(0x80)
        if copy.pending.count > 56 {
            copy.pending.append(contentsOf: repeatElement(0, count: SHA256Hasher.blockByteCount - copy.pending.count))
            copy.compressPending()
        }
        copy.pending.append(contentsOf: repeatElement(0, count: 56 - copy.pending.count))
        for shift in stride(from: 56, through: 0, by: -8) {
            copy.pending.append(UInt8(truncatingIfNeeded: bitLength >> UInt64(shift)))
        }
        copy.compressPending()
        var digest: [UInt8] = []
        digest.reserveCapacity(SHA256Hasher.digestByteCount)
        for word in copy.state {
            digest.append(UInt8(truncatingIfNeeded: word >> 24))
            digest.append(UInt8(truncatingIfNeeded: word >> 16))
            digest.append(UInt8(truncatingIfNeeded: word >> 8))
            digest.append(UInt8(truncatingIfNeeded: word))
        }
        return digest
    }

    /// The digest as 64 lowercase hex characters (the form manifest.json uses).
    public func finalizeHex() -> String {
        SHA256Hasher.hex(finalize())
    }

    // MARK: One-shot helpers

    public static func hash<D: DataProtocol>(_ data: D) -> [UInt8] {
        var hasher = SHA256Hasher()
        hasher.update(data)
        return hasher.finalize()
    }

    public static func hexDigest<D: DataProtocol>(_ data: D) -> String {
        hex(hash(data))
    }

    /// The hex digest of a file, read in chunks (the file is never loaded whole).
    public static func hexDigest(ofFileAt url: URL, chunkSize: Int = 1 << 20) throws -> String {
        let handle = try FileHandle(forReadingFrom: url)
        defer { try? handle.close() }
        var hasher = SHA256Hasher()
        while let chunk = try handle.read(upToCount: max(chunkSize, 1)), !chunk.isEmpty {
            hasher.update(chunk)
        }
        return hasher.finalizeHex()
    }

    /// Lowercase hex of `bytes`.
    public static func hex<C: Sequence>(_ bytes: C) -> String where C.Element == UInt8 {
        let digits = Array("0123456789abcdef".utf8)
        var out: [UInt8] = []
        for byte in bytes {
            out.append(digits[Int(byte >> 4)])
            out.append(digits[Int(byte & 0x0F)])
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// Whether `text` is a SHA-256 hex digest as manifest.json writes it: exactly 64
    /// characters `0-9a-f` (lowercase).
    public static func isHexDigest(_ text: String) -> Bool {
        let bytes = Array(text.utf8)
        return bytes.count == 2 * digestByteCount
            && bytes.allSatisfy { ($0 >= 0x30 && $0 <= 0x39) || ($0 >= 0x61 && $0 <= 0x66) }
    }

    // MARK: Compression

    private mutating func compressPending() {
        pending.withUnsafeBytes { SHA256Hasher.compress(&state, $0.baseAddress!) }
        pending.removeAll(keepingCapacity: true)
    }

    private static let k: [UInt32] = [
        0x428a_2f98, 0x7137_4491, 0xb5c0_fbcf, 0xe9b5_dba5, 0x3956_c25b, 0x59f1_11f1, 0x923f_82a4, 0xab1c_5ed5,
        0xd807_aa98, 0x1283_5b01, 0x2431_85be, 0x550c_7dc3, 0x72be_5d74, 0x80de_b1fe, 0x9bdc_06a7, 0xc19b_f174,
        0xe49b_69c1, 0xefbe_4786, 0x0fc1_9dc6, 0x240c_a1cc, 0x2de9_2c6f, 0x4a74_84aa, 0x5cb0_a9dc, 0x76f9_88da,
        0x983e_5152, 0xa831_c66d, 0xb003_27c8, 0xbf59_7fc7, 0xc6e0_0bf3, 0xd5a7_9147, 0x06ca_6351, 0x1429_2967,
        0x27b7_0a85, 0x2e1b_2138, 0x4d2c_6dfc, 0x5338_0d13, 0x650a_7354, 0x766a_0abb, 0x81c2_c92e, 0x9272_2c85,
        0xa2bf_e8a1, 0xa81a_664b, 0xc24b_8b70, 0xc76c_51a3, 0xd192_e819, 0xd699_0624, 0xf40e_3585, 0x106a_a070,
        0x19a4_c116, 0x1e37_6c08, 0x2748_774c, 0x34b0_bcb5, 0x391c_0cb3, 0x4ed8_aa4a, 0x5b9c_ca4f, 0x682e_6ff3,
        0x748f_82ee, 0x78a5_636f, 0x84c8_7814, 0x8cc7_0208, 0x90be_fffa, 0xa450_6ceb, 0xbef9_a3f7, 0xc671_78f2,
    ]

    @inline(__always)
    private static func rotr(_ x: UInt32, _ n: UInt32) -> UInt32 {
        (x >> n) | (x << (32 - n))
    }

    /// Processes one 64-byte block at `block`.
    private static func compress(_ state: inout [UInt32], _ block: UnsafeRawPointer) {
        withUnsafeTemporaryAllocation(of: UInt32.self, capacity: 64) { w in
            for i in 0..<16 {
                w[i] = UInt32(bigEndian: block.loadUnaligned(fromByteOffset: i * 4, as: UInt32.self))
            }
            for i in 16..<64 {
                let s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3)
                let s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10)
                w[i] = w[i - 16] &+ s0 &+ w[i - 7] &+ s1
            }
            var a = state[0], b = state[1], c = state[2], d = state[3]
            var e = state[4], f = state[5], g = state[6], h = state[7]
            k.withUnsafeBufferPointer { k in
                for i in 0..<64 {
                    let s1 = rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)
                    let choice = (e & f) ^ (~e & g)
                    let t1 = h &+ s1 &+ choice &+ k[i] &+ w[i]
                    let s0 = rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)
                    let majority = (a & b) ^ (a & c) ^ (b & c)
                    let t2 = s0 &+ majority
                    h = g
                    g = f
                    f = e
                    e = d &+ t1
                    d = c
                    c = b
                    b = a
                    a = t1 &+ t2
                }
            }
            state[0] &+= a
            state[1] &+= b
            state[2] &+= c
            state[3] &+= d
            state[4] &+= e
            state[5] &+= f
            state[6] &+= g
            state[7] &+= h
        }
    }
}
