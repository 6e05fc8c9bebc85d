import Foundation
import XCTest
@testable import MLXEdgeKit

/// `Fixtures/unigram/`: scripts/make_unigram_fixture.py and scripts/make_grapheme_tables.py.
enum UnigramFixtures {
    struct Fixture: Decodable {
        var meta: [String: JSONValue]
        var max_length: Int
        var cases: [Case]
    }

    struct Case: Decodable {
        var text: String
        var normalized: [String]
        var ids: [Int32]
        var tokens: [String]
    }

    static func url(_ name: String) throws -> URL {
        let file = name as NSString
        let url = Bundle.module.url(forResource: file.deletingPathExtension, withExtension: file.pathExtension,
                                    subdirectory: "Fixtures/unigram")
        return try XCTUnwrap(url, "missing Fixtures/unigram/\(name); run scripts/make_unigram_fixture.py")
    }

    static func fixture() throws -> Fixture {
        try JSONDecoder().decode(Fixture.self, from: Data(contentsOf: try url("unigram_fixture.json")))
    }

    static func tokenizer(maxLength: Int = 128) throws -> UnigramTokenizer {
        try UnigramTokenizer(specURL: try url("unigram_spec.json"), maxLength: maxLength)
    }
}

final class UnigramTokenizerParityTests: XCTestCase {
    private func list(_ tokens: [String]) -> String {
        "[" + tokens.map(escaped).joined(separator: ", ") + "]"
    }

    /// Every fixture text: ids (with <s>, </s>, truncation and padding), tokens and the normalized
    /// text equal what tokenizers gave.
    func testEveryFixtureTextMatchesTokenizers() throws {
        let fixture = try UnigramFixtures.fixture()
        let tokenizer = try UnigramFixtures.tokenizer(maxLength: fixture.max_length)
        XCTAssertGreaterThanOrEqual(fixture.cases.count, 2000)
        var failures: [String] = []
        for (index, testCase) in fixture.cases.enumerated() {
            var problems: [String] = []
            let normalized = tokenizer.normalized(testCase.text)
            if !sameBytes(normalized, testCase.normalized) {
                problems.append("normalized: expected \(list(testCase.normalized)) got \(list(normalized))")
            }
            let encoding = try tokenizer.encode(testCase.text, maxLength: fixture.max_length)
            let count = testCase.ids.count
            let expectedIds = testCase.ids + Array(repeating: tokenizer.padTokenID, count: fixture.max_length - count)
            if encoding.inputIds != expectedIds {
                problems.append("ids: expected \(testCase.ids) got \(encoding.inputIds.prefix(encoding.tokenCount))")
            }
            if encoding.attentionMask != Array(repeating: 1, count: count) + Array(repeating: 0, count: fixture.max_length - count)
                || encoding.tokenCount != count {
                problems.append("attention mask or token count differ")
            }
            let tokens = tokenizer.tokenize(testCase.text)
            if !sameBytes(Array(tokens.prefix(count - 2)), Array(testCase.tokens.dropFirst().dropLast())) {
                problems.append("tokens: expected \(list(testCase.tokens)) got \(list(tokens))")
            }
            if encoding.isTruncated != (tokens.count > count - 2) {
                problems.append("isTruncated \(encoding.isTruncated) with \(tokens.count) tokens")
            }
            if !problems.isEmpty {
                failures.append("#\(index) text \(escaped(testCase.text)) scalars [\(scalarDump(testCase.text))]\n  "
                                + problems.joined(separator: "\n  "))
            }
        }
        let passed = fixture.cases.count - failures.count
        print("UnigramTokenizer parity with tokenizers: \(passed)/\(fixture.cases.count) texts")
        if let first = failures.first {
            XCTFail("\(failures.count) of \(fixture.cases.count) texts differ from tokenizers; first:\n\(first)")
        }
    }

    func testFixtureCoversTheRequiredKinds() throws {
        let texts = try UnigramFixtures.fixture().cases.map(\.text)
        func any(_ what: String, _ test: (String) -> Bool) {
            XCTAssertTrue(texts.contains(where: test), "no fixture text with \(what)")
        }
        any("Chinese") { $0.unicodeScalars.contains { (0x4E00...0x9FFF).contains($0.value) } }
        any("a ZWJ emoji sequence") { $0.unicodeScalars.contains { $0.value == 0x200D } }
        any("a skin tone") { $0.unicodeScalars.contains { (0x1F3FB...0x1F3FF).contains($0.value) } }
        any("full-width letters") { $0.unicodeScalars.contains { (0xFF21...0xFF5A).contains($0.value) } }
        any("an NFD accent") { $0.unicodeScalars.elementsEqual("cafe\u{301}".unicodeScalars) }
        any("a control character") { $0.unicodeScalars.contains { $0.value < 0x09 } }
        any("the empty string") { $0.isEmpty }
        XCTAssertTrue(try UnigramFixtures.fixture().cases.contains { $0.ids.count == 128 }, "no truncated text")
    }

    // MARK: Grapheme break tables

    private struct GraphemeReference: Decodable {
        var tokenizers_version: String
        var control, extend, zwj, spacing_mark, prepend, l, v, t, lv, lvt: [[UInt32]]
        var regional_indicator, extended_pictographic, incb_consonant, incb_linker, incb_extend: [[UInt32]]
    }

    /// The compiled-in tables equal the probe of the Rust library on every scalar.
    func testGraphemeTablesMatchTheProbedReference() throws {
        let ref = try JSONDecoder().decode(GraphemeReference.self,
                                           from: Data(contentsOf: try UnigramFixtures.url("grapheme_reference.json")))
        var expected = [GraphemeBreak.Category](repeating: .other, count: 0x110000)
        let classes: [([[UInt32]], GraphemeBreak.Category)] = [
            (ref.control, .control), (ref.extend, .extend), (ref.zwj, .zwj), (ref.spacing_mark, .spacingMark),
            (ref.prepend, .prepend), (ref.l, .l), (ref.v, .v), (ref.t, .t), (ref.lv, .lv), (ref.lvt, .lvt),
            (ref.regional_indicator, .regionalIndicator), (ref.extended_pictographic, .extendedPictographic),
            (ref.incb_consonant, .incbConsonant),
        ]
        for (ranges, category) in classes {
            for r in ranges { for v in r[0]...r[1] { expected[Int(v)] = category } }
        }
        expected[0x0A] = .lf
        expected[0x0D] = .cr
        func set(_ ranges: [[UInt32]]) -> Set<UInt32> {
            Set(ranges.flatMap { $0[0]...$0[1] })
        }
        let linkers = set(ref.incb_linker)
        let extenders = set(ref.incb_extend)
        var mismatches: [String] = []
        for v in UInt32(0)...0x10FFFF where mismatches.count < 20 {
            if GraphemeBreak.category(v) != expected[Int(v)] {
                mismatches.append(String(format: "U+%04X", v) + " \(GraphemeBreak.category(v)) vs \(expected[Int(v)])")
            }
            if GraphemeBreak.isIncbLinker(v) != linkers.contains(v) || GraphemeBreak.isIncbExtend(v) != extenders.contains(v) {
                mismatches.append(String(format: "U+%04X", v) + " InCB linker/extend")
            }
        }
        XCTAssertTrue(mismatches.isEmpty, "regenerate with scripts/make_grapheme_tables.py --swift-tables:\n"
                      + mismatches.joined(separator: "\n"))
    }

    func testClusterBoundaries() {
        func clusters(_ s: String) -> [Int] {
            GraphemeBreak.clusterEnds(s.unicodeScalars.map(\.value))
        }
        XCTAssertEqual(clusters(""), [])
        XCTAssertEqual(clusters("ab"), [1, 2])
        XCTAssertEqual(clusters("\r\n"), [2])                                // GB3
        XCTAssertEqual(clusters("\u{1}\u{301}"), [1, 2])                     // GB4
        XCTAssertEqual(clusters("e\u{301}\u{302}x"), [3, 4])                 // GB9
        XCTAssertEqual(clusters("\u{1100}\u{1161}\u{11A8}"), [3])             // GB6-8
        XCTAssertEqual(clusters("\u{600}a"), [2])                            // GB9b
        XCTAssertEqual(clusters("\u{915}\u{94D}\u{937}"), [3])               // GB9c
        XCTAssertEqual(clusters("\u{915}\u{94D}\u{200D}\u{937}"), [4])
        XCTAssertEqual(clusters("a\u{94D}\u{937}"), [2, 3])
        XCTAssertEqual(clusters("\u{1F469}\u{1F3FD}\u{200D}\u{1F4BB}"), [4]) // GB11
        XCTAssertEqual(clusters("a\u{200D}\u{1F4BB}"), [2, 3])
        XCTAssertEqual(clusters("\u{1F1E8}\u{1F1F3}\u{1F1FA}"), [2, 3])      // GB12, GB13
    }
}
