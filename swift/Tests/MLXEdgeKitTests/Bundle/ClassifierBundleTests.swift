import Foundation
import XCTest
@testable import MLXEdgeKit

/// Opening a bundle folder: the pure half of `TextClassifier.open(bundle:)`.
final class ClassifierBundleTests: XCTestCase {
    /// The fixture's model files: the fixture leaves them out, so tests write stand-ins.
    private static let modelFilesNeededOnDevice = [
        "Encoder.mlpackage/Data/com.apple.CoreML/model.mlmodel",
        "Encoder.mlpackage/Data/com.apple.CoreML/weights/weight.bin",
        "Encoder.mlpackage/Manifest.json",
        "Head.mlmodel",
    ]

    /// A copy of the fixture folder with zero-filled model files of the manifest's sizes
    /// (`Head.mlmodel` shorter by `headShortBy` bytes).
    private func bundleWithStandInModels(headShortBy: Int = 0) throws -> URL {
        let copy = try Fixtures.copyOfBundle(self)
        let manifest = try Fixtures.bundleManifest()
        for path in Self.modelFilesNeededOnDevice {
            let url = BundleManifest.url(of: path, in: copy)
            try FileManager.default.createDirectory(at: url.deletingLastPathComponent(), withIntermediateDirectories: true)
            let bytes = manifest.files[path]!.bytes - (path == "Head.mlmodel" ? headShortBy : 0)
            try Data(count: bytes).write(to: url)
        }
        return copy
    }

    func testOpensTheFixtureWithItsLabelsAndTokenizer() throws {
        let directory = try Fixtures.bundleDirectory()
        let bundle = try ClassifierBundle(directory: directory, fileCheck: .none)
        XCTAssertEqual(bundle.directory, directory)
        XCTAssertEqual(bundle.labels, BundleManifestTests.labels)
        XCTAssertEqual(bundle.manifest, try Fixtures.bundleManifest())
        XCTAssertEqual(bundle.io, try bundle.manifest.io())
        XCTAssertEqual(bundle.tokenizer.vocabularySize, 226)
        let t = bundle.tokenizer
        XCTAssertEqual([t.clsTokenID, t.sepTokenID, t.padTokenID, t.unkTokenID], [2, 3, 0, 1])
        XCTAssertEqual(try XCTUnwrap(t as? BertTokenizer).configuration, bundle.manifest.tokenizerConfiguration)
        let encoding = try t.encode("Pay the credit card bill")
        XCTAssertEqual(encoding.inputIds.count, 32)
        XCTAssertEqual(encoding.inputIds.first, 2)
        XCTAssertEqual(encoding.inputIds[encoding.tokenCount - 1], 3)
        XCTAssertEqual(encoding, try bundle.manifest.makeTokenizer(bundleDirectory: directory).encode("Pay the credit card bill"))
    }

    func testTheDefaultCheckNamesTheMissingModels() throws {
        // The fixture has no models: opening it as an app would must say which files are missing.
        XCTAssertThrowsError(try ClassifierBundle(directory: try Fixtures.bundleDirectory())) { error in
            guard case let .fileVerificationFailed(problems) = error as? BundleManifestError else {
                return XCTFail("\(error)")
            }
            XCTAssertEqual(problems, Self.modelFilesNeededOnDevice.map { BundleFileProblem(path: $0, kind: .missing) })
            XCTAssertTrue("\(error)".contains("4 bundle file(s) failed verification"), "\(error)")
        }
    }

    func testAFileLinkedFromOutsideTheBundleIsRefused() throws {
        // Same bytes, so size and digest pass: only where the link leads is wrong.
        let copy = try bundleWithStandInModels()
        let outside = FileManager.default.temporaryDirectory.appendingPathComponent("outside-\(UUID().uuidString)")
        let head = BundleManifest.url(of: "Head.mlmodel", in: copy)
        try FileManager.default.moveItem(at: head, to: outside)
        defer { try? FileManager.default.removeItem(at: outside) }
        try FileManager.default.createSymbolicLink(at: head, withDestinationURL: outside)
        let problems = try Fixtures.bundleManifest().fileProblems(in: copy, only: Self.modelFilesNeededOnDevice, digests: false)
        XCTAssertEqual(problems, [BundleFileProblem(path: "Head.mlmodel", kind: .unreadable("a link that leads out of the bundle"))])
        // a link that stays inside the bundle is fine
        try FileManager.default.removeItem(at: head)
        let inside = copy.appendingPathComponent("head-copy.bin")
        try FileManager.default.moveItem(at: outside, to: inside)
        try FileManager.default.createSymbolicLink(at: head, withDestinationURL: inside)
        XCTAssertEqual(try Fixtures.bundleManifest().fileProblems(in: copy, only: Self.modelFilesNeededOnDevice, digests: false), [])
    }

    func testSizeAndDigestChecks() throws {
        let copy = try bundleWithStandInModels()
        XCTAssertEqual(try ClassifierBundle(directory: copy).labels, BundleManifestTests.labels) // .sizes passes
        XCTAssertThrowsError(try ClassifierBundle(directory: copy, fileCheck: .sha256)) { error in
            guard case let .fileVerificationFailed(problems) = error as? BundleManifestError else {
                return XCTFail("\(error)")
            }
            // The stand-ins have the right sizes and the wrong content; vocab.txt is the real one.
            XCTAssertEqual(problems.map(\.path), Self.modelFilesNeededOnDevice)
            for problem in problems {
                guard case .digestMismatch = problem.kind else { return XCTFail("\(problem)") }
            }
        }

        let short = try bundleWithStandInModels(headShortBy: 1)
        let headBytes = try Fixtures.bundleManifest().files["Head.mlmodel"]!.bytes
        XCTAssertThrowsError(try ClassifierBundle(directory: short)) {
            XCTAssertEqual($0 as? BundleManifestError, .fileVerificationFailed([
                BundleFileProblem(path: "Head.mlmodel", kind: .sizeMismatch(expected: headBytes, actual: headBytes - 1)),
            ]))
        }
    }

    func testInvalidBundlesGiveTheManifestsError() throws {
        let empty = try makeTemporaryDirectory(self)
        XCTAssertThrowsError(try ClassifierBundle(directory: empty, fileCheck: .none)) {
            XCTAssertEqual($0 as? BundleManifestError,
                           .manifestNotFound(path: empty.appendingPathComponent("manifest.json").path))
        }

        // A head with no updatable layer cannot be opened: the error names the field.
        let copy = try Fixtures.copyOfBundle(self)
        let manifestURL = copy.appendingPathComponent(BundleManifest.fileName)
        try mutatedManifest(["models", "head", "updatable_layers"], [String]()).write(to: manifestURL)
        XCTAssertThrowsError(try ClassifierBundle(directory: copy, fileCheck: .none)) {
            XCTAssertEqual($0 as? BundleManifestError,
                           .invalidValue(path: "models.head.updatable_layers", reason: "no updatable layer"))
            XCTAssertEqual("\($0)", "BundleManifest: models.head.updatable_layers: no updatable layer")
        }

        // A vocabulary that does not match the manifest (one token more).
        try Fixtures.bundleManifestData().write(to: manifestURL)
        let vocab = copy.appendingPathComponent("vocab.txt")
        try (String(contentsOf: vocab, encoding: .utf8) + "extra\n").write(to: vocab, atomically: true, encoding: .utf8)
        XCTAssertThrowsError(try ClassifierBundle(directory: copy, fileCheck: .none)) {
            XCTAssertEqual($0 as? BundleManifestError,
                           .tokenizerMismatch("vocab.txt has 227 tokens, tokenizer.vocab_size is 226"))
        }
    }
}
