import Foundation
import XCTest
@testable import MLXEdgeKit

/// A bundle exported with `--extras classifier,onnx` (Fixtures/bundle_extras, the manifest only:
/// scripts/make_bundle_manifest_fixture.py --variant extras) and the same contract without them
/// (Fixtures/bundle): the extras are optional, checked when present, never needed on device.
final class BundleExtrasTests: XCTestCase {
    func testDecodesAndValidatesTheExtras() throws {
        let m = try Fixtures.extrasManifest()
        XCTAssertNoThrow(try m.validate())
        XCTAssertEqual(m.extras, [.classifier, .onnx])
        let classifier = try XCTUnwrap(m.models.classifier)
        XCTAssertEqual(classifier.file, "Classifier.mlpackage")
        XCTAssertEqual(classifier.probabilitiesOutput, "probabilities")
        let onnx = try XCTUnwrap(m.models.onnx)
        XCTAssertEqual(onnx.format, .onnx)
        XCTAssertGreaterThanOrEqual(onnx.opset, 13)
        XCTAssertEqual(onnx.inputs[0].shape, [.symbolic("batch"), .symbolic("sequence")])
        XCTAssertNil(onnx.inputs[0].fixedShape)
        XCTAssertEqual(m.files(of: .onnx), ["model.onnx"])
        XCTAssertEqual(m.files(of: .classifier).first, "Classifier.mlpackage/Data/com.apple.CoreML/model.mlmodel")
        XCTAssertEqual(m.model(.onnx)?.file, "model.onnx")
    }

    func testTheAppNeedsTheSameFilesWithOrWithoutExtras() throws {
        let lean = try Fixtures.bundleManifest()
        let extras = try Fixtures.extrasManifest()
        XCTAssertEqual(lean.models.encoder.inputs, extras.models.encoder.inputs)
        XCTAssertEqual(lean.models.head, extras.models.head)
        let onDevice = extras.filesNeededOnDevice
        XCTAssertFalse(onDevice.contains { $0.hasPrefix("Classifier.mlpackage") || $0 == "model.onnx" })
        XCTAssertEqual(onDevice.count, lean.filesNeededOnDevice.count)
        XCTAssertEqual(try extras.io(), try lean.io())
    }

    func testARoundTripKeepsAnAbsentExtraAbsent() throws {
        let lean = try Fixtures.bundleManifest()
        let json = try XCTUnwrap(try JSONSerialization.jsonObject(with: try lean.jsonData()) as? [String: Any])
        let models = try XCTUnwrap(json["models"] as? [String: Any])
        XCTAssertEqual(Set(models.keys), ["encoder", "head"], "no null entries for the extras")
        let extras = try Fixtures.extrasManifest()
        XCTAssertEqual(try BundleManifest(jsonData: try extras.jsonData()), extras)
    }

    func testAnExtraIsCheckedWhenPresent() throws {
        let data = try Fixtures.extrasManifestData()
        assertManifestError(try mutatedManifest([(["models", "onnx", "opset"], 11)], of: data),
                            .invalidValue(path: "models.onnx.opset", reason: "11 is below 13"))
        assertManifestError(try mutatedManifest([(["models", "classifier", "format"], "onnx")], of: data),
                            .invalidValue(path: "models.classifier.format", reason: "\"onnx\", expected \"mlprogram\""))
        assertManifestError(try mutatedManifest([(["models", "classifier", "probabilities_output"], "p")], of: data),
                            .featureNotFound(model: "classifier", kind: "output", name: "p"))
        // An extra the manifest names must be among its files.
        let unlisted = try mutatedManifest([(["files", "model.onnx"], nil)], of: data)
        assertManifestError(unlisted, .fileNotListed(path: "models.onnx.file", file: "model.onnx"))
    }

    func testEitherExtraAlone() throws {
        let data = try Fixtures.extrasManifestData()
        let onlyONNX = try decodeManifest(try mutatedManifest([(["models", "classifier"], nil)], of: data))
        XCTAssertEqual(onlyONNX.extras, [.onnx])
        let onlyClassifier = try decodeManifest(try mutatedManifest([(["models", "onnx"], nil)], of: data))
        XCTAssertEqual(onlyClassifier.extras, [.classifier])
    }

    func testTheAppsModelsAreStillRequired() throws {
        assertManifestError(try mutatedManifest(["models", "head"], nil), .missingField("models.head"))
    }
}

extension Fixtures {
    /// `Fixtures/bundle_extras/manifest.json`: the tiny student of `Fixtures/bundle` exported with
    /// `--extras classifier,onnx`.
    static func extrasManifestData() throws -> Data {
        let url = Bundle.module.url(forResource: "bundle_extras", withExtension: nil, subdirectory: "Fixtures")
        let directory = try XCTUnwrap(url, "missing Fixtures/bundle_extras; run scripts/make_bundle_manifest_fixture.py")
        return try Data(contentsOf: directory.appendingPathComponent(BundleManifest.fileName))
    }

    static func extrasManifest() throws -> BundleManifest {
        try BundleManifest(jsonData: try extrasManifestData())
    }
}
