extension UnigramTokenizer {
    /// The best segmentation of one Metaspace word (UTF-8), as tokenizers' `encode_optimized`
    /// finds it: positions left to right, every piece that starts there, a path replaced only by
    /// a strictly better score (so on a tie the earliest start wins), an unknown character
    /// scored `unknownScore` where no single-character piece covers it. Calls `emit` per token.
    func viterbi(_ word: [UInt8], _ emit: (() -> String, Int32) -> Void) {
        let n = word.count
        var best = [Double](repeating: 0, count: n + 1)
        var from = [Int](repeating: -1, count: n + 1)
        var ids = [Int32](repeating: 0, count: n + 1)
        word.withUnsafeBufferPointer { bytes in
            var start = 0
            while start < n {
                let base = best[start]
                let charLength = min(Self.utf8Length(lead: bytes[start]), n - start)
                var hasSingle = false
                var h = PieceTable.fnvOffset
                var end = start
                let limit = min(n, start + table.maxPieceBytes)
                while end < limit {
                    h = PieceTable.hash(h, bytes[end])
                    end += 1
                    if end < n && bytes[end] & 0xC0 == 0x80 { continue }  // inside a character
                    guard let id = table.id(hash: h, bytes: bytes, range: start..<end) else { continue }
                    let score = scores[Int(id)] + base
                    if from[end] < 0 || score > best[end] {
                        best[end] = score
                        from[end] = start
                        ids[end] = id
                    }
                    if end - start == charLength { hasSingle = true }
                }
                if !hasSingle {
                    let end = start + charLength
                    let score = unknownScore + base
                    if from[end] < 0 || score > best[end] {
                        best[end] = score
                        from[end] = start
                        ids[end] = unkTokenID
                    }
                }
                start += charLength
            }
        }
        for (range, id) in Self.path(from: from, ids: ids, unknown: unkTokenID) {
            let text = { String(decoding: word[range], as: UTF8.self) }
            // A fused run of unknown characters keeps <unk>'s id unless its text is a piece.
            emit(text, id == unkTokenID ? table.id(of: Array(word[range])) ?? unkTokenID : id)
        }
    }

    /// The best path's tokens as byte ranges, consecutive `<unk>` nodes fused into one.
    static func path(from: [Int], ids: [Int32], unknown: Int32) -> [(Range<Int>, Int32)] {
        var tokens: [(Range<Int>, Int32)] = []
        var end = from.count - 1
        var unknownEnd: Int?
        while end > 0 {
            let start = from[end]
            if ids[end] == unknown {
                if unknownEnd == nil { unknownEnd = end }
            } else {
                if let u = unknownEnd { tokens.append((end..<u, unknown)) }
                unknownEnd = nil
                tokens.append((start..<end, ids[end]))
            }
            end = start
        }
        if let u = unknownEnd { tokens.append((0..<u, unknown)) }
        return tokens.reversed()
    }

    @inline(__always)
    static func utf8Length(lead: UInt8) -> Int {
        lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4
    }
}
