import Foundation

/// A pure-Swift SentencePiece Unigram tokenizer that reproduces Hugging Face `tokenizers` on the
/// XLM-R pipeline (multilingual-e5 and the students pruned from it): added tokens split off the
/// raw text → Precompiled charsmap (by grapheme cluster) → runs of spaces collapsed → Metaspace
/// (`▁`, always prepended, split before each `▁`) → Viterbi over piece scores, a run of unknown
/// characters fused into one `<unk>` → `<s> … </s>`, truncation, padding.
///
/// Built from a ``UnigramSpec`` (`unigram_spec.json`, written by the Python exporter). Pieces are
/// keyed by UTF-8 bytes, so canonically equivalent spellings stay distinct as they do in Rust.
public struct UnigramTokenizer: TextTokenizer {
    /// Default sequence length for ``encode(_:maxLength:)``.
    public let maxLength: Int
    public var vocabularySize: Int { pieces.count }
    /// `<s>`: starts every sequence.
    public let clsTokenID: Int32
    /// `</s>`: ends every sequence.
    public let sepTokenID: Int32
    public let padTokenID: Int32
    public let unkTokenID: Int32

    let pieces: [String]
    let scores: [Double]
    let table: PieceTable
    private let normalizer: UnigramNormalizer
    /// Scored below every piece, as tokenizers does: the lowest score minus 10.
    let unknownScore: Double
    private let replacement: UInt32
    private let addedTokens: [(scalars: [UInt32], id: Int32)]

    // MARK: Loading

    /// Reads `unigram_spec.json` (see ``UnigramSpec``).
    public init(specURL: URL, maxLength: Int = 128) throws {
        try self.init(spec: try UnigramSpec(contentsOf: specURL), maxLength: maxLength)
    }

    public init(specData: Data, maxLength: Int = 128) throws {
        try self.init(spec: try UnigramSpec(jsonData: specData), maxLength: maxLength)
    }

    public init(spec: UnigramSpec, maxLength: Int = 128) throws {
        guard maxLength >= 2 else { throw UnigramTokenizerError.invalidMaxLength(maxLength) }
        try spec.validate()
        self.maxLength = maxLength
        pieces = spec.pieces
        scores = spec.scores
        table = PieceTable(pieces: spec.pieces)
        normalizer = UnigramNormalizer(spec: spec)
        unknownScore = (spec.scores.min() ?? 0) - 10
        replacement = spec.metaspace.replacement.unicodeScalars.first!.value
        addedTokens = spec.addedTokens.map { (Array($0.content.unicodeScalars.map(\.value)), Int32($0.id)) }
        clsTokenID = Int32(spec.bosID)
        sepTokenID = Int32(spec.eosID)
        padTokenID = Int32(spec.padID)
        unkTokenID = Int32(spec.unkID)
    }

    // MARK: Public API

    /// The tokens of `text` as tokenizers' `Encoding.tokens` has them, without `<s>`/`</s>`,
    /// untruncated: pieces, added tokens, and for `<unk>` the text it covers.
    public func tokenize(_ text: String) -> [String] {
        var out: [String] = []
        encodePieces(text) { token, _ in out.append(token()) }
        return out
    }

    /// Token ids for `text`, without `<s>`/`</s>`, untruncated.
    public func tokenIDs(_ text: String) -> [Int32] {
        var out: [Int32] = []
        encodePieces(text) { _, id in out.append(id) }
        return out
    }

    public func token(forID id: Int32) -> String? {
        pieces.indices.contains(Int(id)) ? pieces[Int(id)] : nil
    }

    public func id(forToken token: String) -> Int32? {
        table.id(of: Array(token.utf8))
    }

    /// `<s> ids… </s>`, truncated to fit and padded with `<pad>` to `maxLength` (default:
    /// ``maxLength``), like `tokenizer(text, truncation=True, padding="max_length", max_length=N)`.
    public func encode(_ text: String, maxLength: Int? = nil) throws -> TokenEncoding {
        let length = maxLength ?? self.maxLength
        guard length >= 2 else { throw UnigramTokenizerError.invalidMaxLength(length) }
        return .wrapping(tokenIDs(text), start: clsTokenID, end: sepTokenID, pad: padTokenID, length: length)
    }

    /// The normalized text of each piece of `text` between added tokens (for tests and debugging).
    func normalized(_ text: String) -> [String] {
        splitOnAddedTokens(text.unicodeScalars.map(\.value)).compactMap { segment in
            guard case let .text(scalars) = segment else { return nil }
            return String(String.UnicodeScalarView(normalizer.normalize(scalars).compactMap(Unicode.Scalar.init)))
        }
    }

    // MARK: Pipeline

    /// Calls `emit` with each token (its text, built only when asked for) and id, in order.
    private func encodePieces(_ text: String, _ emit: (() -> String, Int32) -> Void) {
        for segment in splitOnAddedTokens(text.unicodeScalars.map(\.value)) {
            switch segment {
            case let .added(id):
                emit({ pieces[Int(id)] }, id)
            case let .text(scalars):
                for word in metaspace(normalizer.normalize(scalars)) {
                    viterbi(word, emit)
                }
            }
        }
    }

    enum Segment {
        case text([UInt32])
        case added(Int32)
    }

    /// tokenizers matches added tokens in the raw text first (leftmost, then longest); the text
    /// between them is normalized and tokenized piece by piece.
    func splitOnAddedTokens(_ scalars: [UInt32]) -> [Segment] {
        guard !addedTokens.isEmpty else { return [.text(scalars)] }
        var segments: [Segment] = []
        var start = 0
        var i = 0
        while i < scalars.count {
            var best: (length: Int, id: Int32)?
            for token in addedTokens where token.scalars.count > (best?.length ?? 0)
                && i + token.scalars.count <= scalars.count
                && scalars[i..<(i + token.scalars.count)].elementsEqual(token.scalars) {
                best = (token.scalars.count, token.id)
            }
            guard let best else {
                i += 1
                continue
            }
            if start < i { segments.append(.text(Array(scalars[start..<i]))) }
            segments.append(.added(best.id))
            i += best.length
            start = i
        }
        if start < scalars.count { segments.append(.text(Array(scalars[start...]))) }
        return segments
    }

    /// Metaspace: spaces become `▁`, a `▁` goes in front, and each `▁` starts a word (UTF-8).
    func metaspace(_ normalized: [UInt32]) -> [[UInt8]] {
        guard !normalized.isEmpty else { return [] }
        var words: [[UInt8]] = []
        var word: [UInt8] = []
        for (i, v) in normalized.enumerated() {
            let scalar = v == 0x20 ? replacement : v
            if scalar == replacement, !word.isEmpty {
                words.append(word)
                word = []
            }
            if i == 0, scalar != replacement { append(replacement, to: &word) }
            append(scalar, to: &word)
        }
        words.append(word)
        return words
    }

    private func append(_ v: UInt32, to bytes: inout [UInt8]) {
        Unicode.UTF8.encode(Unicode.Scalar(v) ?? "\u{FFFD}") { bytes.append($0) }
    }
}
