import Foundation
import XCTest
@testable import MLXEdgeKit

final class BertTokenizerTests: XCTestCase {
    private let tinyVocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]",
                             "hello", "world", "un", "##aff", "##able", "!", ",", "a", "##b", "##c",
                             "\u{E0}", "a\u{300}", "##\u{300}", "\u{4E2D}", "\u{6587}", "x"]

    private func tiny(_ configuration: BertTokenizer.Configuration = .init()) throws -> BertTokenizer {
        try BertTokenizer(vocabulary: tinyVocab, configuration: configuration)
    }

    // MARK: Errors

    func testMissingVocabularyFileThrows() {
        let url = URL(fileURLWithPath: "/nonexistent/\(UUID().uuidString)/vocab.txt")
        XCTAssertThrowsError(try BertTokenizer(vocabularyURL: url)) { error in
            XCTAssertEqual(error as? BertTokenizerError, .vocabularyFileNotFound(path: url.path))
            XCTAssertTrue("\(error)".contains("not found"))
        }
    }

    func testVocabularyMissingSpecialTokenThrows() {
        let vocab = tinyVocab.filter { $0 != "[SEP]" }
        XCTAssertThrowsError(try BertTokenizer(vocabulary: vocab)) { error in
            XCTAssertEqual(error as? BertTokenizerError, .missingSpecialToken(role: "SEP", token: "[SEP]"))
            XCTAssertTrue("\(error)".contains("[SEP]"))
        }
        XCTAssertThrowsError(try BertTokenizer(vocabulary: tinyVocab, configuration: .init(unkToken: "<unk>"))) {
            XCTAssertEqual($0 as? BertTokenizerError, .missingSpecialToken(role: "UNK", token: "<unk>"))
        }
        XCTAssertThrowsError(try BertTokenizer(vocabulary: [])) {
            XCTAssertEqual($0 as? BertTokenizerError, .emptyVocabulary)
        }
    }

    func testMaxLengthBelowTwoThrows() throws {
        XCTAssertThrowsError(try tiny(.init(maxLength: 1))) {
            XCTAssertEqual($0 as? BertTokenizerError, .invalidMaxLength(1))
        }
        let tokenizer = try tiny()
        XCTAssertThrowsError(try tokenizer.encode("hello", maxLength: 1)) {
            XCTAssertEqual($0 as? BertTokenizerError, .invalidMaxLength(1))
        }
        XCTAssertThrowsError(try tokenizer.encode("hello", maxLength: 0))
        let two = try tokenizer.encode("hello world", maxLength: 2)
        XCTAssertEqual(two.inputIds, [2, 3])
        XCTAssertEqual(two.attentionMask, [1, 1])
        XCTAssertTrue(two.isTruncated)
    }

    func testInvalidUTF8VocabularyThrows() throws {
        let dir = try makeTemporaryDirectory(self)
        let url = dir.appendingPathComponent("vocab.txt")
        try Data([0x5B, 0x50, 0x41, 0x44, 0x5D, 0x0A, 0xFF, 0xFE, 0x0A]).write(to: url)
        XCTAssertThrowsError(try BertTokenizer(vocabularyURL: url)) {
            XCTAssertEqual($0 as? BertTokenizerError, .vocabularyNotUTF8(path: url.path))
        }
    }

    // MARK: Vocabulary file

    func testVocabularyLineEndingsLikePythonReadlines() throws {
        let dir = try makeTemporaryDirectory(self)
        let lf = dir.appendingPathComponent("lf.txt")
        let crlf = dir.appendingPathComponent("crlf.txt")
        try Data(tinyVocab.map { $0 + "\n" }.joined().utf8).write(to: lf)
        try Data(tinyVocab.joined(separator: "\r\n").utf8).write(to: crlf) // no final newline
        let a = try BertTokenizer(vocabularyURL: lf)
        let b = try BertTokenizer(vocabularyURL: crlf)
        XCTAssertEqual(a.vocabularySize, tinyVocab.count)
        XCTAssertEqual(b.vocabularySize, tinyVocab.count)
        XCTAssertEqual(a.tokenIDs("hello unaffable"), b.tokenIDs("hello unaffable"))
        XCTAssertEqual(a.tokenIDs("hello unaffable"), [5, 7, 8, 9])
        XCTAssertEqual(BertTokenizer.splitVocabularyLines(Data("a\rb\r\nc\n\nd".utf8))?.map { String(decoding: $0, as: UTF8.self) },
                       ["a", "b", "c", "", "d"])
    }

    func testRealVocabularySpecialIDs() throws {
        let tokenizer = try BertTokenizer(vocabularyURL: try Fixtures.url("vocab_uncased.txt"))
        XCTAssertEqual(tokenizer.vocabularySize, 30522)
        XCTAssertEqual([tokenizer.padTokenID, tokenizer.unkTokenID, tokenizer.clsTokenID, tokenizer.sepTokenID],
                       [0, 100, 101, 102])
        XCTAssertEqual(tokenizer.token(forID: 7592), "hello")
        XCTAssertEqual(tokenizer.id(forToken: "hello"), 7592)
        XCTAssertNil(tokenizer.token(forID: -1))
        XCTAssertNil(tokenizer.token(forID: 30522))
    }

    // MARK: Canonical equivalence

    func testComposedAndDecomposedStayDistinct() throws {
        // Swift's String == merges canonically equivalent strings; the tokenizer must not.
        XCTAssertEqual("\u{E0}", "a\u{300}")
        let cased = try tiny(.init(doLowerCase: false))
        XCTAssertEqual(cased.id(forToken: "\u{E0}"), 15)
        XCTAssertEqual(cased.id(forToken: "a\u{300}"), 16)
        XCTAssertEqual(cased.tokenIDs("\u{E0}"), [15])
        XCTAssertEqual(cased.tokenIDs("a\u{300}"), [16])
        XCTAssertTrue(sameBytes(cased.tokenize("a\u{300}"), ["a\u{300}"]))
        XCTAssertFalse(sameBytes(cased.tokenize("a\u{300}"), ["\u{E0}"]))
        // Uncased strips accents: both spellings become "a".
        let uncased = try tiny()
        XCTAssertEqual(uncased.tokenIDs("\u{E0} a\u{300} \u{C0}"), [12, 12, 12])
    }

    func testRealCasedVocabularyKeepsBothSpellings() throws {
        let cased = try Fixtures.config("cased").tokenizer()
        let composed = try XCTUnwrap(cased.id(forToken: "voil\u{E0}"))
        let decomposed = try XCTUnwrap(cased.id(forToken: "voila\u{300}"))
        XCTAssertNotEqual(composed, decomposed)
        XCTAssertEqual(cased.tokenIDs("voil\u{E0} voila\u{300}"), [composed, decomposed])
    }

    // MARK: Pipeline edge cases

    func testWordPieceGreedyAndUnknownWord() throws {
        let tokenizer = try tiny()
        XCTAssertEqual(tokenizer.tokenize("unaffable"), ["un", "##aff", "##able"])
        XCTAssertEqual(tokenizer.tokenize("abc"), ["a", "##b", "##c"])
        // one miss inside the word makes the whole word [UNK]
        XCTAssertEqual(tokenizer.tokenize("abcd hello"), ["[UNK]", "hello"])
        XCTAssertEqual(tokenizer.tokenize("Hello, WORLD!"), ["hello", ",", "world", "!"])
    }

    func testLongWordBecomesUnknown() throws {
        let tokenizer = try tiny()
        XCTAssertEqual(tokenizer.tokenize(String(repeating: "x", count: 101)), ["[UNK]"])
        // 100 scalars is allowed by length (then fails WordPiece: no "##x")
        XCTAssertEqual(tokenizer.tokenize(String(repeating: "x", count: 100)), ["[UNK]"])
        let custom = try BertTokenizer(vocabulary: tinyVocab + ["##x"], configuration: .init(maxInputCharsPerWord: 3))
        XCTAssertEqual(custom.tokenize("xxx"), ["x", "##x", "##x"])
        XCTAssertEqual(custom.tokenize("xxxx"), ["[UNK]"])
        // counted in scalars, not Characters: "a" + 3 combining marks is 4 scalars
        let marks = try BertTokenizer(vocabulary: tinyVocab, configuration: .init(doLowerCase: false, maxInputCharsPerWord: 3))
        XCTAssertEqual("a\u{300}\u{300}\u{300}".count, 1)
        XCTAssertEqual(marks.tokenize("a\u{300}\u{300}\u{300}"), ["[UNK]"])
    }

    func testCleanTextAndWhitespace() throws {
        let tokenizer = try tiny()
        XCTAssertEqual(tokenizer.tokenize("hello\u{0}world"), ["[UNK]"]) // NUL removed → "helloworld"
        XCTAssertEqual(tokenizer.tokenize("hello\u{FFFD}\u{200B}\u{AD}"), ["hello"])
        XCTAssertEqual(tokenizer.tokenize("\thello\r\nworld\u{3000}\u{A0}!"), ["hello", "world", "!"])
        XCTAssertEqual(tokenizer.tokenize(""), [])
        XCTAssertEqual(tokenizer.tokenize(" \t\n\r "), [])
    }

    func testChineseCharactersSplit() throws {
        XCTAssertEqual(try tiny().tokenize("\u{4E2D}\u{6587}x"), ["\u{4E2D}", "\u{6587}", "x"])
        let noSplit = try tiny(.init(tokenizeChineseChars: false))
        XCTAssertEqual(noSplit.tokenize("\u{4E2D}\u{6587}"), ["[UNK]"])
        // the Rust ranges start the extension block at U+2B920 (Python's slow tokenizer: U+2B820)
        XCTAssertFalse(BertCharacterClass.isChineseChar(0x2B820))
        XCTAssertTrue(BertCharacterClass.isChineseChar(0x2B920))
    }

    func testStripAccentsOverride() throws {
        let keep = try tiny(.init(doLowerCase: true, stripAccents: false))
        XCTAssertEqual(keep.tokenize("\u{C0}"), ["\u{E0}"])
        let strip = try tiny(.init(doLowerCase: false, stripAccents: true))
        XCTAssertEqual(strip.tokenize("\u{E0}"), ["a"])
        XCTAssertTrue(try tiny().configuration.effectiveStripAccents)
        XCTAssertFalse(try tiny(.init(doLowerCase: false)).configuration.effectiveStripAccents)
    }

    func testSpecialTokensInTextStayWhole() throws {
        let tokenizer = try tiny()
        XCTAssertEqual(tokenizer.tokenize("hello[SEP]world [MASK]"), ["hello", "[SEP]", "world", "[MASK]"])
        XCTAssertEqual(tokenizer.tokenIDs("[CLS][PAD]"), [2, 0])
        // not normalized: lowercase spellings are ordinary text
        XCTAssertEqual(tokenizer.tokenize("[sep]"), ["[UNK]", "[UNK]", "[UNK]"]) // "[", "sep", "]" are not in the tiny vocab
    }

    func testEncodePadsAndTruncates() throws {
        let tokenizer = try tiny(.init(maxLength: 6))
        let short = try tokenizer.encode("hello world")
        XCTAssertEqual(short.inputIds, [2, 5, 6, 3, 0, 0])
        XCTAssertEqual(short.attentionMask, [1, 1, 1, 1, 0, 0])
        XCTAssertEqual(short.tokenCount, 4)
        XCTAssertFalse(short.isTruncated)

        let exact = try tokenizer.encode("hello world hello world")
        XCTAssertEqual(exact.inputIds, [2, 5, 6, 5, 6, 3])
        XCTAssertFalse(exact.isTruncated)

        let long = try tokenizer.encode("hello world hello world hello")
        XCTAssertEqual(long.inputIds, [2, 5, 6, 5, 6, 3])
        XCTAssertEqual(long.attentionMask, [1, 1, 1, 1, 1, 1])
        XCTAssertEqual(long.tokenCount, 6)
        XCTAssertTrue(long.isTruncated)

        let empty = try tokenizer.encode("", maxLength: 4)
        XCTAssertEqual(empty.inputIds, [2, 3, 0, 0])
        XCTAssertEqual(empty.attentionMask, [1, 1, 0, 0])
        XCTAssertEqual(empty.tokenCount, 2)
    }

    func testDuplicateVocabularyEntryKeepsLastID() throws {
        let tokenizer = try BertTokenizer(vocabulary: tinyVocab + ["hello"])
        XCTAssertEqual(tokenizer.id(forToken: "hello"), Int32(tinyVocab.count))
        XCTAssertEqual(tokenizer.tokenIDs("hello"), [Int32(tinyVocab.count)])
    }

    func testUnicodeRangeTableLookup() {
        let table: [UInt32] = [1, 3, 10, 10, 20, 25]
        XCTAssertEqual((0...30).filter { BertCharacterClass.inRanges(table, UInt32($0)) },
                       [1, 2, 3, 10, 20, 21, 22, 23, 24, 25])
        XCTAssertFalse(BertCharacterClass.inRanges([], 5))
    }
}
