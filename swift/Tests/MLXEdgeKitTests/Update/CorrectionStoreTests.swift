import Foundation
import XCTest
@testable import MLXEdgeKit

final class CorrectionStoreTests: XCTestCase {
    private let labels = ["negative", "neutral", "positive"]
    private var file: URL!

    override func setUpWithError() throws {
        file = try makeTemporaryDirectory(self).appendingPathComponent("corrections.json")
    }

    private func date(_ seconds: Int) -> Date { Date(timeIntervalSince1970: TimeInterval(1_700_000_000 + seconds)) }

    private func store(maxCount: Int = 100) throws -> CorrectionStore {
        try CorrectionStore(fileURL: file, allowedLabels: labels, maxCount: maxCount)
    }

    func testDeduplicatesNewestLabelWins() throws {
        let store = try store()
        try store.add(text: "great app", label: "positive", date: date(1))
        try store.add(text: "meh", label: "neutral", date: date(2))
        try store.add(text: "great app", label: "negative", date: date(3))
        XCTAssertEqual(store.corrections.map(\.text), ["meh", "great app"])
        XCTAssertEqual(store.corrections.map(\.label), ["neutral", "negative"])

        try store.add(embedding: [1, 2, 3], label: "positive", date: date(4))
        try store.add(embedding: [1, 2, 3], label: "neutral", date: date(5))
        try store.add(embedding: [1, 2, 3.5], label: "neutral", date: date(6))
        XCTAssertEqual(store.count, 4)
        XCTAssertEqual(store.corrections.filter { $0.embedding == [1, 2, 3] }.map(\.label), ["neutral"])
    }

    func testTextIdentityIsExactScalars() throws {
        // Canonically equivalent spellings are different inputs to a cased tokenizer.
        let store = try store()
        try store.add(text: "caf\u{E9}", label: "positive")
        try store.add(text: "cafe\u{301}", label: "negative")
        XCTAssertEqual(store.count, 2)
    }

    func testCapDropsOldest() throws {
        let store = try store(maxCount: 3)
        for i in 0..<5 { try store.add(text: "text \(i)", label: labels[i % 3], date: date(i)) }
        XCTAssertEqual(store.corrections.map(\.text), ["text 2", "text 3", "text 4"])
        // Re-labelling an old one makes it the newest, so it survives the next drop.
        try store.add(text: "text 2", label: "positive", date: date(10))
        try store.add(text: "text 5", label: "positive", date: date(11))
        XCTAssertEqual(store.corrections.map(\.text), ["text 4", "text 2", "text 5"])
        // Re-opening with a smaller cap applies it.
        XCTAssertEqual(try self.store(maxCount: 2).corrections.map(\.text), ["text 2", "text 5"])
    }

    func testBadLabelThrowsNamingAllowedLabels() throws {
        let store = try store()
        XCTAssertThrowsError(try store.add(text: "hi", label: "Positive")) { error in
            XCTAssertEqual(error as? CorrectionStoreError, .invalidLabel(label: "Positive", allowed: self.labels))
            let message = "\(error)"
            XCTAssertTrue(message.contains("\"Positive\""), message)
            for label in self.labels { XCTAssertTrue(message.contains(label), message) }
        }
        XCTAssertEqual(store.count, 0)
        XCTAssertFalse(FileManager.default.fileExists(atPath: file.path))
    }

    func testInvalidInputsAndSettings() throws {
        let store = try store()
        XCTAssertThrowsError(try store.add(embedding: [], label: "neutral")) {
            XCTAssertEqual($0 as? CorrectionStoreError, .emptyInput)
        }
        XCTAssertThrowsError(try store.add(embedding: [1, .nan], label: "neutral")) {
            XCTAssertEqual($0 as? CorrectionStoreError, .nonFiniteEmbedding)
        }
        XCTAssertThrowsError(try store.add(Correction(label: "neutral"))) {
            XCTAssertEqual($0 as? CorrectionStoreError, .emptyInput)
        }
        XCTAssertThrowsError(try CorrectionStore(fileURL: file, allowedLabels: [])) {
            XCTAssertEqual($0 as? CorrectionStoreError, .emptyLabelList)
        }
        XCTAssertThrowsError(try CorrectionStore(fileURL: file, allowedLabels: ["a", "a"])) {
            XCTAssertEqual($0 as? CorrectionStoreError, .duplicateLabel("a"))
        }
        XCTAssertThrowsError(try CorrectionStore(fileURL: file, allowedLabels: labels, maxCount: 0)) {
            XCTAssertEqual($0 as? CorrectionStoreError, .invalidMaxCount(0))
        }
    }

    func testPersistenceRoundTrip() throws {
        let store = try store()
        let embedding: [Float] = [0.1, -2.5e-8, 3.4028235e38, -0.0, 1.0 / 3.0]
        try store.add(text: "a\u{300} \u{0}\t\u{1F468}\u{200D}\u{1F469}", label: "positive", date: date(1))
        try store.add(embedding: embedding, label: "negative", date: date(2))
        try store.add(text: "both", label: "neutral", embedding: [1, 2], date: date(3))

        let reopened = try self.store()
        XCTAssertEqual(reopened.corrections, store.corrections)
        XCTAssertEqual(reopened.discardedOnLoad, 0)
        let first = try XCTUnwrap(reopened.corrections.first?.text)
        XCTAssertEqual(Array(first.unicodeScalars), Array("a\u{300} \u{0}\t\u{1F468}\u{200D}\u{1F469}".unicodeScalars))
        XCTAssertEqual(reopened.corrections[1].embedding?.map(\.bitPattern), embedding.map(\.bitPattern))

        // Labels no longer allowed are dropped when loading.
        let narrowed = try CorrectionStore(fileURL: file, allowedLabels: ["negative", "neutral"])
        XCTAssertEqual(narrowed.discardedOnLoad, 1)
        XCTAssertEqual(narrowed.corrections.map(\.label), ["negative", "neutral"])

        try reopened.removeAll(where: { $0.label == "negative" })
        XCTAssertEqual(try self.store().corrections.map(\.label), ["positive", "neutral"])
        try reopened.removeAll()
        XCTAssertEqual(try self.store().count, 0)
    }

    func testCorruptFileThrows() throws {
        try Data("[1, 2".utf8).write(to: file)
        XCTAssertThrowsError(try store()) { error in
            guard case .unreadableFile? = error as? CorrectionStoreError else {
                return XCTFail("unexpected \(error)")
            }
        }
        try Data(#"{"formatVersion": 99, "corrections": []}"#.utf8).write(to: file)
        XCTAssertThrowsError(try store()) {
            XCTAssertEqual($0 as? CorrectionStoreError, .unsupportedFormatVersion(99))
        }
    }

    func testAtomicWriteCrashKeepsPreviousFile() throws {
        let store = try store()
        try store.add(text: "kept", label: "positive", date: date(1))
        let before = try Data(contentsOf: file)

        struct Crash: Error {}
        store.beforeRenameHook = { throw Crash() }
        XCTAssertThrowsError(try store.add(text: "lost", label: "negative", date: date(2))) {
            XCTAssertTrue($0 is Crash)
        }
        // Nothing changed: not in memory, not on disk, no temp file left over.
        XCTAssertEqual(store.corrections.map(\.text), ["kept"])
        XCTAssertEqual(try Data(contentsOf: file), before)
        let leftovers = try FileManager.default.contentsOfDirectory(atPath: file.deletingLastPathComponent().path)
        XCTAssertEqual(leftovers, ["corrections.json"])
        XCTAssertEqual(try self.store().corrections.map(\.text), ["kept"])

        // A temp file orphaned by a real crash is ignored and swept on open.
        let orphan = file.deletingLastPathComponent().appendingPathComponent(".corrections.json.\(UUID().uuidString).tmp")
        try Data("garbage".utf8).write(to: orphan)
        XCTAssertEqual(try self.store().corrections.map(\.text), ["kept"])
        XCTAssertFalse(FileManager.default.fileExists(atPath: orphan.path))
    }
}
