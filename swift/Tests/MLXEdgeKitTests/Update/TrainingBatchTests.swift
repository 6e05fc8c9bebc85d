import Foundation
import XCTest
@testable import MLXEdgeKit

final class TrainingBatchTests: XCTestCase {
    private let labels = ["negative", "neutral", "positive"]

    private func batch(_ examples: [(embedding: [Float], label: String)], dimension: Int = 4) throws -> TrainingBatch {
        try TrainingBatch(examples: examples, labels: labels, embeddingInputName: "embedding",
                          labelInputName: "probs_true", embeddingDimension: dimension)
    }

    func testShapesAndLabelIndices() throws {
        let batch = try batch([([0, 1, 2, 3], "positive"), ([4, 5, 6, 7], "negative"), ([1, 1, 1, 1], "neutral")])
        XCTAssertEqual(batch.count, 3)
        XCTAssertEqual(batch.embeddingShape, [4])
        XCTAssertEqual(batch.labelShape, [1])
        XCTAssertEqual(batch.embeddingInputName, "embedding")
        XCTAssertEqual(batch.labelInputName, "probs_true")
        XCTAssertEqual(batch.examples.map(\.labelIndex), [2, 0, 1])
        XCTAssertEqual(batch.examples[1].embedding, [4, 5, 6, 7])
        XCTAssertTrue(batch.examples.allSatisfy { $0.embedding.count == batch.embeddingDimension })
    }

    func testRejectsWrongDimension() {
        XCTAssertThrowsError(try batch([([0, 1, 2, 3], "positive"), ([0, 1, 2], "negative")])) { error in
            XCTAssertEqual(error as? TrainingBatchError, .wrongEmbeddingDimension(index: 1, expected: 4, actual: 3))
            XCTAssertTrue("\(error)".contains("dimension 3, expected 4"))
        }
        XCTAssertThrowsError(try batch([(Array(repeating: 0, count: 385), "positive")], dimension: 384)) {
            XCTAssertEqual($0 as? TrainingBatchError, .wrongEmbeddingDimension(index: 0, expected: 384, actual: 385))
        }
    }

    func testRejectsBadInputs() {
        XCTAssertThrowsError(try batch([])) { XCTAssertEqual($0 as? TrainingBatchError, .emptyBatch) }
        XCTAssertThrowsError(try batch([([0, 1, 2, 3], "great")])) {
            XCTAssertEqual($0 as? TrainingBatchError, .unknownLabel(index: 0, label: "great", allowed: self.labels))
        }
        XCTAssertThrowsError(try batch([([0, .infinity, 2, 3], "positive")])) {
            XCTAssertEqual($0 as? TrainingBatchError, .nonFiniteEmbedding(index: 0))
        }
        XCTAssertThrowsError(try batch([([0], "positive")], dimension: 0)) {
            XCTAssertEqual($0 as? TrainingBatchError, .invalidEmbeddingDimension(0))
        }
        XCTAssertThrowsError(try TrainingBatch(examples: [([0], "a")], labels: [], embeddingInputName: "e",
                                               labelInputName: "l", embeddingDimension: 1)) {
            XCTAssertEqual($0 as? TrainingBatchError, .emptyLabelList)
        }
        XCTAssertThrowsError(try TrainingBatch(examples: [([0], "a")], labels: ["a", "a"], embeddingInputName: "e",
                                               labelInputName: "l", embeddingDimension: 1)) {
            XCTAssertEqual($0 as? TrainingBatchError, .duplicateLabel("a"))
        }
        XCTAssertThrowsError(try TrainingBatch(examples: [([0], "a")], labels: ["a"], embeddingInputName: "x",
                                               labelInputName: "x", embeddingDimension: 1)) {
            XCTAssertEqual($0 as? TrainingBatchError, .invalidInputNames(embedding: "x", label: "x"))
        }
    }

    func testFromCorrections() throws {
        let corrections = [
            Correction(embedding: [1, 0], label: "positive"),
            Correction(text: "hello", label: "neutral"),
            Correction(text: "with cached", embedding: [0, 1], label: "negative"),
        ]
        XCTAssertThrowsError(try TrainingBatch(corrections: corrections, labels: labels, embeddingInputName: "embedding",
                                               labelInputName: "probs_true", embeddingDimension: 2)) {
            XCTAssertEqual($0 as? TrainingBatchError, .missingEmbedding(index: 1))
        }
        var embedded: [String] = []
        let batch = try TrainingBatch(corrections: corrections, labels: labels, embeddingInputName: "embedding",
                                      labelInputName: "probs_true", embeddingDimension: 2,
                                      embed: { text in embedded.append(text); return [0.5, 0.5] })
        XCTAssertEqual(embedded, ["hello"])
        XCTAssertEqual(batch.examples.map(\.embedding), [[1, 0], [0.5, 0.5], [0, 1]])
        XCTAssertEqual(batch.examples.map(\.labelIndex), [2, 1, 0])
    }

    func testFromCorrectionStore() throws {
        let file = try makeTemporaryDirectory(self).appendingPathComponent("c.json")
        let store = try CorrectionStore(fileURL: file, allowedLabels: labels)
        try store.add(embedding: [1, 2, 3], label: "positive")
        try store.add(embedding: [1, 2, 3], label: "negative")
        try store.add(embedding: [3, 2, 1], label: "neutral")
        let batch = try TrainingBatch(corrections: store.corrections, labels: store.allowedLabels,
                                      embeddingInputName: "embedding", labelInputName: "probs_true",
                                      embeddingDimension: 3)
        XCTAssertEqual(batch.examples.map(\.labelIndex), [0, 1])
    }
}

final class ClassificationResultTests: XCTestCase {
    func testFromProbabilityDictionary() throws {
        let result = try XCTUnwrap(ClassificationResult(probabilities: ["a": 0.2, "b": 0.7, "c": 0.1]))
        XCTAssertEqual(result.label, "b")
        XCTAssertEqual(result.confidence, 0.7)
        XCTAssertEqual(result.scores.map(\.label), ["b", "a", "c"])
        XCTAssertEqual(result.probability(of: "c"), 0.1)
        XCTAssertNil(result.probability(of: "zzz"))
        XCTAssertNil(ClassificationResult(probabilities: [:]))
    }

    func testFromValuesWithSoftmax() throws {
        let result = try XCTUnwrap(ClassificationResult(values: [1, 3, 2], labels: ["x", "y", "z"], softmax: true))
        XCTAssertEqual(result.label, "y")
        XCTAssertEqual(result.scores.map(\.probability).reduce(0, +), 1, accuracy: 1e-12)
        XCTAssertEqual(result.confidence, exp(3) / (exp(1) + exp(2) + exp(3)), accuracy: 1e-12)
        let tie = try XCTUnwrap(ClassificationResult(values: [0.5, 0.5], labels: ["first", "second"]))
        XCTAssertEqual(tie.label, "first")
        XCTAssertNil(ClassificationResult(values: [1], labels: ["a", "b"]))
    }
}
