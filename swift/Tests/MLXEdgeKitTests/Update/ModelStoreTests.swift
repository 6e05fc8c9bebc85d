import Foundation
import XCTest
@testable import MLXEdgeKit

final class ModelStoreTests: XCTestCase {
    private var root: URL!
    private var bundled: URL!
    private var base: URL!

    private struct Corrupt: Error {}

    override func setUpWithError() throws {
        root = try makeTemporaryDirectory(self)
        // A fake compiled model: a directory, like Head.mlmodelc, inside a read-only "app bundle".
        bundled = root.appendingPathComponent("App.app/Head.mlmodelc", isDirectory: true)
        try writeModel(at: bundled, marker: "bundled")
        base = root.appendingPathComponent("Application Support/MLXEdgeKit/Head", isDirectory: true)
    }

    private func writeModel(at url: URL, marker: String) throws {
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        try Data(marker.utf8).write(to: url.appendingPathComponent("marker.txt"))
        try Data(repeating: 7, count: 64).write(to: url.appendingPathComponent("weights.bin"))
    }

    private func marker(_ url: URL) throws -> String {
        String(decoding: try Data(contentsOf: url.appendingPathComponent("marker.txt")), as: UTF8.self)
    }

    /// Stands in for "MLModel(contentsOf:) succeeds".
    private func validate(_ url: URL) throws {
        guard (try? marker(url)).map({ $0 != "CORRUPT" }) == true else { throw Corrupt() }
    }

    private func makeUpdate(_ marker: String) throws -> URL {
        let url = root.appendingPathComponent("tmp-\(UUID().uuidString)/Head.mlmodelc", isDirectory: true)
        try writeModel(at: url, marker: marker)
        return url
    }

    private func store(keep: Int = 2) throws -> ModelStore {
        try ModelStore(bundledModelURL: bundled, baseDirectory: base, keepVersions: keep)
    }

    private func versionDirectories() -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: base.appendingPathComponent("versions").path)) ?? []).sorted()
    }

    // MARK: Tests

    func testFirstLaunchCopiesBundledModel() throws {
        let store = try store()
        XCTAssertTrue(store.isUsingBundledModel)
        XCTAssertEqual(store.currentModelURL(validate: validate), bundled)

        let working = try store.install()
        XCTAssertTrue(working.path.hasPrefix(base.path))
        XCTAssertEqual(working.lastPathComponent, "Head.mlmodelc")
        XCTAssertEqual(try marker(working), "bundled")
        XCTAssertEqual(store.currentModelURL(validate: validate), working)
        XCTAssertEqual(store.state.versions.map(\.origin), ["bundled"])
        XCTAssertFalse(store.isUsingBundledModel)

        // Second launch: nothing copied again.
        let again = try self.store()
        XCTAssertEqual(try again.install(), working)
        XCTAssertEqual(versionDirectories(), ["v000001"])
        // The bundled model is untouched.
        XCTAssertEqual(try marker(bundled), "bundled")
    }

    func testInstallWithoutBundledModelThrows() throws {
        let store = try ModelStore(bundledModelURL: root.appendingPathComponent("missing.mlmodelc"), baseDirectory: base)
        XCTAssertThrowsError(try store.install()) {
            XCTAssertEqual($0 as? ModelStoreError,
                           .bundledModelMissing(path: self.root.appendingPathComponent("missing.mlmodelc").path))
        }
        XCTAssertThrowsError(try ModelStore(bundledModelURL: bundled, baseDirectory: base, keepVersions: 0))
    }

    func testCommitSwapsInUpdatedModel() throws {
        let store = try store()
        let first = try store.install()
        let update = try makeUpdate("update-1")
        let second = try store.commit(updatedModelAt: update)
        XCTAssertNotEqual(first, second)
        XCTAssertEqual(try marker(second), "update-1")
        XCTAssertEqual(store.currentModelURL(validate: validate), second)
        XCTAssertEqual(store.state.versions.map(\.origin), ["bundled", "update"])
        XCTAssertTrue(FileManager.default.fileExists(atPath: update.path), "copy leaves the source")

        // A new instance (next launch) sees the same current model.
        XCTAssertEqual(try self.store().currentModelURL(validate: validate), second)

        // moveSource consumes a staging location on the store's volume.
        let staging = try store.makeStagingURL()
        XCTAssertTrue(staging.path.hasPrefix(base.path))
        try writeModel(at: staging, marker: "update-2")
        let third = try store.commit(updatedModelAt: staging, moveSource: true)
        XCTAssertEqual(try marker(third), "update-2")
        XCTAssertFalse(FileManager.default.fileExists(atPath: staging.path))
        XCTAssertFalse(FileManager.default.fileExists(atPath: staging.deletingLastPathComponent().path))

        XCTAssertThrowsError(try store.commit(updatedModelAt: root.appendingPathComponent("nope")))
    }

    func testCorruptWorkingCopyFallsBackToBundled() throws {
        let store = try store()
        try store.install()
        let updated = try store.commit(updatedModelAt: try makeUpdate("update-1"))
        try Data("CORRUPT".utf8).write(to: updated.appendingPathComponent("marker.txt"))

        XCTAssertEqual(store.currentModelURL(validate: validate), bundled)
        XCTAssertTrue(store.isUsingBundledModel)
        let fallback = try XCTUnwrap(store.state.lastFallback)
        XCTAssertEqual(fallback.modelPath, "versions/v000002/Head.mlmodelc")
        XCTAssertTrue(fallback.reason.contains("validation"))

        // Recorded on disk too.
        let reopened = try self.store()
        XCTAssertTrue(reopened.isUsingBundledModel)
        XCTAssertEqual(reopened.state.lastFallback?.modelPath, fallback.modelPath)

        // The next install makes a fresh working copy from the bundled model.
        let fresh = try reopened.install()
        XCTAssertEqual(try marker(fresh), "bundled")
        XCTAssertEqual(reopened.currentModelURL(validate: validate), fresh)
    }

    func testMissingWorkingCopyFallsBackToBundled() throws {
        let store = try store()
        let working = try store.install()
        try FileManager.default.removeItem(at: working)
        XCTAssertEqual(store.currentModelURL(validate: validate), bundled)
        XCTAssertEqual(store.state.lastFallback?.reason, "working copy missing")
    }

    func testInterruptedSwapLeavesPreviousModelCurrent() throws {
        for point in [ModelStore.CrashPoint.afterStaging, .afterVersionRename, .beforeStateRename] {
            try? FileManager.default.removeItem(at: base)
            let store = try store()
            try store.install()
            let previous = try store.commit(updatedModelAt: try makeUpdate("update-1"))
            let stateBefore = try Data(contentsOf: store.stateFileURL)

            store.crashPoint = point
            XCTAssertThrowsError(try store.commit(updatedModelAt: try makeUpdate("update-2")), "\(point)") {
                XCTAssertEqual($0 as? ModelStoreError, .simulatedCrash(point.rawValue))
            }

            // "Relaunch": a fresh instance reads the state from disk.
            let relaunched = try self.store()
            XCTAssertEqual(try Data(contentsOf: relaunched.stateFileURL), stateBefore, "\(point)")
            XCTAssertEqual(relaunched.currentModelURL(validate: validate), previous, "\(point)")
            XCTAssertEqual(try marker(previous), "update-1", "\(point)")

            // Leftovers (staging, orphan version, temp state file) are swept; commits work again.
            try relaunched.install()
            let staging = (try? FileManager.default.contentsOfDirectory(atPath: base.appendingPathComponent("staging").path)) ?? []
            XCTAssertEqual(staging, [], "\(point)")
            XCTAssertEqual(versionDirectories(), ["v000001", "v000002"], "\(point)")
            let next = try relaunched.commit(updatedModelAt: try makeUpdate("update-3"))
            XCTAssertEqual(try marker(next), "update-3", "\(point)")
            let baseItems = try FileManager.default.contentsOfDirectory(atPath: base.path)
            XCTAssertFalse(baseItems.contains { $0.hasSuffix(".tmp") }, "\(point): \(baseItems)")
        }
    }

    func testPruneKeepsNewestVersions() throws {
        let store = try store(keep: 2)
        try store.install()
        var last: URL?
        for i in 1...4 { last = try store.commit(updatedModelAt: try makeUpdate("update-\(i)")) }
        XCTAssertEqual(versionDirectories(), ["v000004", "v000005"])
        XCTAssertEqual(store.state.versions.map(\.directory), ["versions/v000004", "versions/v000005"])
        XCTAssertEqual(store.currentModelURL(validate: validate), last)
        XCTAssertEqual(try marker(try XCTUnwrap(last)), "update-4")

        let one = try ModelStore(bundledModelURL: bundled, baseDirectory: base, keepVersions: 1)
        try one.commit(updatedModelAt: try makeUpdate("update-5"))
        XCTAssertEqual(versionDirectories(), ["v000006"])
    }

    func testStateFileUsesRelativePaths() throws {
        let store = try store()
        try store.install()
        try store.commit(updatedModelAt: try makeUpdate("update-1"))
        let text = String(decoding: try Data(contentsOf: store.stateFileURL), as: UTF8.self)
        XCTAssertFalse(text.contains(root.path), text)
        XCTAssertFalse(text.contains(base.path), text)
        let json = try XCTUnwrap(JSONSerialization.jsonObject(with: Data(contentsOf: store.stateFileURL)) as? [String: Any])
        XCTAssertEqual(json["currentModelPath"] as? String, "versions/v000002/Head.mlmodelc")

        // The app container moves on app updates: the store must still find its model.
        let moved = root.appendingPathComponent("NewContainer/Application Support/MLXEdgeKit/Head", isDirectory: true)
        try FileManager.default.createDirectory(at: moved.deletingLastPathComponent(), withIntermediateDirectories: true)
        try FileManager.default.moveItem(at: base, to: moved)
        let relocated = try ModelStore(bundledModelURL: bundled, baseDirectory: moved)
        let current = relocated.currentModelURL(validate: validate)
        XCTAssertTrue(current.path.hasPrefix(moved.path))
        XCTAssertEqual(try marker(current), "update-1")
    }

    func testResetGoesBackToBundledModel() throws {
        let store = try store()
        try store.install()
        try store.commit(updatedModelAt: try makeUpdate("update-1"))
        try store.commit(updatedModelAt: try makeUpdate("update-2"))
        let working = try store.reset()
        XCTAssertEqual(try marker(working), "bundled")
        XCTAssertEqual(store.currentModelURL(validate: validate), working)
        XCTAssertEqual(store.state.versions.map(\.origin), ["bundled"])
        XCTAssertNil(store.state.lastFallback)
        XCTAssertEqual(versionDirectories().count, 1)
    }

    func testUnreadableStateFileFallsBackSafely() throws {
        try FileManager.default.createDirectory(at: base, withIntermediateDirectories: true)
        try Data("{not json".utf8).write(to: base.appendingPathComponent("state.json"))
        let store = try store()
        XCTAssertEqual(store.currentModelURL(validate: validate), bundled)
        XCTAssertNotNil(store.state.lastFallback)
        XCTAssertEqual(try marker(try store.install()), "bundled")

        // A path escaping the base directory is refused.
        var state = ModelStoreState()
        state.currentModelPath = "../../etc/passwd"
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .iso8601
        try encoder.encode(state).write(to: base.appendingPathComponent("state.json"))
        XCTAssertEqual(try self.store().currentModelURL(validate: validate), bundled)
    }

    func testAtomicWriteCrashBeforeRenameKeepsOldFile() throws {
        let url = root.appendingPathComponent("file.json")
        try AtomicFile.write(Data("old".utf8), to: url)
        struct Crash: Error {}
        XCTAssertThrowsError(try AtomicFile.write(Data("new".utf8), to: url, beforeRename: { throw Crash() }))
        XCTAssertEqual(String(decoding: try Data(contentsOf: url), as: UTF8.self), "old")
        try AtomicFile.write(Data("new".utf8), to: url)
        XCTAssertEqual(String(decoding: try Data(contentsOf: url), as: UTF8.self), "new")
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: root.path).filter { $0.hasSuffix(".tmp") }, [])
    }
}
