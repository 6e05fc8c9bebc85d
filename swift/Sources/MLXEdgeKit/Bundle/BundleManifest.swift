import Foundation

/// The `manifest.json` of an mlx-edge export bundle: the contract between the Python
/// exporter and the app. It mirrors `mlx_edge/schemas/bundle_manifest.schema.json`
/// field by field (snake_case keys, the same required and optional fields).
///
/// Load it with ``load(from:)`` (reads, decodes and validates) and take every feature name,
/// shape, label and tokenizer setting from it; never hard-code them. ``io`` gives the
/// names and shapes the CoreML code needs, ``makeTokenizer(bundleDirectory:)`` the
/// tokenizer, ``verifyFiles(in:only:)`` checks the bundle's files against their sha256.
public struct BundleManifest: Codable, Equatable, Sendable {
    public static let fileName = "manifest.json"
    public static let formatName = "mlx-edge-bundle"
    public static let supportedFormatVersion = 1

    public var format: String
    public var formatVersion: Int
    /// ISO 8601 export time.
    public var createdAt: String
    public var model: ModelInfo
    public var student: Student
    /// Class labels in the head's output order. Fixed at export: corrections must use one.
    public var labels: [String]
    /// Longest sequence the encoder accepts (`[CLS]` and `[SEP]` included).
    public var maxLength: Int
    public var sequenceLength: SequenceLength
    public var precision: Precision
    public var quantize: Quantize
    public var computeUnits: ComputeUnits
    public var minimumDeploymentTarget: DeploymentTarget
    public var tokenizer: Tokenizer
    public var models: Models
    /// Tool versions used for the export (`python`, `mlx-edge`, `coremltools`, …).
    public var versions: [String: String]
    public var checks: Checks
    /// Every file of the bundle except manifest.json: relative path → sha256 and size.
    public var files: [String: FileEntry]

    enum CodingKeys: String, CodingKey {
        case format, model, student, labels, precision, quantize, tokenizer, models, versions, checks, files
        case formatVersion = "format_version"
        case createdAt = "created_at"
        case maxLength = "max_length"
        case sequenceLength = "sequence_length"
        case computeUnits = "compute_units"
        case minimumDeploymentTarget = "minimum_deployment_target"
    }

    // MARK: Nested types

    public struct ModelInfo: Codable, Equatable, Sendable {
        public var description: String
        public var author: String
        public var license: String
        public var version: String
    }

    /// The student checkpoint the bundle was exported from.
    public struct Student: Codable, Equatable, Sendable {
        /// What the encoder computes; absent in the manifest: a BERT student. The bundle is used the
        /// same way for either: the encoder's `embedding` feeds the same updatable head.
        public enum Kind: String, Codable, CaseIterable, Sendable, BundleManifestEnum {
            /// A BERT-shaped transformer (`num_hidden_layers` ≥ 1).
            case bert
            /// A static token table, mean-pooled (`num_hidden_layers` 0): `mlx-edge distill --student static`.
            case `static`
        }

        public var path: String
        public var configSHA256: String
        public var weightsSHA256: String
        /// Width of the encoder's pooled `embedding` (the head's input size).
        public var hiddenSize: Int
        public var numHiddenLayers: Int
        public var vocabSize: Int
        public var kind: Kind

        enum CodingKeys: String, CodingKey {
            case path, kind
            case configSHA256 = "config_sha256"
            case weightsSHA256 = "weights_sha256"
            case hiddenSize = "hidden_size"
            case numHiddenLayers = "num_hidden_layers"
            case vocabSize = "vocab_size"
        }

        public init(path: String, configSHA256: String, weightsSHA256: String, hiddenSize: Int,
                    numHiddenLayers: Int, vocabSize: Int, kind: Kind = .bert) {
            self.path = path
            self.configSHA256 = configSHA256
            self.weightsSHA256 = weightsSHA256
            self.hiddenSize = hiddenSize
            self.numHiddenLayers = numHiddenLayers
            self.vocabSize = vocabSize
            self.kind = kind
        }

        public init(from decoder: Decoder) throws {
            let c = try decoder.container(keyedBy: CodingKeys.self)
            path = try c.decode(String.self, forKey: .path)
            configSHA256 = try c.decode(String.self, forKey: .configSHA256)
            weightsSHA256 = try c.decode(String.self, forKey: .weightsSHA256)
            hiddenSize = try c.decode(Int.self, forKey: .hiddenSize)
            numHiddenLayers = try c.decode(Int.self, forKey: .numHiddenLayers)
            vocabSize = try c.decode(Int.self, forKey: .vocabSize)
            kind = try c.decodeIfPresent(Kind.self, forKey: .kind) ?? .bert
        }

        public func encode(to encoder: Encoder) throws {
            var c = encoder.container(keyedBy: CodingKeys.self)
            try c.encode(path, forKey: .path)
            try c.encode(configSHA256, forKey: .configSHA256)
            try c.encode(weightsSHA256, forKey: .weightsSHA256)
            try c.encode(hiddenSize, forKey: .hiddenSize)
            try c.encode(numHiddenLayers, forKey: .numHiddenLayers)
            try c.encode(vocabSize, forKey: .vocabSize)
            if kind != .bert { try c.encode(kind, forKey: .kind) } // as the exporter writes it
        }
    }

    /// The encoder's sequence length: one fixed length, a range, or a set of lengths.
    public struct SequenceLength: Codable, Equatable, Sendable {
        public enum Kind: String, Codable, CaseIterable, Sendable, BundleManifestEnum {
            case fixed, range, enumerated
        }

        public var kind: Kind
        public var defaultLength: Int
        public var min: Int
        public var max: Int
        /// The accepted lengths (only for `enumerated`), ascending.
        public var lengths: [Int]?

        enum CodingKeys: String, CodingKey {
            case kind, min, max, lengths
            case defaultLength = "default"
        }

        public init(kind: Kind, defaultLength: Int, min: Int, max: Int, lengths: [Int]? = nil) {
            self.kind = kind
            self.defaultLength = defaultLength
            self.min = min
            self.max = max
            self.lengths = lengths
        }

        /// The length a text of `tokenCount` tokens (`[CLS]` and `[SEP]` included) is
        /// padded to, as the exporter's `SequenceLengths.padded_length` does: fixed → the
        /// length; range → `tokenCount` clamped to `min...max`; enumerated → the smallest
        /// accepted length that holds it, else the longest (the text is truncated).
        public func paddedLength(forTokenCount tokenCount: Int) -> Int {
            switch kind {
            case .fixed:
                return max
            case .range:
                return Swift.min(Swift.max(tokenCount, min), max)
            case .enumerated:
                return (lengths ?? [max]).first { $0 >= tokenCount } ?? max
            }
        }

        /// Whether the encoder accepts inputs of `length` tokens.
        public func accepts(_ length: Int) -> Bool {
            switch kind {
            case .fixed: return length == max
            case .range: return (min...max).contains(length)
            case .enumerated: return (lengths ?? [max]).contains(length)
            }
        }
    }

    public enum Precision: String, Codable, CaseIterable, Sendable, BundleManifestEnum {
        case fp16, fp32
    }

    /// How the encoder's weights are compressed. CoreML decompresses them itself: nothing for
    /// the app to do, beyond the deployment target (block-wise modes need iOS 18 / macOS 15).
    public struct Quantize: Codable, Equatable, Sendable {
        public enum Mode: String, Codable, CaseIterable, Sendable, BundleManifestEnum {
            case none, int8, palettize
            /// Linear int8 / int4 with one scale per `blockSize` input weights (iOS 18).
            case int8Block = "int8-block", int4Block = "int4-block"

            /// Whether the mode is block-wise (needs iOS 18 and a `block_size`).
            public var isBlockwise: Bool { self == .int8Block || self == .int4Block }
        }

        public enum Method: String, Codable, CaseIterable, Sendable, BundleManifestEnum {
            case kmeans, uniform
        }

        public var mode: Mode
        /// Bits per weight (palettize and the block-wise modes).
        public var bits: Int?
        public var method: Method?
        /// Weights per scale along a weight's input axis (block-wise modes).
        public var blockSize: Int?

        enum CodingKeys: String, CodingKey {
            case mode, bits, method
            case blockSize = "block_size"
        }
    }

    /// The compute units the encoder was exported for (`MLComputeUnits` on device).
    public enum ComputeUnits: String, Codable, CaseIterable, Sendable, BundleManifestEnum {
        case cpuAndGPU = "CPU_AND_GPU"
        case all = "ALL"
        case cpuAndNeuralEngine = "CPU_AND_NE"
        case cpuOnly = "CPU_ONLY"
    }

    public enum DeploymentTarget: String, Codable, CaseIterable, Sendable, BundleManifestEnum {
        case iOS16, iOS17, iOS18
    }

    /// The tokenizer: its kind, the files that hold it, its settings (for WordPiece, Hugging
    /// Face's BertTokenizer's; a Unigram tokenizer's are all in its spec file) and special ids.
    public struct Tokenizer: Codable, Equatable, Sendable {
        /// Which tokenizer the student was distilled with; absent in older manifests: WordPiece.
        public enum Kind: String, Codable, CaseIterable, Sendable, BundleManifestEnum {
            /// BERT's WordPiece: ``BertTokenizer`` reads `vocab_file` with the settings below.
            case wordpiece
            /// SentencePiece Unigram (the XLM-R pipeline): ``UnigramTokenizer`` reads `spec_file`.
            case unigram
        }

        public var type: Kind
        /// Tokenizer files shipped in the bundle (e.g. `vocab.txt`, `tokenizer.json`).
        public var files: [String]
        /// The WordPiece vocabulary (one token per line), if the bundle has one.
        public var vocabFile: String?
        /// The Unigram spec (`unigram_spec.json`) ``UnigramTokenizer`` reads; nil for WordPiece.
        public var specFile: String?
        public var vocabSize: Int
        public var doLowerCase: Bool
        /// `null` in the manifest: follow `do_lower_case`.
        public var stripAccents: Bool?
        public var tokenizeChineseChars: Bool
        public var cleanText: Bool
        public var clsToken: String
        public var sepToken: String
        public var padToken: String
        public var unkToken: String
        public var clsID: Int
        public var sepID: Int
        public var padID: Int
        public var unkID: Int
        public var maxLength: Int
        public var truncation: Bool
        public var padding: String

        enum CodingKeys: String, CodingKey {
            case type, files, truncation, padding
            case vocabFile = "vocab_file"
            case specFile = "spec_file"
            case vocabSize = "vocab_size"
            case doLowerCase = "do_lower_case"
            case stripAccents = "strip_accents"
            case tokenizeChineseChars = "tokenize_chinese_chars"
            case cleanText = "clean_text"
            case clsToken = "cls_token"
            case sepToken = "sep_token"
            case padToken = "pad_token"
            case unkToken = "unk_token"
            case clsID = "cls_id"
            case sepID = "sep_id"
            case padID = "pad_id"
            case unkID = "unk_id"
            case maxLength = "max_length"
        }

        public init(from decoder: Decoder) throws {
            let c = try decoder.container(keyedBy: CodingKeys.self)
            type = try c.decodeIfPresent(Kind.self, forKey: .type) ?? .wordpiece
            files = try c.decode([String].self, forKey: .files)
            vocabFile = try c.decodeIfPresent(String.self, forKey: .vocabFile)
            specFile = try c.decodeIfPresent(String.self, forKey: .specFile)
            vocabSize = try c.decode(Int.self, forKey: .vocabSize)
            doLowerCase = try c.decode(Bool.self, forKey: .doLowerCase)
            // Required but nullable in the schema: present, true/false/null.
            guard c.contains(.stripAccents) else {
                throw DecodingError.keyNotFound(CodingKeys.stripAccents, .init(
                    codingPath: c.codingPath, debugDescription: "strip_accents is required (it may be null)"))
            }
            stripAccents = try c.decodeIfPresent(Bool.self, forKey: .stripAccents)
            tokenizeChineseChars = try c.decode(Bool.self, forKey: .tokenizeChineseChars)
            cleanText = try c.decode(Bool.self, forKey: .cleanText)
            clsToken = try c.decode(String.self, forKey: .clsToken)
            sepToken = try c.decode(String.self, forKey: .sepToken)
            padToken = try c.decode(String.self, forKey: .padToken)
            unkToken = try c.decode(String.self, forKey: .unkToken)
            clsID = try c.decode(Int.self, forKey: .clsID)
            sepID = try c.decode(Int.self, forKey: .sepID)
            padID = try c.decode(Int.self, forKey: .padID)
            unkID = try c.decode(Int.self, forKey: .unkID)
            maxLength = try c.decode(Int.self, forKey: .maxLength)
            truncation = try c.decode(Bool.self, forKey: .truncation)
            padding = try c.decode(String.self, forKey: .padding)
        }

        public func encode(to encoder: Encoder) throws {
            var c = encoder.container(keyedBy: CodingKeys.self)
            try c.encode(type, forKey: .type)
            try c.encode(files, forKey: .files)
            try c.encode(vocabFile, forKey: .vocabFile) // null when absent, as the exporter writes it
            try c.encode(specFile, forKey: .specFile)
            try c.encode(vocabSize, forKey: .vocabSize)
            try c.encode(doLowerCase, forKey: .doLowerCase)
            try c.encode(stripAccents, forKey: .stripAccents)
            try c.encode(tokenizeChineseChars, forKey: .tokenizeChineseChars)
            try c.encode(cleanText, forKey: .cleanText)
            try c.encode(clsToken, forKey: .clsToken)
            try c.encode(sepToken, forKey: .sepToken)
            try c.encode(padToken, forKey: .padToken)
            try c.encode(unkToken, forKey: .unkToken)
            try c.encode(clsID, forKey: .clsID)
            try c.encode(sepID, forKey: .sepID)
            try c.encode(padID, forKey: .padID)
            try c.encode(unkID, forKey: .unkID)
            try c.encode(maxLength, forKey: .maxLength)
            try c.encode(truncation, forKey: .truncation)
            try c.encode(padding, forKey: .padding)
        }
    }

    public enum DataType: String, Codable, CaseIterable, Sendable, BundleManifestEnum {
        case float32, float16, float64, int32, int64

        public var isFloatingPoint: Bool { self == .float32 || self == .float16 || self == .float64 }
    }

    /// One dimension of a feature's shape: a number, or a symbolic name (ONNX: `batch`).
    public enum Dimension: Codable, Equatable, Sendable, CustomStringConvertible {
        case fixed(Int)
        case symbolic(String)

        public init(from decoder: Decoder) throws {
            let container = try decoder.singleValueContainer()
            if let value = try? container.decode(Int.self) {
                self = .fixed(value)
            } else if let name = try? container.decode(String.self) {
                self = .symbolic(name)
            } else {
                throw DecodingError.typeMismatch(Dimension.self, .init(
                    codingPath: decoder.codingPath, debugDescription: "a dimension is an integer or a string"))
            }
        }

        public func encode(to encoder: Encoder) throws {
            var container = encoder.singleValueContainer()
            switch self {
            case let .fixed(value): try container.encode(value)
            case let .symbolic(name): try container.encode(name)
            }
        }

        public var value: Int? {
            if case let .fixed(n) = self { return n }
            return nil
        }

        public var description: String {
            switch self {
            case let .fixed(n): return "\(n)"
            case let .symbolic(name): return "\"\(name)\""
            }
        }
    }

    /// A model input or output as the exporter read it from the saved model.
    public struct Feature: Codable, Equatable, Sendable {
        public var name: String
        public var shape: [Dimension]
        public var dtype: DataType
        /// Flexible shapes (`--seq-len 16-128`): per dimension, `[lower, upper]`.
        public var shapeRange: [[Int]]?
        /// Flexible shapes (`--seq-len 32,64,128`): every accepted shape.
        public var enumeratedShapes: [[Int]]?

        enum CodingKeys: String, CodingKey {
            case name, shape, dtype
            case shapeRange = "shape_range"
            case enumeratedShapes = "enumerated_shapes"
        }

        public init(name: String, shape: [Dimension], dtype: DataType, shapeRange: [[Int]]? = nil,
                    enumeratedShapes: [[Int]]? = nil) {
            self.name = name
            self.shape = shape
            self.dtype = dtype
            self.shapeRange = shapeRange
            self.enumeratedShapes = enumeratedShapes
        }

        /// The shape as numbers; nil when a dimension is symbolic.
        public var fixedShape: [Int]? {
            let values = shape.compactMap(\.value)
            return values.count == shape.count ? values : nil
        }

        /// Number of elements (product of the dimensions); nil when a dimension is symbolic.
        public var elementCount: Int? {
            fixedShape.map { $0.reduce(1, *) }
        }
    }

    public enum ModelFormat: String, Codable, CaseIterable, Sendable, BundleManifestEnum {
        case mlprogram, neuralnetwork, onnx
    }

    /// The encoder (`Encoder.mlpackage`): token ids and attention mask → `embedding`, `logits`.
    public struct EncoderModel: Codable, Equatable, Sendable, BundleModelEntry {
        public var file: String
        public var format: ModelFormat
        /// Token ids then attention mask (in that order), Int32 `[1, length]`.
        public var inputs: [Feature]
        public var outputs: [Feature]
        /// The output with the pooled sentence embedding (the head's input).
        public var embeddingOutput: String

        enum CodingKeys: String, CodingKey {
            case file, format, inputs, outputs
            case embeddingOutput = "embedding_output"
        }
    }

    /// The non-updatable classifier (`Classifier.mlpackage`): token ids → probabilities.
    public struct ClassifierModel: Codable, Equatable, Sendable, BundleModelEntry {
        public var file: String
        public var format: ModelFormat
        public var inputs: [Feature]
        public var outputs: [Feature]
        public var probabilitiesOutput: String

        enum CodingKeys: String, CodingKey {
            case file, format, inputs, outputs
            case probabilitiesOutput = "probabilities_output"
        }
    }

    public struct ONNXModel: Codable, Equatable, Sendable, BundleModelEntry {
        public var file: String
        public var format: ModelFormat
        public var inputs: [Feature]
        public var outputs: [Feature]
        public var opset: Int
    }

    /// A `{default, allowed}` integer setting (epochs, mini-batch size).
    public struct Choice: Codable, Equatable, Sendable {
        public var defaultValue: Int
        public var allowed: [Int]

        enum CodingKeys: String, CodingKey {
            case allowed
            case defaultValue = "default"
        }
    }

    /// The updatable head (`Head.mlmodel`, a NeuralNetwork model, not a classifier model):
    /// `embedding` `[hidden]` → `probs` `[labels]`, trained with `MLUpdateTask`.
    public struct HeadModel: Codable, Equatable, Sendable, BundleModelEntry {
        public struct Loss: Codable, Equatable, Sendable {
            public var type: String
            public var input: String
            public var target: String
        }

        public struct Optimizer: Codable, Equatable, Sendable {
            public enum Kind: String, Codable, CaseIterable, Sendable, BundleManifestEnum {
                case sgd, adam
            }

            public struct LearningRate: Codable, Equatable, Sendable {
                public var defaultValue: Double
                public var min: Double
                public var max: Double

                enum CodingKeys: String, CodingKey {
                    case min, max
                    case defaultValue = "default"
                }
            }

            public var type: Kind
            public var learningRate: LearningRate
            public var miniBatchSize: Choice

            enum CodingKeys: String, CodingKey {
                case type
                case learningRate = "learning_rate"
                case miniBatchSize = "mini_batch_size"
            }
        }

        public var file: String
        public var format: ModelFormat
        public var inputs: [Feature]
        /// A plain probability array (named by ``probabilitiesOutput``), in label order.
        public var outputs: [Feature]
        /// What `MLUpdateTask` feeds: the embedding and the true label index (Int32 `[1]`).
        public var trainingInputs: [Feature]
        public var embeddingInput: String
        /// Training input with the true label's index (e.g. `probs_true`).
        public var labelInput: String
        public var probabilitiesOutput: String
        public var updatableLayers: [String]
        public var loss: Loss
        public var optimizer: Optimizer
        public var epochs: Choice
        public var shuffle: Bool

        enum CodingKeys: String, CodingKey {
            case file, format, inputs, outputs, loss, optimizer, epochs, shuffle
            case trainingInputs = "training_inputs"
            case embeddingInput = "embedding_input"
            case labelInput = "label_input"
            case probabilitiesOutput = "probabilities_output"
            case updatableLayers = "updatable_layers"
        }
    }

    /// The bundle's models: the encoder and the head are in every bundle (MLXEdgeKit loads
    /// them); the classifier and the ONNX model only in one exported with `--extras`.
    public struct Models: Codable, Equatable, Sendable {
        public var encoder: EncoderModel
        public var head: HeadModel
        /// `--extras classifier`: not used by MLXEdgeKit.
        public var classifier: ClassifierModel?
        /// `--extras onnx`: not used by MLXEdgeKit.
        public var onnx: ONNXModel?
    }

    /// A model every bundle has: what MLXEdgeKit loads.
    public enum ModelKind: String, CaseIterable, Sendable {
        case encoder, head
    }

    /// A model a bundle has only when it was exported with `--extras`; MLXEdgeKit never loads one.
    public enum ExtraKind: String, CaseIterable, Sendable {
        case classifier, onnx
    }

    /// The checks the exporter ran on the bundle before writing it.
    public struct Checks: Codable, Equatable, Sendable {
        public struct Result: Codable, Equatable, Sendable {
            public var name: String
            public var ok: Bool
            public var detail: String
            public var figures: [String: JSONValue]
            public var skipped: Bool
        }

        public var texts: Int
        public var source: String
        public var passed: Bool
        public var results: [Result]
    }

    public struct FileEntry: Codable, Equatable, Sendable {
        /// 64 lowercase hex characters.
        public var sha256: String
        public var bytes: Int
    }

    public func model(_ kind: ModelKind) -> any BundleModelEntry {
        switch kind {
        case .encoder: return models.encoder
        case .head: return models.head
        }
    }

    /// An extra's entry; nil when the bundle was exported without it.
    public func model(_ kind: ExtraKind) -> (any BundleModelEntry)? {
        switch kind {
        case .classifier: return models.classifier
        case .onnx: return models.onnx
        }
    }

    /// The extras this bundle has (none in a default export).
    public var extras: [ExtraKind] {
        ExtraKind.allCases.filter { model($0) != nil }
    }
}

// MARK: - Loading

extension BundleManifest {
    /// Reads, decodes and validates `manifest.json` in `directory` (the bundle folder).
    public static func load(from directory: URL) throws -> BundleManifest {
        let url = directory.appendingPathComponent(fileName)
        guard FileManager.default.fileExists(atPath: url.path) else {
            throw BundleManifestError.manifestNotFound(path: url.path)
        }
        let data: Data
        do {
            data = try Data(contentsOf: url)
        } catch {
            throw BundleManifestError.unreadable(path: url.path, reason: error.localizedDescription)
        }
        return try BundleManifest(jsonData: data)
    }

    /// Decodes manifest.json's bytes; with `validate` (the default) also runs ``validate()``.
    /// Every failure is a ``BundleManifestError`` naming the field (e.g.
    /// `models.head.label_input`).
    public init(jsonData data: Data, validate: Bool = true) throws {
        // Format and version first: a newer format should say so, not "missing field".
        let header: Header
        do {
            header = try JSONDecoder().decode(Header.self, from: data)
        } catch let error as DecodingError {
            if case .typeMismatch(_, let context) = error, context.codingPath.isEmpty {
                throw BundleManifestError.invalidJSON("the manifest is not a JSON object")
            }
            throw BundleManifestError(error)
        }
        guard let format = header.format else { throw BundleManifestError.missingField("format") }
        guard format == BundleManifest.formatName else { throw BundleManifestError.unsupportedFormat(format) }
        guard let version = header.formatVersion else { throw BundleManifestError.missingField("format_version") }
        guard version == BundleManifest.supportedFormatVersion else {
            throw BundleManifestError.unsupportedFormatVersion(found: version,
                                                               supported: BundleManifest.supportedFormatVersion)
        }
        do {
            self = try JSONDecoder().decode(BundleManifest.self, from: data)
        } catch let error as DecodingError {
            throw BundleManifestError(error)
        }
        if validate { try self.validate() }
    }

    /// The manifest as JSON (sorted keys), e.g. to store next to a downloaded bundle.
    public func jsonData(prettyPrinted: Bool = true) throws -> Data {
        let encoder = JSONEncoder()
        encoder.outputFormatting = prettyPrinted ? [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
            : [.sortedKeys, .withoutEscapingSlashes]
        return try encoder.encode(self)
    }

    private struct Header: Decodable {
        var format: String?
        var formatVersion: Int?

        enum CodingKeys: String, CodingKey {
            case format
            case formatVersion = "format_version"
        }
    }
}

/// What every model entry of the manifest has.
public protocol BundleModelEntry: Sendable {
    var file: String { get }
    var format: BundleManifest.ModelFormat { get }
    var inputs: [BundleManifest.Feature] { get }
    var outputs: [BundleManifest.Feature] { get }
}

/// String enums of the manifest: an unknown value is a ``BundleManifestError/invalidValue(path:reason:)``
/// that lists the accepted values.
public protocol BundleManifestEnum: RawRepresentable, CaseIterable, Decodable where RawValue == String {}

extension BundleManifestEnum {
    public init(from decoder: Decoder) throws {
        let raw = try decoder.singleValueContainer().decode(String.self)
        guard let value = Self(rawValue: raw) else {
            throw BundleManifestError.invalidValue(
                path: BundleManifestError.path(decoder.codingPath),
                reason: "\"\(raw)\" is not one of " + Self.allCases.map { "\"\($0.rawValue)\"" }.joined(separator: ", "))
        }
        self = value
    }
}
