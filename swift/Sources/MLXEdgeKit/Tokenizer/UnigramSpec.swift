import Foundation

/// Errors thrown while loading a ``UnigramSpec`` or encoding text with a ``UnigramTokenizer``.
public enum UnigramTokenizerError: Error, Equatable, Sendable, CustomStringConvertible, LocalizedError {
    /// The spec file does not exist.
    case specFileNotFound(path: String)
    /// The spec file exists but could not be read.
    case specUnreadable(path: String, reason: String)
    /// The bytes are not a JSON document of the expected shape.
    case invalidJSON(reason: String)
    /// A document of another format or a newer version.
    case unsupportedFormat(format: String, version: Int)
    /// The document decodes but cannot be used; `field` names where (`scores`, `normalizer[0].map[12]`).
    case invalidSpec(field: String, reason: String)
    /// A sequence length below 2 cannot even hold `<s>` and `</s>`.
    case invalidMaxLength(Int)

    public var description: String {
        switch self {
        case let .specFileNotFound(path):
            return "UnigramTokenizer: spec file not found at \(path)"
        case let .specUnreadable(path, reason):
            return "UnigramTokenizer: could not read spec file \(path): \(reason)"
        case let .invalidJSON(reason):
            return "UnigramTokenizer: the spec is not a valid \(UnigramSpec.format) document: \(reason)"
        case let .unsupportedFormat(format, version):
            return "UnigramTokenizer: the spec is \(format) version \(version); this MLXEdgeKit reads "
                + "\(UnigramSpec.format) version \(UnigramSpec.version) (export the bundle again, or update MLXEdgeKit)"
        case let .invalidSpec(field, reason):
            return "UnigramTokenizer: spec field \(field): \(reason)"
        case let .invalidMaxLength(n):
            return "UnigramTokenizer: maxLength must be at least 2 (room for <s> and </s>), got \(n)"
        }
    }

    public var errorDescription: String? { description }
}

/// The tokenizer document the Python side writes (`mlx_edge/models/unigram_spec.py` documents the
/// format): pieces and scores in id order, special ids, the added tokens, the normalizer steps
/// and the Metaspace settings.
public struct UnigramSpec: Decodable, Sendable {
    public static let format = "mlx-edge.unigram"
    public static let version = 1
    /// The Rust normalizer looks a grapheme cluster up whole only below this many UTF-8 bytes.
    static let graphemeLookupBytes = 6

    public struct AddedToken: Decodable, Sendable {
        public var id: Int
        public var content: String
    }

    public struct NormalizerStep: Decodable, Sendable {
        /// `charsmap` or `collapse_spaces`.
        public var type: String
        /// charsmap: [key, replacement] pairs (a list, so that keys stay byte-exact).
        public var map: [[String]]?
        public var maxKeyBytes: Int?

        enum CodingKeys: String, CodingKey {
            case type, map
            case maxKeyBytes = "max_key_bytes"
        }
    }

    public struct Metaspace: Decodable, Sendable {
        public var replacement: String
        public var prependScheme: String
        public var split: Bool

        enum CodingKeys: String, CodingKey {
            case replacement, split
            case prependScheme = "prepend_scheme"
        }
    }

    public var format: String
    public var version: Int
    public var pieces: [String]
    public var scores: [Double]
    public var unkID: Int
    public var bosID: Int
    public var eosID: Int
    public var padID: Int
    /// Matched in the raw text before anything else.
    public var addedTokens: [AddedToken]
    /// Applied in this order.
    public var normalizer: [NormalizerStep]
    public var metaspace: Metaspace

    enum CodingKeys: String, CodingKey {
        case format, version, pieces, scores, normalizer, metaspace
        case unkID = "unk_id", bosID = "bos_id", eosID = "eos_id", padID = "pad_id"
        case addedTokens = "added_tokens"
    }

    /// Decodes and validates a spec document.
    public init(jsonData: Data) throws {
        struct Header: Decodable { var format: String?; var version: Int? }
        let decoder = JSONDecoder()
        let header: Header
        do {
            header = try decoder.decode(Header.self, from: jsonData)
        } catch {
            throw UnigramTokenizerError.invalidJSON(reason: Self.reason(error))
        }
        guard header.format == Self.format, header.version == Self.version else {
            throw UnigramTokenizerError.unsupportedFormat(format: header.format ?? "(no format)", version: header.version ?? 0)
        }
        do {
            self = try decoder.decode(UnigramSpec.self, from: jsonData)
        } catch {
            throw UnigramTokenizerError.invalidJSON(reason: Self.reason(error))
        }
        try validate()
    }

    /// Reads and validates the spec file at `url`.
    public init(contentsOf url: URL) throws {
        guard FileManager.default.fileExists(atPath: url.path) else {
            throw UnigramTokenizerError.specFileNotFound(path: url.path)
        }
        let data: Data
        do {
            data = try Data(contentsOf: url)
        } catch {
            throw UnigramTokenizerError.specUnreadable(path: url.path, reason: error.localizedDescription)
        }
        try self.init(jsonData: data)
    }

    private static func reason(_ error: Error) -> String {
        guard let error = error as? DecodingError else { return "\(error)" }
        switch error {
        case let .keyNotFound(key, context):
            return "missing \(path(context.codingPath + [key]))"
        case let .typeMismatch(type, context), let .valueNotFound(type, context):
            return "\(path(context.codingPath)) is not \(type)"
        case let .dataCorrupted(context):
            return context.codingPath.isEmpty ? context.debugDescription
                : "\(path(context.codingPath)): \(context.debugDescription)"
        @unknown default:
            return "\(error)"
        }
    }

    private static func path(_ keys: [CodingKey]) -> String {
        let text = keys.map { $0.intValue.map { "[\($0)]" } ?? ".\($0.stringValue)" }.joined()
        return text.hasPrefix(".") ? String(text.dropFirst()) : text
    }

    private func invalid(_ field: String, _ reason: String) -> UnigramTokenizerError {
        .invalidSpec(field: field, reason: reason)
    }

    func validate() throws {
        guard !pieces.isEmpty else { throw invalid("pieces", "the list is empty") }
        guard scores.count == pieces.count else {
            throw invalid("scores", "\(scores.count) scores for \(pieces.count) pieces")
        }
        if let i = pieces.firstIndex(where: \.isEmpty) { throw invalid("pieces[\(i)]", "the piece is empty") }
        if let i = scores.firstIndex(where: { !$0.isFinite }) { throw invalid("scores[\(i)]", "not a finite number") }
        for (name, id) in [("unk_id", unkID), ("bos_id", bosID), ("eos_id", eosID), ("pad_id", padID)]
        where !pieces.indices.contains(id) {
            throw invalid(name, "\(id) is outside the \(pieces.count) pieces")
        }
        for (i, token) in addedTokens.enumerated() {
            guard pieces.indices.contains(token.id), pieces[token.id].utf8.elementsEqual(token.content.utf8),
                  !token.content.isEmpty else {
                throw invalid("added_tokens[\(i)]", "\"\(token.content)\" is not the piece with id \(token.id)")
            }
        }
        for (i, step) in normalizer.enumerated() {
            try validate(step, at: "normalizer[\(i)]")
        }
        guard metaspace.replacement.unicodeScalars.count == 1 else {
            throw invalid("metaspace.replacement", "\"\(metaspace.replacement)\" is not one character")
        }
        guard metaspace.prependScheme == "always", metaspace.split else {
            throw invalid("metaspace", "prepend_scheme \(metaspace.prependScheme), split \(metaspace.split): "
                          + "MLXEdgeKit implements prepend_scheme always with split")
        }
    }

    private func validate(_ step: NormalizerStep, at field: String) throws {
        switch step.type {
        case "collapse_spaces":
            return
        case "charsmap":
            guard step.maxKeyBytes == Self.graphemeLookupBytes - 1 else {
                throw invalid("\(field).max_key_bytes", "\(step.maxKeyBytes.map(String.init) ?? "missing"), "
                              + "expected \(Self.graphemeLookupBytes - 1) (the Rust normalizer's whole-grapheme lookup)")
            }
            guard let map = step.map else { throw invalid("\(field).map", "missing") }
            for (i, pair) in map.enumerated() {
                let bytes = pair.first?.utf8.count ?? 0
                guard pair.count == 2, bytes > 0, bytes < Self.graphemeLookupBytes,
                      !pair[0].unicodeScalars.contains("\0") else {
                    throw invalid("\(field).map[\(i)]", "not a [key, replacement] pair with a key of 1 to "
                                  + "\(Self.graphemeLookupBytes - 1) UTF-8 bytes and no NUL")
                }
            }
        default:
            throw invalid("\(field).type", "\"\(step.type)\" is not charsmap or collapse_spaces")
        }
    }
}
