import Foundation

/// Errors thrown while building a ``TrainingBatch``.
public enum TrainingBatchError: Error, Equatable, Sendable, CustomStringConvertible, LocalizedError {
    case emptyBatch
    case emptyLabelList
    case duplicateLabel(String)
    case invalidEmbeddingDimension(Int)
    case invalidInputNames(embedding: String, label: String)
    case wrongEmbeddingDimension(index: Int, expected: Int, actual: Int)
    case nonFiniteEmbedding(index: Int)
    case unknownLabel(index: Int, label: String, allowed: [String])
    /// A text-only correction and no `embed` closure to compute its embedding.
    case missingEmbedding(index: Int)

    public var description: String {
        switch self {
        case .emptyBatch: return "TrainingBatch: no examples"
        case .emptyLabelList: return "TrainingBatch: the label list is empty"
        case let .duplicateLabel(label): return "TrainingBatch: label \"\(label)\" appears twice in the label list"
        case let .invalidEmbeddingDimension(d): return "TrainingBatch: embedding dimension must be positive, got \(d)"
        case let .invalidInputNames(e, l):
            return "TrainingBatch: training input names must be non-empty and distinct, got \"\(e)\" and \"\(l)\""
        case let .wrongEmbeddingDimension(i, expected, actual):
            return "TrainingBatch: example \(i) has an embedding of dimension \(actual), expected \(expected)"
        case let .nonFiniteEmbedding(i): return "TrainingBatch: example \(i) has NaN or infinite embedding values"
        case let .unknownLabel(i, label, allowed):
            return "TrainingBatch: example \(i) has label \"\(label)\", not one of: "
                + allowed.map { "\"\($0)\"" }.joined(separator: ", ")
        case let .missingEmbedding(i): return "TrainingBatch: example \(i) has no embedding and no embed function was given"
        }
    }

    public var errorDescription: String? { description }
}

/// Training data for the updatable classifier head, in the shapes `MLUpdateTask` wants:
/// per example, the embedding input as a Float32 array of shape `[dim]` and the label
/// input as an Int32 class index of shape `[1]` (index into the label list, which must be
/// the head's class order). Pure: the CoreML side only copies these into MLMultiArrays.
public struct TrainingBatch: Sendable, Equatable {
    public struct Example: Sendable, Equatable {
        /// Shape `[embeddingDimension]`.
        public var embedding: [Float]
        /// Shape `[1]`: the index of the label in ``TrainingBatch/labels``.
        public var labelIndex: Int32
    }

    /// Head training input fed with the embedding (e.g. `embedding`).
    public let embeddingInputName: String
    /// Head training input fed with the true class (e.g. `probs_true`).
    public let labelInputName: String
    public let embeddingDimension: Int
    /// Class labels in the head's class order.
    public let labels: [String]
    public let examples: [Example]

    public var count: Int { examples.count }
    public var embeddingShape: [Int] { [embeddingDimension] }
    public var labelShape: [Int] { [1] }

    /// - Parameters:
    ///   - examples: (embedding, label) pairs.
    ///   - labels: the head's class labels, in class-index order.
    ///   - embeddingInputName / labelInputName: the head's training input names.
    ///   - embeddingDimension: the encoder's embedding size (e.g. 384).
    public init(examples: [(embedding: [Float], label: String)], labels: [String],
                embeddingInputName: String, labelInputName: String, embeddingDimension: Int) throws {
        guard !labels.isEmpty else { throw TrainingBatchError.emptyLabelList }
        var index: [String: Int32] = [:]
        for (i, label) in labels.enumerated() {
            guard index[label] == nil else { throw TrainingBatchError.duplicateLabel(label) }
            index[label] = Int32(i)
        }
        guard embeddingDimension > 0 else { throw TrainingBatchError.invalidEmbeddingDimension(embeddingDimension) }
        guard !embeddingInputName.isEmpty, !labelInputName.isEmpty, embeddingInputName != labelInputName else {
            throw TrainingBatchError.invalidInputNames(embedding: embeddingInputName, label: labelInputName)
        }
        guard !examples.isEmpty else { throw TrainingBatchError.emptyBatch }
        var built: [Example] = []
        built.reserveCapacity(examples.count)
        for (i, example) in examples.enumerated() {
            guard example.embedding.count == embeddingDimension else {
                throw TrainingBatchError.wrongEmbeddingDimension(index: i, expected: embeddingDimension,
                                                                 actual: example.embedding.count)
            }
            guard example.embedding.allSatisfy(\.isFinite) else { throw TrainingBatchError.nonFiniteEmbedding(index: i) }
            guard let labelIndex = index[example.label] else {
                throw TrainingBatchError.unknownLabel(index: i, label: example.label, allowed: labels)
            }
            built.append(Example(embedding: example.embedding, labelIndex: labelIndex))
        }
        self.embeddingInputName = embeddingInputName
        self.labelInputName = labelInputName
        self.embeddingDimension = embeddingDimension
        self.labels = labels
        self.examples = built
    }

    /// Builds a batch from stored corrections. A correction without an embedding is
    /// embedded with `embed` (e.g. the on-device encoder); without `embed` it is an error.
    public init(corrections: [Correction], labels: [String], embeddingInputName: String,
                labelInputName: String, embeddingDimension: Int,
                embed: ((String) throws -> [Float])? = nil) throws {
        var pairs: [(embedding: [Float], label: String)] = []
        pairs.reserveCapacity(corrections.count)
        for (i, correction) in corrections.enumerated() {
            if let embedding = correction.embedding {
                pairs.append((embedding, correction.label))
            } else if let text = correction.text, let embed {
                pairs.append((try embed(text), correction.label))
            } else {
                throw TrainingBatchError.missingEmbedding(index: i)
            }
        }
        try self.init(examples: pairs, labels: labels, embeddingInputName: embeddingInputName,
                      labelInputName: labelInputName, embeddingDimension: embeddingDimension)
    }
}
