import Foundation
import XCTest
@testable import MLXEdgeKit

/// A spec document as JSON objects, for building small or broken specs.
private func specJSON(pieces: [(String, Double)], normalizer: [[String: Any]] = [],
                      added: [String] = ["<s>", "<pad>", "</s>", "<unk>"]) -> [String: Any] {
    let all = [("<s>", 0.0), ("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0)] + pieces
    return [
        "format": "mlx-edge.unigram", "version": 1,
        "pieces": all.map(\.0), "scores": all.map(\.1),
        "unk_id": 3, "bos_id": 0, "eos_id": 2, "pad_id": 1,
        "added_tokens": added.enumerated().map { ["id": $0.offset, "content": $0.element] },
        "normalizer": normalizer,
        "metaspace": ["replacement": "\u{2581}", "prepend_scheme": "always", "split": true],
    ]
}

private func data(_ json: [String: Any]) throws -> Data {
    try JSONSerialization.data(withJSONObject: json)
}

/// The small vocabulary the expected values below were computed with (tokenizers 0.23.3, the same
/// Metaspace and Unigram model, no normalizer).
private let smallPieces: [(String, Double)] = [
    ("\u{2581}", -1.5), ("a", -1.0), ("b", -2.0), ("ab", -1.5), ("\u{2581}a", -1.0),
    ("\u{2581}\u{E0}", -1.0), ("\u{2581}a\u{300}", -1.0), ("xy", -3.0),
]

final class UnigramTokenizerTests: XCTestCase {
    private func small() throws -> UnigramTokenizer {
        try UnigramTokenizer(specData: try data(specJSON(pieces: smallPieces)), maxLength: 8)
    }

    func testTiesKeepTheEarliestStartAsTokenizersDoes() throws {
        // "▁ab": ▁ + ab and ▁a + b both score -3.0; tokenizers keeps the path found first.
        XCTAssertEqual(try small().tokenIDs("ab"), [4, 7])
    }

    func testPiecesAreKeyedByBytes() throws {
        let tokenizer = try small()
        XCTAssertEqual(tokenizer.tokenIDs("\u{E0}"), [9])
        XCTAssertEqual(tokenizer.tokenIDs("a\u{300}"), [10])
        XCTAssertEqual(tokenizer.id(forToken: "\u{2581}a\u{300}"), 10)
        XCTAssertEqual(tokenizer.id(forToken: "\u{2581}\u{E0}"), 9)
    }

    func testRunsOfUnknownCharactersFuseIntoOneUnk() throws {
        let tokenizer = try small()
        XCTAssertEqual(tokenizer.tokenIDs("zz"), [4, 3])
        XCTAssertEqual(tokenizer.tokenize("zqa"), ["\u{2581}", "zq", "a"])
        XCTAssertEqual(tokenizer.tokenIDs("qxyq"), [4, 3, 11, 3])
        XCTAssertEqual(tokenizer.tokenize("q\u{E0}q"), ["\u{2581}", "q\u{E0}q"])
        XCTAssertEqual(tokenizer.tokenIDs("b b"), [4, 6, 4, 6])
    }

    func testEncodeWrapsTruncatesAndPads() throws {
        let tokenizer = try small()
        XCTAssertEqual(try tokenizer.encode("ab", maxLength: nil).inputIds, [0, 4, 7, 2, 1, 1, 1, 1])
        let long = try tokenizer.encode("b b b b b", maxLength: 6)
        XCTAssertEqual(long.inputIds, [0, 4, 6, 4, 6, 2])
        XCTAssertEqual(long.attentionMask, [1, 1, 1, 1, 1, 1])
        XCTAssertTrue(long.isTruncated)
        XCTAssertEqual(try tokenizer.encode("", maxLength: 4).inputIds, [0, 2, 1, 1])
        XCTAssertThrowsError(try tokenizer.encode("a", maxLength: 1)) { error in
            XCTAssertEqual(error as? UnigramTokenizerError, .invalidMaxLength(1))
        }
    }

    func testBothTokenizersServeAsTextTokenizer() throws {
        let bert = try BertTokenizer(vocabularyURL: try Fixtures.url("vocab_uncased.txt"))
        let tokenizers: [any TextTokenizer] = [bert, try small()]
        for tokenizer in tokenizers {
            let encoding = try tokenizer.encode("ab", maxLength: 8)
            XCTAssertEqual(encoding.inputIds.first, tokenizer.clsTokenID)
            XCTAssertEqual(encoding.inputIds[encoding.tokenCount - 1], tokenizer.sepTokenID)
            XCTAssertEqual(encoding.inputIds.last, tokenizer.padTokenID)
        }
    }

    // MARK: Load time of a 250k-piece vocabulary

    /// A synthetic spec as large as multilingual-e5's (250,002 pieces, its 7,563 charsmap pairs'
    /// count), so the load time is measured on every run.
    func testA250kPieceSpecLoadsQuickly() throws {
        var pieces: [(String, Double)] = []
        pieces.reserveCapacity(250_000)
        var generator = SystemRandomNumberGenerator()
        let alphabet = Array("abcdefghijklmnopqrstuvwxyz\u{E9}\u{4E00}\u{4E01}\u{4E03}\u{3042}\u{0915}").map(String.init)
        var seen = Set<[UInt8]>()
        while pieces.count < 250_000 {
            var piece = Bool.random(using: &generator) ? "\u{2581}" : ""
            for _ in 0..<Int.random(in: 1...9, using: &generator) { piece += alphabet.randomElement(using: &generator)! }
            if seen.insert(Array(piece.utf8)).inserted { pieces.append((piece, -Double.random(in: 1...20))) }
        }
        let map: [[String]] = (0..<7563).map { i in [String(UnicodeScalar(0x3400 + i)!), "x"] }
        let spec = try data(specJSON(pieces: pieces, normalizer: [
            ["type": "charsmap", "max_key_bytes": 5, "map": map], ["type": "collapse_spaces"],
        ]))
        let start = Date()
        let tokenizer = try UnigramTokenizer(specData: spec)
        let seconds = Date().timeIntervalSince(start)
        print(String(format: "UnigramTokenizer: 250,004 pieces (%.1f MB spec) loaded in %.3f s",
                     Double(spec.count) / 1e6, seconds))
        XCTAssertEqual(tokenizer.vocabularySize, 250_004)
        XCTAssertEqual(tokenizer.id(forToken: pieces[123_456].0), Int32(4 + 123_456))
        XCTAssertFalse(tokenizer.tokenIDs("abc \u{4E00}\u{4E01} caf\u{E9}").isEmpty)
        XCTAssertLessThan(seconds, 10, "a 250k-piece spec must not hold up app start")
    }

    /// The real 250k spec, when `MLXEDGE_UNIGRAM_SPEC` names one (`write_unigram_spec` on
    /// multilingual-e5-small): load time, and the fixture's tokens (pruning keeps them equal).
    func testTheFullSpecFromTheEnvironment() throws {
        guard let path = ProcessInfo.processInfo.environment["MLXEDGE_UNIGRAM_SPEC"] else {
            throw XCTSkip("set MLXEDGE_UNIGRAM_SPEC to a full unigram_spec.json to time the real 250k vocabulary")
        }
        let start = Date()
        let tokenizer = try UnigramTokenizer(specURL: URL(fileURLWithPath: path))
        let seconds = Date().timeIntervalSince(start)
        print(String(format: "UnigramTokenizer: %d pieces from %@ loaded in %.3f s", tokenizer.vocabularySize, path, seconds))
        XCTAssertLessThan(seconds, 10)
        var same = 0
        let cases = try UnigramFixtures.fixture().cases
        for testCase in cases {
            let tokens = Array(tokenizer.tokenize(testCase.text).prefix(testCase.ids.count - 2))
            if sameBytes(tokens, Array(testCase.tokens.dropFirst().dropLast())) { same += 1 }
        }
        print("UnigramTokenizer (full spec) tokens equal tokenizers': \(same)/\(cases.count) texts")
        XCTAssertEqual(same, cases.count)
    }

    // MARK: Bad specs

    private func assertSpecError(_ json: [String: Any], _ expected: UnigramTokenizerError,
                                 file: StaticString = #filePath, line: UInt = #line) throws {
        XCTAssertThrowsError(try UnigramTokenizer(specData: try data(json)), file: file, line: line) { error in
            XCTAssertEqual(error as? UnigramTokenizerError, expected, "\(error)", file: file, line: line)
        }
    }

    private func changed(_ key: String, _ value: Any?) -> [String: Any] {
        var json = specJSON(pieces: smallPieces)
        json[key] = value
        return json
    }

    func testBadSpecsAreRefusedWithTheField() throws {
        try assertSpecError(changed("format", "something-else"), .unsupportedFormat(format: "something-else", version: 1))
        try assertSpecError(changed("version", 2), .unsupportedFormat(format: "mlx-edge.unigram", version: 2))
        try assertSpecError(changed("scores", [0.0]), .invalidSpec(field: "scores", reason: "1 scores for 12 pieces"))
        try assertSpecError(changed("unk_id", 99), .invalidSpec(field: "unk_id", reason: "99 is outside the 12 pieces"))
        try assertSpecError(changed("pieces", [String]()), .invalidSpec(field: "pieces", reason: "the list is empty"))
        try assertSpecError(changed("added_tokens", [["id": 1, "content": "<s>"]]),
                            .invalidSpec(field: "added_tokens[0]", reason: "\"<s>\" is not the piece with id 1"))
        try assertSpecError(changed("metaspace", ["replacement": "\u{2581}", "prepend_scheme": "first", "split": true]),
                            .invalidSpec(field: "metaspace", reason: "prepend_scheme first, split true: "
                                         + "MLXEdgeKit implements prepend_scheme always with split"))
        try assertSpecError(changed("metaspace", ["replacement": "__", "prepend_scheme": "always", "split": true]),
                            .invalidSpec(field: "metaspace.replacement", reason: "\"__\" is not one character"))
        try assertSpecError(changed("normalizer", [["type": "nfkc"]]),
                            .invalidSpec(field: "normalizer[0].type", reason: "\"nfkc\" is not charsmap or collapse_spaces"))
        let keyReason = "not a [key, replacement] pair with a key of 1 to 5 UTF-8 bytes and no NUL"
        for key in ["", "abcdef", "a\u{0}"] {
            try assertSpecError(changed("normalizer", [["type": "charsmap", "max_key_bytes": 5, "map": [["a", "b"], [key, "x"]]]]),
                                .invalidSpec(field: "normalizer[0].map[1]", reason: keyReason))
        }
        try assertSpecError(changed("normalizer", [["type": "charsmap", "max_key_bytes": 9, "map": [[String]]()]]),
                            .invalidSpec(field: "normalizer[0].max_key_bytes",
                                         reason: "9, expected 5 (the Rust normalizer's whole-grapheme lookup)"))
        try assertSpecError(changed("pad_id", nil), .invalidJSON(reason: "missing pad_id"))
        try assertSpecError(changed("scores", ["x"]), .invalidJSON(reason: "scores[0] is not Double"))
    }

    func testUnreadableSpecs() throws {
        XCTAssertThrowsError(try UnigramTokenizer(specData: Data("not json".utf8))) { error in
            guard case .invalidJSON = error as? UnigramTokenizerError else { return XCTFail("\(error)") }
        }
        let missing = URL(fileURLWithPath: "/nonexistent/unigram_spec.json")
        XCTAssertThrowsError(try UnigramTokenizer(specURL: missing)) { error in
            XCTAssertEqual(error as? UnigramTokenizerError, .specFileNotFound(path: missing.path))
            XCTAssertTrue("\(error)".contains("not found"))
        }
        XCTAssertThrowsError(try UnigramTokenizer(specData: try data(specJSON(pieces: smallPieces)), maxLength: 1))
    }
}
