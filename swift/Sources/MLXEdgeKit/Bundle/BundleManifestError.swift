import Foundation

/// Why a bundle's manifest.json (or a bundle file it lists) cannot be used. Paths name the
/// JSON field the way you would find it in the file: `models.head.training_inputs[1].dtype`.
public enum BundleManifestError: Error, Equatable, Sendable, CustomStringConvertible, LocalizedError {
    case manifestNotFound(path: String)
    case unreadable(path: String, reason: String)
    case invalidJSON(String)
    /// `format` is not `mlx-edge-bundle`.
    case unsupportedFormat(String)
    /// `format_version` is not one this MLXEdgeKit reads.
    case unsupportedFormatVersion(found: Int, supported: Int)
    /// A required field is absent.
    case missingField(String)
    /// A field has the wrong JSON type (e.g. a string where a number belongs, or null).
    case wrongType(path: String, expected: String)
    /// A field has a value outside what the schema allows.
    case invalidValue(path: String, reason: String)
    /// Fewer than two labels.
    case tooFewLabels(Int)
    case emptyLabel(index: Int)
    case duplicateLabel(String)
    /// A sequence length below 2 (no room for `[CLS]` and `[SEP]`).
    case invalidMaxLength(path: String, value: Int)
    /// Two fields that must agree do not.
    case inconsistent(path: String, reason: String)
    /// A feature's shape does not fit (symbolic where a number is needed, wrong element count…).
    case invalidShape(path: String, shape: String, reason: String)
    case invalidDataType(path: String, found: String, expected: [String])
    /// A model has no input / output named as the manifest says.
    case featureNotFound(model: String, kind: String, name: String)
    /// The head's `training_inputs` lack the embedding or label input.
    case missingTrainingInput(name: String)
    case invalidSHA256(path: String, value: String)
    /// A `files` key that is absolute, empty, or goes up with `..`.
    case invalidFilePath(String)
    case noFiles
    /// A model file or tokenizer file that `files` does not list.
    case fileNotListed(path: String, file: String)
    /// A tokenizer setting MLXEdgeKit's tokenizers do not implement, or a file the tokenizer needs
    /// that the manifest does not name.
    case unsupportedTokenizerSetting(name: String, value: String, reason: String)
    /// The vocabulary or spec file disagrees with the manifest (size or special-token ids).
    case tokenizerMismatch(String)
    /// Bundle files missing or different from their manifest entry.
    case fileVerificationFailed([BundleFileProblem])

    public var description: String {
        let prefix = "BundleManifest: "
        switch self {
        case let .manifestNotFound(path): return prefix + "no manifest.json at \(path)"
        case let .unreadable(path, reason): return prefix + "cannot read \(path): \(reason)"
        case let .invalidJSON(reason): return prefix + "manifest.json is not valid JSON: \(reason)"
        case let .unsupportedFormat(found):
            return prefix + "format is \"\(found)\", expected \"\(BundleManifest.formatName)\""
        case let .unsupportedFormatVersion(found, supported):
            return prefix + "format_version \(found) is not supported (this MLXEdgeKit reads version \(supported)); "
                + "export the bundle with a matching mlx-edge or update MLXEdgeKit"
        case let .missingField(path): return prefix + "required field \(path) is missing"
        case let .wrongType(path, expected): return prefix + "\(path) has the wrong type, expected \(expected)"
        case let .invalidValue(path, reason): return prefix + "\(path): \(reason)"
        case let .tooFewLabels(n): return prefix + "labels has \(n) entr\(n == 1 ? "y" : "ies"), at least 2 are needed"
        case let .emptyLabel(index): return prefix + "labels[\(index)] is an empty string"
        case let .duplicateLabel(label): return prefix + "label \"\(label)\" appears more than once in labels"
        case let .invalidMaxLength(path, value):
            return prefix + "\(path) is \(value), it must be at least 2 (room for [CLS] and [SEP])"
        case let .inconsistent(path, reason): return prefix + "\(path): \(reason)"
        case let .invalidShape(path, shape, reason): return prefix + "\(path) \(shape): \(reason)"
        case let .invalidDataType(path, found, expected):
            return prefix + "\(path) is \(found), expected " + expected.joined(separator: " or ")
        case let .featureNotFound(model, kind, name): return prefix + "the \(model) has no \(kind) \"\(name)\""
        case let .missingTrainingInput(name):
            return prefix + "models.head.training_inputs has no \"\(name)\" (MLUpdateTask needs it)"
        case let .invalidSHA256(path, value):
            return prefix + "\(path) is \"\(value)\", not a sha256 (64 lowercase hex characters)"
        case let .invalidFilePath(path):
            return prefix + "files has the path \"\(path)\"; paths must be relative and stay inside the bundle"
        case .noFiles: return prefix + "files is empty"
        case let .fileNotListed(path, file): return prefix + "\(path) names \"\(file)\", which files does not list"
        case let .unsupportedTokenizerSetting(name, value, reason):
            return prefix + "tokenizer.\(name) is \(value): \(reason)"
        case let .tokenizerMismatch(reason): return prefix + "the tokenizer does not match the manifest: \(reason)"
        case let .fileVerificationFailed(problems):
            let shown = problems.prefix(3).map(\.description).joined(separator: "; ")
            return prefix + "\(problems.count) bundle file(s) failed verification: \(shown)"
                + (problems.count > 3 ? "; …" : "")
        }
    }

    public var errorDescription: String? { description }

    /// `models.head.inputs[0].shape` from a coding path.
    static func path(_ codingPath: [CodingKey]) -> String {
        var out = ""
        for key in codingPath {
            if let index = key.intValue {
                out += "[\(index)]"
            } else {
                out += (out.isEmpty ? "" : ".") + key.stringValue
            }
        }
        return out.isEmpty ? "<root>" : out
    }

    /// A decoding failure, named by the field it happened at.
    init(_ error: DecodingError) {
        switch error {
        case let .keyNotFound(key, context):
            self = .missingField(BundleManifestError.path(context.codingPath + [key]))
        case let .typeMismatch(type, context):
            self = .wrongType(path: BundleManifestError.path(context.codingPath), expected: BundleManifestError.name(of: type))
        case let .valueNotFound(type, context):
            self = .wrongType(path: BundleManifestError.path(context.codingPath),
                              expected: "\(BundleManifestError.name(of: type)), found null")
        case let .dataCorrupted(context):
            if context.codingPath.isEmpty {
                let underlying = (context.underlyingError as NSError?)?.localizedDescription
                self = .invalidJSON(underlying ?? context.debugDescription)
            } else {
                self = .invalidValue(path: BundleManifestError.path(context.codingPath), reason: context.debugDescription)
            }
        @unknown default:
            self = .invalidJSON("\(error)")
        }
    }

    private static func name(of type: Any.Type) -> String {
        switch type {
        case is String.Type: return "a string"
        case is Int.Type: return "an integer"
        case is Double.Type: return "a number"
        case is Bool.Type: return "a boolean"
        case is BundleManifest.Dimension.Type: return "an integer or a string"
        default:
            let text = "\(type)"
            if text.hasPrefix("Array") || text.hasPrefix("[") { return "an array" }
            if text.hasPrefix("Dictionary") { return "an object" }
            return text
        }
    }
}

/// One bundle file that failed ``BundleManifest/verifyFiles(in:only:)``.
public struct BundleFileProblem: Equatable, Sendable, CustomStringConvertible {
    public enum Kind: Equatable, Sendable {
        case missing
        case notListed
        case sizeMismatch(expected: Int, actual: Int)
        case digestMismatch(expected: String, actual: String)
        case unreadable(String)
    }

    /// Relative path inside the bundle.
    public var path: String
    public var kind: Kind

    public init(path: String, kind: Kind) {
        self.path = path
        self.kind = kind
    }

    public var description: String {
        switch kind {
        case .missing: return "\(path) is missing"
        case .notListed: return "\(path) is not listed in the manifest's files"
        case let .sizeMismatch(expected, actual): return "\(path) has \(actual) bytes, the manifest says \(expected)"
        case let .digestMismatch(expected, actual): return "\(path) has sha256 \(actual), the manifest says \(expected)"
        case let .unreadable(reason): return "\(path) cannot be read: \(reason)"
        }
    }
}
