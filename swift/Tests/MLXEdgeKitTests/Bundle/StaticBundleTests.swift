import Foundation
import XCTest
@testable import MLXEdgeKit

/// A bundle whose student is a static token table (`mlx-edge distill --student static`): the same
/// contract as a BERT bundle (encoder `embedding` → updatable head), `student.kind` "static" and no
/// layers. The fixture (Fixtures/bundle_static, scripts/make_bundle_manifest_fixture.py --variant
/// static) is a real export of a tiny random static student (16 wide) with the WordPiece tokenizer.
final class StaticBundleTests: XCTestCase {
    private static func directory() throws -> URL {
        let url = Bundle.module.url(forResource: "bundle_static", withExtension: nil, subdirectory: "Fixtures")
        return try XCTUnwrap(url, "missing Fixtures/bundle_static; run scripts/make_bundle_manifest_fixture.py")
    }

    private static func manifestData() throws -> Data {
        try Data(contentsOf: try directory().appendingPathComponent(BundleManifest.fileName))
    }

    func testDecodesValidatesAndOpensTheFixture() throws {
        let directory = try Self.directory()
        let m = try BundleManifest.load(from: directory)
        XCTAssertEqual(m.student.kind, .static)
        XCTAssertEqual(m.student.numHiddenLayers, 0)
        XCTAssertEqual(m.embeddingDimension, 16)
        XCTAssertNoThrow(try m.validate())
        XCTAssertEqual(try BundleManifest(jsonData: try m.jsonData()), m, "round trip")
        XCTAssertEqual(m.fileProblems(in: directory, only: m.tokenizer.files), [])
        let bundle = try ClassifierBundle(directory: directory, fileCheck: .none)
        XCTAssertEqual(bundle.io.embeddingDimension, 16)
        XCTAssertEqual(bundle.io.headEmbedding.shape, [16])
        XCTAssertEqual(bundle.io.trainingEmbedding.shape, [16])
        let encoding = try bundle.tokenizer.encode("Pay the credit card bill")
        XCTAssertEqual(encoding.inputIds.count, bundle.manifest.maxLength)
        XCTAssertEqual(encoding, try m.makeTokenizer(bundleDirectory: directory).encode("Pay the credit card bill"))
    }

    func testTheAppNeedsTheSameKindOfFilesAsForABertStudent() throws {
        let staticManifest = try BundleManifest.load(from: try Self.directory())
        let bert = try Fixtures.bundleManifest()
        XCTAssertEqual(staticManifest.filesNeededOnDevice.filter { !$0.contains("tokenizer") && $0 != "vocab.txt" },
                       bert.filesNeededOnDevice.filter { !$0.contains("tokenizer") && $0 != "vocab.txt" })
        XCTAssertEqual(staticManifest.models.encoder.embeddingOutput, bert.models.encoder.embeddingOutput)
        XCTAssertEqual(staticManifest.models.head.trainingInputs.map(\.name), bert.models.head.trainingInputs.map(\.name))
    }

    func testKindIsOptionalAndOnlyAStaticStudentMayHaveNoLayers() throws {
        let data = try Self.manifestData()
        // Written only for a static student; a BERT manifest (the other fixtures) has none and decodes as bert.
        XCTAssertEqual(try Fixtures.bundleManifest().student.kind, .bert)
        let bertJSON = try XCTUnwrap(try JSONSerialization.jsonObject(with: try Fixtures.bundleManifest().jsonData())
            as? [String: Any])
        XCTAssertNil((bertJSON["student"] as? [String: Any])?["kind"], "a bert student is written without kind")
        assertManifestError(try mutatedManifest([(["student", "kind"], "bert")], of: data),
                            .invalidValue(path: "student.num_hidden_layers", reason: "0 is below 1"))
        assertManifestError(try mutatedManifest([(["student", "kind"], nil)], of: data),
                            .invalidValue(path: "student.num_hidden_layers", reason: "0 is below 1"))
        assertManifestError(try mutatedManifest([(["student", "num_hidden_layers"], -1)], of: data),
                            .invalidValue(path: "student.num_hidden_layers", reason: "-1 is below 0"))
        assertManifestError(try mutatedManifest([(["student", "kind"], "lstm")], of: data),
                            .invalidValue(path: "student.kind", reason: "\"lstm\" is not one of \"bert\", \"static\""))
    }
}
