import Foundation

/// Errors thrown while building a ``BertTokenizer`` or encoding text.
public enum BertTokenizerError: Error, Equatable, Sendable, CustomStringConvertible, LocalizedError {
    /// The vocabulary file does not exist.
    case vocabularyFileNotFound(path: String)
    /// The vocabulary file exists but could not be read.
    case vocabularyUnreadable(path: String, reason: String)
    /// The vocabulary file is not valid UTF-8.
    case vocabularyNotUTF8(path: String)
    /// The vocabulary has no tokens at all.
    case emptyVocabulary
    /// A required special token (e.g. `[CLS]`) is not in the vocabulary.
    case missingSpecialToken(role: String, token: String)
    /// A sequence length below 2 cannot even hold `[CLS]` and `[SEP]`.
    case invalidMaxLength(Int)
    /// `maxInputCharsPerWord` must be positive.
    case invalidMaxInputCharsPerWord(Int)

    public var description: String {
        switch self {
        case let .vocabularyFileNotFound(path):
            return "BertTokenizer: vocabulary file not found at \(path)"
        case let .vocabularyUnreadable(path, reason):
            return "BertTokenizer: could not read vocabulary file \(path): \(reason)"
        case let .vocabularyNotUTF8(path):
            return "BertTokenizer: vocabulary file \(path) is not valid UTF-8"
        case .emptyVocabulary:
            return "BertTokenizer: the vocabulary is empty"
        case let .missingSpecialToken(role, token):
            return "BertTokenizer: the vocabulary has no \(role) token \"\(token)\""
        case let .invalidMaxLength(n):
            return "BertTokenizer: maxLength must be at least 2 (room for [CLS] and [SEP]), got \(n)"
        case let .invalidMaxInputCharsPerWord(n):
            return "BertTokenizer: maxInputCharsPerWord must be positive, got \(n)"
        }
    }

    public var errorDescription: String? { description }
}

/// A pure-Swift BERT WordPiece tokenizer that reproduces Hugging Face's
/// `BertTokenizer` (the Rust `tokenizers` backend used by transformers 5):
/// `BertNormalizer` → `BertPreTokenizer` → `WordPiece`, plus the `[CLS] … [SEP]`
/// template, `truncation=True` and `padding="max_length"`.
///
/// Text is processed as Unicode scalars (never `Character`s) and the vocabulary is
/// keyed by UTF-8 bytes, so canonically-equivalent but differently-encoded strings
/// ("à" vs "a\u{300}") stay distinct exactly as they are in Hugging Face.
public struct BertTokenizer: TextTokenizer {

    /// Tokenizer settings, mirroring `tokenizer_config.json`.
    public struct Configuration: Sendable, Equatable, Codable {
        /// Lowercase the input (`do_lower_case`).
        public var doLowerCase: Bool
        /// Strip accents (NFD + drop nonspacing marks). `nil` follows `doLowerCase`.
        public var stripAccents: Bool?
        /// Put spaces around CJK ideographs so each becomes its own word.
        public var tokenizeChineseChars: Bool
        /// Default sequence length for ``BertTokenizer/encode(_:maxLength:)``.
        public var maxLength: Int
        /// Words longer than this many scalars become `[UNK]`.
        public var maxInputCharsPerWord: Int
        public var clsToken: String
        public var sepToken: String
        public var padToken: String
        public var unkToken: String
        /// Also kept whole when it appears in the input; ignored if not in the vocabulary.
        public var maskToken: String?
        public var continuingSubwordPrefix: String

        public init(
            doLowerCase: Bool = true,
            stripAccents: Bool? = nil,
            tokenizeChineseChars: Bool = true,
            maxLength: Int = 128,
            maxInputCharsPerWord: Int = 100,
            clsToken: String = "[CLS]",
            sepToken: String = "[SEP]",
            padToken: String = "[PAD]",
            unkToken: String = "[UNK]",
            maskToken: String? = "[MASK]",
            continuingSubwordPrefix: String = "##"
        ) {
            self.doLowerCase = doLowerCase
            self.stripAccents = stripAccents
            self.tokenizeChineseChars = tokenizeChineseChars
            self.maxLength = maxLength
            self.maxInputCharsPerWord = maxInputCharsPerWord
            self.clsToken = clsToken
            self.sepToken = sepToken
            self.padToken = padToken
            self.unkToken = unkToken
            self.maskToken = maskToken
            self.continuingSubwordPrefix = continuingSubwordPrefix
        }

        /// Whether accents are stripped (`stripAccents ?? doLowerCase`).
        public var effectiveStripAccents: Bool { stripAccents ?? doLowerCase }
    }

    /// Model inputs for one text: `[CLS] tokens… [SEP] [PAD]…`.
    public typealias Encoding = TokenEncoding

    public let configuration: Configuration
    /// Vocabulary size (number of lines in `vocab.txt`).
    public var vocabularySize: Int { idToToken.count }

    public let clsTokenID: Int32
    public let sepTokenID: Int32
    public let padTokenID: Int32
    public let unkTokenID: Int32

    private let vocab: [[UInt8]: Int32]
    private let idToToken: [String]
    /// Special tokens matched verbatim in the raw input (HF "added tokens").
    private let specialTokens: [(scalars: [Unicode.Scalar], token: String, id: Int32)]
    private let prefixBytes: [UInt8]
    /// Longest vocabulary entry in scalars (lets WordPiece skip impossible lookups).
    private let longestTokenScalars: Int

    // MARK: Loading

    /// Loads `vocab.txt` (one token per line, id = line index) the way transformers'
    /// `load_vocab` reads it (UTF-8, universal newlines, a repeated token keeps its last id).
    public init(vocabularyURL: URL, configuration: Configuration = Configuration()) throws {
        let path = vocabularyURL.path
        guard FileManager.default.fileExists(atPath: path) else {
            throw BertTokenizerError.vocabularyFileNotFound(path: path)
        }
        let data: Data
        do {
            data = try Data(contentsOf: vocabularyURL)
        } catch {
            throw BertTokenizerError.vocabularyUnreadable(path: path, reason: error.localizedDescription)
        }
        guard let lines = BertTokenizer.splitVocabularyLines(data) else {
            throw BertTokenizerError.vocabularyNotUTF8(path: path)
        }
        try self.init(vocabularyBytes: lines, configuration: configuration)
    }

    /// Builds a tokenizer from tokens in id order.
    public init(vocabulary: [String], configuration: Configuration = Configuration()) throws {
        try self.init(vocabularyBytes: vocabulary.map { Array($0.utf8) }, configuration: configuration)
    }

    private init(vocabularyBytes tokens: [[UInt8]], configuration: Configuration) throws {
        guard configuration.maxLength >= 2 else {
            throw BertTokenizerError.invalidMaxLength(configuration.maxLength)
        }
        guard configuration.maxInputCharsPerWord > 0 else {
            throw BertTokenizerError.invalidMaxInputCharsPerWord(configuration.maxInputCharsPerWord)
        }
        guard !tokens.isEmpty else { throw BertTokenizerError.emptyVocabulary }
        var vocab: [[UInt8]: Int32] = [:]
        vocab.reserveCapacity(tokens.count)
        var idToToken: [String] = []
        idToToken.reserveCapacity(tokens.count)
        var longest = 1
        for (index, bytes) in tokens.enumerated() {
            vocab[bytes] = Int32(index) // a repeated line keeps its last index, like a Python dict
            let token = String(decoding: bytes, as: UTF8.self)
            idToToken.append(token)
            longest = max(longest, token.unicodeScalars.count)
        }
        func id(_ role: String, _ token: String) throws -> Int32 {
            guard let id = vocab[Array(token.utf8)] else {
                throw BertTokenizerError.missingSpecialToken(role: role, token: token)
            }
            return id
        }
        self.clsTokenID = try id("CLS", configuration.clsToken)
        self.sepTokenID = try id("SEP", configuration.sepToken)
        self.padTokenID = try id("PAD", configuration.padToken)
        self.unkTokenID = try id("UNK", configuration.unkToken)
        var specials: [(scalars: [Unicode.Scalar], token: String, id: Int32)] = []
        var candidates = [configuration.padToken, configuration.unkToken, configuration.clsToken, configuration.sepToken]
        if let mask = configuration.maskToken { candidates.append(mask) }
        for token in candidates where !token.isEmpty && !specials.contains(where: { $0.token.utf8.elementsEqual(token.utf8) }) {
            if let tid = vocab[Array(token.utf8)] {
                specials.append((Array(token.unicodeScalars), token, tid))
            }
        }
        self.configuration = configuration
        self.vocab = vocab
        self.idToToken = idToToken
        self.specialTokens = specials
        self.prefixBytes = Array(configuration.continuingSubwordPrefix.utf8)
        self.longestTokenScalars = longest
    }

    /// Splits like Python's text-mode `readlines()`: `\n`, `\r\n` and `\r` end a line;
    /// a final line without newline still counts. Returns nil for invalid UTF-8.
    static func splitVocabularyLines(_ data: Data) -> [[UInt8]]? {
        let bytes = [UInt8](data)
        guard String(data: data, encoding: .utf8) != nil || bytes.isEmpty else { return nil }
        var lines: [[UInt8]] = []
        var current: [UInt8] = []
        var i = 0
        while i < bytes.count {
            let b = bytes[i]
            if b == 0x0A || b == 0x0D {
                lines.append(current)
                current = []
                if b == 0x0D, i + 1 < bytes.count, bytes[i + 1] == 0x0A { i += 1 }
            } else {
                current.append(b)
            }
            i += 1
        }
        if !current.isEmpty { lines.append(current) }
        return lines
    }

    // MARK: Public API

    /// Word pieces for `text`, without `[CLS]`/`[SEP]`, untruncated
    /// (what `tokenizer.tokenize(text)` returns in transformers).
    public func tokenize(_ text: String) -> [String] {
        pieces(text).map { $0.token }
    }

    /// Token ids for `text`, without `[CLS]`/`[SEP]`, untruncated.
    public func tokenIDs(_ text: String) -> [Int32] {
        pieces(text).map { $0.id }
    }

    /// The vocabulary entry for an id, or nil when out of range.
    public func token(forID id: Int32) -> String? {
        id >= 0 && Int(id) < idToToken.count ? idToToken[Int(id)] : nil
    }

    /// The id of a vocabulary entry (exact UTF-8 match), or nil.
    public func id(forToken token: String) -> Int32? {
        vocab[Array(token.utf8)]
    }

    /// `[CLS] pieces… [SEP]`, truncated to fit and padded with `[PAD]` to `maxLength`
    /// (default: `configuration.maxLength`), like Hugging Face's
    /// `tokenizer(text, truncation=True, padding="max_length", max_length=N)`.
    public func encode(_ text: String, maxLength: Int? = nil) throws -> Encoding {
        let length = maxLength ?? configuration.maxLength
        guard length >= 2 else { throw BertTokenizerError.invalidMaxLength(length) }
        var ids = tokenIDs(text)
        let room = length - 2
        let truncated = ids.count > room
        if truncated { ids.removeSubrange(room...) }
        var inputIds: [Int32] = []
        inputIds.reserveCapacity(length)
        inputIds.append(clsTokenID)
        inputIds.append(contentsOf: ids)
        inputIds.append(sepTokenID)
        let count = inputIds.count
        var mask = [Int32](repeating: 1, count: count)
        if count < length {
            inputIds.append(contentsOf: repeatElement(padTokenID, count: length - count))
            mask.append(contentsOf: repeatElement(0, count: length - count))
        }
        return Encoding(inputIds: inputIds, attentionMask: mask, tokenCount: count, isTruncated: truncated)
    }

    // MARK: Pipeline

    struct Piece: Equatable {
        var token: String
        var id: Int32
    }

    func pieces(_ text: String) -> [Piece] {
        var out: [Piece] = []
        for segment in splitOnSpecialTokens(Array(text.unicodeScalars)) {
            switch segment {
            case let .special(token, id):
                out.append(Piece(token: token, id: id))
            case let .text(scalars):
                for word in preTokenize(normalize(scalars)) {
                    wordPiece(word, into: &out)
                }
            }
        }
        return out
    }

    enum Segment {
        case text([Unicode.Scalar])
        case special(String, Int32)
    }

    /// Special tokens in the raw input are kept whole (Hugging Face matches its
    /// non-normalized added tokens, leftmost-longest, before normalization).
    func splitOnSpecialTokens(_ scalars: [Unicode.Scalar]) -> [Segment] {
        // Fast path: no scalar of the text can start a special token.
        guard scalars.contains(where: { s in specialTokens.contains { $0.scalars.first == s } }) else {
            return [.text(scalars)]
        }
        var segments: [Segment] = []
        var start = 0
        var i = 0
        while i < scalars.count {
            var best: (length: Int, token: String, id: Int32)?
            for special in specialTokens {
                let n = special.scalars.count
                guard n > 0, i + n <= scalars.count, n > (best?.length ?? 0) else { continue }
                var match = true
                for k in 0..<n where scalars[i + k] != special.scalars[k] {
                    match = false
                    break
                }
                if match { best = (n, special.token, special.id) }
            }
            if let best {
                if start < i { segments.append(.text(Array(scalars[start..<i]))) }
                segments.append(.special(best.token, best.id))
                i += best.length
                start = i
            } else {
                i += 1
            }
        }
        if start < scalars.count { segments.append(.text(Array(scalars[start...]))) }
        return segments
    }

    /// `BertNormalizer`: clean text, pad CJK ideographs, strip accents (NFD, drop Mn), lowercase.
    func normalize(_ input: [Unicode.Scalar]) -> [Unicode.Scalar] {
        var scalars: [Unicode.Scalar] = []
        scalars.reserveCapacity(input.count)
        var hasNonASCII = false
        for s in input {
            let v = s.value
            if BertCharacterClass.isRemovedByCleanText(v) { continue }
            if BertCharacterClass.isWhitespace(v) {
                scalars.append(" ")
            } else if configuration.tokenizeChineseChars && BertCharacterClass.isChineseChar(v) {
                scalars.append(" ")
                scalars.append(s)
                scalars.append(" ")
                hasNonASCII = true
            } else {
                scalars.append(s)
                if v >= 0x80 { hasNonASCII = true }
            }
        }
        if configuration.effectiveStripAccents && hasNonASCII {
            scalars = BertCharacterClass.canonicalDecomposition(scalars).filter {
                !BertCharacterClass.isNonspacingMark($0.value)
            }
        }
        if configuration.doLowerCase {
            var lowered: [Unicode.Scalar] = []
            lowered.reserveCapacity(scalars.count)
            for s in scalars {
                if s.value < 0x80 {
                    lowered.append(s.value >= 0x41 && s.value <= 0x5A ? Unicode.Scalar(s.value + 32)! : s)
                } else {
                    lowered.append(contentsOf: s.properties.lowercaseMapping.unicodeScalars)
                }
            }
            scalars = lowered
        }
        return scalars
    }

    /// `BertPreTokenizer`: split on whitespace (dropped) and punctuation (kept, alone).
    func preTokenize(_ scalars: [Unicode.Scalar]) -> [[Unicode.Scalar]] {
        var words: [[Unicode.Scalar]] = []
        var current: [Unicode.Scalar] = []
        for s in scalars {
            let v = s.value
            if BertCharacterClass.isWhitespace(v) {
                if !current.isEmpty { words.append(current); current = [] }
            } else if BertCharacterClass.isPunctuation(v) {
                if !current.isEmpty { words.append(current); current = [] }
                words.append([s])
            } else {
                current.append(s)
            }
        }
        if !current.isEmpty { words.append(current) }
        return words
    }

    /// Greedy longest-match-first WordPiece; any miss makes the whole word `[UNK]`.
    func wordPiece(_ word: [Unicode.Scalar], into out: inout [Piece]) {
        if word.count > configuration.maxInputCharsPerWord {
            out.append(Piece(token: configuration.unkToken, id: unkTokenID))
            return
        }
        // UTF-8 bytes of the word and the byte offset of every scalar boundary.
        var bytes: [UInt8] = []
        var offsets: [Int] = [0]
        for s in word {
            UTF8.encode(s) { bytes.append($0) }
            offsets.append(bytes.count)
        }
        var found: [Piece] = []
        var start = 0
        while start < word.count {
            var end = min(word.count, start + longestTokenScalars)
            var match: Piece?
            while start < end {
                var key: [UInt8]
                if start > 0 {
                    key = prefixBytes
                    key.append(contentsOf: bytes[offsets[start]..<offsets[end]])
                } else {
                    key = Array(bytes[offsets[start]..<offsets[end]])
                }
                if let id = vocab[key] {
                    match = Piece(token: idToToken[Int(id)], id: id)
                    break
                }
                end -= 1
            }
            guard let piece = match else {
                out.append(Piece(token: configuration.unkToken, id: unkTokenID))
                return
            }
            found.append(piece)
            start = end
        }
        out.append(contentsOf: found)
    }
}

/// Character classes of Hugging Face's Rust `BertNormalizer` / `BertPreTokenizer`.
enum BertCharacterClass {
    static func isRemovedByCleanText(_ v: UInt32) -> Bool {
        if v >= 0x20 && v < 0x7F { return false }
        return inRanges(BertUnicodeTables.removedByCleanText, v)
    }

    static func isWhitespace(_ v: UInt32) -> Bool {
        if v == 0x20 { return true }
        if v < 0x09 || (v > 0x20 && v < 0x85) { return false }
        return inRanges(BertUnicodeTables.whitespace, v)
    }

    static func isPunctuation(_ v: UInt32) -> Bool {
        if v < 0x80 {
            return (33...47).contains(v) || (58...64).contains(v) || (91...96).contains(v) || (123...126).contains(v)
        }
        return inRanges(BertUnicodeTables.punctuation, v)
    }

    static func isNonspacingMark(_ v: UInt32) -> Bool {
        if v < 0x300 { return false }
        return inRanges(BertUnicodeTables.nonspacingMarks, v)
    }

    /// The CJK ranges of the Rust `is_chinese_char` (note 0x2B920, not Python's 0x2B820).
    static func isChineseChar(_ v: UInt32) -> Bool {
        switch v {
        case 0x4E00...0x9FFF, 0x3400...0x4DBF, 0x20000...0x2A6DF, 0x2A700...0x2B73F,
             0x2B740...0x2B81F, 0x2B920...0x2CEAF, 0xF900...0xFAFF, 0x2F800...0x2FA1F:
            return true
        default:
            return false
        }
    }

    /// NFD, except for the few scalars the Rust normalizer (older Unicode data) leaves
    /// whole. Those are starters, so splitting around them cannot change the reordering.
    static func canonicalDecomposition(_ scalars: [Unicode.Scalar]) -> [Unicode.Scalar] {
        var out: [Unicode.Scalar] = []
        out.reserveCapacity(scalars.count + 8)
        var pending = String.UnicodeScalarView()
        func flush() {
            guard !pending.isEmpty else { return }
            if pending.allSatisfy({ $0.value < 0xC0 }) {
                out.append(contentsOf: pending)
            } else {
                out.append(contentsOf: String(pending).decomposedStringWithCanonicalMapping.unicodeScalars)
            }
            pending = String.UnicodeScalarView()
        }
        for s in scalars {
            if BertUnicodeTables.nfdExceptions.contains(s.value) {
                flush()
                out.append(s)
            } else {
                pending.append(s)
            }
        }
        flush()
        return out
    }

    /// Binary search in a flat, sorted list of inclusive `[lo, hi]` pairs.
    static func inRanges(_ table: [UInt32], _ v: UInt32) -> Bool {
        var lo = 0
        var hi = table.count / 2 - 1
        while lo <= hi {
            let mid = (lo + hi) / 2
            if v < table[2 * mid] {
                hi = mid - 1
            } else if v > table[2 * mid + 1] {
                lo = mid + 1
            } else {
                return true
            }
        }
        return false
    }
}
