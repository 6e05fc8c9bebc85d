import Foundation

/// Errors thrown by ``BundleIO`` when arrays do not fit the bundle's models.
public enum BundleIOError: Error, Equatable, Sendable, CustomStringConvertible, LocalizedError {
    /// An array has the wrong number of values for a feature.
    case wrongElementCount(feature: String, expected: Int, actual: Int)
    case nonFiniteValues(feature: String)
    case labelIndexOutOfRange(index: Int32, labels: Int)
    /// A ``TrainingBatch`` built for another label list, input names or embedding width.
    case batchMismatch(String)
    /// A loaded model lacks features the manifest names (the model and the manifest are
    /// from different exports).
    case modelMismatch(model: String, missing: [String])
    /// An update option outside what the head allows (`MLUpdateTask` would fail).
    case updateOptionOutOfRange(option: String, value: String, allowed: String)

    public var description: String {
        switch self {
        case let .wrongElementCount(feature, expected, actual):
            return "BundleIO: \"\(feature)\" needs \(expected) values, got \(actual)"
        case let .nonFiniteValues(feature): return "BundleIO: \"\(feature)\" has NaN or infinite values"
        case let .labelIndexOutOfRange(index, labels):
            return "BundleIO: label index \(index) is outside the \(labels) labels"
        case let .batchMismatch(reason): return "BundleIO: the training batch does not match the bundle: \(reason)"
        case let .modelMismatch(model, missing):
            return "BundleIO: the loaded \(model) has no feature " + missing.map { "\"\($0)\"" }.joined(separator: ", ")
                + " that the manifest names; are the model and manifest.json from the same export?"
        case let .updateOptionOutOfRange(option, value, allowed):
            return "BundleIO: \(option) \(value) is not allowed by the head (allowed: \(allowed))"
        }
    }

    public var errorDescription: String? { description }
}

/// One model input as the manifest declares it, with its values: what the CoreML code
/// copies into an `MLMultiArray` of `shape` and `dataType` (converting the values).
public struct FeatureArray: Equatable, Sendable {
    public enum Values: Equatable, Sendable {
        case float32([Float])
        case int32([Int32])

        public var count: Int {
            switch self {
            case let .float32(values): return values.count
            case let .int32(values): return values.count
            }
        }
    }

    public var name: String
    public var shape: [Int]
    /// The data type the model declares for this feature.
    public var dataType: BundleManifest.DataType
    public var values: Values

    public init(name: String, shape: [Int], dataType: BundleManifest.DataType, values: Values) {
        self.name = name
        self.shape = shape
        self.dataType = dataType
        self.values = values
    }
}

/// The feature names, shapes and data types of a bundle's encoder and head, taken from a
/// validated ``BundleManifest``, and the pure conversions between app values and model
/// arrays. The CoreML code (``EdgeClassifier``, ``OnDeviceUpdater``) only copies
/// ``FeatureArray``s into `MLMultiArray`s and flat arrays out of them.
///
/// Shapes come from the manifest, never assumed: the encoder outputs the embedding as
/// `[1, hidden]` while the head takes `[hidden]`; a flat `[Float]` of `hidden` values travels
/// between them and each side gets the shape its model declares.
public struct BundleIO: Equatable, Sendable {
    public struct Feature: Equatable, Sendable {
        public var name: String
        public var shape: [Int]
        public var dataType: BundleManifest.DataType

        public var elementCount: Int { shape.reduce(1, *) }
    }

    /// The head's update settings: the defaults and the ranges an app may choose within.
    public struct UpdateSettings: Equatable, Sendable {
        public var optimizer: BundleManifest.HeadModel.Optimizer.Kind
        public var learningRate: BundleManifest.HeadModel.Optimizer.LearningRate
        public var miniBatchSize: BundleManifest.Choice
        public var epochs: BundleManifest.Choice
        public var shuffle: Bool
    }

    /// Labels in the head's output order.
    public let labels: [String]
    public let embeddingDimension: Int
    public let sequenceLength: BundleManifest.SequenceLength
    /// Encoder input: token ids (shape at the longest length).
    public let tokenIDs: Feature
    /// Encoder input: attention mask (same shape as ``tokenIDs``).
    public let attentionMask: Feature
    /// Encoder output with the embedding (e.g. `[1, hidden]`).
    public let encoderEmbedding: Feature
    /// Head input with the embedding (e.g. `[hidden]`).
    public let headEmbedding: Feature
    /// Head output: probabilities in label order (e.g. `[labels]`).
    public let headProbabilities: Feature
    /// Head training input with the embedding.
    public let trainingEmbedding: Feature
    /// Head training input with the true label's index, Int32 `[1]`.
    public let trainingLabel: Feature
    public let updateSettings: UpdateSettings

    /// Validates `manifest` (``BundleManifest/validate()``) and takes its features.
    public init(manifest: BundleManifest) throws {
        try manifest.validate()
        func feature(_ f: BundleManifest.Feature) -> Feature {
            Feature(name: f.name, shape: f.fixedShape ?? [], dataType: f.dtype)
        }
        func named(_ name: String, _ list: [BundleManifest.Feature]) -> Feature {
            feature(list.first { $0.name == name }!) // validate() checked it is there
        }
        let encoder = manifest.models.encoder
        let head = manifest.models.head
        labels = manifest.labels
        embeddingDimension = manifest.student.hiddenSize
        sequenceLength = manifest.sequenceLength
        tokenIDs = feature(encoder.inputs[0])
        attentionMask = feature(encoder.inputs[1])
        encoderEmbedding = named(encoder.embeddingOutput, encoder.outputs)
        headEmbedding = named(head.embeddingInput, head.inputs)
        headProbabilities = named(head.probabilitiesOutput, head.outputs)
        trainingEmbedding = named(head.embeddingInput, head.trainingInputs)
        trainingLabel = named(head.labelInput, head.trainingInputs)
        updateSettings = UpdateSettings(optimizer: head.optimizer.type, learningRate: head.optimizer.learningRate,
                                        miniBatchSize: head.optimizer.miniBatchSize, epochs: head.epochs,
                                        shuffle: head.shuffle)
    }

    // MARK: Encoder

    /// The encoder input shape for `length` tokens: the manifest's shape with its last
    /// dimension set to `length` (`[1, length]`, or `[length]` if the model takes that).
    public func encoderInputShape(length: Int) -> [Int] {
        var shape = tokenIDs.shape
        if shape.isEmpty { return [length] }
        shape[shape.count - 1] = length
        return shape
    }

    /// The encoder's two inputs for `text`: tokenized at the longest length, then cut to the
    /// length the encoder accepts for it (``BundleManifest/SequenceLength/paddedLength(forTokenCount:)``).
    public func encoderInputs(for text: String, tokenizer: any TextTokenizer) throws -> [FeatureArray] {
        try encoderInputs(for: tokenizer.encode(text, maxLength: sequenceLength.max))
    }

    /// The encoder's inputs for an encoding made with `maxLength` = `sequenceLength.max`.
    public func encoderInputs(for encoding: TokenEncoding) throws -> [FeatureArray] {
        let longest = sequenceLength.max
        guard encoding.inputIds.count == longest, encoding.attentionMask.count == longest else {
            throw BundleIOError.wrongElementCount(feature: tokenIDs.name, expected: longest,
                                                  actual: encoding.inputIds.count)
        }
        let length = sequenceLength.paddedLength(forTokenCount: encoding.tokenCount)
        let shape = encoderInputShape(length: length)
        return [
            FeatureArray(name: tokenIDs.name, shape: shape, dataType: tokenIDs.dataType,
                         values: .int32(Array(encoding.inputIds.prefix(length)))),
            FeatureArray(name: attentionMask.name, shape: shape, dataType: attentionMask.dataType,
                         values: .int32(Array(encoding.attentionMask.prefix(length)))),
        ]
    }

    /// The embedding from the encoder's output values (flattened, any shape of `hidden` values).
    public func embedding(fromEncoderOutput values: [Float]) throws -> [Float] {
        guard values.count == encoderEmbedding.elementCount else {
            throw BundleIOError.wrongElementCount(feature: encoderEmbedding.name, expected: encoderEmbedding.elementCount,
                                                  actual: values.count)
        }
        return values
    }

    // MARK: Head

    /// The head's embedding input, in the shape the head declares.
    public func headInput(embedding: [Float]) throws -> FeatureArray {
        guard embedding.count == headEmbedding.elementCount else {
            throw BundleIOError.wrongElementCount(feature: headEmbedding.name, expected: headEmbedding.elementCount,
                                                  actual: embedding.count)
        }
        guard embedding.allSatisfy(\.isFinite) else { throw BundleIOError.nonFiniteValues(feature: headEmbedding.name) }
        return FeatureArray(name: headEmbedding.name, shape: headEmbedding.shape, dataType: headEmbedding.dataType,
                            values: .float32(embedding))
    }

    /// The result from the head's probability output (flattened, label order).
    public func classification(fromHeadOutput probabilities: [Double]) throws -> ClassificationResult {
        guard probabilities.count == labels.count,
              let result = ClassificationResult(values: probabilities, labels: labels) else {
            throw BundleIOError.wrongElementCount(feature: headProbabilities.name, expected: labels.count,
                                                  actual: probabilities.count)
        }
        return result
    }

    // MARK: Training

    /// A ``TrainingBatch`` with the manifest's labels, training input names and width.
    public func makeTrainingBatch(examples: [(embedding: [Float], label: String)]) throws -> TrainingBatch {
        try TrainingBatch(examples: examples, labels: labels, embeddingInputName: trainingEmbedding.name,
                          labelInputName: trainingLabel.name, embeddingDimension: embeddingDimension)
    }

    /// A ``TrainingBatch`` from stored corrections (text-only ones are embedded with `embed`).
    public func makeTrainingBatch(corrections: [Correction],
                                  embed: ((String) throws -> [Float])? = nil) throws -> TrainingBatch {
        try TrainingBatch(corrections: corrections, labels: labels, embeddingInputName: trainingEmbedding.name,
                          labelInputName: trainingLabel.name, embeddingDimension: embeddingDimension, embed: embed)
    }

    /// Throws ``BundleIOError/batchMismatch(_:)`` unless `batch` uses this bundle's labels
    /// (same order), training input names and embedding width.
    public func check(_ batch: TrainingBatch) throws {
        guard batch.labels == labels else {
            throw BundleIOError.batchMismatch("its labels \(batch.labels) differ from the manifest's \(labels)")
        }
        guard batch.embeddingInputName == trainingEmbedding.name, batch.labelInputName == trainingLabel.name else {
            throw BundleIOError.batchMismatch(
                "its inputs \"\(batch.embeddingInputName)\", \"\(batch.labelInputName)\" differ from the head's "
                    + "\"\(trainingEmbedding.name)\", \"\(trainingLabel.name)\"")
        }
        guard batch.embeddingDimension == embeddingDimension else {
            throw BundleIOError.batchMismatch(
                "its embeddings have \(batch.embeddingDimension) values, the head takes \(embeddingDimension)")
        }
    }

    /// One training example as the head's training inputs: the embedding in the training
    /// input's shape, and the label index as a `[1]` array.
    public func trainingInputs(for example: TrainingBatch.Example) throws -> [FeatureArray] {
        guard example.embedding.count == trainingEmbedding.elementCount else {
            throw BundleIOError.wrongElementCount(feature: trainingEmbedding.name,
                                                  expected: trainingEmbedding.elementCount, actual: example.embedding.count)
        }
        guard example.embedding.allSatisfy(\.isFinite) else {
            throw BundleIOError.nonFiniteValues(feature: trainingEmbedding.name)
        }
        guard example.labelIndex >= 0, Int(example.labelIndex) < labels.count else {
            throw BundleIOError.labelIndexOutOfRange(index: example.labelIndex, labels: labels.count)
        }
        return [
            FeatureArray(name: trainingEmbedding.name, shape: trainingEmbedding.shape,
                         dataType: trainingEmbedding.dataType, values: .float32(example.embedding)),
            FeatureArray(name: trainingLabel.name, shape: trainingLabel.shape, dataType: trainingLabel.dataType,
                         values: .int32([example.labelIndex])),
        ]
    }

    /// Throws ``BundleIOError/updateOptionOutOfRange(option:value:allowed:)`` for an update
    /// option the head does not allow (nil = the head's default).
    public func checkUpdateOptions(epochs: Int?, learningRate: Double?, miniBatchSize: Int?) throws {
        let s = updateSettings
        if let epochs, !s.epochs.allowed.contains(epochs) {
            throw BundleIOError.updateOptionOutOfRange(option: "epochs", value: "\(epochs)",
                                                       allowed: BundleIO.describe(s.epochs.allowed))
        }
        if let miniBatchSize, !s.miniBatchSize.allowed.contains(miniBatchSize) {
            throw BundleIOError.updateOptionOutOfRange(option: "mini-batch size", value: "\(miniBatchSize)",
                                                       allowed: BundleIO.describe(s.miniBatchSize.allowed))
        }
        if let learningRate, !(s.learningRate.min...s.learningRate.max).contains(learningRate) {
            throw BundleIOError.updateOptionOutOfRange(option: "learning rate", value: "\(learningRate)",
                                                       allowed: "\(s.learningRate.min)...\(s.learningRate.max)")
        }
    }

    // MARK: Models

    /// Names a loaded model must have, per the manifest.
    public func requiredFeatureNames(_ kind: BundleManifest.ModelKind)
        -> (inputs: [String], outputs: [String], trainingInputs: [String]) {
        switch kind {
        case .encoder: return ([tokenIDs.name, attentionMask.name], [encoderEmbedding.name], [])
        case .head: return ([headEmbedding.name], [headProbabilities.name], [trainingEmbedding.name, trainingLabel.name])
        }
    }

    /// Throws ``BundleIOError/modelMismatch(model:missing:)`` if a loaded model (its
    /// description's feature names) lacks a feature the manifest names. Pass
    /// `trainingInputNames` to check the head's training inputs too.
    public func checkModel(_ kind: BundleManifest.ModelKind, inputNames: Set<String>, outputNames: Set<String>,
                           trainingInputNames: Set<String>? = nil) throws {
        let required = requiredFeatureNames(kind)
        var missing = required.inputs.filter { !inputNames.contains($0) }
            + required.outputs.filter { !outputNames.contains($0) }
        if let trainingInputNames {
            missing += required.trainingInputs.filter { !trainingInputNames.contains($0) }
        }
        if !missing.isEmpty { throw BundleIOError.modelMismatch(model: kind.rawValue, missing: missing) }
    }

    private static func describe(_ values: [Int]) -> String {
        let sorted = values.sorted()
        if let first = sorted.first, let last = sorted.last, sorted.count > 3, sorted == Array(first...last) {
            return "\(first)...\(last)"
        }
        return sorted.map(String.init).joined(separator: ", ")
    }
}
