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

/// Block-wise quantized bundles (`--quantize int8-block|int4-block --block-size N`, iOS 18).
final class BlockwiseQuantizeTests: XCTestCase {
    private func blockwise(_ mode: String, bits: Any?, blockSize: Any?, target: String = "iOS18") throws -> Data {
        try mutatedManifest([
            (["quantize"], ["mode": mode, "bits": bits as Any, "block_size": blockSize as Any]
                .compactMapValues { $0 is NSNull ? nil : $0 }),
            (["minimum_deployment_target"], target),
        ])
    }

    func testDecodesTheBlockwiseModes() throws {
        let int4 = try decodeManifest(try blockwise("int4-block", bits: 4, blockSize: 32))
        XCTAssertEqual(int4.quantize.mode, .int4Block)
        XCTAssertTrue(int4.quantize.mode.isBlockwise)
        XCTAssertEqual(int4.quantize.blockSize, 32)
        XCTAssertEqual(int4.quantize.bits, 4)
        let int8 = try decodeManifest(try blockwise("int8-block", bits: 8, blockSize: 24))
        XCTAssertEqual(int8.quantize.mode, .int8Block)
        XCTAssertEqual(try BundleManifest(jsonData: try int8.jsonData()), int8)
        XCTAssertFalse(BundleManifest.Quantize.Mode.int8.isBlockwise)
    }

    func testABlockwiseModeNeedsItsSettingsAndIOS18() throws {
        assertManifestError(try blockwise("int4-block", bits: 4, blockSize: NSNull()),
                            .missingField("quantize.block_size"))
        assertManifestError(try blockwise("int4-block", bits: 4, blockSize: 0),
                            .invalidValue(path: "quantize.block_size", reason: "0 is below 1"))
        assertManifestError(try blockwise("int4-block", bits: 8, blockSize: 32),
                            .inconsistent(path: "quantize.bits", reason: "8, expected 4 for \"int4-block\""))
        assertManifestError(try blockwise("int8-block", bits: 8, blockSize: 32, target: "iOS17"),
                            .inconsistent(path: "minimum_deployment_target",
                                          reason: "\"iOS17\", but \"int8-block\" weights need iOS18"))
        assertManifestError(try mutatedManifest(["quantize", "mode"], "int2-block"),
                            .invalidValue(path: "quantize.mode", reason: "\"int2-block\" is not one of \"none\", "
                                + "\"int8\", \"palettize\", \"int8-block\", \"int4-block\""))
    }
}
