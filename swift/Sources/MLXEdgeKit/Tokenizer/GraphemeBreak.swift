/// Extended grapheme clusters cut exactly where Hugging Face `tokenizers` cuts them.
///
/// The Precompiled normalizer of a SentencePiece tokenizer looks up whole clusters, so a different
/// cut changes the normalized text. Swift's `Character` follows the OS's Unicode version, which
/// changes between releases; this follows UAX #29 (GB3–GB13, GB9c included) with frozen tables
/// probed from the Rust library (`GraphemeBreakTables.swift`, Unicode 17 as of tokenizers 0.23).
enum GraphemeBreak {
    /// Grapheme_Cluster_Break, with Extended_Pictographic and InCB=Consonant folded in (they only
    /// ever fall on `Other` characters).
    enum Category: UInt8 {
        case other, cr, lf, control, extend, zwj, spacingMark, prepend
        case l, v, t, lv, lvt, regionalIndicator, extendedPictographic, incbConsonant
    }

    static func category(_ v: UInt32) -> Category {
        if v < 0x7F {
            if v >= 0x20 { return .other }
            return v == 0x0D ? .cr : v == 0x0A ? .lf : .control
        }
        guard let i = rangeIndex(v, classRanges, lo: \.0, hi: \.1) else { return .other }
        return classRanges[i].2
    }

    static func isIncbLinker(_ v: UInt32) -> Bool {
        v >= 0x300 && rangeIndex(v, incbLinkerRanges, lo: \.0, hi: \.1) != nil
    }

    static func isIncbExtend(_ v: UInt32) -> Bool {
        v >= 0x300 && rangeIndex(v, incbExtendRanges, lo: \.0, hi: \.1) != nil
    }

    private static func rangeIndex<T>(_ v: UInt32, _ table: [T], lo: KeyPath<T, UInt32>, hi: KeyPath<T, UInt32>) -> Int? {
        var low = 0
        var high = table.count
        while low < high {
            let mid = (low + high) / 2
            if table[mid][keyPath: hi] < v {
                low = mid + 1
            } else if table[mid][keyPath: lo] > v {
                high = mid
            } else {
                return mid
            }
        }
        return nil
    }

    /// The end index of every cluster of `scalars` (scalar values), in order; the last is `count`.
    static func clusterEnds(_ scalars: [UInt32]) -> [Int] {
        var ends: [Int] = []
        guard !scalars.isEmpty else { return ends }
        var state = State()
        var previous = category(scalars[0])
        state.advance(scalars[0], previous)
        for i in 1..<scalars.count {
            let v = scalars[i]
            let next = category(v)
            if state.isBoundary(previous, next) { ends.append(i) }
            state.advance(v, next)
            previous = next
        }
        ends.append(scalars.count)
        return ends
    }

    /// What the look-back rules (GB9c, GB11, GB12/13) need, carried forward scalar by scalar.
    struct State {
        /// GB9c: a consonant followed only by InCB Extend/Linker scalars, with at least one linker.
        var consonant = false
        var linkerAfterConsonant = false
        /// GB11: Extended_Pictographic Extend* (`pictographic`), then a ZWJ (`pictographicZWJ`).
        var pictographic = false
        var pictographicZWJ = false
        /// GB12/13: regional indicators in a row just before this point.
        var regionalCount = 0

        func isBoundary(_ previous: Category, _ next: Category) -> Bool {
            switch (previous, next) {
            case (.cr, .lf): return false                                    // GB3
            case (.control, _), (.cr, _), (.lf, _): return true              // GB4
            case (_, .control), (_, .cr), (_, .lf): return true              // GB5
            case (.l, .l), (.l, .v), (.l, .lv), (.l, .lvt): return false     // GB6
            case (.lv, .v), (.lv, .t), (.v, .v), (.v, .t): return false      // GB7
            case (.lvt, .t), (.t, .t): return false                          // GB8
            case (_, .extend), (_, .zwj), (_, .spacingMark): return false    // GB9, GB9a
            case (.prepend, _): return false                                 // GB9b
            case (_, .incbConsonant): return !linkerAfterConsonant           // GB9c
            case (.zwj, .extendedPictographic): return !pictographicZWJ      // GB11
            case (.regionalIndicator, .regionalIndicator): return regionalCount % 2 == 0 // GB12, GB13
            default: return true                                             // GB999
            }
        }

        mutating func advance(_ v: UInt32, _ category: Category) {
            if category == .incbConsonant {
                consonant = true
                linkerAfterConsonant = false
            } else if GraphemeBreak.isIncbLinker(v) {
                linkerAfterConsonant = consonant
            } else if !GraphemeBreak.isIncbExtend(v) {
                consonant = false
                linkerAfterConsonant = false
            }
            let wasPictographic = pictographic
            pictographic = category == .extendedPictographic || (category == .extend && wasPictographic)
            pictographicZWJ = category == .zwj && wasPictographic
            regionalCount = category == .regionalIndicator ? regionalCount + 1 : 0
        }
    }
}
