import Foundation

/// Where a classifier keeps what it writes on device for one bundle:
///
/// ```
/// <directory>/CompiledModels/Encoder-<digest>.mlmodelc   compiled once (EdgeClassifier.compiledModelURL)
/// <directory>/CompiledModels/Head-<digest>.mlmodelc
/// <directory>/Head-<digest>/                             the head's working copies (ModelStore)
/// <directory>/Corrections-<digest>.json                  the user's corrections (CorrectionStore)
/// ```
///
/// Each name holds the first 16 hex digits of a model's digest from the manifest
/// (``BundleManifest/modelDigest(_:)``), so a new export starts fresh: a new head, and new
/// corrections, keyed by the encoder because their embeddings came from it.
public struct OnDeviceStorage: Equatable, Sendable {
    /// The root folder, by default ``defaultDirectory()``.
    public let directory: URL
    /// The cache of compiled models, for ``EdgeClassifier/compiledModelURL(_:manifest:bundleDirectory:cacheDirectory:)``.
    public let compiledModelsDirectory: URL
    /// The base directory of the head's ``ModelStore``.
    public let headStoreDirectory: URL
    /// The file of the ``CorrectionStore``.
    public let correctionsFileURL: URL

    public init(directory: URL, manifest: BundleManifest) {
        self.directory = directory
        compiledModelsDirectory = directory.appendingPathComponent("CompiledModels", isDirectory: true)
        headStoreDirectory = directory.appendingPathComponent("Head-\(manifest.modelDigest(.head).prefix(16))",
                                                              isDirectory: true)
        correctionsFileURL = directory.appendingPathComponent("Corrections-\(manifest.modelDigest(.encoder).prefix(16)).json")
    }

    /// `Application Support/MLXEdgeKit`: writable, kept across app updates, and never emptied
    /// by the system the way Caches is (that would lose the user's training).
    public static func defaultDirectory() throws -> URL {
        let support = try FileManager.default.url(for: .applicationSupportDirectory, in: .userDomainMask,
                                                  appropriateFor: nil, create: true)
        return support.appendingPathComponent("MLXEdgeKit", isDirectory: true)
    }
}
