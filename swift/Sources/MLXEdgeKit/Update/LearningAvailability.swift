import Foundation

/// Why a classifier cannot learn from corrections.
public enum LearningError: Error, Equatable, Sendable, CustomStringConvertible, LocalizedError {
    /// The app opened the classifier with learning turned off.
    case disabled
    /// The loaded head cannot be trained with `MLUpdateTask`; the reason says why.
    case headNotUpdatable(reason: String)

    public var description: String {
        switch self {
        case .disabled:
            return "Learning: learning from corrections is turned off (TextClassifier.Configuration.learnsFromCorrections)"
        case let .headNotUpdatable(reason):
            return "Learning: the head cannot learn on device: \(reason)"
        }
    }

    public var errorDescription: String? { description }
}

/// Whether a classifier's head can learn from corrections on device.
///
/// Decided from what the loaded head says about itself (CoreML's `MLModelDescription`),
/// handed in as plain values so that the decision runs and is tested on Linux. A valid
/// manifest always declares an updatable head; this catches a head model that does not
/// match it.
public enum LearningAvailability: Equatable, Sendable {
    case available
    case unavailable(LearningError)

    /// - Parameters:
    ///   - enabled: whether the app asked for learning.
    ///   - headIsUpdatable: the loaded head's `modelDescription.isUpdatable`.
    ///   - headTrainingInputNames: the keys of its `modelDescription.trainingInputDescriptionsByName`.
    ///   - io: the bundle's features; the head must have every training input it names.
    public init(enabled: Bool, headIsUpdatable: Bool, headTrainingInputNames: Set<String>, io: BundleIO) {
        guard enabled else {
            self = .unavailable(.disabled)
            return
        }
        guard headIsUpdatable else {
            self = .unavailable(.headNotUpdatable(
                reason: "its model description says it is not updatable; ship the Head.mlmodel that mlx-edge exported "
                    + "with this manifest.json"))
            return
        }
        let missing = io.requiredFeatureNames(.head).trainingInputs.filter { !headTrainingInputNames.contains($0) }
        guard missing.isEmpty else {
            self = .unavailable(.headNotUpdatable(
                reason: "it has no training input " + missing.map { "\"\($0)\"" }.joined(separator: ", ")
                    + " that the manifest names; are the model and manifest.json from the same export?"))
            return
        }
        self = .available
    }

    public var isAvailable: Bool { self == .available }

    /// Throws the ``LearningError`` unless learning is available.
    public func check() throws {
        if case let .unavailable(error) = self { throw error }
    }
}
