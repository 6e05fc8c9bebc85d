import Foundation

// What an app needs from the manifest: names, sizes, the tokenizer, file checks.
extension BundleManifest {
    // MARK: Names and sizes

    /// Width of the encoder's pooled embedding (= the head's input size).
    public var embeddingDimension: Int { student.hiddenSize }

    /// The encoder's inputs, token ids first then attention mask (validated: exactly two).
    public var encoderInputNames: [String] { models.encoder.inputs.map(\.name) }
    public var encoderTokenIDsInputName: String { models.encoder.inputs.first?.name ?? "" }
    public var encoderAttentionMaskInputName: String { models.encoder.inputs.dropFirst().first?.name ?? "" }
    public var encoderOutputNames: [String] { models.encoder.outputs.map(\.name) }
    /// Encoder output with the sentence embedding (e.g. `embedding`).
    public var encoderEmbeddingOutputName: String { models.encoder.embeddingOutput }

    public var headInputNames: [String] { models.head.inputs.map(\.name) }
    public var headOutputNames: [String] { models.head.outputs.map(\.name) }
    /// Head input fed with the embedding at prediction time (e.g. `embedding`).
    public var headEmbeddingInputName: String { models.head.embeddingInput }
    /// Head output: a plain probability array in label order (e.g. `probs`).
    public var headProbabilitiesOutputName: String { models.head.probabilitiesOutput }
    /// What `MLUpdateTask` needs in each example (e.g. `embedding`, `probs_true`).
    public var headTrainingInputNames: [String] { models.head.trainingInputs.map(\.name) }
    /// Training input with the true label's index, Int32 `[1]` (e.g. `probs_true`).
    public var headLabelInputName: String { models.head.labelInput }

    /// Feature names, shapes and data types for building the models' inputs and reading
    /// their outputs. Throws for a manifest that fails ``validate()``.
    public func io() throws -> BundleIO {
        try BundleIO(manifest: self)
    }

    // MARK: Tokenizer

    /// ``BertTokenizer`` settings from the manifest (`maxLength` = the longest sequence); a
    /// WordPiece bundle's only (a Unigram tokenizer's settings are in its spec file).
    public var tokenizerConfiguration: BertTokenizer.Configuration {
        BertTokenizer.Configuration(
            doLowerCase: tokenizer.doLowerCase, stripAccents: tokenizer.stripAccents,
            tokenizeChineseChars: tokenizer.tokenizeChineseChars, maxLength: tokenizer.maxLength,
            clsToken: tokenizer.clsToken, sepToken: tokenizer.sepToken, padToken: tokenizer.padToken,
            unkToken: tokenizer.unkToken)
    }

    /// Where the vocabulary file (`tokenizer.vocab_file`) is in the bundle folder.
    public func vocabularyURL(in bundleDirectory: URL) throws -> URL {
        guard let name = tokenizer.vocabFile, !name.isEmpty else {
            throw BundleManifestError.unsupportedTokenizerSetting(
                name: "vocab_file", value: "null", reason: "MLXEdgeKit's BertTokenizer needs a WordPiece vocab.txt")
        }
        return try BundleManifest.fileURL(name, in: bundleDirectory)
    }

    /// Where the Unigram spec (`tokenizer.spec_file`) is in the bundle folder.
    public func tokenizerSpecURL(in bundleDirectory: URL) throws -> URL {
        guard let name = tokenizer.specFile, !name.isEmpty else {
            throw BundleManifestError.unsupportedTokenizerSetting(
                name: "spec_file", value: "null", reason: "MLXEdgeKit's UnigramTokenizer needs the spec the exporter writes")
        }
        return try BundleManifest.fileURL(name, in: bundleDirectory)
    }

    /// The one tokenizer file MLXEdgeKit reads: `tokenizer.vocab_file` (WordPiece) or
    /// `tokenizer.spec_file` (Unigram).
    public var tokenizerFile: String? {
        switch tokenizer.type {
        case .wordpiece: return tokenizer.vocabFile
        case .unigram: return tokenizer.specFile
        }
    }

    /// The bundle's tokenizer, of the kind `tokenizer.type` names: a ``BertTokenizer`` over the
    /// vocabulary file with the manifest's settings, or a ``UnigramTokenizer`` over the spec
    /// file. Throws ``BundleManifestError/tokenizerMismatch(_:)`` when its size or special-token
    /// ids differ from the manifest's (the encoder was exported with those), and the tokenizer's
    /// own error (``BertTokenizerError``, ``UnigramTokenizerError``) for an unreadable file.
    public func makeTokenizer(bundleDirectory: URL) throws -> any TextTokenizer {
        let t = self.tokenizer
        let tokenizer: any TextTokenizer
        switch t.type {
        case .wordpiece:
            tokenizer = try BertTokenizer(vocabularyURL: try vocabularyURL(in: bundleDirectory),
                                          configuration: tokenizerConfiguration)
        case .unigram:
            tokenizer = try UnigramTokenizer(specURL: try tokenizerSpecURL(in: bundleDirectory), maxLength: t.maxLength)
        }
        guard tokenizer.vocabularySize == t.vocabSize else {
            throw BundleManifestError.tokenizerMismatch(
                "\(tokenizerFile ?? "the vocabulary") has \(tokenizer.vocabularySize) tokens, tokenizer.vocab_size is \(t.vocabSize)")
        }
        for (role, expected, actual) in [("cls", t.clsID, tokenizer.clsTokenID), ("sep", t.sepID, tokenizer.sepTokenID),
                                         ("pad", t.padID, tokenizer.padTokenID), ("unk", t.unkID, tokenizer.unkTokenID)]
            where Int(actual) != expected {
            throw BundleManifestError.tokenizerMismatch("tokenizer.\(role)_id is \(expected), the vocabulary has it at \(actual)")
        }
        return tokenizer
    }

    // MARK: Files

    /// The bundle's files that are missing or differ from `files` (size, then sha256).
    /// `only` restricts the check to some paths (e.g. `tokenizer.files`); a path there that
    /// `files` does not list is a problem too. Reads every checked file in full, unless
    /// `digests` is false: then only presence and size are checked.
    public func fileProblems(in bundleDirectory: URL, only paths: [String]? = nil,
                             digests: Bool = true) -> [BundleFileProblem] {
        var problems: [BundleFileProblem] = []
        let fileManager = FileManager.default
        for path in paths ?? files.keys.sorted() {
            guard let entry = files[path] else {
                problems.append(BundleFileProblem(path: path, kind: .notListed))
                continue
            }
            guard BundleManifest.isSafeRelativePath(path) else {
                problems.append(BundleFileProblem(path: path, kind: .unreadable("unsafe path")))
                continue
            }
            let link = BundleManifest.url(of: path, in: bundleDirectory)
            let url = link.resolvingSymlinksInPath()  // a file's attributes, not a link's
            guard BundleManifest.staysInside(link, bundleDirectory: bundleDirectory) else {
                problems.append(BundleFileProblem(path: path, kind: .unreadable("a link that leads out of the bundle")))
                continue
            }
            var isDirectory: ObjCBool = false
            guard fileManager.fileExists(atPath: url.path, isDirectory: &isDirectory) else {
                problems.append(BundleFileProblem(path: path, kind: .missing))
                continue
            }
            guard !isDirectory.boolValue else {
                problems.append(BundleFileProblem(path: path, kind: .unreadable("it is a directory")))
                continue
            }
            do {
                let size = (try fileManager.attributesOfItem(atPath: url.path)[.size] as? NSNumber)?.intValue ?? -1
                guard size == entry.bytes else {
                    problems.append(BundleFileProblem(path: path, kind: .sizeMismatch(expected: entry.bytes, actual: size)))
                    continue
                }
                guard digests else { continue }
                let digest = try SHA256Hasher.hexDigest(ofFileAt: url)
                if digest != entry.sha256 {
                    problems.append(BundleFileProblem(path: path, kind: .digestMismatch(expected: entry.sha256, actual: digest)))
                }
            } catch {
                problems.append(BundleFileProblem(path: path, kind: .unreadable(error.localizedDescription)))
            }
        }
        return problems
    }

    /// Throws ``BundleManifestError/fileVerificationFailed(_:)`` unless every file (or every
    /// file in `only`) is present with its manifest size and sha256 (only the size when
    /// `digests` is false).
    public func verifyFiles(in bundleDirectory: URL, only paths: [String]? = nil, digests: Bool = true) throws {
        let problems = fileProblems(in: bundleDirectory, only: paths, digests: digests)
        if !problems.isEmpty { throw BundleManifestError.fileVerificationFailed(problems) }
    }

    /// The `files` entries of one model: its file, or every file inside its package folder.
    public func files(of kind: ModelKind) -> [String] {
        files(under: model(kind).file)
    }

    /// The `files` entries of an extra; none when the bundle does not have it.
    public func files(of kind: ExtraKind) -> [String] {
        model(kind).map { files(under: $0.file) } ?? []
    }

    private func files(under file: String) -> [String] {
        files.keys.filter { $0 == file || $0.hasPrefix(file + "/") }.sorted()
    }

    /// The files MLXEdgeKit reads on device: the encoder's and head's files and the
    /// tokenizer's (``tokenizerFile``: `vocab.txt`, or `unigram_spec.json` for a Unigram bundle).
    /// Ship these (plus manifest.json); the extras (`Classifier.mlpackage`, `model.onnx`, in a
    /// bundle exported with `--extras`) and the other tokenizer files are not needed. Pass it as
    /// `only:` to ``verifyFiles(in:only:)``.
    public var filesNeededOnDevice: [String] {
        var paths = files(of: .encoder) + files(of: .head)
        if let file = tokenizerFile, files[file] != nil { paths.append(file) }
        return paths
    }

    /// A digest of one model's content, from the manifest alone (its files' paths and
    /// sha256): it changes whenever the exported model changes. Use it to name caches of the
    /// compiled model and the ``ModelStore`` of the head, so that a new export starts fresh.
    public func modelDigest(_ kind: ModelKind) -> String {
        digest(of: files(of: kind))
    }

    /// A digest of the whole bundle's content (every `files` entry).
    public var contentDigest: String {
        digest(of: files.keys.sorted())
    }

    /// sha256 of the lines `path NUL sha256 LF` of `paths` (sorted).
    private func digest(of paths: [String]) -> String {
        let lines = paths.sorted().map { "\($0)\u{0}\(files[$0]?.sha256 ?? "")\n" }.joined()
        return SHA256Hasher.hexDigest(Array(lines.utf8))
    }

    /// `Head-<first 16 hex of modelDigest>.mlmodelc`: where to keep the compiled model.
    public func compiledModelName(_ kind: ModelKind) -> String {
        let file = model(kind).file
        let stem = (file as NSString).deletingPathExtension
        return "\(stem.isEmpty ? kind.rawValue : stem)-\(modelDigest(kind).prefix(16)).mlmodelc"
    }

    /// Among the names in a cache folder, the compiled copies of this model from other
    /// exports (`Head-<other digest>.mlmodelc`).
    public func staleCompiledModelNames(_ kind: ModelKind, among names: [String]) -> [String] {
        let current = compiledModelName(kind)
        let stem = String(current.prefix(upTo: current.index(current.endIndex, offsetBy: -(16 + ".mlmodelc".count))))
        return names.filter { name in
            guard name != current else { return false }
            guard name.hasPrefix(stem), name.hasSuffix(".mlmodelc") else { return false }
            let digest = name.dropFirst(stem.count).dropLast(".mlmodelc".count)
            return digest.count == 16 && digest.allSatisfy { $0.isHexDigit && !$0.isUppercase }
        }.sorted()
    }

    /// The URL of a bundle-relative path (`Encoder.mlpackage/Manifest.json`).
    public static func url(of relativePath: String, in bundleDirectory: URL) -> URL {
        var url = bundleDirectory
        for part in relativePath.split(separator: "/") { url.appendPathComponent(String(part)) }
        return url
    }

    /// The URL of a file the manifest names, refused when its path is unsafe or a link leads it out of the bundle.
    static func fileURL(_ name: String, in bundleDirectory: URL) throws -> URL {
        guard isSafeRelativePath(name) else { throw BundleManifestError.invalidFilePath(name) }
        let url = url(of: name, in: bundleDirectory)
        guard staysInside(url, bundleDirectory: bundleDirectory) else {
            throw BundleManifestError.invalidFilePath("\(name) (a link that leads out of the bundle)")
        }
        return url
    }

    /// Whether `url`, with every symbolic link on its way resolved, is still inside
    /// `bundleDirectory` (itself resolved): a safe relative path can still lead out of the
    /// bundle through a link, and the app must not read or ship what it points to.
    public static func staysInside(_ url: URL, bundleDirectory: URL) -> Bool {
        let root = bundleDirectory.resolvingSymlinksInPath().standardizedFileURL.path
        let target = url.resolvingSymlinksInPath().standardizedFileURL.path
        return target == root || target.hasPrefix(root.hasSuffix("/") ? root : root + "/")
    }
}
