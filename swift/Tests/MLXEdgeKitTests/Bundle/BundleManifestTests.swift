import Foundation
import XCTest
@testable import MLXEdgeKit

/// The manifest fixture is a real export (scripts/make_bundle_manifest_fixture.py): a tiny
/// student with 6 labels, hidden size 32, a 226-token vocabulary, fixed length 32, exported
/// without extras (encoder and head only; BundleExtrasTests reads the one with extras).
final class BundleManifestTests: XCTestCase {
    static let labels = ["finance", "health", "life", "study", "travel", "work"]

    // MARK: The fixture decodes and validates

    func testDecodesTheExportedFixture() throws {
        let m = try Fixtures.bundleManifest()
        XCTAssertEqual(m.format, "mlx-edge-bundle")
        XCTAssertEqual(m.formatVersion, 1)
        XCTAssertEqual(m.labels, Self.labels)
        XCTAssertEqual(m.maxLength, 32)
        XCTAssertEqual(m.sequenceLength, .init(kind: .fixed, defaultLength: 32, min: 32, max: 32))
        XCTAssertEqual(m.precision, .fp32)
        XCTAssertEqual(m.quantize.mode, BundleManifest.Quantize.Mode.none)
        XCTAssertEqual(m.computeUnits, .cpuAndGPU)
        XCTAssertEqual(m.minimumDeploymentTarget, .iOS16)
        XCTAssertEqual(m.student.hiddenSize, 32)
        XCTAssertEqual(m.student.path, "tiny-student")
        XCTAssertEqual(m.models.encoder.format, .mlprogram)
        XCTAssertEqual(m.models.head.format, .neuralnetwork)
        XCTAssertNil(m.models.classifier)
        XCTAssertNil(m.models.onnx)
        XCTAssertEqual(m.extras, [])
        XCTAssertEqual(m.models.head.optimizer.type, .sgd)
        // the export's default: 0.05 over the mean squared norm of the tiny student's embeddings (13.46)
        XCTAssertEqual(m.models.head.optimizer.learningRate.defaultValue, 0.03714888542196767, accuracy: 1e-12)
        XCTAssertEqual(m.models.head.epochs.defaultValue, 20)
        XCTAssertEqual(m.models.head.optimizer.miniBatchSize.allowed, [1, 2, 4, 8, 16, 32, 64])
        XCTAssertTrue(m.checks.passed)
        XCTAssertFalse(m.checks.results.isEmpty)
        XCTAssertNotNil(m.versions["coremltools"])
        XCTAssertEqual(m.tokenizer.vocabFile, "vocab.txt")
        XCTAssertNil(m.tokenizer.stripAccents)
        XCTAssertTrue(m.files.values.allSatisfy { SHA256Hasher.isHexDigest($0.sha256) })
        XCTAssertNoThrow(try m.validate())
    }

    func testNameHelpersComeFromTheManifest() throws {
        let m = try Fixtures.bundleManifest()
        XCTAssertEqual(m.embeddingDimension, 32)
        XCTAssertEqual(m.encoderInputNames, ["input_ids", "attention_mask"])
        XCTAssertEqual(m.encoderTokenIDsInputName, "input_ids")
        XCTAssertEqual(m.encoderAttentionMaskInputName, "attention_mask")
        XCTAssertEqual(m.encoderOutputNames, ["embedding", "logits"])
        XCTAssertEqual(m.encoderEmbeddingOutputName, "embedding")
        XCTAssertEqual(m.headInputNames, ["embedding"])
        XCTAssertEqual(m.headOutputNames, ["probs"])
        XCTAssertEqual(m.headEmbeddingInputName, "embedding")
        XCTAssertEqual(m.headProbabilitiesOutputName, "probs")
        XCTAssertEqual(m.headTrainingInputNames, ["embedding", "probs_true"])
        XCTAssertEqual(m.headLabelInputName, "probs_true")

        // Renamed features in the manifest are followed, nothing is hard-coded.
        let renamed = try decodeManifest(try mutatedManifest([
            (["models", "head", "outputs", 0, "name"], "scores"),
            (["models", "head", "probabilities_output"], "scores"),
            (["models", "head", "loss", "input"], "scores"),
            (["models", "head", "training_inputs", 1, "name"], "truth"),
            (["models", "head", "label_input"], "truth"),
            (["models", "head", "loss", "target"], "truth"),
        ]))
        XCTAssertEqual(renamed.headProbabilitiesOutputName, "scores")
        XCTAssertEqual(renamed.headLabelInputName, "truth")
        let io = try renamed.io()
        XCTAssertEqual(io.headProbabilities.name, "scores")
        XCTAssertEqual(io.trainingLabel.name, "truth")
    }

    func testEncodeDecodeRoundTrip() throws {
        let m = try Fixtures.bundleManifest()
        let again = try BundleManifest(jsonData: try m.jsonData())
        XCTAssertEqual(again, m)
        let json = try XCTUnwrap(try JSONSerialization.jsonObject(with: try m.jsonData()) as? [String: Any])
        let tokenizer = try XCTUnwrap(json["tokenizer"] as? [String: Any])
        XCTAssertTrue(tokenizer["strip_accents"] is NSNull, "required-but-null stays present")
        XCTAssertEqual(Set(json.keys), Set(try Fixtures.bundleManifestJSON().keys))
    }

    func testFlexibleSequenceLengthsAsTheExporterWritesThem() throws {
        let range = try decodeManifest(try mutatedManifest(Self.rangeChanges))
        XCTAssertEqual(range.sequenceLength.kind, .range)
        XCTAssertEqual(range.models.encoder.inputs[0].shapeRange, [[1, 1], [8, 32]])
        let enumerated = try decodeManifest(try mutatedManifest(Self.enumeratedChanges))
        XCTAssertEqual(enumerated.sequenceLength.lengths, [8, 16, 32])

        let seq = range.sequenceLength
        XCTAssertEqual([1, 8, 9, 31, 32, 40].map(seq.paddedLength(forTokenCount:)), [8, 8, 9, 31, 32, 32])
        XCTAssertTrue(seq.accepts(8) && seq.accepts(20) && !seq.accepts(7) && !seq.accepts(33))
        let sets = enumerated.sequenceLength
        XCTAssertEqual([1, 8, 9, 16, 17, 32, 99].map(sets.paddedLength(forTokenCount:)), [8, 8, 16, 16, 32, 32, 32])
        XCTAssertTrue(sets.accepts(16) && !sets.accepts(12))
        let fixed = try Fixtures.bundleManifest().sequenceLength
        XCTAssertEqual([1, 32, 50].map(fixed.paddedLength(forTokenCount:)), [32, 32, 32])

        assertManifestError(try mutatedManifest(Self.rangeChanges + [(["models", "encoder", "inputs", 1, "shape_range"], nil)]),
                            .missingField("models.encoder.inputs[1].shape_range"))
        assertManifestError(try mutatedManifest(Self.enumeratedChanges + [(["sequence_length", "lengths"], nil)]),
                            .missingField("sequence_length.lengths"))
        assertManifestError(
            try mutatedManifest(Self.enumeratedChanges + [(["sequence_length", "lengths"], [8, 24, 32])]),
            .inconsistent(path: "models.encoder.inputs[0].enumerated_shapes",
                          reason: "the lengths [8, 16, 32] differ from sequence_length.lengths [8, 24, 32]"))
    }

    static let rangeChanges: [([JSONKey], Any?)] = [
        (["sequence_length"], ["kind": "range", "default": 32, "min": 8, "max": 32]),
        (["models", "encoder", "inputs", 0, "shape_range"], [[1, 1], [8, 32]]),
        (["models", "encoder", "inputs", 1, "shape_range"], [[1, 1], [8, 32]]),
        (["tokenizer", "padding"], "to the next accepted length"),
    ]

    static let enumeratedChanges: [([JSONKey], Any?)] = [
        (["sequence_length"], ["kind": "enumerated", "default": 32, "min": 8, "max": 32, "lengths": [8, 16, 32]]),
        (["models", "encoder", "inputs", 0, "enumerated_shapes"], [[1, 32], [1, 8], [1, 16]]),
        (["models", "encoder", "inputs", 1, "enumerated_shapes"], [[1, 32], [1, 8], [1, 16]]),
        (["minimum_deployment_target"], "iOS18"),
        (["tokenizer", "padding"], "to the next accepted length"),
    ]

    // MARK: Format and required fields

    func testFormatAndVersionAreCheckedFirst() throws {
        // A future version says so, even when its fields differ.
        assertManifestError(try mutatedManifest([(["format_version"], 2), (["models"], nil)]),
                            .unsupportedFormatVersion(found: 2, supported: 1))
        assertManifestError(try mutatedManifest(["format"], "other-bundle"), .unsupportedFormat("other-bundle"))
        assertManifestError(try mutatedManifest(["format_version"], nil), .missingField("format_version"))
        assertManifestError(Data("[1, 2]".utf8), .invalidJSON("the manifest is not a JSON object"))
        XCTAssertThrowsError(try BundleManifest(jsonData: Data("{\"format\": ".utf8))) {
            guard case .invalidJSON = $0 as? BundleManifestError else { return XCTFail("\($0)") }
        }
        let error = BundleManifestError.unsupportedFormatVersion(found: 2, supported: 1)
        XCTAssertTrue(error.description.contains("format_version 2 is not supported"))
    }

    func testMissingFieldsAreNamedByTheirPath() throws {
        assertManifestError(try mutatedManifest(["models", "head", "label_input"], nil),
                            .missingField("models.head.label_input"))
        assertManifestError(try mutatedManifest(["labels"], nil), .missingField("labels"))
        assertManifestError(try mutatedManifest(["tokenizer", "strip_accents"], nil),
                            .missingField("tokenizer.strip_accents"))
        assertManifestError(try mutatedManifest(["models", "head", "training_inputs", 1, "dtype"], nil),
                            .missingField("models.head.training_inputs[1].dtype"))
        assertManifestError(try mutatedManifest(["files", "vocab.txt", "sha256"], nil),
                            .missingField("files.vocab.txt.sha256"))
        assertManifestError(try mutatedManifest(["versions", "torch"], nil), .missingField("versions.torch"))
        assertManifestError(try mutatedManifest(["checks"], nil), .missingField("checks"))
        XCTAssertEqual(BundleManifestError.missingField("models.head.label_input").description,
                       "BundleManifest: required field models.head.label_input is missing")
        // Optional fields may be absent.
        let withoutVocabFile = try BundleManifest(jsonData: try mutatedManifest(["tokenizer", "vocab_file"], nil),
                                                  validate: false)
        XCTAssertNil(withoutVocabFile.tokenizer.vocabFile)
    }

    func testWrongTypesAndValues() throws {
        assertManifestError(try mutatedManifest(["max_length"], "32"), .wrongType(path: "max_length", expected: "an integer"))
        assertManifestError(try mutatedManifest(["labels"], NSNull()), .wrongType(path: "labels", expected: "an array, found null"))
        assertManifestError(try mutatedManifest(["labels", 2], 7), .wrongType(path: "labels[2]", expected: "a string"))
        assertManifestError(try mutatedManifest(["precision"], "fp8"),
                            .invalidValue(path: "precision", reason: "\"fp8\" is not one of \"fp16\", \"fp32\""))
        assertManifestError(try mutatedManifest(["models", "head", "training_inputs", 0, "dtype"], "bfloat16"),
                            .invalidValue(path: "models.head.training_inputs[0].dtype",
                                          reason: "\"bfloat16\" is not one of \"float32\", \"float16\", \"float64\", \"int32\", \"int64\""))
        assertManifestError(try mutatedManifest(["quantize"], ["mode": "palettize", "bits": 5, "method": "kmeans"]),
                            .invalidValue(path: "quantize.bits", reason: "5 is not one of 1, 2, 3, 4, 6, 8"))
        XCTAssertEqual(try decodeManifest(try mutatedManifest(["quantize"], ["mode": "palettize", "bits": 6,
                                                                             "method": "kmeans"])).quantize.method, .kmeans)
        assertManifestError(try mutatedManifest(["compute_units"], "GPU"),
                            .invalidValue(path: "compute_units",
                                          reason: "\"GPU\" is not one of \"CPU_AND_GPU\", \"ALL\", \"CPU_AND_NE\", \"CPU_ONLY\""))
        assertManifestError(try mutatedManifest(["models", "encoder", "inputs", 0, "shape", 1], true),
                            .wrongType(path: "models.encoder.inputs[0].shape[1]", expected: "an integer or a string"))
    }

    // MARK: Labels

    func testLabels() throws {
        assertManifestError(try mutatedManifest(["labels", 1], "finance"), .duplicateLabel("finance"))
        assertManifestError(try mutatedManifest(["labels"], ["only"]), .tooFewLabels(1))
        assertManifestError(try mutatedManifest(["labels"], [String]()), .tooFewLabels(0))
        assertManifestError(try mutatedManifest(["labels", 3], ""), .emptyLabel(index: 3))
        XCTAssertEqual(BundleManifestError.duplicateLabel("finance").description,
                       "BundleManifest: label \"finance\" appears more than once in labels")
    }

    // MARK: sha256 and files

    func testFileEntries() throws {
        let upper = String(repeating: "A", count: 64)
        assertManifestError(try mutatedManifest(["files", "vocab.txt", "sha256"], upper),
                            .invalidSHA256(path: "files.vocab.txt.sha256", value: upper))
        assertManifestError(try mutatedManifest(["files", "vocab.txt", "sha256"], "abc123"),
                            .invalidSHA256(path: "files.vocab.txt.sha256", value: "abc123"))
        assertManifestError(try mutatedManifest(["student", "config_sha256"], "not-a-digest"),
                            .invalidSHA256(path: "student.config_sha256", value: "not-a-digest"))
        assertManifestError(try mutatedManifest(["files", "Head.mlmodel", "bytes"], -1),
                            .invalidValue(path: "files.Head.mlmodel.bytes", reason: "-1 is negative"))
        assertManifestError(try mutatedManifest(["files"], [String: Any]()), .noFiles)
        let entry: [String: Any] = ["sha256": String(repeating: "0", count: 64), "bytes": 1]
        assertManifestError(try mutatedManifest(["files", "../escape.txt"], entry), .invalidFilePath("../escape.txt"))
        assertManifestError(try mutatedManifest(["files", "/abs.txt"], entry), .invalidFilePath("/abs.txt"))
        assertManifestError(try mutatedManifest(["models", "head", "file"], "Other.mlmodel"),
                            .fileNotListed(path: "models.head.file", file: "Other.mlmodel"))
        assertManifestError(try mutatedManifest(["files", "tokenizer.json"], nil),
                            .fileNotListed(path: "tokenizer.files[0]", file: "tokenizer.json"))
        // A package is listed through the files inside it.
        XCTAssertEqual(try Fixtures.bundleManifest().files(of: .encoder), [
            "Encoder.mlpackage/Data/com.apple.CoreML/model.mlmodel",
            "Encoder.mlpackage/Data/com.apple.CoreML/weights/weight.bin",
            "Encoder.mlpackage/Manifest.json",
        ])
    }

    // MARK: Shapes and data types

    func testShapes() throws {
        assertManifestError(
            try mutatedManifest(["models", "head", "inputs", 0, "shape"], [31]),
            .invalidShape(path: "models.head.inputs[0].shape", shape: "[31]",
                          reason: "expected [32] or [1, 32]: the embedding width (student.hidden_size 32)"))
        assertManifestError(
            try mutatedManifest(["models", "head", "outputs", 0, "shape"], [5]),
            .invalidShape(path: "models.head.outputs[0].shape", shape: "[5]",
                          reason: "expected [6] or [1, 6]: one probability per label (6 labels)"))
        assertManifestError(
            try mutatedManifest(["models", "encoder", "outputs", 0, "shape"], [2, 32]),
            .invalidShape(path: "models.encoder.outputs[0].shape", shape: "[2, 32]",
                          reason: "expected [32] or [1, 32]: the embedding width (student.hidden_size 32)"))
        assertManifestError(
            try mutatedManifest(["models", "encoder", "inputs", 0, "shape"], [1, 16]),
            .invalidShape(path: "models.encoder.inputs[0].shape", shape: "[1, 16]",
                          reason: "the length 16 is not one sequence_length accepts"))
        assertManifestError(
            try mutatedManifest(["models", "encoder", "inputs", 0, "shape"], [2, 32]),
            .invalidShape(path: "models.encoder.inputs[0].shape", shape: "[2, 32]", reason: "expected [length] or [1, length]"))
        assertManifestError(
            try mutatedManifest(["models", "encoder", "outputs", 1, "shape"], ["batch", 6]),
            .invalidShape(path: "models.encoder.outputs[1].shape", shape: "[\"batch\", 6]",
                          reason: "a CoreML feature needs numeric dimensions"))
        assertManifestError(
            try mutatedManifest(["models", "head", "training_inputs", 1, "shape"], [2]),
            .invalidShape(path: "models.head.training_inputs[1].shape", shape: "[2]",
                          reason: "the label input holds one class index: expected [1]"))
        assertManifestError(
            try mutatedManifest(["models", "head", "training_inputs", 0, "shape"], [0]),
            .invalidShape(path: "models.head.training_inputs[0].shape", shape: "[0]", reason: "every dimension must be positive"))
        assertManifestError(
            try mutatedManifest(["models", "encoder", "inputs", 1, "shape"], [32]),
            .invalidShape(path: "models.encoder.inputs[1].shape", shape: "[32]",
                          reason: "the attention mask must have the token ids' shape [1, 32]"))
        // (hidden) and (1, hidden) are both fine.
        XCTAssertNoThrow(try decodeManifest(try mutatedManifest([
            (["models", "head", "inputs", 0, "shape"], [1, 32]),
            (["models", "head", "training_inputs", 0, "shape"], [1, 32]),
            (["models", "encoder", "outputs", 0, "shape"], [32]),
        ])))
    }

    func testDataTypes() throws {
        assertManifestError(try mutatedManifest(["models", "head", "training_inputs", 1, "dtype"], "float32"),
                            .invalidDataType(path: "models.head.training_inputs[1].dtype", found: "float32",
                                             expected: ["int32"]))
        assertManifestError(try mutatedManifest(["models", "encoder", "inputs", 0, "dtype"], "int64"),
                            .invalidDataType(path: "models.encoder.inputs[0].dtype", found: "int64", expected: ["int32"]))
        assertManifestError(try mutatedManifest(["models", "head", "outputs", 0, "dtype"], "int32"),
                            .invalidDataType(path: "models.head.outputs[0].dtype", found: "int32",
                                             expected: ["float32", "float16", "float64"]))
    }

    // MARK: Models

    func testHeadTrainingInputsAndLoss() throws {
        assertManifestError(try mutatedManifest(["models", "head", "training_inputs", 1], nil),
                            .missingTrainingInput(name: "probs_true"))
        assertManifestError(try mutatedManifest(["models", "head", "training_inputs", 0, "name"], "emb"),
                            .missingTrainingInput(name: "embedding"))
        assertManifestError(try mutatedManifest(["models", "head", "probabilities_output"], "probabilities"),
                            .featureNotFound(model: "head", kind: "output", name: "probabilities"))
        assertManifestError(try mutatedManifest(["models", "encoder", "embedding_output"], "pooled"),
                            .featureNotFound(model: "encoder", kind: "output", name: "pooled"))
        assertManifestError(try mutatedManifest(["models", "head", "embedding_input"], "x"),
                            .featureNotFound(model: "head", kind: "input", name: "x"))
        assertManifestError(try mutatedManifest(["models", "head", "loss", "target"], "other"),
                            .inconsistent(path: "models.head.loss.target",
                                          reason: "\"other\" differs from label_input \"probs_true\""))
        assertManifestError(try mutatedManifest(["models", "head", "epochs", "default"], 500),
                            .inconsistent(path: "models.head.epochs.default",
                                          reason: "500 is not in allowed \(Array(1...200))"))
        assertManifestError(try mutatedManifest(["models", "head", "format"], "mlprogram"),
                            .invalidValue(path: "models.head.format", reason: "\"mlprogram\", expected \"neuralnetwork\""))
        assertManifestError(try mutatedManifest(["models", "encoder", "inputs", 1], nil),
                            .invalidValue(path: "models.encoder.inputs",
                                          reason: "1 inputs, expected 2 (token ids, then attention mask)"))
    }

    // MARK: Lengths and tokenizer

    func testMaxLengths() throws {
        assertManifestError(try mutatedManifest(["max_length"], 1), .invalidMaxLength(path: "max_length", value: 1))
        assertManifestError(try mutatedManifest(["sequence_length", "min"], 1),
                            .invalidMaxLength(path: "sequence_length.min", value: 1))
        assertManifestError(try mutatedManifest(["tokenizer", "max_length"], 16),
                            .inconsistent(path: "tokenizer.max_length", reason: "16 differs from max_length 32"))
        assertManifestError(try mutatedManifest(["sequence_length", "max"], 64),
                            .inconsistent(path: "sequence_length.max", reason: "64 differs from max_length 32"))
    }

    func testTokenizerSettings() throws {
        assertManifestError(try mutatedManifest(["tokenizer", "clean_text"], false),
                            .unsupportedTokenizerSetting(name: "clean_text", value: "false",
                                                         reason: "MLXEdgeKit's BertTokenizer always cleans text"))
        assertManifestError(try mutatedManifest(["tokenizer", "vocab_file"], NSNull()),
                            .unsupportedTokenizerSetting(name: "vocab_file", value: "null",
                                                         reason: "MLXEdgeKit's BertTokenizer needs a WordPiece vocab.txt"))
        assertManifestError(try mutatedManifest(["tokenizer", "vocab_file"], "vocab2.txt"),
                            .fileNotListed(path: "tokenizer.vocab_file", file: "vocab2.txt"))
        assertManifestError(try mutatedManifest(["tokenizer", "cls_id"], 226),
                            .invalidValue(path: "tokenizer.cls_id", reason: "226 is outside the vocabulary (226 tokens)"))
        assertManifestError(try mutatedManifest(["tokenizer", "sep_id"], 2),
                            .inconsistent(path: "tokenizer.sep_id", reason: "2 is also the cls id"))
        assertManifestError(try mutatedManifest(["tokenizer", "vocab_size"], 300),
                            .inconsistent(path: "tokenizer.vocab_size", reason: "300 differs from student.vocab_size 226"))
        assertManifestError(try mutatedManifest(["tokenizer", "truncation"], false),
                            .unsupportedTokenizerSetting(
                                name: "truncation", value: "false",
                                reason: "the encoder takes at most max_length tokens; truncation must be on"))
    }

    func testTokenizerFromTheBundle() throws {
        let m = try Fixtures.bundleManifest()
        let directory = try Fixtures.bundleDirectory()
        XCTAssertEqual(try m.vocabularyURL(in: directory).lastPathComponent, "vocab.txt")
        let config = m.tokenizerConfiguration
        XCTAssertTrue(config.doLowerCase)
        XCTAssertNil(config.stripAccents)
        XCTAssertEqual(config.maxLength, 32)
        let tokenizer = try m.makeTokenizer(bundleDirectory: directory)
        XCTAssertEqual(tokenizer.vocabularySize, 226)
        XCTAssertEqual([tokenizer.clsTokenID, tokenizer.sepTokenID, tokenizer.padTokenID, tokenizer.unkTokenID], [2, 3, 0, 1])
        let encoding = try tokenizer.encode("Pay the credit card bill")
        XCTAssertEqual(encoding.inputIds.count, 32)
        XCTAssertEqual(encoding.inputIds.first, 2)
        XCTAssertEqual(encoding.inputIds[encoding.tokenCount - 1], 3)
        XCTAssertEqual(tokenizer.tokenize("PAY the Bill"), tokenizer.tokenize("pay the bill"), "do_lower_case")
    }

    func testTokenizerMismatchWithTheVocabulary() throws {
        let m = try Fixtures.bundleManifest()
        let copy = try Fixtures.copyOfBundle(self)
        let vocab = copy.appendingPathComponent("vocab.txt")
        var lines = try String(contentsOf: vocab, encoding: .utf8).split(separator: "\n", omittingEmptySubsequences: false)
        lines.removeLast(2) // last token and the empty string after the final newline
        try (lines.joined(separator: "\n") + "\n").write(to: vocab, atomically: true, encoding: .utf8)
        XCTAssertThrowsError(try m.makeTokenizer(bundleDirectory: copy)) {
            XCTAssertEqual($0 as? BundleManifestError,
                           .tokenizerMismatch("vocab.txt has 225 tokens, tokenizer.vocab_size is 226"))
        }
        var shifted = m
        shifted.tokenizer.padID = 4
        XCTAssertThrowsError(try shifted.makeTokenizer(bundleDirectory: try Fixtures.bundleDirectory())) {
            XCTAssertEqual($0 as? BundleManifestError,
                           .tokenizerMismatch("tokenizer.pad_id is 4, the vocabulary has it at 0"))
        }
        try FileManager.default.removeItem(at: vocab)
        XCTAssertThrowsError(try m.makeTokenizer(bundleDirectory: copy)) {
            guard case .vocabularyFileNotFound = $0 as? BertTokenizerError else { return XCTFail("\($0)") }
        }
    }

    // MARK: File verification

    func testVerifiesTheFixturesFiles() throws {
        let m = try Fixtures.bundleManifest()
        let directory = try Fixtures.bundleDirectory()
        XCTAssertEqual(m.fileProblems(in: directory, only: m.tokenizer.files), [])
        XCTAssertNoThrow(try m.verifyFiles(in: directory, only: m.tokenizer.files))
        // The fixture carries no models: those are reported missing, and nothing else.
        let problems = m.fileProblems(in: directory)
        let modelFiles = m.files.keys.filter { !m.tokenizer.files.contains($0) }.sorted()
        XCTAssertEqual(problems, modelFiles.map { BundleFileProblem(path: $0, kind: .missing) })
        XCTAssertThrowsError(try m.verifyFiles(in: directory)) {
            guard case let .fileVerificationFailed(list) = $0 as? BundleManifestError else { return XCTFail("\($0)") }
            XCTAssertEqual(list.count, modelFiles.count)
            XCTAssertTrue("\($0)".contains("Encoder.mlpackage/Data/com.apple.CoreML/model.mlmodel is missing"), "\($0)")
        }
    }

    func testDetectsChangedFiles() throws {
        let m = try Fixtures.bundleManifest()
        let copy = try Fixtures.copyOfBundle(self)
        let config = copy.appendingPathComponent("tokenizer_config.json")
        var bytes = [UInt8](try Data(contentsOf: config))
        bytes[bytes.count / 2] ^= 0x01 // same size, different content
        try Data(bytes).write(to: config)
        try Data("extra".utf8).write(to: copy.appendingPathComponent("tokenizer.json"), options: .atomic)
        let problems = m.fileProblems(in: copy, only: m.tokenizer.files + ["unlisted.bin"])
        XCTAssertEqual(problems.count, 3)
        XCTAssertEqual(problems[0], BundleFileProblem(path: "tokenizer.json",
                                                      kind: .sizeMismatch(expected: m.files["tokenizer.json"]!.bytes, actual: 5)))
        XCTAssertEqual(problems[1].path, "tokenizer_config.json")
        guard case let .digestMismatch(expected, actual) = problems[1].kind else { return XCTFail("\(problems[1])") }
        XCTAssertEqual(expected, m.files["tokenizer_config.json"]!.sha256)
        XCTAssertNotEqual(actual, expected)
        XCTAssertTrue(SHA256Hasher.isHexDigest(actual))
        XCTAssertEqual(problems[2], BundleFileProblem(path: "unlisted.bin", kind: .notListed))
    }

    func testFilesNeededOnDevice() throws {
        let m = try Fixtures.bundleManifest()
        XCTAssertEqual(m.filesNeededOnDevice, [
            "Encoder.mlpackage/Data/com.apple.CoreML/model.mlmodel",
            "Encoder.mlpackage/Data/com.apple.CoreML/weights/weight.bin",
            "Encoder.mlpackage/Manifest.json",
            "Head.mlmodel",
            "vocab.txt",
        ])
        XCTAssertEqual(m.files(of: .head), ["Head.mlmodel"])
        XCTAssertEqual(m.files(of: .onnx), [], "not exported")
        // A lean bundle's files are the app's files, the tokenizer's others and nothing more.
        let others = Set(m.files.keys).subtracting(m.filesNeededOnDevice)
        XCTAssertEqual(others, ["tokenizer.json", "tokenizer_config.json"])
    }

    // MARK: Digests and cache names

    func testModelDigests() throws {
        let m = try Fixtures.bundleManifest()
        let digests = BundleManifest.ModelKind.allCases.map(m.modelDigest)
        XCTAssertEqual(Set(digests).count, 2)
        XCTAssertTrue(digests.allSatisfy(SHA256Hasher.isHexDigest))
        XCTAssertEqual(m.modelDigest(.head), try Fixtures.bundleManifest().modelDigest(.head), "deterministic")
        XCTAssertEqual(m.compiledModelName(.head), "Head-\(m.modelDigest(.head).prefix(16)).mlmodelc")
        XCTAssertTrue(m.compiledModelName(.encoder).hasPrefix("Encoder-"))

        let head = m.compiledModelName(.head)
        let names = [head, "Head-0123456789abcdef.mlmodelc", "Head-old.mlmodelc", "Encoder-0123456789abcdef.mlmodelc",
                     ".1234.partial", "Headline-0123456789abcdef.mlmodelc", "notes.txt"]
        XCTAssertEqual(m.staleCompiledModelNames(.head, among: names), ["Head-0123456789abcdef.mlmodelc"])
        XCTAssertEqual(m.staleCompiledModelNames(.encoder, among: names), ["Encoder-0123456789abcdef.mlmodelc"])

        var changed = m
        changed.files["Head.mlmodel"]!.sha256 = String(repeating: "0", count: 64)
        XCTAssertNotEqual(changed.modelDigest(.head), m.modelDigest(.head))
        XCTAssertEqual(changed.modelDigest(.encoder), m.modelDigest(.encoder))
        XCTAssertNotEqual(changed.contentDigest, m.contentDigest)
    }

    // MARK: Loading from a folder

    func testLoadFromAFolder() throws {
        let empty = try makeTemporaryDirectory(self)
        XCTAssertThrowsError(try BundleManifest.load(from: empty)) {
            guard case .manifestNotFound = $0 as? BundleManifestError else { return XCTFail("\($0)") }
        }
        let copy = try Fixtures.copyOfBundle(self)
        try mutatedManifest(["labels", 1], "finance").write(to: copy.appendingPathComponent("manifest.json"))
        XCTAssertThrowsError(try BundleManifest.load(from: copy)) {
            XCTAssertEqual($0 as? BundleManifestError, .duplicateLabel("finance"))
        }
        // Without validation the manifest is only decoded.
        let decoded = try BundleManifest(jsonData: try mutatedManifest(["labels", 1], "finance"), validate: false)
        XCTAssertEqual(decoded.labels[1], "finance")
        XCTAssertThrowsError(try decoded.io())
    }

    func testCorrectionsUseTheManifestsLabels() throws {
        let m = try Fixtures.bundleManifest()
        let store = try CorrectionStore(fileURL: try makeTemporaryDirectory(self).appendingPathComponent("c.json"),
                                        allowedLabels: m.labels)
        XCTAssertNoThrow(try store.add(text: "pay rent", label: "finance"))
        XCTAssertThrowsError(try store.add(text: "pay rent", label: "positive")) {
            XCTAssertEqual($0 as? CorrectionStoreError, .invalidLabel(label: "positive", allowed: m.labels))
        }
    }
}
