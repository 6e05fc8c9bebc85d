import Foundation

/// Errors thrown by ``ModelStore``.
public enum ModelStoreError: Error, Equatable, Sendable, CustomStringConvertible, LocalizedError {
    case bundledModelMissing(path: String)
    case updatedModelMissing(path: String)
    case invalidKeepCount(Int)
    /// Test-only: a simulated crash at an injected point.
    case simulatedCrash(String)

    public var description: String {
        switch self {
        case let .bundledModelMissing(path): return "ModelStore: bundled model not found at \(path)"
        case let .updatedModelMissing(path): return "ModelStore: updated model not found at \(path)"
        case let .invalidKeepCount(n): return "ModelStore: keepVersions must be at least 1, got \(n)"
        case let .simulatedCrash(point): return "ModelStore: simulated crash at \(point)"
        }
    }

    public var errorDescription: String? { description }
}

/// What ``ModelStore`` persists in `state.json`. Every path is RELATIVE to the store's
/// base directory: the app container's absolute path changes across app updates.
public struct ModelStoreState: Codable, Equatable, Sendable {
    public struct Version: Codable, Equatable, Sendable {
        /// Version directory, relative to the base directory (e.g. `versions/v000002`).
        public var directory: String
        /// Model inside it, relative to the base directory (e.g. `versions/v000002/Head.mlmodelc`).
        public var modelPath: String
        /// `bundled` for the first-launch copy / reset, `update` for on-device training.
        public var origin: String
        public var createdAt: Date
    }

    public struct Fallback: Codable, Equatable, Sendable {
        /// The working copy that failed (relative path), if any.
        public var modelPath: String?
        public var reason: String
        public var date: Date
    }

    public var formatVersion: Int = 1
    /// The working copy in use (relative path); nil means the bundled model is in use.
    public var currentModelPath: String?
    /// Committed versions, oldest first; the current one is the last.
    public var versions: [Version] = []
    /// The most recent fall back to the bundled model.
    public var lastFallback: Fallback?

    public init() {}
}

/// Manages the on-device, updatable copy of a model.
///
/// - The bundled model (inside the app bundle) is read-only and never modified.
/// - Working copies live under `baseDirectory` (Application Support by default):
///   `versions/vNNNNNN/<model name>`, plus `state.json` naming the current one.
/// - ``commit(updatedModelAt:moveSource:)`` stages the new model inside the base
///   directory (same volume), renames the staged directory into `versions/`, then
///   atomically replaces `state.json` (write temp + rename). The state-file rename is the
///   commit point: a crash at any earlier moment leaves the previous model current and
///   untouched; the leftovers are swept later.
/// - ``currentModelURL(validate:)`` falls back to the bundled model (and records it)
///   when the working copy is missing or fails the validator.
///
/// Thread-safe (all operations are serialized by a lock). Pure Foundation.
public final class ModelStore: @unchecked Sendable {
    public let bundledModelURL: URL
    public let baseDirectory: URL
    public let keepVersions: Int

    /// Name of every working copy (the bundled model's file name, e.g. `Head.mlmodelc`).
    public var modelFileName: String { bundledModelURL.lastPathComponent }
    public var stateFileURL: URL { baseDirectory.appendingPathComponent("state.json") }
    var versionsDirectory: URL { baseDirectory.appendingPathComponent("versions", isDirectory: true) }
    var stagingDirectory: URL { baseDirectory.appendingPathComponent("staging", isDirectory: true) }

    /// Test hook to simulate a crash at a given point of ``commit(updatedModelAt:moveSource:)``.
    enum CrashPoint: String, Sendable {
        case afterStaging, afterVersionRename, beforeStateRename
    }
    var crashPoint: CrashPoint?

    private let lock = NSLock()
    private var _state: ModelStoreState
    private let fileManager = FileManager.default

    /// - Parameters:
    ///   - bundledModelURL: the read-only model in the app bundle (e.g. `Head.mlmodelc`).
    ///   - baseDirectory: where working copies live; see ``defaultBaseDirectory(name:)``.
    ///   - keepVersions: committed versions kept on disk (the current one included).
    public init(bundledModelURL: URL, baseDirectory: URL, keepVersions: Int = 2) throws {
        guard keepVersions >= 1 else { throw ModelStoreError.invalidKeepCount(keepVersions) }
        self.bundledModelURL = bundledModelURL
        self.baseDirectory = baseDirectory
        self.keepVersions = keepVersions
        try FileManager.default.createDirectory(at: baseDirectory, withIntermediateDirectories: true)
        self._state = ModelStore.loadState(at: baseDirectory.appendingPathComponent("state.json"))
    }

    /// Uses `Application Support/MLXEdgeKit/<name>`.
    public convenience init(bundledModelURL: URL, name: String, keepVersions: Int = 2) throws {
        try self.init(bundledModelURL: bundledModelURL,
                      baseDirectory: try ModelStore.defaultBaseDirectory(name: name),
                      keepVersions: keepVersions)
    }

    public static func defaultBaseDirectory(name: String) throws -> URL {
        try OnDeviceStorage.defaultDirectory().appendingPathComponent(name, isDirectory: true)
    }

    /// A snapshot of the persisted state.
    public var state: ModelStoreState {
        lock.lock(); defer { lock.unlock() }
        return _state
    }

    /// True when the bundled model is in use (no working copy, or it failed validation).
    public var isUsingBundledModel: Bool { state.currentModelPath == nil }

    // MARK: Operations

    /// First launch: copies the bundled model into a working copy when there is none,
    /// and sweeps leftovers of interrupted commits. Returns the working copy.
    /// Call it at launch, before starting an update: the sweep empties the staging area.
    @discardableResult
    public func install() throws -> URL {
        lock.lock(); defer { lock.unlock() }
        guard fileManager.fileExists(atPath: bundledModelURL.path) else {
            throw ModelStoreError.bundledModelMissing(path: bundledModelURL.path)
        }
        sweepLeftovers()
        if let path = _state.currentModelPath {
            let url = resolve(path)
            if fileManager.fileExists(atPath: url.path) { return url }
        }
        return try commitLocked(source: bundledModelURL, move: false, origin: "bundled")
    }

    /// Makes the model at `updatedModelAt` the current working copy (atomic swap), then
    /// prunes old versions. With `moveSource` the source is moved instead of copied
    /// (use it for a temporary file, ideally one from ``makeStagingURL()``).
    @discardableResult
    public func commit(updatedModelAt source: URL, moveSource: Bool = false) throws -> URL {
        lock.lock(); defer { lock.unlock() }
        guard fileManager.fileExists(atPath: source.path) else {
            throw ModelStoreError.updatedModelMissing(path: source.path)
        }
        return try commitLocked(source: source, move: moveSource, origin: "update")
    }

    /// A fresh location on the store's volume to write an updated model to before
    /// ``commit(updatedModelAt:moveSource:)`` (e.g. `context.model.write(to:)`).
    public func makeStagingURL() throws -> URL {
        let directory = stagingDirectory.appendingPathComponent("out-" + UUID().uuidString, isDirectory: true)
        try fileManager.createDirectory(at: directory, withIntermediateDirectories: true)
        return directory.appendingPathComponent(modelFileName)
    }

    /// The newest working copy. If it is missing, or `validate` throws (e.g. it cannot be
    /// loaded: corrupt), the bundled model is returned and the fallback is recorded (the
    /// broken copy stops being current; a later ``install()`` makes a fresh copy).
    public func currentModelURL(validate: (URL) throws -> Void = { _ in }) -> URL {
        lock.lock(); defer { lock.unlock() }
        guard let path = _state.currentModelPath else { return bundledModelURL }
        let url = resolve(path)
        let reason: String
        if !fileManager.fileExists(atPath: url.path) {
            reason = "working copy missing"
        } else {
            do {
                try validate(url)
                return url
            } catch {
                reason = "working copy failed validation: \(error)"
            }
        }
        var next = _state
        next.currentModelPath = nil
        next.lastFallback = .init(modelPath: path, reason: reason, date: Date())
        try? saveLocked(next)
        _state = next // even if the state could not be saved, stop using the broken copy now
        return bundledModelURL
    }

    /// Goes back to the bundled model: drops every working copy, then makes a fresh copy
    /// of the bundled model. Returns the new working copy.
    @discardableResult
    public func reset() throws -> URL {
        lock.lock(); defer { lock.unlock() }
        try saveLocked(ModelStoreState()) // commit point: from here on the bundled model is current
        _state = ModelStoreState()
        try? fileManager.removeItem(at: versionsDirectory)
        try? fileManager.removeItem(at: stagingDirectory)
        return try commitLocked(source: bundledModelURL, move: false, origin: "bundled")
    }

    // MARK: Internals (lock held)

    private func commitLocked(source: URL, move: Bool, origin: String) throws -> URL {
        // 1. Stage inside the base directory: same volume, so the next step is a rename.
        let staged = stagingDirectory.appendingPathComponent(UUID().uuidString, isDirectory: true)
        try fileManager.createDirectory(at: staged, withIntermediateDirectories: true)
        let stagedModel = staged.appendingPathComponent(modelFileName)
        do {
            if move {
                try fileManager.moveItem(at: source, to: stagedModel)
                // An emptied `makeStagingURL()` folder is no longer needed.
                let parent = source.deletingLastPathComponent()
                if parent.deletingLastPathComponent().standardizedFileURL.path == stagingDirectory.standardizedFileURL.path,
                   parent.lastPathComponent.hasPrefix("out-") {
                    try? fileManager.removeItem(at: parent)
                }
            } else {
                try fileManager.copyItem(at: source, to: stagedModel)
            }
            try crash(.afterStaging)
        } catch {
            if case ModelStoreError.simulatedCrash = error {} else { try? fileManager.removeItem(at: staged) }
            throw error
        }

        // 2. Move the staged directory to a never-used version name (atomic rename).
        try fileManager.createDirectory(at: versionsDirectory, withIntermediateDirectories: true)
        let name = String(format: "v%06d", nextVersionNumber())
        let versionDirectory = versionsDirectory.appendingPathComponent(name, isDirectory: true)
        try AtomicFile.rename(staged, to: versionDirectory)
        try crash(.afterVersionRename)

        // 3. Commit point: atomically replace state.json to name the new version.
        let relativeDirectory = "versions/\(name)"
        let relativeModel = "\(relativeDirectory)/\(modelFileName)"
        var next = _state
        next.currentModelPath = relativeModel
        next.versions.append(.init(directory: relativeDirectory, modelPath: relativeModel,
                                   origin: origin, createdAt: Date()))
        try saveLocked(next, beforeRename: { try self.crash(.beforeStateRename) })
        _state = next

        // 4. Prune (failures here are harmless; leftovers are swept next time).
        pruneLocked()
        return resolve(relativeModel)
    }

    private func crash(_ point: CrashPoint) throws {
        if crashPoint == point { throw ModelStoreError.simulatedCrash(point.rawValue) }
    }

    /// One more than any version number ever used (in the state or on disk), so an
    /// orphan left by an interrupted commit is never reused.
    private func nextVersionNumber() -> Int {
        var highest = 0
        let names = (try? fileManager.contentsOfDirectory(atPath: versionsDirectory.path)) ?? []
        for name in names + _state.versions.map({ ($0.directory as NSString).lastPathComponent }) {
            if name.hasPrefix("v"), let n = Int(name.dropFirst()) { highest = max(highest, n) }
        }
        return highest + 1
    }

    /// Keeps the newest `keepVersions` committed versions (always the current one) and
    /// deletes everything else under `versions/` (including orphans of interrupted commits).
    private func pruneLocked() {
        var keep = Array(_state.versions.suffix(keepVersions))
        if let current = _state.currentModelPath, !keep.contains(where: { $0.modelPath == current }),
           let record = _state.versions.first(where: { $0.modelPath == current }) {
            keep.insert(record, at: 0)
        }
        if keep != _state.versions {
            var next = _state
            next.versions = keep
            guard (try? saveLocked(next)) != nil else { return }
            _state = next
        }
        let kept = Set(keep.map { ($0.directory as NSString).lastPathComponent })
        let names = (try? fileManager.contentsOfDirectory(atPath: versionsDirectory.path)) ?? []
        for name in names where !kept.contains(name) {
            try? fileManager.removeItem(at: versionsDirectory.appendingPathComponent(name))
        }
    }

    /// Removes staging leftovers, stale temporary state files and orphan versions.
    private func sweepLeftovers() {
        try? fileManager.removeItem(at: stagingDirectory)
        AtomicFile.removeStaleTemporaries(for: stateFileURL)
        pruneLocked()
    }

    private func resolve(_ relativePath: String) -> URL {
        var url = baseDirectory
        for component in relativePath.split(separator: "/") { url.appendPathComponent(String(component)) }
        return url
    }

    private func saveLocked(_ state: ModelStoreState, beforeRename: (() throws -> Void)? = nil) throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        encoder.dateEncodingStrategy = .iso8601
        try AtomicFile.write(try encoder.encode(state), to: stateFileURL, beforeRename: beforeRename)
    }

    private static func loadState(at url: URL) -> ModelStoreState {
        guard let data = try? Data(contentsOf: url) else { return ModelStoreState() }
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .iso8601
        guard let state = try? decoder.decode(ModelStoreState.self, from: data) else {
            var fresh = ModelStoreState()
            fresh.lastFallback = .init(modelPath: nil, reason: "state file unreadable; using the bundled model", date: Date())
            return fresh
        }
        // Paths must stay inside the base directory.
        if let path = state.currentModelPath, path.hasPrefix("/") || path.split(separator: "/").contains("..") {
            var fresh = ModelStoreState()
            fresh.lastFallback = .init(modelPath: path, reason: "state file has an invalid path", date: Date())
            return fresh
        }
        return state
    }
}
