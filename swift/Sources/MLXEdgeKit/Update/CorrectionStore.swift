import Foundation

/// One user correction: an input (text, embedding, or both) and the label the user chose.
public struct Correction: Codable, Equatable, Sendable {
    /// The text the user corrected, if known.
    public var text: String?
    /// The encoder embedding of the input, if known (what the head trains on).
    public var embedding: [Float]?
    public var label: String
    public var date: Date

    public init(text: String? = nil, embedding: [Float]? = nil, label: String, date: Date = Date()) {
        self.text = text
        self.embedding = embedding
        self.label = label
        self.date = date
    }

    private enum CodingKeys: String, CodingKey { case text, embedding, label, date }

    public init(from decoder: Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        text = try container.decodeIfPresent(String.self, forKey: .text)
        // Stored as Double: every Float is exactly representable, and JSON decoders
        // reject Float values near Float.greatestFiniteMagnitude after rounding.
        embedding = try container.decodeIfPresent([Double].self, forKey: .embedding)?.map { Float($0) }
        label = try container.decode(String.self, forKey: .label)
        date = try container.decode(Date.self, forKey: .date)
    }

    public func encode(to encoder: Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encodeIfPresent(text, forKey: .text)
        try container.encodeIfPresent(embedding?.map { Double($0) }, forKey: .embedding)
        try container.encode(label, forKey: .label)
        try container.encode(date, forKey: .date)
    }

    /// Identity used for de-duplication: the text (exact Unicode scalars, the same notion of
    /// "same text" the tokenizer has) when present, otherwise the embedding's exact bits.
    enum Key: Hashable {
        case text([UInt8])
        case embedding([UInt32])
    }

    var key: Key? {
        if let text { return .text(Array(text.utf8)) }
        if let embedding { return .embedding(embedding.map(\.bitPattern)) }
        return nil
    }
}

/// Errors thrown by ``CorrectionStore``.
public enum CorrectionStoreError: Error, Equatable, Sendable, CustomStringConvertible, LocalizedError {
    case invalidLabel(label: String, allowed: [String])
    case emptyLabelList
    case duplicateLabel(String)
    case invalidMaxCount(Int)
    /// Neither a text nor a non-empty embedding.
    case emptyInput
    case nonFiniteEmbedding
    case unreadableFile(path: String, reason: String)
    case unsupportedFormatVersion(Int)

    public var description: String {
        switch self {
        case let .invalidLabel(label, allowed):
            return "CorrectionStore: label \"\(label)\" is not allowed; allowed labels: "
                + allowed.map { "\"\($0)\"" }.joined(separator: ", ")
        case .emptyLabelList: return "CorrectionStore: the allowed label list is empty"
        case let .duplicateLabel(label): return "CorrectionStore: label \"\(label)\" appears twice in the allowed labels"
        case let .invalidMaxCount(n): return "CorrectionStore: maxCount must be at least 1, got \(n)"
        case .emptyInput: return "CorrectionStore: a correction needs a text or a non-empty embedding"
        case .nonFiniteEmbedding: return "CorrectionStore: the embedding contains NaN or infinity"
        case let .unreadableFile(path, reason): return "CorrectionStore: cannot read \(path): \(reason)"
        case let .unsupportedFormatVersion(v): return "CorrectionStore: unsupported file format version \(v)"
        }
    }

    public var errorDescription: String? { description }
}

/// The user's corrections, persisted as JSON (written atomically: temp file + rename).
///
/// - De-duplicated: the same text (or, without text, the same embedding) keeps only its
///   newest label, moved to the newest position.
/// - Capped: beyond `maxCount`, the oldest corrections are dropped.
/// - Labels are validated against the allowed list given at init.
///
/// Every mutation is saved before it becomes visible; if saving fails, nothing changes.
/// Thread-safe. Pure Foundation.
public final class CorrectionStore: @unchecked Sendable {
    public static let formatVersion = 1

    public let fileURL: URL
    public let allowedLabels: [String]
    public let maxCount: Int
    /// Stored corrections whose label is no longer allowed, dropped when loading.
    public let discardedOnLoad: Int

    private let lock = NSLock()
    private var _corrections: [Correction]

    private struct File: Codable {
        var formatVersion: Int
        var corrections: [Correction]
    }

    /// Opens (or starts) the store at `fileURL`.
    /// - Throws: ``CorrectionStoreError`` for an empty/duplicated label list, a bad
    ///   `maxCount`, or an existing file that cannot be decoded.
    public init(fileURL: URL, allowedLabels: [String], maxCount: Int = 1000) throws {
        guard !allowedLabels.isEmpty else { throw CorrectionStoreError.emptyLabelList }
        var seen = Set<String>()
        for label in allowedLabels where !seen.insert(label).inserted {
            throw CorrectionStoreError.duplicateLabel(label)
        }
        guard maxCount >= 1 else { throw CorrectionStoreError.invalidMaxCount(maxCount) }
        self.fileURL = fileURL
        self.allowedLabels = allowedLabels
        self.maxCount = maxCount

        var loaded: [Correction] = []
        if FileManager.default.fileExists(atPath: fileURL.path) {
            do {
                let data = try Data(contentsOf: fileURL)
                let file = try CorrectionStore.decoder.decode(File.self, from: data)
                guard file.formatVersion == CorrectionStore.formatVersion else {
                    throw CorrectionStoreError.unsupportedFormatVersion(file.formatVersion)
                }
                loaded = file.corrections
            } catch let error as CorrectionStoreError {
                throw error
            } catch {
                throw CorrectionStoreError.unreadableFile(path: fileURL.path, reason: "\(error)")
            }
        }
        let allowed = Set(allowedLabels)
        let valid = loaded.filter { allowed.contains($0.label) && $0.key != nil }
        self.discardedOnLoad = loaded.count - valid.count
        var normalized: [Correction] = []
        for correction in valid { CorrectionStore.insert(correction, into: &normalized, maxCount: maxCount) }
        self._corrections = normalized
        AtomicFile.removeStaleTemporaries(for: fileURL)
    }

    /// All corrections, oldest first.
    public var corrections: [Correction] {
        lock.lock(); defer { lock.unlock() }
        return _corrections
    }

    public var count: Int { corrections.count }

    /// Throws ``CorrectionStoreError/invalidLabel(label:allowed:)`` unless `label` is allowed.
    public func validate(label: String) throws {
        guard allowedLabels.contains(label) else {
            throw CorrectionStoreError.invalidLabel(label: label, allowed: allowedLabels)
        }
    }

    /// Records that `text` should be labelled `label` (optionally with its embedding).
    @discardableResult
    public func add(text: String, label: String, embedding: [Float]? = nil, date: Date = Date()) throws -> Correction {
        try add(Correction(text: text, embedding: embedding, label: label, date: date))
    }

    /// Records that `text` should be labelled `label`, with the embedding `embed` computes for
    /// it (the on-device encoder). The label is checked first, so a refused correction costs
    /// no encoder run.
    @discardableResult
    public func add(text: String, label: String, embed: (String) throws -> [Float], date: Date = Date()) throws -> Correction {
        try validate(label: label)
        return try add(text: text, label: label, embedding: try embed(text), date: date)
    }

    /// Records that `embedding` should be labelled `label`.
    @discardableResult
    public func add(embedding: [Float], label: String, date: Date = Date()) throws -> Correction {
        try add(Correction(text: nil, embedding: embedding, label: label, date: date))
    }

    /// Adds a correction (replacing an older one for the same input) and saves.
    @discardableResult
    public func add(_ correction: Correction) throws -> Correction {
        try validate(label: correction.label)
        if let embedding = correction.embedding {
            guard embedding.allSatisfy(\.isFinite) else { throw CorrectionStoreError.nonFiniteEmbedding }
            if embedding.isEmpty && correction.text == nil { throw CorrectionStoreError.emptyInput }
        }
        guard correction.key != nil else { throw CorrectionStoreError.emptyInput }
        lock.lock(); defer { lock.unlock() }
        var next = _corrections
        CorrectionStore.insert(correction, into: &next, maxCount: maxCount)
        try save(next)
        _corrections = next
        return correction
    }

    /// Removes the corrections matching `predicate` and saves.
    public func removeAll(where predicate: (Correction) -> Bool) throws {
        lock.lock(); defer { lock.unlock() }
        let next = _corrections.filter { !predicate($0) }
        try save(next)
        _corrections = next
    }

    /// Removes every correction and saves.
    public func removeAll() throws {
        try removeAll(where: { _ in true })
    }

    // MARK: Internals

    /// Dedup (newest label wins, moved to the end) then cap (drop oldest).
    private static func insert(_ correction: Correction, into list: inout [Correction], maxCount: Int) {
        if let key = correction.key {
            list.removeAll { $0.key == key }
        }
        list.append(correction)
        if list.count > maxCount { list.removeFirst(list.count - maxCount) }
    }

    private func save(_ corrections: [Correction]) throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        encoder.dateEncodingStrategy = .millisecondsSince1970
        let data = try encoder.encode(File(formatVersion: CorrectionStore.formatVersion, corrections: corrections))
        try AtomicFile.write(data, to: fileURL, beforeRename: beforeRenameHook)
    }

    /// Test hook: throwing simulates a crash between the temp write and the rename.
    var beforeRenameHook: (() throws -> Void)?

    private static var decoder: JSONDecoder {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .millisecondsSince1970
        return decoder
    }
}
