import Foundation
import XCTest
@testable import MLXEdgeKit

enum Fixtures {
    static func url(_ name: String) throws -> URL {
        let file = name as NSString
        let url = Bundle.module.url(forResource: file.deletingPathExtension, withExtension: file.pathExtension,
                                    subdirectory: "Fixtures")
        return try XCTUnwrap(url, "missing test fixture \(name); run scripts/make_tokenizer_fixture.py")
    }

    struct TokenizerFixture: Decodable {
        var meta: [String: String]
        var max_length: Int
        var configs: [Config]
    }

    struct Config: Decodable {
        var name: String
        var vocab_file: String
        var do_lower_case: Bool
        var strip_accents: Bool?
        var tokenize_chinese_chars: Bool
        var max_input_chars_per_word: Int
        var special_tokens: [String: String]
        var cases: [Case]

        var configuration: BertTokenizer.Configuration {
            BertTokenizer.Configuration(
                doLowerCase: do_lower_case, stripAccents: strip_accents,
                tokenizeChineseChars: tokenize_chinese_chars, maxLength: 32,
                maxInputCharsPerWord: max_input_chars_per_word,
                clsToken: special_tokens["cls"] ?? "[CLS]", sepToken: special_tokens["sep"] ?? "[SEP]",
                padToken: special_tokens["pad"] ?? "[PAD]", unkToken: special_tokens["unk"] ?? "[UNK]",
                maskToken: special_tokens["mask"])
        }

        func tokenizer() throws -> BertTokenizer {
            var configuration = configuration
            configuration.maxLength = 32
            return try BertTokenizer(vocabularyURL: try Fixtures.url(vocab_file), configuration: configuration)
        }
    }

    struct Case: Decodable {
        var text: String
        var tokens: [String]
        var input_ids: [Int32]
        var attention_mask: [Int32]
    }

    static func tokenizerFixture() throws -> TokenizerFixture {
        let data = try Data(contentsOf: try url("tokenizer_fixture.json"))
        return try JSONDecoder().decode(TokenizerFixture.self, from: data)
    }

    static func config(_ name: String) throws -> Config {
        try XCTUnwrap(try tokenizerFixture().configs.first { $0.name == name }, "no fixture config \(name)")
    }
}

/// `U+0061 U+0300 …`: shows exactly which scalars a string holds.
func scalarDump(_ s: String) -> String {
    s.unicodeScalars.map { String(format: "U+%04X", $0.value) }.joined(separator: " ")
}

/// Exact (scalar-by-scalar) rendering, with invisible characters escaped.
func escaped(_ s: String) -> String {
    var out = "\""
    for scalar in s.unicodeScalars {
        if scalar.value >= 0x20 && scalar.value < 0x7F && scalar != "\"" && scalar != "\\" {
            out.unicodeScalars.append(scalar)
        } else {
            out += String(format: "\\u{%X}", scalar.value)
        }
    }
    return out + "\""
}

/// Token lists compared by UTF-8 bytes (Swift `String ==` would merge canonically
/// equivalent spellings).
func sameBytes(_ a: [String], _ b: [String]) -> Bool {
    a.count == b.count && zip(a, b).allSatisfy { Array($0.utf8) == Array($1.utf8) }
}

/// A fresh temporary directory, removed when the test ends.
func makeTemporaryDirectory(_ testCase: XCTestCase) throws -> URL {
    let url = FileManager.default.temporaryDirectory
        .appendingPathComponent("MLXEdgeKitTests-\(UUID().uuidString)", isDirectory: true)
    try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
    testCase.addTeardownBlock { try? FileManager.default.removeItem(at: url) }
    return url
}
