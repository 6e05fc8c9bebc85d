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

// MARK: Bundle manifest fixture (scripts/make_bundle_manifest_fixture.py)

extension Fixtures {
    /// `Fixtures/bundle/`: manifest.json and the tokenizer files of a real tiny export.
    static func bundleDirectory() throws -> URL {
        let url = Bundle.module.url(forResource: "bundle", withExtension: nil, subdirectory: "Fixtures")
        return try XCTUnwrap(url, "missing Fixtures/bundle; run scripts/make_bundle_manifest_fixture.py")
    }

    static func bundleManifestData() throws -> Data {
        try Data(contentsOf: try bundleDirectory().appendingPathComponent(BundleManifest.fileName))
    }

    static func bundleManifest() throws -> BundleManifest {
        try BundleManifest.load(from: try bundleDirectory())
    }

    /// The fixture's manifest.json as JSONSerialization objects, for mutation.
    static func bundleManifestJSON() throws -> [String: Any] {
        try XCTUnwrap(try JSONSerialization.jsonObject(with: try bundleManifestData()) as? [String: Any])
    }

    /// A copy of the fixture bundle folder in a temporary directory (writable).
    static func copyOfBundle(_ testCase: XCTestCase) throws -> URL {
        let destination = try makeTemporaryDirectory(testCase).appendingPathComponent("bundle")
        try FileManager.default.copyItem(at: try bundleDirectory(), to: destination)
        return destination
    }
}

// MARK: Unigram bundle fixture (scripts/make_bundle_manifest_fixture.py --variant unigram)

extension Fixtures {
    /// `Fixtures/bundle_unigram/`: manifest.json, unigram_spec.json and tokenizer_cases.json of a
    /// real tiny export whose student has a SentencePiece Unigram tokenizer.
    static func unigramBundleDirectory() throws -> URL {
        let url = Bundle.module.url(forResource: "bundle_unigram", withExtension: nil, subdirectory: "Fixtures")
        return try XCTUnwrap(url, "missing Fixtures/bundle_unigram; run scripts/make_bundle_manifest_fixture.py")
    }

    static func unigramManifestData() throws -> Data {
        try Data(contentsOf: try unigramBundleDirectory().appendingPathComponent(BundleManifest.fileName))
    }

    /// A copy of the Unigram fixture folder in a temporary directory (writable).
    static func copyOfUnigramBundle(_ testCase: XCTestCase) throws -> URL {
        let destination = try makeTemporaryDirectory(testCase).appendingPathComponent("bundle_unigram")
        try FileManager.default.copyItem(at: try unigramBundleDirectory(), to: destination)
        return destination
    }

    /// What the bundle's own tokenizer.json gave each text in Python (`tokenizers`, max length 32).
    struct TokenizerCases: Decodable {
        struct Case: Decodable {
            var text: String
            var input_ids: [Int32]
            var attention_mask: [Int32]
        }

        var max_length: Int
        var cases: [Case]
    }

    static func unigramTokenizerCases() throws -> TokenizerCases {
        let url = try unigramBundleDirectory().appendingPathComponent("tokenizer_cases.json")
        return try JSONDecoder().decode(TokenizerCases.self, from: Data(contentsOf: url))
    }
}

/// One step of a path into JSON: an object key or an array index.
enum JSONKey: ExpressibleByStringLiteral, ExpressibleByIntegerLiteral {
    case key(String)
    case index(Int)

    init(stringLiteral value: String) { self = .key(value) }
    init(integerLiteral value: Int) { self = .index(value) }
}

/// `root` with the value at `path` replaced by `value`; nil removes it (use NSNull() for null).
func replacing(_ root: Any, at path: ArraySlice<JSONKey>, with value: Any?) -> Any {
    guard let first = path.first else { return value ?? NSNull() }
    let rest = path.dropFirst()
    switch first {
    case let .key(key):
        var object = root as! [String: Any]
        if rest.isEmpty {
            object[key] = value
        } else {
            object[key] = replacing(object[key]!, at: rest, with: value)
        }
        return object
    case let .index(index):
        var array = root as! [Any]
        if rest.isEmpty {
            if let value { array[index] = value } else { array.remove(at: index) }
        } else {
            array[index] = replacing(array[index], at: rest, with: value)
        }
        return array
    }
}

/// The fixture's manifest.json (or the manifest `of`) with the given changes, as JSON bytes.
func mutatedManifest(_ changes: [([JSONKey], Any?)], of manifest: Data? = nil) throws -> Data {
    var json: Any = try JSONSerialization.jsonObject(with: try manifest ?? Fixtures.bundleManifestData())
    for (path, value) in changes {
        json = replacing(json, at: path[...], with: value)
    }
    return try JSONSerialization.data(withJSONObject: json)
}

func mutatedManifest(_ path: [JSONKey], _ value: Any?) throws -> Data {
    try mutatedManifest([(path, value)])
}

/// Decodes (and validates) manifest bytes, failing the test on any error.
func decodeManifest(_ data: Data, file: StaticString = #filePath, line: UInt = #line) throws -> BundleManifest {
    do {
        return try BundleManifest(jsonData: data)
    } catch {
        XCTFail("unexpected error: \(error)", file: file, line: line)
        throw error
    }
}

/// Asserts that decoding + validating `data` throws exactly `expected`.
func assertManifestError(_ data: Data, _ expected: BundleManifestError,
                         file: StaticString = #filePath, line: UInt = #line) {
    XCTAssertThrowsError(try BundleManifest(jsonData: data), file: file, line: line) { error in
        XCTAssertEqual(error as? BundleManifestError, expected, "\(error)", file: file, line: line)
    }
}
