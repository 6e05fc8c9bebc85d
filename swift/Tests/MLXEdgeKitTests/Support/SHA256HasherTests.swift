import Foundation
import XCTest
@testable import MLXEdgeKit

final class SHA256HasherTests: XCTestCase {
    private func hex(_ text: String) -> String { SHA256Hasher.hexDigest(Array(text.utf8)) }

    /// FIPS 180-4 / NIST example vectors.
    func testKnownVectors() {
        XCTAssertEqual(hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
        XCTAssertEqual(hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        XCTAssertEqual(hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
                       "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1")
        XCTAssertEqual(hex("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu"),
                       "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1")
        XCTAssertEqual(SHA256Hasher.hexDigest([UInt8](repeating: 0x61, count: 1_000_000)),
                       "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0")
        XCTAssertEqual(hex("naïve 東京 🙂"), "5740f38e77c7f5c7ec3fd6a0f10d93a1459a6e11e40144186e0164a47079c289")
        XCTAssertEqual(SHA256Hasher.hash(Data("abc".utf8)).count, SHA256Hasher.digestByteCount)
    }

    /// Lengths around the padding boundaries (55/56 bytes: one or two final blocks); values from Python's hashlib.
    func testPaddingBoundaries() {
        let expected = [
            55: "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318",
            56: "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a",
            63: "7d3e74a05d7db15bce4ad9ec0658ea98e3f06eeecf16b4c6fff2da457ddc2f34",
            64: "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb",
            65: "635361c48bb9eab14198e76ea8ab7f1a41685d6ad62aa9146d301d4f17eb0ae0",
            119: "31eba51c313a5c08226adf18d4a359cfdfd8d2e816b13f4af952f7ea6584dcfb",
            120: "2f3d335432c70b580af0e8e1b3674a7c020d683aa5f73aaaedfdc55af904c21c",
            1000: "41edece42d63e8d9bf515a9ba6932e1c20cbc9f5a5d134645adb5db1b9737ea3",
        ]
        for (count, digest) in expected {
            XCTAssertEqual(SHA256Hasher.hexDigest([UInt8](repeating: 0x61, count: count)), digest, "\(count) bytes")
        }
    }

    func testStreamingInAnyPiecesMatchesOneShot() {
        let bytes = (0..<1000).map { UInt8($0 * 7 % 251) }
        let expected = "59425e4412e296fc74736673ce067027f384203f59c0d2c3e6be7b13347b3ffc"
        XCTAssertEqual(SHA256Hasher.hexDigest(bytes), expected)
        for piece in [1, 3, 55, 63, 64, 65, 128, 999] {
            var hasher = SHA256Hasher()
            var start = 0
            while start < bytes.count {
                let end = min(start + piece, bytes.count)
                hasher.update(bytes[start..<end])
                start = end
            }
            XCTAssertEqual(hasher.finalizeHex(), expected, "pieces of \(piece)")
        }
        var hasher = SHA256Hasher()
        hasher.update(bytes[0..<500])
        XCTAssertEqual(hasher.finalizeHex(), hasher.finalizeHex(), "finalize leaves the hasher unchanged")
        hasher.update([UInt8]())
        hasher.update(bytes[500...])
        XCTAssertEqual(hasher.finalizeHex(), expected)
    }

    func testFileDigestInChunks() throws {
        let url = try makeTemporaryDirectory(self).appendingPathComponent("data.bin")
        let bytes = (0..<1000).map { UInt8($0 * 7 % 251) }
        try Data(bytes).write(to: url)
        for chunk in [1, 7, 64, 1 << 20] {
            XCTAssertEqual(try SHA256Hasher.hexDigest(ofFileAt: url, chunkSize: chunk),
                           "59425e4412e296fc74736673ce067027f384203f59c0d2c3e6be7b13347b3ffc")
        }
        let empty = url.deletingLastPathComponent().appendingPathComponent("empty")
        try Data().write(to: empty)
        XCTAssertEqual(try SHA256Hasher.hexDigest(ofFileAt: empty),
                       "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
        XCTAssertThrowsError(try SHA256Hasher.hexDigest(ofFileAt: url.appendingPathExtension("missing")))
    }

    /// The fixture's tokenizer files hash to what the Python exporter (hashlib) wrote in the manifest.
    func testMatchesTheExportersDigests() throws {
        let manifest = try Fixtures.bundleManifest()
        for name in manifest.tokenizer.files {
            let url = try Fixtures.bundleDirectory().appendingPathComponent(name)
            XCTAssertEqual(try SHA256Hasher.hexDigest(ofFileAt: url), manifest.files[name]?.sha256, name)
        }
    }

    func testHexDigestSyntax() {
        XCTAssertTrue(SHA256Hasher.isHexDigest(String(repeating: "a", count: 64)))
        XCTAssertTrue(SHA256Hasher.isHexDigest("0123456789abcdef" + String(repeating: "0", count: 48)))
        XCTAssertFalse(SHA256Hasher.isHexDigest(String(repeating: "A", count: 64)), "uppercase")
        XCTAssertFalse(SHA256Hasher.isHexDigest(String(repeating: "a", count: 63)))
        XCTAssertFalse(SHA256Hasher.isHexDigest(String(repeating: "a", count: 65)))
        XCTAssertFalse(SHA256Hasher.isHexDigest(String(repeating: "g", count: 64)))
        XCTAssertFalse(SHA256Hasher.isHexDigest(""))
        XCTAssertEqual(SHA256Hasher.hex([0x00, 0x0f, 0xa0, 0xff]), "000fa0ff")
    }
}
