import Foundation

/// A classifier's answer: the best label and every label's probability, best first.
public struct ClassificationResult: Sendable, Equatable {
    public struct Score: Sendable, Equatable {
        public var label: String
        public var probability: Double
    }

    /// Label probabilities, highest first (ties: label order as given / alphabetical).
    public let scores: [Score]

    public var label: String { scores[0].label }
    public var confidence: Double { scores[0].probability }

    public func probability(of label: String) -> Double? {
        scores.first { $0.label == label }?.probability
    }

    /// From a label → probability dictionary (a CoreML classifier's probabilities output).
    /// Returns nil when empty.
    public init?(probabilities: [String: Double]) {
        guard !probabilities.isEmpty else { return nil }
        scores = probabilities
            .map { Score(label: $0.key, probability: $0.value) }
            .sorted { $0.probability != $1.probability ? $0.probability > $1.probability : $0.label < $1.label }
    }

    /// From per-class values in `labels` order. With `softmax`, `values` are logits.
    /// Returns nil when the counts differ or there are no labels.
    public init?(values: [Double], labels: [String], softmax: Bool = false) {
        guard !labels.isEmpty, values.count == labels.count else { return nil }
        var probabilities = values
        if softmax {
            let peak = values.max() ?? 0
            let exps = values.map { Foundation.exp($0 - peak) }
            let total = exps.reduce(0, +)
            probabilities = exps.map { $0 / total }
        }
        scores = zip(labels, probabilities).enumerated()
            .sorted { $0.element.1 != $1.element.1 ? $0.element.1 > $1.element.1 : $0.offset < $1.offset }
            .map { Score(label: $0.element.0, probability: $0.element.1) }
    }
}
