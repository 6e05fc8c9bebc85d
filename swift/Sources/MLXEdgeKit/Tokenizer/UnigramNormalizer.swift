/// The spec's normalizer steps, on Unicode scalar values: the Precompiled charsmap walked as
/// tokenizers walks it, and `Replace(" {2,}", " ")`.
struct UnigramNormalizer: Sendable {
    enum Step: Sendable {
        case charsmap(Charsmap)
        case collapseSpaces
    }

    let steps: [Step]

    init(spec: UnigramSpec) {
        steps = spec.normalizer.map { step in
            step.type == "charsmap" ? .charsmap(Charsmap(pairs: step.map ?? [])) : .collapseSpaces
        }
    }

    func normalize(_ scalars: [UInt32]) -> [UInt32] {
        var text = scalars
        for step in steps {
            switch step {
            case let .charsmap(map): text = map.apply(text)
            case .collapseSpaces: text = Self.collapseSpaces(text)
            }
        }
        return text
    }

    /// Runs of two or more U+0020 become one.
    static func collapseSpaces(_ text: [UInt32]) -> [UInt32] {
        var out: [UInt32] = []
        out.reserveCapacity(text.count)
        for v in text where !(v == 0x20 && out.last == 0x20) {
            out.append(v)
        }
        return out
    }

    /// SentencePiece's precompiled character map, decoded into key -> replacement.
    ///
    /// tokenizers (spm_precompiled) walks the text by grapheme cluster. A cluster shorter than
    /// 6 UTF-8 bytes is replaced whole by the replacement of the *shortest* key that prefixes it
    /// (so "Ａ" + U+0301 becomes "A": the mark goes with it); otherwise, or when no key prefixes
    /// it, each scalar is replaced alone or kept.
    struct Charsmap: Sendable {
        private let keys: [UInt64: Int32]
        private let replacements: [[UInt32]]

        init(pairs: [[String]]) {
            var keys: [UInt64: Int32] = [:]
            keys.reserveCapacity(pairs.count)
            var replacements: [[UInt32]] = []
            replacements.reserveCapacity(pairs.count)
            for pair in pairs {
                var key = Key()
                for s in pair[0].unicodeScalars { key.append(s.value) }
                keys[key.packed] = Int32(replacements.count)  // a repeated key keeps its last replacement
                replacements.append(pair[1].unicodeScalars.map(\.value))
            }
            self.keys = keys
            self.replacements = replacements
        }

        /// Up to 5 UTF-8 bytes and their count, packed into one integer.
        struct Key {
            var bits: UInt64 = 0
            var count = 0

            mutating func append(_ v: UInt32) {
                Unicode.UTF8.encode(Unicode.Scalar(v) ?? "\u{FFFD}") { byte in
                    if count < 7 { bits |= UInt64(byte) << (8 * UInt64(count)) }
                    count += 1
                }
            }

            var packed: UInt64 { bits | UInt64(min(count, 255)) << 56 }
        }

        func apply(_ text: [UInt32]) -> [UInt32] {
            var out: [UInt32] = []
            out.reserveCapacity(text.count)
            var start = 0
            for end in GraphemeBreak.clusterEnds(text) {
                if !replaceWhole(text[start..<end], into: &out) {
                    for v in text[start..<end] {
                        if let r = lookup([v]) { out.append(contentsOf: replacements[r]) } else { out.append(v) }
                    }
                }
                start = end
            }
            return out
        }

        /// The shortest-key replacement of a cluster below 6 bytes; false when none applies.
        private func replaceWhole(_ cluster: ArraySlice<UInt32>, into out: inout [UInt32]) -> Bool {
            var bytes = 0
            for v in cluster { bytes += Self.utf8Count(v) }
            guard bytes < UnigramSpec.graphemeLookupBytes else { return false }
            var key = Key()
            for v in cluster {
                key.append(v)
                if let r = keys[key.packed] {
                    out.append(contentsOf: replacements[Int(r)])
                    return true
                }
            }
            return false
        }

        private func lookup(_ scalars: [UInt32]) -> Int? {
            var key = Key()
            for v in scalars { key.append(v) }
            return keys[key.packed].map(Int.init)
        }

        static func utf8Count(_ v: UInt32) -> Int {
            v < 0x80 ? 1 : v < 0x800 ? 2 : v < 0x10000 ? 3 : 4
        }
    }
}
