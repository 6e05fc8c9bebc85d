#if canImport(CoreML)
import CoreML
import Foundation

/// The one-call entry point: open an exported bundle folder, then classify text and, where
/// the head can learn, take the user's corrections and train on them.
///
/// ```swift
/// let classifier = try await TextClassifier.open(bundle: bundleURL)
/// let result = try classifier.classify("Pay the credit card bill")   // .label, .confidence, .scores
/// try classifier.correct("Pay the credit card bill", label: "finance")
/// try await classifier.learn()
/// ```
///
/// It puts together what an app can also use piece by piece: ``ClassifierBundle`` (manifest,
/// tokenizer, file checks), ``EdgeClassifier`` (prediction), and ``CorrectionStore``,
/// ``ModelStore`` and ``OnDeviceUpdater`` (learning), kept where ``OnDeviceStorage`` says.
public final class TextClassifier: Sendable {
    public struct Configuration: Sendable {
        /// Where compiled models, the head's working copies and the corrections live; nil:
        /// ``OnDeviceStorage/defaultDirectory()`` (Application Support/MLXEdgeKit).
        public var storageDirectory: URL?
        /// How much of the bundle's files to check when opening.
        public var fileCheck: ClassifierBundle.FileCheck
        /// Off: the exported head is used as it is, and ``correct(_:label:)``, ``learn(options:progress:)``
        /// and ``reset()`` throw ``LearningError/disabled``.
        public var learnsFromCorrections: Bool
        /// nil: the compute units the bundle was exported for (the manifest's `compute_units`).
        public var computeUnits: MLComputeUnits?
        /// The most corrections kept; beyond it the oldest are dropped.
        public var maxCorrections: Int

        public init(storageDirectory: URL? = nil, fileCheck: ClassifierBundle.FileCheck = .sizes,
                    learnsFromCorrections: Bool = true, computeUnits: MLComputeUnits? = nil,
                    maxCorrections: Int = 1000) {
            self.storageDirectory = storageDirectory
            self.fileCheck = fileCheck
            self.learnsFromCorrections = learnsFromCorrections
            self.computeUnits = computeUnits
            self.maxCorrections = maxCorrections
        }
    }

    /// What learning needs; it exists only when the head can learn.
    private struct Learner: Sendable {
        let corrections: CorrectionStore
        let headStore: ModelStore
        let updater: OnDeviceUpdater
    }

    public let bundle: ClassifierBundle
    public let storage: OnDeviceStorage
    /// Prediction with the current head; also gives `embedding(for:)`.
    public let classifier: EdgeClassifier
    private let learner: Result<Learner, LearningError>
    private let computeUnits: MLComputeUnits

    private init(bundle: ClassifierBundle, storage: OnDeviceStorage, classifier: EdgeClassifier,
                 learner: Result<Learner, LearningError>, computeUnits: MLComputeUnits) {
        self.bundle = bundle
        self.storage = storage
        self.classifier = classifier
        self.learner = learner
        self.computeUnits = computeUnits
    }

    /// Labels in the head's output order: a correction must use one of them.
    public var labels: [String] { bundle.labels }

    /// Whether ``correct(_:label:)`` and ``learn(options:progress:)`` can run, and if not, why.
    public var learning: LearningAvailability {
        switch learner {
        case .success: return .available
        case let .failure(error): return .unavailable(error)
        }
    }

    /// The user's corrections (to list or remove some); nil when learning is unavailable.
    public var corrections: CorrectionStore? { try? learner.get().corrections }

    // MARK: Opening

    /// Opens the bundle folder `directory` (the one with manifest.json): validates the manifest,
    /// checks the files, builds the tokenizer, compiles the models once into
    /// ``OnDeviceStorage/compiledModelsDirectory``, and loads them. Where the head can learn,
    /// it loads the head's working copy (the bundled head if that copy is broken) and the
    /// corrections. Call it at launch, not while another classifier of this bundle is learning.
    public static func open(bundle directory: URL,
                            configuration: Configuration = Configuration()) async throws -> TextClassifier {
        let bundle = try ClassifierBundle(directory: directory, fileCheck: configuration.fileCheck)
        let manifest = bundle.manifest
        let storage = OnDeviceStorage(directory: try configuration.storageDirectory ?? OnDeviceStorage.defaultDirectory(),
                                      manifest: manifest)
        let computeUnits = configuration.computeUnits ?? manifest.computeUnits.mlComputeUnits
        let models = modelConfiguration(computeUnits)
        let encoderURL = try await EdgeClassifier.compiledModelURL(.encoder, manifest: manifest, bundleDirectory: directory,
                                                                   cacheDirectory: storage.compiledModelsDirectory)
        let bundledHeadURL = try await EdgeClassifier.compiledModelURL(.head, manifest: manifest, bundleDirectory: directory,
                                                                       cacheDirectory: storage.compiledModelsDirectory)
        let encoder = try MLModel(contentsOf: encoderURL, configuration: models)
        let bundledHead = try MLModel(contentsOf: bundledHeadURL, configuration: models)
        let description = bundledHead.modelDescription
        let availability = LearningAvailability(
            enabled: configuration.learnsFromCorrections, headIsUpdatable: description.isUpdatable,
            headTrainingInputNames: Set(description.trainingInputDescriptionsByName.keys), io: bundle.io)

        var head = bundledHead
        let learner: Result<Learner, LearningError>
        switch availability {
        case let .unavailable(error):
            learner = .failure(error)
        case .available:
            let headStore = try ModelStore(bundledModelURL: bundledHeadURL, baseDirectory: storage.headStoreDirectory)
            try headStore.install()
            var current: MLModel?
            _ = headStore.currentModelURL { current = try MLModel(contentsOf: $0, configuration: models) }
            head = current ?? bundledHead // nil: no working copy, or it failed to load (the store records it)
            let corrections = try CorrectionStore(fileURL: storage.correctionsFileURL, allowedLabels: bundle.labels,
                                                  maxCount: configuration.maxCorrections)
            learner = .success(Learner(corrections: corrections, headStore: headStore,
                                       updater: try OnDeviceUpdater(store: headStore, manifest: manifest)))
        }
        let classifier = try EdgeClassifier(manifest: manifest, encoder: encoder, head: head, tokenizer: bundle.tokenizer)
        return TextClassifier(bundle: bundle, storage: storage, classifier: classifier, learner: learner,
                              computeUnits: computeUnits)
    }

    // MARK: Classifying and learning

    public func classify(_ text: String) throws -> ClassificationResult {
        try classifier.classify(text)
    }

    /// Records that `text` should be labelled `label`, with its embedding from the encoder.
    /// Throws ``LearningError`` when learning is unavailable, and
    /// ``CorrectionStoreError/invalidLabel(label:allowed:)`` for a label not in ``labels``
    /// (checked before the encoder runs). The same text corrected again keeps the newest label.
    @discardableResult
    public func correct(_ text: String, label: String) throws -> Correction {
        try learner.get().corrections.add(text: text, label: label, embed: classifier.embedding(for:))
    }

    /// Trains the head on every stored correction and puts the result in use at once.
    ///
    /// The update (``OnDeviceUpdater``) trains a copy of the current head and commits it
    /// atomically, so a crash or a cancelled task leaves the previous head in use. Throws
    /// ``LearningError`` when learning is unavailable, ``TrainingBatchError/emptyBatch`` with no
    /// corrections, ``OnDeviceUpdaterError/updateInProgress`` while another call runs, and
    /// ``BundleIOError/updateOptionOutOfRange(option:value:allowed:)`` for options the head does not allow.
    public func learn(options: OnDeviceUpdater.Options = OnDeviceUpdater.Options(),
                      progress: (@Sendable (OnDeviceUpdater.Progress) -> Void)? = nil) async throws {
        let learner = try self.learner.get()
        let batch = try bundle.io.makeTrainingBatch(corrections: learner.corrections.corrections,
                                                    embed: classifier.embedding(for:))
        let updatedHeadURL = try await learner.updater.update(with: batch, options: options, progress: progress)
        try classifier.replaceHead(contentsOf: updatedHeadURL, configuration: TextClassifier.modelConfiguration(computeUnits))
    }

    /// Goes back to the exported head and deletes the corrections. Do not call it while
    /// ``learn(options:progress:)`` runs.
    public func reset() throws {
        let learner = try self.learner.get()
        let headURL = try learner.headStore.reset()
        try classifier.replaceHead(contentsOf: headURL, configuration: TextClassifier.modelConfiguration(computeUnits))
        try learner.corrections.removeAll()
    }

    private static func modelConfiguration(_ computeUnits: MLComputeUnits) -> MLModelConfiguration {
        let configuration = MLModelConfiguration()
        configuration.computeUnits = computeUnits
        return configuration
    }
}
#endif
