import Foundation
import XCTest
@testable import MLXEdgeKit

/// The pure half of `TextClassifier`'s learning: where its files go, whether the head can
/// learn, and recording a correction for the bundle.
final class LearningTests: XCTestCase {
    private let embeddingWidth = 32 // the fixture's student.hidden_size

    // MARK: On-device storage

    func testStorageNamesFollowTheModelsDigests() throws {
        let m = try Fixtures.bundleManifest()
        let root = URL(fileURLWithPath: "/tmp/Support/MLXEdgeKit", isDirectory: true)
        let storage = OnDeviceStorage(directory: root, manifest: m)
        XCTAssertEqual(storage.directory, root)
        XCTAssertEqual(storage.compiledModelsDirectory.path, "/tmp/Support/MLXEdgeKit/CompiledModels")
        XCTAssertEqual(storage.headStoreDirectory.path, "/tmp/Support/MLXEdgeKit/Head-\(m.modelDigest(.head).prefix(16))")
        XCTAssertEqual(storage.correctionsFileURL.path,
                       "/tmp/Support/MLXEdgeKit/Corrections-\(m.modelDigest(.encoder).prefix(16)).json")

        // A new head starts a new working copy and keeps the corrections; a new encoder starts
        // new corrections (their embeddings came from the old one).
        var newHead = m
        newHead.files["Head.mlmodel"]!.sha256 = String(repeating: "0", count: 64)
        let afterNewHead = OnDeviceStorage(directory: root, manifest: newHead)
        XCTAssertNotEqual(afterNewHead.headStoreDirectory, storage.headStoreDirectory)
        XCTAssertEqual(afterNewHead.correctionsFileURL, storage.correctionsFileURL)
        XCTAssertEqual(afterNewHead.compiledModelsDirectory, storage.compiledModelsDirectory)

        var newEncoder = m
        newEncoder.files["Encoder.mlpackage/Manifest.json"]!.sha256 = String(repeating: "0", count: 64)
        let afterNewEncoder = OnDeviceStorage(directory: root, manifest: newEncoder)
        XCTAssertEqual(afterNewEncoder.headStoreDirectory, storage.headStoreDirectory)
        XCTAssertNotEqual(afterNewEncoder.correctionsFileURL, storage.correctionsFileURL)
    }

    // MARK: Whether the head can learn

    func testLearningAvailabilityFromTheLoadedHead() throws {
        let io = try Fixtures.bundleManifest().io()
        let trainingInputs: Set<String> = ["embedding", "probs_true"]

        let available = LearningAvailability(enabled: true, headIsUpdatable: true, headTrainingInputNames: trainingInputs, io: io)
        XCTAssertEqual(available, .available)
        XCTAssertTrue(available.isAvailable)
        XCTAssertNoThrow(try available.check())

        let disabled = LearningAvailability(enabled: false, headIsUpdatable: true, headTrainingInputNames: trainingInputs, io: io)
        XCTAssertEqual(disabled, .unavailable(.disabled))
        XCTAssertFalse(disabled.isAvailable)
        XCTAssertThrowsError(try disabled.check()) { XCTAssertEqual($0 as? LearningError, .disabled) }

        let notUpdatable = LearningAvailability(enabled: true, headIsUpdatable: false, headTrainingInputNames: [], io: io)
        guard case let .unavailable(.headNotUpdatable(reason)) = notUpdatable else { return XCTFail("\(notUpdatable)") }
        XCTAssertTrue(reason.contains("not updatable"), reason)
        XCTAssertThrowsError(try notUpdatable.check()) {
            XCTAssertEqual($0 as? LearningError, .headNotUpdatable(reason: reason))
            XCTAssertTrue("\($0)".hasPrefix("Learning: the head cannot learn on device: "), "\($0)")
        }

        // Updatable, but from another export: it lacks the label input the manifest names.
        let mismatched = LearningAvailability(enabled: true, headIsUpdatable: true,
                                              headTrainingInputNames: ["embedding", "label"], io: io)
        guard case let .unavailable(.headNotUpdatable(why)) = mismatched else { return XCTFail("\(mismatched)") }
        XCTAssertTrue(why.contains("\"probs_true\""), why)
        XCTAssertFalse(why.contains("\"embedding\""), why)
    }

    func testTrainingInputNamesComeFromTheManifest() throws {
        let renamed = try decodeManifest(try mutatedManifest([
            (["models", "head", "training_inputs", 1, "name"], "label"),
            (["models", "head", "label_input"], "label"),
            (["models", "head", "loss", "target"], "label"),
        ]))
        let io = try renamed.io()
        XCTAssertEqual(LearningAvailability(enabled: true, headIsUpdatable: true,
                                            headTrainingInputNames: ["embedding", "label"], io: io), .available)
        XCTAssertFalse(LearningAvailability(enabled: true, headIsUpdatable: true,
                                            headTrainingInputNames: ["embedding", "probs_true"], io: io).isAvailable)
    }

    // MARK: Recording corrections for the bundle

    private func corrections(for bundle: ClassifierBundle, in directory: URL) throws -> CorrectionStore {
        let storage = OnDeviceStorage(directory: directory, manifest: bundle.manifest)
        return try CorrectionStore(fileURL: storage.correctionsFileURL, allowedLabels: bundle.labels)
    }

    func testAnUnknownLabelIsRefusedBeforeTheEncoderRuns() throws {
        let bundle = try ClassifierBundle(directory: try Fixtures.bundleDirectory(), fileCheck: .none)
        let directory = try makeTemporaryDirectory(self)
        let store = try corrections(for: bundle, in: directory)
        var encoderRuns = 0
        let embed: (String) throws -> [Float] = { _ in
            encoderRuns += 1
            return [Float](repeating: 0.25, count: self.embeddingWidth)
        }
        XCTAssertThrowsError(try store.add(text: "Pay rent", label: "positive", embed: embed)) {
            XCTAssertEqual($0 as? CorrectionStoreError, .invalidLabel(label: "positive", allowed: bundle.labels))
            XCTAssertTrue("\($0)".contains("\"finance\", \"health\""), "\($0)")
        }
        XCTAssertEqual(encoderRuns, 0)
        XCTAssertEqual(store.count, 0)
        XCTAssertFalse(FileManager.default.fileExists(atPath: store.fileURL.path), "nothing written")

        // An encoder failure records nothing either.
        struct EncoderFailed: Error {}
        XCTAssertThrowsError(try store.add(text: "Pay rent", label: "finance", embed: { _ in throw EncoderFailed() })) {
            XCTAssertTrue($0 is EncoderFailed, "\($0)")
        }
        XCTAssertEqual(store.count, 0)
    }

    func testACorrectionIsStoredWithItsEmbeddingAndTrainsTheBundlesHead() throws {
        let bundle = try ClassifierBundle(directory: try Fixtures.bundleDirectory(), fileCheck: .none)
        let directory = try makeTemporaryDirectory(self)
        let store = try corrections(for: bundle, in: directory)
        var embedded: [String] = []
        let embed: (String) throws -> [Float] = { text in
            embedded.append(text)
            return [Float](repeating: Float(text.count), count: self.embeddingWidth)
        }
        try store.add(text: "Pay rent", label: "finance", embed: embed)
        try store.add(text: "Book a flight", label: "travel", embed: embed)
        try store.add(text: "Pay rent", label: "life", embed: embed) // corrected again: the newest label wins
        XCTAssertEqual(embedded, ["Pay rent", "Book a flight", "Pay rent"])
        XCTAssertEqual(store.corrections.map(\.text), ["Book a flight", "Pay rent"])
        XCTAssertEqual(store.corrections.map(\.label), ["travel", "life"])
        XCTAssertEqual(store.corrections[1].embedding, [Float](repeating: 8, count: embeddingWidth))

        // Saved where OnDeviceStorage says, and read back by the next launch.
        let reopened = try corrections(for: bundle, in: directory)
        XCTAssertEqual(reopened.corrections.map(\.text), store.corrections.map(\.text))
        XCTAssertEqual(reopened.corrections.map(\.label), store.corrections.map(\.label))
        XCTAssertEqual(reopened.corrections.map(\.embedding), store.corrections.map(\.embedding))
        XCTAssertTrue(reopened.fileURL.lastPathComponent.hasPrefix("Corrections-"))

        // The batch for the head: label indices in the manifest's order, its training input names.
        let batch = try bundle.io.makeTrainingBatch(corrections: reopened.corrections)
        XCTAssertEqual(batch.examples.map(\.labelIndex), [4, 2]) // travel, life
        XCTAssertEqual(batch.embeddingInputName, "embedding")
        XCTAssertEqual(batch.labelInputName, "probs_true")
        XCTAssertNoThrow(try bundle.io.check(batch))
        XCTAssertEqual(try bundle.io.trainingInputs(for: batch.examples[0]).map(\.shape), [[32], [1]])
    }
}
