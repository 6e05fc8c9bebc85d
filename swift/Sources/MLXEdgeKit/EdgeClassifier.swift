#if canImport(CoreML)
import CoreML
import Foundation

/// Errors thrown by ``EdgeClassifier``.
public enum EdgeClassifierError: Error, CustomStringConvertible, LocalizedError {
    case missingOutput(model: String, name: String)
    case unexpectedHeadOutput(String)
    case embeddingDimensionMismatch(expected: Int, actual: Int)

    public var description: String {
        switch self {
        case let .missingOutput(model, name): return "EdgeClassifier: the \(model) has no output \"\(name)\""
        case let .unexpectedHeadOutput(detail): return "EdgeClassifier: cannot read the head's probabilities: \(detail)"
        case let .embeddingDimensionMismatch(expected, actual):
            return "EdgeClassifier: the head expects \(expected) embedding values, the encoder gave \(actual)"
        }
    }

    public var errorDescription: String? { description }
}

/// Text → tokens → encoder (`input_ids`, `attention_mask`: Int32 `[1, maxLength]`) →
/// `embedding` → head → probabilities → label.
///
/// All tokenization and result logic is in the pure core (``BertTokenizer``,
/// ``ClassificationResult``); this type only moves arrays in and out of CoreML.
public final class EdgeClassifier: @unchecked Sendable {
    /// Feature names of the exported encoder and head.
    public struct IONames: Sendable {
        public var inputIds: String
        public var attentionMask: String
        /// Encoder output holding the sentence embedding.
        public var encoderEmbedding: String
        /// Head input fed with the embedding.
        public var headEmbedding: String
        /// Head output with the probabilities; nil uses the model description's
        /// `predictedProbabilitiesName`.
        public var headProbabilities: String?

        public init(inputIds: String = "input_ids", attentionMask: String = "attention_mask",
                    encoderEmbedding: String = "embedding", headEmbedding: String = "embedding",
                    headProbabilities: String? = nil) {
            self.inputIds = inputIds
            self.attentionMask = attentionMask
            self.encoderEmbedding = encoderEmbedding
            self.headEmbedding = headEmbedding
            self.headProbabilities = headProbabilities
        }
    }

    public let tokenizer: BertTokenizer
    public let encoder: MLModel
    public let names: IONames
    /// Class labels in the head's class order (used when the head outputs an array).
    public let labels: [String]
    /// Sequence length fed to the encoder.
    public let maxLength: Int

    private let lock = NSLock()
    private var _head: MLModel

    public var head: MLModel {
        lock.lock(); defer { lock.unlock() }
        return _head
    }

    public init(encoder: MLModel, head: MLModel, tokenizer: BertTokenizer, labels: [String],
                names: IONames = IONames(), maxLength: Int? = nil) {
        self.encoder = encoder
        self._head = head
        self.tokenizer = tokenizer
        self.labels = labels
        self.names = names
        // Prefer the encoder's fixed input length, else the tokenizer's setting.
        let declared = encoder.modelDescription.inputDescriptionsByName[names.inputIds]?
            .multiArrayConstraint?.shape.last?.intValue
        self.maxLength = maxLength ?? declared.flatMap { $0 > 1 ? $0 : nil } ?? tokenizer.configuration.maxLength
    }

    /// Loads compiled models (`.mlmodelc`; see ``compiledModelURL(for:)``).
    public convenience init(encoderURL: URL, headURL: URL, tokenizer: BertTokenizer, labels: [String],
                            names: IONames = IONames(), maxLength: Int? = nil,
                            configuration: MLModelConfiguration = MLModelConfiguration()) throws {
        let encoder = try MLModel(contentsOf: encoderURL, configuration: configuration)
        let head = try MLModel(contentsOf: headURL, configuration: configuration)
        self.init(encoder: encoder, head: head, tokenizer: tokenizer, labels: labels, names: names, maxLength: maxLength)
    }

    /// Compiles an `.mlpackage` / `.mlmodel` (returns a temporary `.mlmodelc`); a
    /// `.mlmodelc` is returned unchanged. Move the result somewhere permanent to keep it.
    public static func compiledModelURL(for url: URL) async throws -> URL {
        if url.pathExtension == "mlmodelc" { return url }
        return try await MLModel.compileModel(at: url)
    }

    /// Swaps in a new head (e.g. after ``OnDeviceUpdater`` committed an update).
    public func replaceHead(with model: MLModel) {
        lock.lock(); defer { lock.unlock() }
        _head = model
    }

    public func replaceHead(contentsOf url: URL, configuration: MLModelConfiguration = MLModelConfiguration()) throws {
        replaceHead(with: try MLModel(contentsOf: url, configuration: configuration))
    }

    /// The encoder's sentence embedding for `text`, flattened.
    public func embedding(for text: String) throws -> [Float] {
        let encoding = try tokenizer.encode(text, maxLength: maxLength)
        let shape = [1, encoding.inputIds.count]
        let inputs = try MLDictionaryFeatureProvider(dictionary: [
            names.inputIds: MLMultiArray(MLShapedArray<Int32>(scalars: encoding.inputIds, shape: shape)),
            names.attentionMask: MLMultiArray(MLShapedArray<Int32>(scalars: encoding.attentionMask, shape: shape)),
        ])
        let output = try encoder.prediction(from: inputs)
        guard let array = output.featureValue(for: names.encoderEmbedding)?.multiArrayValue else {
            throw EdgeClassifierError.missingOutput(model: "encoder", name: names.encoderEmbedding)
        }
        return MLShapedArray<Float>(converting: array).scalars
    }

    public func classify(_ text: String) throws -> ClassificationResult {
        try classify(embedding: try embedding(for: text))
    }

    public func classify(embedding: [Float]) throws -> ClassificationResult {
        let head = self.head
        let input = try EdgeClassifier.featureValue(
            embedding, for: head.modelDescription.inputDescriptionsByName[names.headEmbedding])
        let output = try head.prediction(from: MLDictionaryFeatureProvider(dictionary: [names.headEmbedding: input]))
        guard let name = names.headProbabilities ?? head.modelDescription.predictedProbabilitiesName else {
            throw EdgeClassifierError.unexpectedHeadOutput("no probabilities output name")
        }
        guard let value = output.featureValue(for: name) else {
            throw EdgeClassifierError.missingOutput(model: "head", name: name)
        }
        if value.type == .dictionary {
            var probabilities: [String: Double] = [:]
            for (key, number) in value.dictionaryValue {
                probabilities[(key.base as? String) ?? "\(key.base)"] = number.doubleValue
            }
            if let result = ClassificationResult(probabilities: probabilities) { return result }
        } else if let array = value.multiArrayValue {
            let values = MLShapedArray<Double>(converting: array).scalars
            if let result = ClassificationResult(values: values, labels: labels) { return result }
            throw EdgeClassifierError.unexpectedHeadOutput("\(values.count) values for \(labels.count) labels")
        }
        throw EdgeClassifierError.unexpectedHeadOutput("feature \"\(name)\" of type \(value.type.rawValue)")
    }

    /// An embedding as the MLMultiArray a head input declares (shape and data type),
    /// defaulting to Float32 `[count]`. Shared with ``OnDeviceUpdater``.
    static func featureValue(_ embedding: [Float], for description: MLFeatureDescription?) throws -> MLFeatureValue {
        var shape = [embedding.count]
        var dataType = MLMultiArrayDataType.float32
        if let constraint = description?.multiArrayConstraint {
            let declared = constraint.shape.map(\.intValue)
            let elements = declared.reduce(1, *)
            if !declared.isEmpty, declared.allSatisfy({ $0 > 0 }) {
                guard elements == embedding.count else {
                    throw EdgeClassifierError.embeddingDimensionMismatch(expected: elements, actual: embedding.count)
                }
                shape = declared
            }
            dataType = constraint.dataType
        }
        let array: MLMultiArray
        switch dataType {
        case .double:
            array = MLMultiArray(MLShapedArray<Double>(scalars: embedding.map(Double.init), shape: shape))
        default:
            array = MLMultiArray(MLShapedArray<Float>(scalars: embedding, shape: shape))
        }
        return MLFeatureValue(multiArray: array)
    }
}
#endif
