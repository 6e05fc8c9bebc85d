import Foundation
import XCTest
@testable import MLXEdgeKit

/// A bundle whose student has a SentencePiece Unigram tokenizer opens and tokenizes as a WordPiece
/// one does. The fixture (Fixtures/bundle_unigram, scripts/make_bundle_manifest_fixture.py) is a
/// real export of a tiny student (120 pieces, XLM-R's charsmap, fixed length 32): its manifest, the
/// spec MLXEdgeKit reads, and the ids its tokenizer.json gave a few texts in Python.
final class UnigramBundleTests: XCTestCase {
    private static let modelFilesNeededOnDevice = [
        "Encoder.mlpackage/Data/com.apple.CoreML/model.mlmodel",
        "Encoder.mlpackage/Data/com.apple.CoreML/weights/weight.bin",
        "Encoder.mlpackage/Manifest.json",
        "Head.mlmodel",
    ]

    private func manifest(_ changes: [([JSONKey], Any?)]) throws -> Data {
        try mutatedManifest(changes, of: try Fixtures.unigramManifestData())
    }

    func testDecodesAndValidatesTheFixture() throws {
        let m = try BundleManifest.load(from: try Fixtures.unigramBundleDirectory())
        XCTAssertEqual(m.tokenizer.type, .unigram)
        XCTAssertEqual(m.tokenizer.specFile, "unigram_spec.json")
        XCTAssertNil(m.tokenizer.vocabFile)
        XCTAssertEqual(m.tokenizerFile, "unigram_spec.json")
        XCTAssertEqual(m.tokenizer.vocabSize, 120)
        XCTAssertEqual(m.filesNeededOnDevice, Self.modelFilesNeededOnDevice + ["unigram_spec.json"])
        XCTAssertNoThrow(try m.validate())
        XCTAssertEqual(try BundleManifest(jsonData: try m.jsonData()), m, "round trip")
        XCTAssertEqual(m.fileProblems(in: try Fixtures.unigramBundleDirectory(), only: ["unigram_spec.json"]), [])
    }

    func testOpensAndGivesTheIdsPythonRecorded() throws {
        let directory = try Fixtures.unigramBundleDirectory()
        let bundle = try ClassifierBundle(directory: directory, fileCheck: .none)
        let t = bundle.tokenizer
        XCTAssertTrue(t is UnigramTokenizer, "\(type(of: t))")
        XCTAssertEqual(t.vocabularySize, 120)
        XCTAssertEqual([t.clsTokenID, t.sepTokenID, t.padTokenID, t.unkTokenID], [0, 2, 1, 3])
        let fixture = try Fixtures.unigramTokenizerCases()
        XCTAssertEqual(fixture.max_length, bundle.manifest.maxLength)
        XCTAssertGreaterThanOrEqual(fixture.cases.count, 8)
        var matched = 0
        for c in fixture.cases {
            let encoding = try t.encode(c.text) // the manifest's length, 32
            XCTAssertEqual(encoding.inputIds, c.input_ids, escaped(c.text))
            XCTAssertEqual(encoding.attentionMask, c.attention_mask, escaped(c.text))
            let inputs = try bundle.io.encoderInputs(for: c.text, tokenizer: t)
            XCTAssertEqual(inputs[0].values, .int32(c.input_ids), escaped(c.text))
            XCTAssertEqual(inputs[1].values, .int32(c.attention_mask), escaped(c.text))
            matched += encoding.inputIds == c.input_ids ? 1 : 0
        }
        print("Unigram bundle: \(matched)/\(fixture.cases.count) texts give the ids Python recorded")
        XCTAssertTrue(fixture.cases.contains { $0.input_ids.contains(3) }, "the cases cover <unk>")
        XCTAssertTrue(fixture.cases.contains { !$0.attention_mask.contains(0) }, "the cases cover truncation")
    }

    func testTheDefaultCheckWantsTheSpecAndTheModels() throws {
        // The fixture has no models: they are what is missing, the spec is there.
        XCTAssertThrowsError(try ClassifierBundle(directory: try Fixtures.unigramBundleDirectory())) {
            XCTAssertEqual($0 as? BundleManifestError, .fileVerificationFailed(
                Self.modelFilesNeededOnDevice.map { BundleFileProblem(path: $0, kind: .missing) }))
        }
        let copy = try Fixtures.copyOfUnigramBundle(self)
        try FileManager.default.removeItem(at: copy.appendingPathComponent("unigram_spec.json"))
        XCTAssertThrowsError(try ClassifierBundle(directory: copy)) { error in
            guard case let .fileVerificationFailed(problems) = error as? BundleManifestError else {
                return XCTFail("\(error)")
            }
            XCTAssertEqual(problems.last, BundleFileProblem(path: "unigram_spec.json", kind: .missing))
        }
        XCTAssertThrowsError(try ClassifierBundle(directory: copy, fileCheck: .none)) {
            let path = copy.appendingPathComponent("unigram_spec.json").path
            XCTAssertEqual($0 as? UnigramTokenizerError, .specFileNotFound(path: path))
            XCTAssertEqual("\($0)", "UnigramTokenizer: spec file not found at \(path)")
        }
    }

    func testAWrongTypeOrAMissingSpecFileIsNamed() throws {
        assertManifestError(try manifest([(["tokenizer", "type"], "bpe")]),
                            .invalidValue(path: "tokenizer.type", reason: "\"bpe\" is not one of \"wordpiece\", \"unigram\""))
        let needsSpec = BundleManifestError.unsupportedTokenizerSetting(
            name: "spec_file", value: "null",
            reason: "MLXEdgeKit's UnigramTokenizer needs the spec the exporter writes (unigram_spec.json); "
                + "export the bundle again with a current mlx-edge")
        assertManifestError(try manifest([(["tokenizer", "spec_file"], NSNull())]), needsSpec)
        assertManifestError(try manifest([(["tokenizer", "spec_file"], nil)]), needsSpec) // an older Unigram export
        XCTAssertTrue("\(needsSpec)".hasPrefix("BundleManifest: tokenizer.spec_file is null: "), "\(needsSpec)")
        assertManifestError(try manifest([(["tokenizer", "spec_file"], "spec.json")]),
                            .fileNotListed(path: "tokenizer.spec_file", file: "spec.json"))
        // Called WordPiece, the bundle has no vocabulary; a WordPiece bundle called Unigram has no spec.
        assertManifestError(try manifest([(["tokenizer", "type"], "wordpiece")]),
                            .unsupportedTokenizerSetting(name: "vocab_file", value: "null",
                                                         reason: "MLXEdgeKit's BertTokenizer needs a WordPiece vocab.txt"))
        assertManifestError(try mutatedManifest(["tokenizer", "type"], "unigram"), needsSpec)
        assertManifestError(try mutatedManifest(["tokenizer", "spec_file"], "vocab.txt"),
                            .inconsistent(path: "tokenizer.spec_file",
                                          reason: "\"vocab.txt\" is a Unigram spec, but tokenizer.type is \"wordpiece\" (it reads vocab_file)"))
    }

    func testAManifestWithoutATypeIsWordPiece() throws {
        // Bundles exported before the manifest named the tokenizer's kind.
        let m = try decodeManifest(try mutatedManifest([(["tokenizer", "type"], nil), (["tokenizer", "spec_file"], nil)]))
        XCTAssertEqual(m.tokenizer.type, .wordpiece)
        XCTAssertNil(m.tokenizer.specFile)
        XCTAssertEqual(m, try Fixtures.bundleManifest())
        XCTAssertTrue(try m.makeTokenizer(bundleDirectory: try Fixtures.bundleDirectory()) is BertTokenizer)
    }

    func testASpecThatDisagreesWithTheManifestIsRefused() throws {
        let copy = try Fixtures.copyOfUnigramBundle(self)
        let m = try BundleManifest.load(from: copy)
        var bigger = m
        bigger.tokenizer.vocabSize = 121
        XCTAssertThrowsError(try bigger.makeTokenizer(bundleDirectory: copy)) {
            XCTAssertEqual($0 as? BundleManifestError,
                           .tokenizerMismatch("unigram_spec.json has 120 tokens, tokenizer.vocab_size is 121"), "\($0)")
        }
        var shifted = m
        shifted.tokenizer.padID = 4
        XCTAssertThrowsError(try shifted.makeTokenizer(bundleDirectory: copy)) {
            XCTAssertEqual($0 as? BundleManifestError, .tokenizerMismatch("tokenizer.pad_id is 4, the vocabulary has it at 1"))
        }
        try Data("{\"format\": \"mlx-edge.unigram\"".utf8).write(to: copy.appendingPathComponent("unigram_spec.json"))
        XCTAssertThrowsError(try m.makeTokenizer(bundleDirectory: copy)) {
            guard case .invalidJSON = $0 as? UnigramTokenizerError else { return XCTFail("\($0)") }
        }
    }
}
