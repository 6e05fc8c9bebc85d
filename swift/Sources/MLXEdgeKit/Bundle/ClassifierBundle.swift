import Foundation

/// An exported bundle folder, opened and checked: the manifest (decoded and validated), the
/// feature names and shapes (``BundleIO``), the tokenizer the manifest names (WordPiece from
/// the bundle's vocabulary, Unigram from its spec), and the files the app reads, present.
///
/// This is the first half of ``TextClassifier/open(bundle:configuration:)``, the part with no
/// CoreML, so it runs (and is tested) on Linux too. Every failure is a
/// ``BundleManifestError`` (or a ``BertTokenizerError`` / ``UnigramTokenizerError`` for an
/// unreadable vocabulary or spec).
public struct ClassifierBundle: Sendable {
    /// How much of the bundle's files to check when opening.
    public enum FileCheck: Sendable, Equatable {
        /// Read only manifest.json and the tokenizer's file.
        case none
        /// The files the app reads (``BundleManifest/filesNeededOnDevice``) exist with their
        /// manifest sizes: a missing `Head.mlmodel` is named here, not by a CoreML error later.
        case sizes
        /// Their sha256 as well. It reads every byte of the models, tens of MB for the encoder.
        case sha256
    }

    /// The bundle folder (the one that holds manifest.json).
    public let directory: URL
    public let manifest: BundleManifest
    public let io: BundleIO
    /// The bundle's tokenizer (``BertTokenizer`` or ``UnigramTokenizer``, as `tokenizer.type`
    /// says), checked against the manifest's vocabulary size and special-token ids.
    public let tokenizer: any TextTokenizer

    /// Labels in the head's output order. Fixed at export: corrections must use one of them.
    public var labels: [String] { io.labels }

    /// Opens the bundle folder `directory`: reads and validates manifest.json, checks the files
    /// as `fileCheck` says, and builds the tokenizer.
    public init(directory: URL, fileCheck: FileCheck = .sizes) throws {
        let manifest = try BundleManifest.load(from: directory)
        switch fileCheck {
        case .none: break
        case .sizes: try manifest.verifyFiles(in: directory, only: manifest.filesNeededOnDevice, digests: false)
        case .sha256: try manifest.verifyFiles(in: directory, only: manifest.filesNeededOnDevice)
        }
        self.directory = directory
        self.manifest = manifest
        self.io = try manifest.io()
        self.tokenizer = try manifest.makeTokenizer(bundleDirectory: directory)
    }
}
