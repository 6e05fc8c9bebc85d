import Foundation
import XCTest
@testable import MLXEdgeKit

/// The pure side of EdgeClassifier / OnDeviceUpdater: which names, shapes and data types the
/// MLMultiArrays get, all from the manifest fixture.
final class BundleIOTests: XCTestCase {
    private func io(_ changes: [([JSONKey], Any?)] = []) throws -> BundleIO {
        try decodeManifest(try mutatedManifest(changes)).io()
    }

    private func tokenizer() throws -> any TextTokenizer {
        try Fixtures.bundleManifest().makeTokenizer(bundleDirectory: try Fixtures.bundleDirectory())
    }

    func testFeaturesFromTheFixture() throws {
        let io = try self.io()
        XCTAssertEqual(io.labels, BundleManifestTests.labels)
        XCTAssertEqual(io.embeddingDimension, 32)
        XCTAssertEqual(io.tokenIDs, .init(name: "input_ids", shape: [1, 32], dataType: .int32))
        XCTAssertEqual(io.attentionMask, .init(name: "attention_mask", shape: [1, 32], dataType: .int32))
        XCTAssertEqual(io.encoderEmbedding, .init(name: "embedding", shape: [1, 32], dataType: .float32))
        XCTAssertEqual(io.headEmbedding, .init(name: "embedding", shape: [32], dataType: .float32))
        XCTAssertEqual(io.headProbabilities, .init(name: "probs", shape: [6], dataType: .float32))
        XCTAssertEqual(io.trainingEmbedding, .init(name: "embedding", shape: [32], dataType: .float32))
        XCTAssertEqual(io.trainingLabel, .init(name: "probs_true", shape: [1], dataType: .int32))
        XCTAssertEqual(io.updateSettings.epochs.defaultValue, 20)
        XCTAssertEqual(io.updateSettings.optimizer, .sgd)
        XCTAssertTrue(io.updateSettings.shuffle)
        XCTAssertEqual(io.requiredFeatureNames(.encoder).inputs, ["input_ids", "attention_mask"])
        XCTAssertEqual(io.requiredFeatureNames(.head).trainingInputs, ["embedding", "probs_true"])
    }

    func testEncoderInputsAtTheFixedLength() throws {
        let io = try self.io()
        let tokenizer = try tokenizer()
        let inputs = try io.encoderInputs(for: "Pay the credit card bill", tokenizer: tokenizer)
        XCTAssertEqual(inputs.map(\.name), ["input_ids", "attention_mask"])
        XCTAssertEqual(inputs.map(\.shape), [[1, 32], [1, 32]])
        XCTAssertEqual(inputs.map(\.dataType), [.int32, .int32])
        let encoding = try tokenizer.encode("Pay the credit card bill", maxLength: 32)
        XCTAssertEqual(inputs[0].values, .int32(encoding.inputIds))
        XCTAssertEqual(inputs[1].values, .int32(encoding.attentionMask))
        // An encoding of another length is refused rather than silently reshaped.
        XCTAssertThrowsError(try io.encoderInputs(for: try tokenizer.encode("x", maxLength: 16))) {
            XCTAssertEqual($0 as? BundleIOError, .wrongElementCount(feature: "input_ids", expected: 32, actual: 16))
        }
    }

    func testEncoderInputsWithFlexibleLengths() throws {
        let tokenizer = try tokenizer()
        let short = "pay"
        let medium = "Email the Q3 deck to Lisa before Friday" // 10 tokens with [CLS] and [SEP]
        let long = String(repeating: "run 5km in the park ", count: 20)
        let counts = try [short, medium, long].map { try tokenizer.encode($0, maxLength: 32).tokenCount }
        XCTAssertEqual(counts, [3, 10, 32])

        let range = try io(BundleManifestTests.rangeChanges)
        let rangeShapes = try [short, medium, long].map { try range.encoderInputs(for: $0, tokenizer: tokenizer)[0].shape }
        XCTAssertEqual(rangeShapes, [[1, 8], [1, counts[1]], [1, 32]])

        let enumerated = try io(BundleManifestTests.enumeratedChanges)
        let inputs = try [short, medium, long].map { try enumerated.encoderInputs(for: $0, tokenizer: tokenizer) }
        XCTAssertEqual(inputs.map { $0[0].shape }, [[1, 8], [1, 16], [1, 32]])
        // Cut from the padded encoding: the real tokens and the mask are kept, padding is dropped.
        let encoding = try tokenizer.encode(medium, maxLength: 32)
        XCTAssertEqual(inputs[1][0].values, .int32(Array(encoding.inputIds.prefix(16))))
        XCTAssertEqual(inputs[1][1].values, .int32(Array(encoding.attentionMask.prefix(16))))
        XCTAssertTrue(inputs.allSatisfy { $0[0].values.count == $0[0].shape.reduce(1, *) })
    }

    /// `(768)` vs `(1, 768)`: each model gets the shape its manifest entry declares.
    func testEmbeddingShapesFollowTheManifest() throws {
        let io = try self.io()
        let embedding = (0..<32).map { Float($0) / 10 }
        XCTAssertEqual(io.encoderInputShape(length: 32), [1, 32])
        XCTAssertEqual(try io.embedding(fromEncoderOutput: embedding), embedding)
        let input = try io.headInput(embedding: embedding)
        XCTAssertEqual(input, FeatureArray(name: "embedding", shape: [32], dataType: .float32, values: .float32(embedding)))

        let batched = try self.io([
            (["models", "head", "inputs", 0, "shape"], [1, 32]),
            (["models", "head", "training_inputs", 0, "shape"], [1, 32]),
            (["models", "encoder", "inputs", 0, "shape"], [32]),
            (["models", "encoder", "inputs", 1, "shape"], [32]),
        ])
        XCTAssertEqual(try batched.headInput(embedding: embedding).shape, [1, 32])
        XCTAssertEqual(batched.encoderInputShape(length: 32), [32])
        XCTAssertEqual(try batched.encoderInputs(for: "pay", tokenizer: try tokenizer())[1].shape, [32])
        let example = try batched.makeTrainingBatch(examples: [(embedding, "work")]).examples[0]
        XCTAssertEqual(try batched.trainingInputs(for: example)[0].shape, [1, 32])

        XCTAssertThrowsError(try io.headInput(embedding: Array(repeating: 0, count: 31))) {
            XCTAssertEqual($0 as? BundleIOError, .wrongElementCount(feature: "embedding", expected: 32, actual: 31))
        }
        XCTAssertThrowsError(try io.headInput(embedding: [.nan] + Array(repeating: 0, count: 31))) {
            XCTAssertEqual($0 as? BundleIOError, .nonFiniteValues(feature: "embedding"))
        }
        XCTAssertThrowsError(try io.embedding(fromEncoderOutput: Array(repeating: 0, count: 64))) {
            XCTAssertEqual($0 as? BundleIOError, .wrongElementCount(feature: "embedding", expected: 32, actual: 64))
        }
    }

    func testClassificationFromThePlainProbabilityArray() throws {
        let io = try self.io()
        let result = try io.classification(fromHeadOutput: [0.05, 0.1, 0.05, 0.6, 0.1, 0.1])
        XCTAssertEqual(result.label, "study")
        XCTAssertEqual(result.confidence, 0.6)
        XCTAssertEqual(result.scores.map(\.label), ["study", "health", "travel", "work", "finance", "life"])
        XCTAssertThrowsError(try io.classification(fromHeadOutput: [0.5, 0.5])) {
            XCTAssertEqual($0 as? BundleIOError, .wrongElementCount(feature: "probs", expected: 6, actual: 2))
        }
    }

    func testTrainingBatchAndInputs() throws {
        let io = try self.io()
        let corrections = [Correction(embedding: Array(repeating: 0.5, count: 32), label: "travel"),
                           Correction(text: "pay rent", label: "finance")]
        let batch = try io.makeTrainingBatch(corrections: corrections, embed: { _ in Array(repeating: 1, count: 32) })
        XCTAssertEqual(batch.embeddingInputName, "embedding")
        XCTAssertEqual(batch.labelInputName, "probs_true")
        XCTAssertEqual(batch.labels, io.labels)
        XCTAssertEqual(batch.examples.map(\.labelIndex), [4, 0])
        XCTAssertNoThrow(try io.check(batch))

        let features = try io.trainingInputs(for: batch.examples[0])
        XCTAssertEqual(features, [
            FeatureArray(name: "embedding", shape: [32], dataType: .float32, values: .float32(Array(repeating: 0.5, count: 32))),
            FeatureArray(name: "probs_true", shape: [1], dataType: .int32, values: .int32([4])),
        ])

        // A correction must use one of the manifest's labels.
        XCTAssertThrowsError(try io.makeTrainingBatch(examples: [(Array(repeating: 0, count: 32), "positive")])) {
            XCTAssertEqual($0 as? TrainingBatchError, .unknownLabel(index: 0, label: "positive", allowed: io.labels))
        }
        let reordered = try TrainingBatch(examples: [(Array(repeating: 0, count: 32), "work")], labels: io.labels.reversed(),
                                          embeddingInputName: "embedding", labelInputName: "probs_true", embeddingDimension: 32)
        XCTAssertThrowsError(try io.check(reordered)) {
            guard case .batchMismatch = $0 as? BundleIOError else { return XCTFail("\($0)") }
        }
        let renamed = try TrainingBatch(examples: [(Array(repeating: 0, count: 32), "work")], labels: io.labels,
                                        embeddingInputName: "embedding", labelInputName: "label", embeddingDimension: 32)
        XCTAssertThrowsError(try io.check(renamed)) {
            XCTAssertEqual($0 as? BundleIOError, .batchMismatch(
                "its inputs \"embedding\", \"label\" differ from the head's \"embedding\", \"probs_true\""))
        }
        let narrow = try TrainingBatch(examples: [([0, 0], "work")], labels: io.labels, embeddingInputName: "embedding",
                                       labelInputName: "probs_true", embeddingDimension: 2)
        XCTAssertThrowsError(try io.check(narrow))
        XCTAssertThrowsError(try io.trainingInputs(for: narrow.examples[0])) {
            XCTAssertEqual($0 as? BundleIOError, .wrongElementCount(feature: "embedding", expected: 32, actual: 2))
        }
    }

    func testUpdateOptionsWithinTheHeadsRanges() throws {
        let io = try self.io()
        XCTAssertNoThrow(try io.checkUpdateOptions(epochs: nil, learningRate: nil, miniBatchSize: nil))
        XCTAssertNoThrow(try io.checkUpdateOptions(epochs: 10, learningRate: 0.01, miniBatchSize: 4))
        XCTAssertThrowsError(try io.checkUpdateOptions(epochs: 500, learningRate: nil, miniBatchSize: nil)) {
            XCTAssertEqual($0 as? BundleIOError, .updateOptionOutOfRange(option: "epochs", value: "500", allowed: "1...200"))
        }
        XCTAssertThrowsError(try io.checkUpdateOptions(epochs: nil, learningRate: nil, miniBatchSize: 3)) {
            XCTAssertEqual($0 as? BundleIOError, .updateOptionOutOfRange(option: "mini-batch size", value: "3",
                                                                         allowed: "1, 2, 4, 8, 16, 32, 64"))
        }
        XCTAssertThrowsError(try io.checkUpdateOptions(epochs: nil, learningRate: 2, miniBatchSize: nil)) {
            XCTAssertEqual($0 as? BundleIOError, .updateOptionOutOfRange(option: "learning rate", value: "2.0",
                                                                         allowed: "1e-05...1.0"))
        }
    }

    func testLoadedModelsMustHaveTheManifestsFeatures() throws {
        let io = try self.io()
        XCTAssertNoThrow(try io.checkModel(.encoder, inputNames: ["input_ids", "attention_mask"],
                                           outputNames: ["embedding", "logits"]))
        XCTAssertNoThrow(try io.checkModel(.head, inputNames: ["embedding"], outputNames: ["probs"],
                                           trainingInputNames: ["embedding", "probs_true"]))
        XCTAssertThrowsError(try io.checkModel(.encoder, inputNames: ["input_ids", "attention_mask"],
                                               outputNames: ["logits"])) {
            XCTAssertEqual($0 as? BundleIOError, .modelMismatch(model: "encoder", missing: ["embedding"]))
        }
        // A classifier-style head (probabilities as a dictionary output) is not this bundle's head.
        XCTAssertThrowsError(try io.checkModel(.head, inputNames: ["embedding"], outputNames: ["classProbability", "label"],
                                               trainingInputNames: ["embedding", "label"])) {
            XCTAssertEqual($0 as? BundleIOError, .modelMismatch(model: "head", missing: ["probs", "probs_true"]))
        }
    }

    func testInvalidManifestHasNoIO() throws {
        let manifest = try BundleManifest(jsonData: try mutatedManifest(["models", "head", "training_inputs", 1], nil),
                                          validate: false)
        XCTAssertThrowsError(try BundleIO(manifest: manifest)) {
            XCTAssertEqual($0 as? BundleManifestError, .missingTrainingInput(name: "probs_true"))
        }
    }
}
