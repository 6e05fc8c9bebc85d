import Foundation
import XCTest
@testable import MLXEdgeKit

/// Parity with Hugging Face transformers' BertTokenizer over the generated fixture
/// (scripts/make_tokenizer_fixture.py), plus an exhaustive per-scalar check of the
/// normalizer / pre-tokenizer character classes against the probed Rust library.
final class BertTokenizerParityTests: XCTestCase {

    func testFixtureMetadata() throws {
        let fixture = try Fixtures.tokenizerFixture()
        XCTAssertEqual(fixture.max_length, 32)
        XCTAssertNotNil(fixture.meta["transformers_version"])
        XCTAssertNotNil(fixture.meta["tokenizers_version"])
        XCTAssertNotNil(fixture.meta["python_version"])
        XCTAssertEqual(Set(fixture.configs.map(\.name)),
                       ["uncased", "uncased_keep_accents", "cased", "cased_no_chinese_split"])
        for config in fixture.configs {
            XCTAssertGreaterThanOrEqual(config.cases.count, 120, config.name)
        }
    }

    func testParityUncased() throws { try checkParity("uncased") }
    func testParityUncasedKeepAccents() throws { try checkParity("uncased_keep_accents") }
    func testParityCased() throws { try checkParity("cased") }
    func testParityCasedNoChineseSplit() throws { try checkParity("cased_no_chinese_split") }

    private func list(_ tokens: [String]) -> String {
        "[" + tokens.map(escaped).joined(separator: ", ") + "]"
    }

    private func checkParity(_ name: String, file: StaticString = #filePath, line: UInt = #line) throws {
        let fixture = try Fixtures.tokenizerFixture()
        let config = try XCTUnwrap(fixture.configs.first { $0.name == name })
        let tokenizer = try config.tokenizer()
        var failures: [String] = []
        for (index, testCase) in config.cases.enumerated() {
            let tokens = tokenizer.tokenize(testCase.text)
            let encoding = try tokenizer.encode(testCase.text, maxLength: fixture.max_length)
            var problems: [String] = []
            if !sameBytes(tokens, testCase.tokens) {
                problems.append("tokens: expected \(list(testCase.tokens)) got \(list(tokens))")
            }
            if encoding.inputIds != testCase.input_ids {
                problems.append("input_ids: expected \(testCase.input_ids) got \(encoding.inputIds)")
            }
            if encoding.attentionMask != testCase.attention_mask {
                problems.append("attention_mask: expected \(testCase.attention_mask) got \(encoding.attentionMask)")
            }
            if encoding.tokenCount != Int(testCase.attention_mask.reduce(0, +)) {
                problems.append("tokenCount \(encoding.tokenCount) != mask sum")
            }
            if !problems.isEmpty {
                failures.append("[\(name) #\(index)] text \(escaped(testCase.text)) scalars [\(scalarDump(testCase.text))]\n  "
                                + problems.joined(separator: "\n  "))
            }
        }
        if let first = failures.first {
            XCTFail("\(failures.count) of \(config.cases.count) cases differ from Hugging Face; first:\n\(first)",
                    file: file, line: line)
        }
    }

    // MARK: Exhaustive character-class parity

    private struct UnicodeReference: Decodable {
        var removed_by_clean_text: [[UInt32]]
        var whitespace: [[UInt32]]
        var punctuation: [[UInt32]]
        var chinese: [[UInt32]]
        var nonspacing_marks: [[UInt32]]
        var nfd_exceptions: [UInt32]
        var strip_accents_map: [String: String]
        var lowercase_map: [String: String]
        var tokenizers_version: String
    }

    private func reference() throws -> UnicodeReference {
        let data = try Data(contentsOf: try Fixtures.url("unicode_reference.json"))
        return try JSONDecoder().decode(UnicodeReference.self, from: data)
    }

    private func set(_ ranges: [[UInt32]]) -> Set<UInt32> {
        var out = Set<UInt32>()
        for r in ranges { for v in r[0]...r[1] { out.insert(v) } }
        return out
    }

    private var allScalars: [Unicode.Scalar] {
        (0...0x10FFFF as ClosedRange<UInt32>).compactMap(Unicode.Scalar.init)
    }

    func testCharacterClassesMatchRustTokenizers() throws {
        let ref = try reference()
        let removed = set(ref.removed_by_clean_text)
        let whitespace = set(ref.whitespace)
        let punctuation = set(ref.punctuation)
        let chinese = set(ref.chinese)
        let marks = set(ref.nonspacing_marks)
        var mismatches: [String] = []
        for scalar in allScalars {
            let v = scalar.value
            func check(_ what: String, _ swift: Bool, _ hf: Bool) {
                if swift != hf, mismatches.count < 20 {
                    mismatches.append(String(format: "U+%04X", v) + " \(what): swift \(swift) hf \(hf)")
                }
            }
            check("removed", BertCharacterClass.isRemovedByCleanText(v), removed.contains(v))
            check("whitespace", BertCharacterClass.isWhitespace(v), whitespace.contains(v))
            check("punctuation", BertCharacterClass.isPunctuation(v) && !BertCharacterClass.isWhitespace(v),
                  punctuation.contains(v))
            check("chinese", BertCharacterClass.isChineseChar(v), chinese.contains(v))
            check("nonspacing mark", BertCharacterClass.isNonspacingMark(v), marks.contains(v))
        }
        XCTAssertEqual(Set(ref.nfd_exceptions), BertUnicodeTables.nfdExceptions,
                       "regenerate BertUnicodeTables.swift with --swift-tables")
        XCTAssertTrue(mismatches.isEmpty, mismatches.joined(separator: "\n"))
    }

    /// Every scalar, alone, through the full normalizer of the uncased configuration
    /// (clean text → CJK padding → NFD + drop Mn → lowercase) and the keep-accents one.
    func testSingleScalarNormalizationMatchesRustTokenizers() throws {
        let ref = try reference()
        let removed = set(ref.removed_by_clean_text)
        let whitespace = set(ref.whitespace)
        let chinese = set(ref.chinese)
        let marks = set(ref.nonspacing_marks)
        var strip: [UInt32: [Unicode.Scalar]] = [:]
        for (k, v) in ref.strip_accents_map { strip[UInt32(k)!] = Array(v.unicodeScalars) }
        var lower: [UInt32: [Unicode.Scalar]] = [:]
        for (k, v) in ref.lowercase_map { lower[UInt32(k)!] = Array(v.unicodeScalars) }

        func hangul(_ v: UInt32) -> [Unicode.Scalar] {
            let s = v - 0xAC00
            var out = [Unicode.Scalar(0x1100 + s / 588)!, Unicode.Scalar(0x1161 + (s % 588) / 28)!]
            if s % 28 != 0 { out.append(Unicode.Scalar(0x11A7 + s % 28)!) }
            return out
        }
        func expected(_ scalar: Unicode.Scalar, stripAccents: Bool) -> [Unicode.Scalar] {
            let v = scalar.value
            if removed.contains(v) { return [] }
            if whitespace.contains(v) { return [" "] }
            var out: [Unicode.Scalar] = chinese.contains(v) ? [" ", scalar, " "] : [scalar]
            if stripAccents {
                out = out.flatMap { s -> [Unicode.Scalar] in
                    if marks.contains(s.value) { return [] }
                    if (0xAC00...0xD7A3).contains(s.value) { return hangul(s.value) }
                    return strip[s.value] ?? [s]
                }
            }
            return out.flatMap { lower[$0.value] ?? [$0] }
        }

        let vocab = try Fixtures.url("vocab_uncased.txt")
        let uncased = try BertTokenizer(vocabularyURL: vocab)
        let keepAccents = try BertTokenizer(vocabularyURL: vocab,
                                            configuration: .init(doLowerCase: true, stripAccents: false))
        var mismatches: [String] = []
        for scalar in allScalars {
            for (tokenizer, stripAccents) in [(uncased, true), (keepAccents, false)] {
                let got = tokenizer.normalize([scalar])
                let want = expected(scalar, stripAccents: stripAccents)
                if got != want, mismatches.count < 20 {
                    mismatches.append(String(format: "U+%04X", scalar.value)
                                      + " strip=\(stripAccents): swift \(got.map { String(format: "%04X", $0.value) })"
                                      + " hf \(want.map { String(format: "%04X", $0.value) })")
                }
            }
        }
        XCTAssertTrue(mismatches.isEmpty, mismatches.joined(separator: "\n"))
    }
}
