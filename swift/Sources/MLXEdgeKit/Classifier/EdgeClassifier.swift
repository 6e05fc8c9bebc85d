#if canImport(CoreML)
import CoreML
import Foundation

/// Errors thrown by ``EdgeClassifier``.
public enum EdgeClassifierError: Error, CustomStringConvertible, LocalizedError {
    /// A prediction result lacks the output the manifest names, or it is not a multi-array.
    case missingOutput(model: String, name: String)
    /// A feature type MLMultiArray cannot hold (int64).
    case unsupportedDataType(feature: String, dataType: String)

    public var description: String {
        switch self {
        case let .missingOutput(model, name):
            return "EdgeClassifier: the \(model)'s prediction has no multi-array output \"\(name)\""
        case let .unsupportedDataType(feature, dataType):
            return "EdgeClassifier: feature \"\(feature)\" has data type \(dataType), which MLMultiArray cannot hold"
        }
    }

    public var errorDescription: String? { description }
}

/// Text → tokenizer (``BertTokenizer`` or ``UnigramTokenizer``) → encoder → embedding → head →
/// ``ClassificationResult``.
///
/// Every feature name and shape comes from the bundle's ``BundleManifest`` (through
/// ``BundleIO``): the encoder's token-id and mask inputs, its embedding output, the head's
/// embedding input and its probability output, a plain `MLMultiArray` in label order (the
/// head is a NeuralNetwork model, not a classifier model). This type only copies arrays
/// into and out of CoreML; the logic is in the pure core and tested on Linux.
public final class EdgeClassifier: @unchecked Sendable {
    public let manifest: BundleManifest
    public let io: BundleIO
    public let tokenizer: any TextTokenizer
    public let encoder: MLModel

    private let lock = NSLock()
    private var _head: MLModel

    /// Labels in the head's output order (the manifest's `labels`).
    public var labels: [String] { io.labels }

    public var head: MLModel {
        lock.lock(); defer { lock.unlock() }
        return _head
    }

    /// Checks that both models have the features the manifest names
    /// (``BundleIOError/modelMismatch(model:missing:)`` otherwise).
    public init(manifest: BundleManifest, encoder: MLModel, head: MLModel, tokenizer: any TextTokenizer) throws {
        let io = try manifest.io()
        try EdgeClassifier.check(encoder, as: .encoder, io: io)
        try EdgeClassifier.check(head, as: .head, io: io)
        self.manifest = manifest
        self.io = io
        self.tokenizer = tokenizer
        self.encoder = encoder
        self._head = head
    }

    /// Loads compiled models (`.mlmodelc`; see ``compiledModelURL(_:manifest:bundleDirectory:cacheDirectory:)``).
    /// `configuration` defaults to the manifest's compute units.
    public convenience init(manifest: BundleManifest, encoderURL: URL, headURL: URL, tokenizer: any TextTokenizer,
                            configuration: MLModelConfiguration? = nil) throws {
        let configuration = configuration ?? EdgeClassifier.configuration(for: manifest)
        let encoder = try MLModel(contentsOf: encoderURL, configuration: configuration)
        let head = try MLModel(contentsOf: headURL, configuration: configuration)
        try self.init(manifest: manifest, encoder: encoder, head: head, tokenizer: tokenizer)
    }

    /// An `MLModelConfiguration` with the compute units the bundle was exported for.
    public static func configuration(for manifest: BundleManifest) -> MLModelConfiguration {
        let configuration = MLModelConfiguration()
        configuration.computeUnits = manifest.computeUnits.mlComputeUnits
        return configuration
    }

    /// Swaps in a new head (e.g. the URL ``OnDeviceUpdater/update(with:options:progress:)`` returns).
    public func replaceHead(with model: MLModel) throws {
        try EdgeClassifier.check(model, as: .head, io: io)
        lock.lock(); defer { lock.unlock() }
        _head = model
    }

    public func replaceHead(contentsOf url: URL, configuration: MLModelConfiguration? = nil) throws {
        try replaceHead(with: try MLModel(contentsOf: url, configuration: configuration ?? EdgeClassifier.configuration(for: manifest)))
    }

    // MARK: Prediction

    /// The encoder's sentence embedding for `text` (flattened: `hidden` values).
    public func embedding(for text: String) throws -> [Float] {
        let inputs = try io.encoderInputs(for: text, tokenizer: tokenizer)
        let output = try encoder.prediction(from: try EdgeClassifier.provider(inputs))
        let name = io.encoderEmbedding.name
        guard let array = output.featureValue(for: name)?.multiArrayValue else {
            throw EdgeClassifierError.missingOutput(model: "encoder", name: name)
        }
        return try io.embedding(fromEncoderOutput: MLShapedArray<Float>(converting: array).scalars)
    }

    public func classify(_ text: String) throws -> ClassificationResult {
        try classify(embedding: try embedding(for: text))
    }

    /// Runs the head on an embedding (e.g. a stored correction's).
    public func classify(embedding: [Float]) throws -> ClassificationResult {
        let input = try io.headInput(embedding: embedding)
        let output = try head.prediction(from: try EdgeClassifier.provider([input]))
        let name = io.headProbabilities.name
        guard let array = output.featureValue(for: name)?.multiArrayValue else {
            throw EdgeClassifierError.missingOutput(model: "head", name: name)
        }
        return try io.classification(fromHeadOutput: MLShapedArray<Double>(converting: array).scalars)
    }

    // MARK: Compiling the bundle's models

    /// The compiled `.mlmodelc` of one of the bundle's models, kept in `cacheDirectory`
    /// (use a writable place such as Application Support, not the app bundle). The first call
    /// compiles the bundle's `.mlpackage` / `.mlmodel` with `MLModel.compileModel(at:)`; later
    /// calls return the cached copy. The name holds the model's digest from the manifest
    /// (``BundleManifest/compiledModelName(_:)``), so a new export is compiled again, and older
    /// compiled copies of that model are removed.
    public static func compiledModelURL(_ kind: BundleManifest.ModelKind, manifest: BundleManifest,
                                        bundleDirectory: URL, cacheDirectory: URL) async throws -> URL {
        let fileManager = FileManager.default
        let name = manifest.compiledModelName(kind)
        let destination = cacheDirectory.appendingPathComponent(name, isDirectory: true)
        if fileManager.fileExists(atPath: destination.path) { return destination }
        let source = BundleManifest.url(of: manifest.model(kind).file, in: bundleDirectory)
        let compiled = try await MLModel.compileModel(at: source) // a temporary location
        try fileManager.createDirectory(at: cacheDirectory, withIntermediateDirectories: true)
        let staging = cacheDirectory.appendingPathComponent(".\(UUID().uuidString).partial", isDirectory: true)
        try fileManager.moveItem(at: compiled, to: staging)
        do {
            try AtomicFile.rename(staging, to: destination)
        } catch {
            try? fileManager.removeItem(at: staging)
            guard fileManager.fileExists(atPath: destination.path) else { throw error } // else: another caller won
        }
        let names = (try? fileManager.contentsOfDirectory(atPath: cacheDirectory.path)) ?? []
        for stale in manifest.staleCompiledModelNames(kind, among: names) {
            try? fileManager.removeItem(at: cacheDirectory.appendingPathComponent(stale))
        }
        return destination
    }

    // MARK: CoreML glue (shared with OnDeviceUpdater)

    static func check(_ model: MLModel, as kind: BundleManifest.ModelKind, io: BundleIO, training: Bool = false) throws {
        let description = model.modelDescription
        try io.checkModel(kind, inputNames: Set(description.inputDescriptionsByName.keys),
                          outputNames: Set(description.outputDescriptionsByName.keys),
                          trainingInputNames: training ? Set(description.trainingInputDescriptionsByName.keys) : nil)
    }

    static func provider(_ features: [FeatureArray]) throws -> MLDictionaryFeatureProvider {
        var dictionary: [String: Any] = [:]
        for feature in features {
            dictionary[feature.name] = MLFeatureValue(multiArray: try feature.multiArray())
        }
        return try MLDictionaryFeatureProvider(dictionary: dictionary)
    }
}

extension FeatureArray {
    /// An `MLMultiArray` of the declared shape and data type holding the values.
    func multiArray() throws -> MLMultiArray {
        switch (values, dataType) {
        case let (.int32(v), .int32):
            return MLMultiArray(MLShapedArray<Int32>(scalars: v, shape: shape))
        case let (.float32(v), .float32):
            return MLMultiArray(MLShapedArray<Float>(scalars: v, shape: shape))
        case let (.int32(v), .float32):
            return MLMultiArray(MLShapedArray<Float>(scalars: v.map { Float($0) }, shape: shape))
        case let (.float32(v), .float64):
            return MLMultiArray(MLShapedArray<Double>(scalars: v.map { Double($0) }, shape: shape))
        case let (.int32(v), .float64):
            return MLMultiArray(MLShapedArray<Double>(scalars: v.map { Double($0) }, shape: shape))
        case let (.float32(v), .int32):
            return MLMultiArray(MLShapedArray<Int32>(scalars: v.map { Int32($0) }, shape: shape))
        case (_, .float16):
            let array = try MLMultiArray(shape: shape.map { NSNumber(value: $0) }, dataType: .float16)
            switch values {
            case let .float32(v): for (i, x) in v.enumerated() { array[i] = NSNumber(value: x) }
            case let .int32(v): for (i, x) in v.enumerated() { array[i] = NSNumber(value: Float(x)) }
            }
            return array
        case (_, .int64):
            throw EdgeClassifierError.unsupportedDataType(feature: name, dataType: dataType.rawValue)
        }
    }
}

extension BundleManifest.ComputeUnits {
    public var mlComputeUnits: MLComputeUnits {
        switch self {
        case .cpuAndGPU: return .cpuAndGPU
        case .all: return .all
        case .cpuAndNeuralEngine: return .cpuAndNeuralEngine
        case .cpuOnly: return .cpuOnly
        }
    }
}
#endif
