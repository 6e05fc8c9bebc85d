#if canImport(CoreML)
import CoreML
import Foundation

/// Errors thrown by ``OnDeviceUpdater``.
public enum OnDeviceUpdaterError: Error, CustomStringConvertible, LocalizedError {
    /// Another update is running; only one at a time.
    case updateInProgress
    case modelNotUpdatable(path: String)
    /// The update task ended without completing (failed or cancelled).
    case taskFailed(state: String, underlying: String?)

    public var description: String {
        switch self {
        case .updateInProgress: return "OnDeviceUpdater: an update is already running"
        case let .modelNotUpdatable(path): return "OnDeviceUpdater: the model at \(path) is not updatable"
        case let .taskFailed(state, underlying):
            return "OnDeviceUpdater: the update task ended in state \(state)" + (underlying.map { ": \($0)" } ?? "")
        }
    }

    public var errorDescription: String? { description }
}

/// Fine-tunes the updatable head on device with `MLUpdateTask`, one update at a time, and
/// commits the result through ``ModelStore`` (atomic swap).
///
/// The training inputs' names, shapes and data types come from the bundle's
/// ``BundleManifest`` (`models.head.training_inputs`: the embedding `[hidden]` Float32 and the
/// label index `[1]` Int32), built by the pure ``BundleIO/trainingInputs(for:)``.
public actor OnDeviceUpdater {
    public struct Options: Sendable {
        public var epochs: Int?
        public var learningRate: Double?
        public var miniBatchSize: Int?
        public var shuffle: Bool?
        public var computeUnits: MLComputeUnits

        public init(epochs: Int? = nil, learningRate: Double? = nil, miniBatchSize: Int? = nil,
                    shuffle: Bool? = nil, computeUnits: MLComputeUnits = .all) {
            self.epochs = epochs
            self.learningRate = learningRate
            self.miniBatchSize = miniBatchSize
            self.shuffle = shuffle
            self.computeUnits = computeUnits
        }
    }

    public struct Progress: Sendable {
        public enum Event: Sendable { case trainingBegin, epochEnd, miniBatchEnd }
        public var event: Event
        public var epoch: Int?
        public var miniBatch: Int?
        public var loss: Double?
    }

    public let store: ModelStore
    public let io: BundleIO
    private var isUpdating = false

    /// `store` holds the compiled head (`.mlmodelc`) of the bundle `manifest` describes.
    public init(store: ModelStore, manifest: BundleManifest) throws {
        self.store = store
        self.io = try manifest.io()
    }

    /// Trains the current head (``ModelStore/currentModelURL(validate:)``, a compiled
    /// `.mlmodelc`) on `batch`, writes the updated model to a staging location, commits it,
    /// and returns the new current model URL. Throws ``OnDeviceUpdaterError/updateInProgress``
    /// if called while another update runs, ``BundleIOError`` if `batch` was not built for this
    /// bundle (``BundleIO/makeTrainingBatch(corrections:embed:)``) or an option is outside the
    /// head's allowed values. Cancelling the Swift task cancels the update.
    public func update(with batch: TrainingBatch, options: Options = Options(),
                       progress: (@Sendable (Progress) -> Void)? = nil) async throws -> URL {
        guard !isUpdating else { throw OnDeviceUpdaterError.updateInProgress }
        isUpdating = true
        defer { isUpdating = false }
        try io.check(batch)
        try io.checkUpdateOptions(epochs: options.epochs, learningRate: options.learningRate,
                                  miniBatchSize: options.miniBatchSize)

        let configuration = MLModelConfiguration()
        configuration.computeUnits = options.computeUnits
        var parameters: [MLParameterKey: Any] = [:]
        if let epochs = options.epochs { parameters[.epochs] = epochs }
        if let learningRate = options.learningRate { parameters[.learningRate] = learningRate }
        if let miniBatchSize = options.miniBatchSize { parameters[.miniBatchSize] = miniBatchSize }
        if let shuffle = options.shuffle { parameters[.shuffle] = shuffle }
        if !parameters.isEmpty { configuration.parameters = parameters }

        // The current working copy, or the bundled head if the working copy cannot load.
        var loaded: MLModel?
        let modelURL = store.currentModelURL(validate: { loaded = try MLModel(contentsOf: $0) })
        let model = try loaded ?? MLModel(contentsOf: modelURL)
        guard model.modelDescription.isUpdatable else {
            throw OnDeviceUpdaterError.modelNotUpdatable(path: modelURL.path)
        }
        try EdgeClassifier.check(model, as: .head, io: io, training: true)
        let trainingData = try OnDeviceUpdater.batchProvider(for: batch, io: io)
        let outputURL = try store.makeStagingURL()

        let box = TaskBox()
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, Error>) in
                let handlers = MLUpdateProgressHandlers(
                    forEvents: [.trainingBegin, .epochEnd, .miniBatchEnd],
                    progressHandler: { context in
                        progress?(OnDeviceUpdater.progress(from: context))
                    },
                    completionHandler: { context in
                        // Completion is also called on failure and cancellation: check.
                        let task = context.task
                        guard task.state == .completed, task.error == nil else {
                            continuation.resume(throwing: OnDeviceUpdaterError.taskFailed(
                                state: OnDeviceUpdater.name(of: task.state),
                                underlying: task.error.map { "\($0)" }))
                            return
                        }
                        do {
                            try context.model.write(to: outputURL)
                            continuation.resume()
                        } catch {
                            continuation.resume(throwing: error)
                        }
                    })
                do {
                    let task = try MLUpdateTask(forModelAt: modelURL, trainingData: trainingData,
                                                configuration: configuration, progressHandlers: handlers)
                    if box.set(task) {
                        task.resume()
                    } else {
                        continuation.resume(throwing: CancellationError())
                    }
                } catch {
                    continuation.resume(throwing: error)
                }
            }
        } onCancel: {
            box.cancel()
        }
        return try store.commit(updatedModelAt: outputURL, moveSource: true)
    }

    // MARK: Helpers

    /// One MLFeatureProvider per example, with the names, shapes and data types of the
    /// manifest's training inputs.
    static func batchProvider(for batch: TrainingBatch, io: BundleIO) throws -> MLArrayBatchProvider {
        var providers: [MLFeatureProvider] = []
        providers.reserveCapacity(batch.count)
        for example in batch.examples {
            providers.append(try EdgeClassifier.provider(try io.trainingInputs(for: example)))
        }
        return MLArrayBatchProvider(array: providers)
    }

    static func progress(from context: MLUpdateContext) -> Progress {
        let event: Progress.Event
        switch context.event {
        case .trainingBegin: event = .trainingBegin
        case .epochEnd: event = .epochEnd
        default: event = .miniBatchEnd
        }
        return Progress(event: event,
                        epoch: context.metrics[.epochIndex] as? Int,
                        miniBatch: context.metrics[.miniBatchIndex] as? Int,
                        loss: (context.metrics[.lossValue] as? NSNumber)?.doubleValue)
    }

    static func name(of state: MLTaskState) -> String {
        switch state {
        case .suspended: return "suspended"
        case .running: return "running"
        case .cancelling: return "cancelling"
        case .completed: return "completed"
        case .failed: return "failed"
        @unknown default: return "unknown(\(state.rawValue))"
        }
    }

    /// Lets the cancellation handler reach the task created inside the continuation.
    private final class TaskBox: @unchecked Sendable {
        private let lock = NSLock()
        private var task: MLUpdateTask?
        private var cancelled = false

        /// Stores the task; false if cancellation already happened (do not start it).
        func set(_ task: MLUpdateTask) -> Bool {
            lock.lock(); defer { lock.unlock() }
            self.task = task
            return !cancelled
        }

        func cancel() {
            lock.lock()
            cancelled = true
            let task = self.task
            lock.unlock()
            task?.cancel()
        }
    }
}
#endif
