/// What the rest of MLXEdgeKit needs from a tokenizer: ``BertTokenizer`` (WordPiece) and
/// ``UnigramTokenizer`` (SentencePiece Unigram) both give it.
public protocol TextTokenizer: Sendable {
    /// Number of ids (pieces or vocabulary lines).
    var vocabularySize: Int { get }
    /// The id that starts a sequence (`[CLS]`, `<s>`).
    var clsTokenID: Int32 { get }
    /// The id that ends a sequence (`[SEP]`, `</s>`).
    var sepTokenID: Int32 { get }
    var padTokenID: Int32 { get }
    var unkTokenID: Int32 { get }

    /// Tokens for `text`, without the start/end tokens, untruncated.
    func tokenize(_ text: String) -> [String]
    /// Token ids for `text`, without the start/end tokens, untruncated.
    func tokenIDs(_ text: String) -> [Int32]
    /// The vocabulary entry for an id, or nil when out of range.
    func token(forID id: Int32) -> String?
    /// The id of a vocabulary entry (exact UTF-8 match), or nil.
    func id(forToken token: String) -> Int32?
    /// Start token, ids, end token, truncated to fit and padded to `maxLength` (nil: the
    /// tokenizer's default length).
    func encode(_ text: String, maxLength: Int?) throws -> TokenEncoding
}

extension TextTokenizer {
    /// ``encode(_:maxLength:)`` at the tokenizer's default length (a protocol requirement cannot
    /// default its argument, so `bundle.tokenizer.encode(text)` needs this).
    public func encode(_ text: String) throws -> TokenEncoding {
        try encode(text, maxLength: nil)
    }
}

/// Model inputs for one text: `[CLS] tokens… [SEP] [PAD]…` (or `<s> … </s> <pad>…`).
public struct TokenEncoding: Sendable, Equatable {
    /// Token ids, padded with the pad id to the requested length.
    public var inputIds: [Int32]
    /// 1 for real tokens (the start and end tokens included), 0 for padding.
    public var attentionMask: [Int32]
    /// Number of real tokens, start and end included (= sum of the mask).
    public var tokenCount: Int
    /// Whether tokens were dropped to fit the length.
    public var isTruncated: Bool

    /// `start ids… end`, keeping `ids` that fit in `length`, then padding.
    static func wrapping(_ ids: [Int32], start: Int32, end: Int32, pad: Int32, length: Int) -> TokenEncoding {
        let room = length - 2
        let truncated = ids.count > room
        var inputIds: [Int32] = []
        inputIds.reserveCapacity(length)
        inputIds.append(start)
        inputIds.append(contentsOf: truncated ? ids[..<room] : ids[...])
        inputIds.append(end)
        let count = inputIds.count
        var mask = [Int32](repeating: 1, count: count)
        if count < length {
            inputIds.append(contentsOf: repeatElement(pad, count: length - count))
            mask.append(contentsOf: repeatElement(0, count: length - count))
        }
        return TokenEncoding(inputIds: inputIds, attentionMask: mask, tokenCount: count, isTruncated: truncated)
    }
}
