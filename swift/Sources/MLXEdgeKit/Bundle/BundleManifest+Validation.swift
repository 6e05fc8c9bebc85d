import Foundation

extension BundleManifest {
    /// Tool versions the schema requires in `versions`.
    public static let requiredVersionKeys = ["python", "mlx-edge", "mlx", "torch", "coremltools", "onnx",
                                             "onnxruntime", "numpy"]

    /// Checks what the JSON schema says and what the app relies on beyond it, and throws the
    /// first problem as a ``BundleManifestError``:
    ///
    /// - format and version, labels (at least 2, non-empty, unique);
    /// - quantize: bits in range; a block-wise mode with its bits, a block size ≥ 1 and iOS18;
    /// - lengths: `max_length` ≥ 2, `sequence_length` and `tokenizer.max_length` agree with it;
    /// - tokenizer: the file its kind reads, listed in `tokenizer.files` (WordPiece: `vocab_file`;
    ///   Unigram: `spec_file`), ids inside the vocabulary, settings the tokenizer implements
    ///   (truncation on; for WordPiece, clean text on);
    /// - models: the encoder and the head (the classifier and ONNX extras when present): expected
    ///   formats, files listed in `files`, numeric shapes, the encoder's two
    ///   Int32 inputs of one shape, the embedding width equal to `student.hidden_size` at the
    ///   encoder output, head input and head training input, one probability per label, the
    ///   head's training inputs (embedding and Int32 `[1]` label) present, loss wired to them,
    ///   update settings in range;
    /// - files: non-empty, relative paths, sha256 of 64 lowercase hex characters, sizes ≥ 0.
    public func validate() throws {
        guard format == BundleManifest.formatName else { throw BundleManifestError.unsupportedFormat(format) }
        guard formatVersion == BundleManifest.supportedFormatVersion else {
            throw BundleManifestError.unsupportedFormatVersion(found: formatVersion,
                                                               supported: BundleManifest.supportedFormatVersion)
        }
        try validateLabels()
        try validateStudent()
        try validateLengths()
        try validateFiles()
        try validateTokenizer()
        try validateModels()
        try validateQuantize()
        for key in BundleManifest.requiredVersionKeys where versions[key] == nil {
            throw BundleManifestError.missingField("versions.\(key)")
        }
        guard checks.texts >= 0 else {
            throw BundleManifestError.invalidValue(path: "checks.texts", reason: "\(checks.texts) is negative")
        }
    }

    private func validateQuantize() throws {
        if let bits = quantize.bits, ![1, 2, 3, 4, 6, 8].contains(bits) {
            throw BundleManifestError.invalidValue(path: "quantize.bits", reason: "\(bits) is not one of 1, 2, 3, 4, 6, 8")
        }
        guard quantize.mode.isBlockwise else { return }
        guard let blockSize = quantize.blockSize else { throw BundleManifestError.missingField("quantize.block_size") }
        guard blockSize >= 1 else {
            throw BundleManifestError.invalidValue(path: "quantize.block_size", reason: "\(blockSize) is below 1")
        }
        let bits = quantize.mode == .int8Block ? 8 : 4
        guard quantize.bits == bits else {
            throw BundleManifestError.inconsistent(
                path: "quantize.bits", reason: "\(quantize.bits.map(String.init) ?? "null"), expected \(bits) for \"\(quantize.mode.rawValue)\"")
        }
        guard minimumDeploymentTarget == .iOS18 else {
            throw BundleManifestError.inconsistent(
                path: "minimum_deployment_target",
                reason: "\"\(minimumDeploymentTarget.rawValue)\", but \"\(quantize.mode.rawValue)\" weights need iOS18")
        }
    }

    private func validateLabels() throws {
        guard labels.count >= 2 else { throw BundleManifestError.tooFewLabels(labels.count) }
        var seen = Set<String>()
        for (index, label) in labels.enumerated() {
            guard !label.isEmpty else { throw BundleManifestError.emptyLabel(index: index) }
            guard seen.insert(label).inserted else { throw BundleManifestError.duplicateLabel(label) }
        }
    }

    private func validateStudent() throws {
        try BundleManifest.checkSHA256(student.configSHA256, path: "student.config_sha256")
        try BundleManifest.checkSHA256(student.weightsSHA256, path: "student.weights_sha256")
        for (value, name) in [(student.hiddenSize, "hidden_size"), (student.vocabSize, "vocab_size")] where value < 1 {
            throw BundleManifestError.invalidValue(path: "student.\(name)", reason: "\(value) is below 1")
        }
        // A static student (a token table, mean-pooled) has no layers; a BERT student at least one.
        let fewestLayers = student.kind == .static ? 0 : 1
        guard student.numHiddenLayers >= fewestLayers else {
            throw BundleManifestError.invalidValue(
                path: "student.num_hidden_layers", reason: "\(student.numHiddenLayers) is below \(fewestLayers)")
        }
    }

    private func validateLengths() throws {
        guard maxLength >= 2 else { throw BundleManifestError.invalidMaxLength(path: "max_length", value: maxLength) }
        let seq = sequenceLength
        for (value, name) in [(seq.defaultLength, "default"), (seq.min, "min"), (seq.max, "max")] where value < 2 {
            throw BundleManifestError.invalidMaxLength(path: "sequence_length.\(name)", value: value)
        }
        guard seq.max == maxLength else {
            throw BundleManifestError.inconsistent(path: "sequence_length.max",
                                                   reason: "\(seq.max) differs from max_length \(maxLength)")
        }
        guard seq.min <= seq.defaultLength, seq.defaultLength <= seq.max else {
            throw BundleManifestError.inconsistent(
                path: "sequence_length", reason: "expected min ≤ default ≤ max, got \(seq.min), \(seq.defaultLength), \(seq.max)")
        }
        switch seq.kind {
        case .fixed:
            guard seq.min == seq.max else {
                throw BundleManifestError.inconsistent(path: "sequence_length",
                                                       reason: "a fixed length has min = max, got \(seq.min) and \(seq.max)")
            }
        case .range:
            break
        case .enumerated:
            guard let lengths = seq.lengths else { throw BundleManifestError.missingField("sequence_length.lengths") }
            guard lengths.count >= 2 else {
                throw BundleManifestError.invalidValue(path: "sequence_length.lengths",
                                                       reason: "\(lengths.count) length(s), at least 2 are needed")
            }
            for (i, length) in lengths.enumerated() where length < 2 {
                throw BundleManifestError.invalidMaxLength(path: "sequence_length.lengths[\(i)]", value: length)
            }
            guard zip(lengths, lengths.dropFirst()).allSatisfy({ $0 < $1 }), lengths.first == seq.min,
                  lengths.last == seq.max, lengths.contains(seq.defaultLength) else {
                throw BundleManifestError.inconsistent(
                    path: "sequence_length.lengths",
                    reason: "\(lengths) must ascend from min \(seq.min) to max \(seq.max) and hold default \(seq.defaultLength)")
            }
        }
    }

    private func validateFiles() throws {
        guard !files.isEmpty else { throw BundleManifestError.noFiles }
        for path in files.keys.sorted() {
            guard BundleManifest.isSafeRelativePath(path) else { throw BundleManifestError.invalidFilePath(path) }
            let entry = files[path]!
            try BundleManifest.checkSHA256(entry.sha256, path: "files.\(path).sha256")
            guard entry.bytes >= 0 else {
                throw BundleManifestError.invalidValue(path: "files.\(path).bytes", reason: "\(entry.bytes) is negative")
            }
        }
    }

    private func validateTokenizer() throws {
        let t = tokenizer
        guard t.maxLength >= 2 else { throw BundleManifestError.invalidMaxLength(path: "tokenizer.max_length", value: t.maxLength) }
        guard t.maxLength == maxLength else {
            throw BundleManifestError.inconsistent(path: "tokenizer.max_length",
                                                   reason: "\(t.maxLength) differs from max_length \(maxLength)")
        }
        guard !t.files.isEmpty else {
            throw BundleManifestError.invalidValue(path: "tokenizer.files", reason: "the list is empty")
        }
        for (i, file) in t.files.enumerated() where files[file] == nil {
            throw BundleManifestError.fileNotListed(path: "tokenizer.files[\(i)]", file: file)
        }
        try validateTokenizerFile(t)
        guard t.vocabSize >= 1 else {
            throw BundleManifestError.invalidValue(path: "tokenizer.vocab_size", reason: "\(t.vocabSize) is below 1")
        }
        guard t.vocabSize == student.vocabSize else {
            throw BundleManifestError.inconsistent(path: "tokenizer.vocab_size",
                                                   reason: "\(t.vocabSize) differs from student.vocab_size \(student.vocabSize)")
        }
        let specials = [("cls", t.clsToken, t.clsID), ("sep", t.sepToken, t.sepID), ("pad", t.padToken, t.padID),
                        ("unk", t.unkToken, t.unkID)]
        var ids: [Int: String] = [:]
        for (role, token, id) in specials {
            guard !token.isEmpty else {
                throw BundleManifestError.invalidValue(path: "tokenizer.\(role)_token", reason: "the token is empty")
            }
            guard (0..<t.vocabSize).contains(id) else {
                throw BundleManifestError.invalidValue(path: "tokenizer.\(role)_id",
                                                       reason: "\(id) is outside the vocabulary (\(t.vocabSize) tokens)")
            }
            if let other = ids[id] {
                throw BundleManifestError.inconsistent(path: "tokenizer.\(role)_id",
                                                       reason: "\(id) is also the \(other) id")
            }
            ids[id] = role
        }
        guard t.cleanText || t.type == .unigram else { // a Unigram tokenizer normalizes by its spec
            throw BundleManifestError.unsupportedTokenizerSetting(
                name: "clean_text", value: "false", reason: "MLXEdgeKit's BertTokenizer always cleans text")
        }
        guard t.truncation else {
            throw BundleManifestError.unsupportedTokenizerSetting(
                name: "truncation", value: "false", reason: "the encoder takes at most max_length tokens; truncation must be on")
        }
    }

    /// The one file the tokenizer of `t.type` reads is named and listed in `tokenizer.files`.
    private func validateTokenizerFile(_ t: Tokenizer) throws {
        switch t.type {
        case .wordpiece:
            guard let vocabFile = t.vocabFile, !vocabFile.isEmpty else {
                throw BundleManifestError.unsupportedTokenizerSetting(
                    name: "vocab_file", value: "null", reason: "MLXEdgeKit's BertTokenizer needs a WordPiece vocab.txt")
            }
            guard t.files.contains(vocabFile) else {
                throw BundleManifestError.fileNotListed(path: "tokenizer.vocab_file", file: vocabFile)
            }
            if let specFile = t.specFile {
                throw BundleManifestError.inconsistent(
                    path: "tokenizer.spec_file",
                    reason: "\"\(specFile)\" is a Unigram spec, but tokenizer.type is \"wordpiece\" (it reads vocab_file)")
            }
        case .unigram:
            guard let specFile = t.specFile, !specFile.isEmpty else {
                throw BundleManifestError.unsupportedTokenizerSetting(
                    name: "spec_file", value: "null",
                    reason: "MLXEdgeKit's UnigramTokenizer needs the spec the exporter writes (unigram_spec.json); "
                        + "export the bundle again with a current mlx-edge")
            }
            guard t.files.contains(specFile) else {
                throw BundleManifestError.fileNotListed(path: "tokenizer.spec_file", file: specFile)
            }
        }
    }

    private func validateModels() throws {
        let hidden = student.hiddenSize

        // Encoder: ids + mask → embedding.
        let encoder = models.encoder
        try checkEntry(encoder, name: "encoder", expected: .mlprogram)
        guard encoder.inputs.count == 2 else {
            throw BundleManifestError.invalidValue(
                path: "models.encoder.inputs",
                reason: "\(encoder.inputs.count) inputs, expected 2 (token ids, then attention mask)")
        }
        for (i, input) in encoder.inputs.enumerated() {
            let path = "models.encoder.inputs[\(i)]"
            try BundleManifest.checkDataType(input, path: path, allowed: [.int32])
            let shape = try BundleManifest.numericShape(input, path: path)
            guard shape.count == 1 || (shape.count == 2 && shape[0] == 1) else {
                throw BundleManifestError.invalidShape(path: path + ".shape", shape: "\(shape)",
                                                       reason: "expected [length] or [1, length]")
            }
            guard sequenceLength.accepts(shape[shape.count - 1]) else {
                throw BundleManifestError.invalidShape(
                    path: path + ".shape", shape: "\(shape)",
                    reason: "the length \(shape[shape.count - 1]) is not one sequence_length accepts")
            }
            try checkFlexibleLength(input, path: path)
        }
        guard encoder.inputs[0].shape == encoder.inputs[1].shape else {
            throw BundleManifestError.invalidShape(
                path: "models.encoder.inputs[1].shape", shape: "\(encoder.inputs[1].shape)",
                reason: "the attention mask must have the token ids' shape \(encoder.inputs[0].shape)")
        }
        let (embeddingIndex, embedding) = try feature(encoder.embeddingOutput, in: encoder.outputs, model: "encoder", kind: "output")
        try checkVector(embedding, path: "models.encoder.outputs[\(embeddingIndex)]", count: hidden,
                        what: "the embedding width (student.hidden_size \(hidden))")

        // Head: embedding → probs; trained on (embedding, label index).
        let head = models.head
        try checkEntry(head, name: "head", expected: .neuralnetwork)
        let (headInputIndex, headInput) = try feature(head.embeddingInput, in: head.inputs, model: "head", kind: "input")
        try checkVector(headInput, path: "models.head.inputs[\(headInputIndex)]", count: hidden,
                        what: "the embedding width (student.hidden_size \(hidden))")
        let (probsIndex, probs) = try feature(head.probabilitiesOutput, in: head.outputs, model: "head", kind: "output")
        try checkVector(probs, path: "models.head.outputs[\(probsIndex)]", count: labels.count,
                        what: "one probability per label (\(labels.count) labels)")
        guard head.embeddingInput != head.labelInput else {
            throw BundleManifestError.inconsistent(path: "models.head.label_input",
                                                   reason: "the label input cannot also be the embedding input")
        }
        guard let trainingEmbeddingIndex = head.trainingInputs.firstIndex(where: { $0.name == head.embeddingInput }) else {
            throw BundleManifestError.missingTrainingInput(name: head.embeddingInput)
        }
        guard let labelIndex = head.trainingInputs.firstIndex(where: { $0.name == head.labelInput }) else {
            throw BundleManifestError.missingTrainingInput(name: head.labelInput)
        }
        try checkFeatureNames(head.trainingInputs, path: "models.head.training_inputs")
        try checkVector(head.trainingInputs[trainingEmbeddingIndex],
                        path: "models.head.training_inputs[\(trainingEmbeddingIndex)]", count: hidden,
                        what: "the embedding width (student.hidden_size \(hidden))")
        let label = head.trainingInputs[labelIndex]
        let labelPath = "models.head.training_inputs[\(labelIndex)]"
        try BundleManifest.checkDataType(label, path: labelPath, allowed: [.int32])
        let labelShape = try BundleManifest.numericShape(label, path: labelPath)
        guard labelShape.reduce(1, *) == 1 else {
            throw BundleManifestError.invalidShape(path: labelPath + ".shape", shape: "\(labelShape)",
                                                   reason: "the label input holds one class index: expected [1]")
        }
        guard head.loss.type == "categorical_cross_entropy" else {
            throw BundleManifestError.invalidValue(path: "models.head.loss.type",
                                                   reason: "\"\(head.loss.type)\", expected \"categorical_cross_entropy\"")
        }
        guard head.loss.input == head.probabilitiesOutput else {
            throw BundleManifestError.inconsistent(
                path: "models.head.loss.input",
                reason: "\"\(head.loss.input)\" differs from probabilities_output \"\(head.probabilitiesOutput)\"")
        }
        guard head.loss.target == head.labelInput else {
            throw BundleManifestError.inconsistent(
                path: "models.head.loss.target", reason: "\"\(head.loss.target)\" differs from label_input \"\(head.labelInput)\"")
        }
        guard !head.updatableLayers.isEmpty else {
            throw BundleManifestError.invalidValue(path: "models.head.updatable_layers", reason: "no updatable layer")
        }
        let rate = head.optimizer.learningRate
        guard rate.min > 0, rate.min <= rate.defaultValue, rate.defaultValue <= rate.max else {
            throw BundleManifestError.inconsistent(
                path: "models.head.optimizer.learning_rate",
                reason: "expected 0 < min ≤ default ≤ max, got \(rate.min), \(rate.defaultValue), \(rate.max)")
        }
        try checkChoice(head.optimizer.miniBatchSize, path: "models.head.optimizer.mini_batch_size")
        try checkChoice(head.epochs, path: "models.head.epochs")

        // The extras (`--extras`; not used by MLXEdgeKit): checked when the bundle has them.
        if let classifier = models.classifier {
            try checkEntry(classifier, name: "classifier", expected: .mlprogram)
            let (classifierIndex, classifierProbs) = try feature(classifier.probabilitiesOutput, in: classifier.outputs,
                                                                 model: "classifier", kind: "output")
            try checkVector(classifierProbs, path: "models.classifier.outputs[\(classifierIndex)]", count: labels.count,
                            what: "one probability per label (\(labels.count) labels)")
        }
        if let onnx = models.onnx { // symbolic dimensions allowed
            try checkEntry(onnx, name: "onnx", expected: .onnx)
            guard onnx.opset >= 13 else {
                throw BundleManifestError.invalidValue(path: "models.onnx.opset", reason: "\(onnx.opset) is below 13")
            }
        }
    }

    // MARK: Check helpers

    static func checkSHA256(_ value: String, path: String) throws {
        guard SHA256Hasher.isHexDigest(value) else { throw BundleManifestError.invalidSHA256(path: path, value: value) }
    }

    /// Relative, non-empty, no `..`, no empty or `.` components, no backslash.
    static func isSafeRelativePath(_ path: String) -> Bool {
        guard !path.isEmpty, !path.hasPrefix("/"), !path.contains("\\") else { return false }
        let parts = path.split(separator: "/", omittingEmptySubsequences: false)
        return parts.allSatisfy { !$0.isEmpty && $0 != "." && $0 != ".." }
    }

    static func checkDataType(_ feature: Feature, path: String, allowed: [DataType]) throws {
        guard allowed.contains(feature.dtype) else {
            throw BundleManifestError.invalidDataType(path: path + ".dtype", found: feature.dtype.rawValue,
                                                      expected: allowed.map(\.rawValue))
        }
    }

    /// The shape as positive numbers (a CoreML model's shapes are never symbolic).
    static func numericShape(_ feature: Feature, path: String) throws -> [Int] {
        guard !feature.shape.isEmpty else {
            throw BundleManifestError.invalidShape(path: path + ".shape", shape: "[]", reason: "the shape is empty")
        }
        guard let shape = feature.fixedShape else {
            throw BundleManifestError.invalidShape(path: path + ".shape", shape: "\(feature.shape)",
                                                   reason: "a CoreML feature needs numeric dimensions")
        }
        guard shape.allSatisfy({ $0 > 0 }) else {
            throw BundleManifestError.invalidShape(path: path + ".shape", shape: "\(shape)",
                                                   reason: "every dimension must be positive")
        }
        return shape
    }

    /// A float feature of `count` elements, `[count]` or `[1, …, count]`.
    private func checkVector(_ feature: Feature, path: String, count: Int, what: String) throws {
        try BundleManifest.checkDataType(feature, path: path, allowed: [.float32, .float16, .float64])
        let shape = try BundleManifest.numericShape(feature, path: path)
        guard shape.dropLast().allSatisfy({ $0 == 1 }), shape.last == count else {
            throw BundleManifestError.invalidShape(path: path + ".shape", shape: "\(shape)",
                                                   reason: "expected [\(count)] or [1, \(count)]: \(what)")
        }
    }

    /// Model format, file listed in `files` (a file, or the folder of a package), feature lists.
    private func checkEntry(_ entry: any BundleModelEntry, name: String, expected: ModelFormat) throws {
        guard entry.format == expected else {
            throw BundleManifestError.invalidValue(path: "models.\(name).format",
                                                   reason: "\"\(entry.format.rawValue)\", expected \"\(expected.rawValue)\"")
        }
        guard !entry.file.isEmpty else {
            throw BundleManifestError.invalidValue(path: "models.\(name).file", reason: "the file name is empty")
        }
        guard files[entry.file] != nil || files.keys.contains(where: { $0.hasPrefix(entry.file + "/") }) else {
            throw BundleManifestError.fileNotListed(path: "models.\(name).file", file: entry.file)
        }
        guard !entry.inputs.isEmpty else {
            throw BundleManifestError.invalidValue(path: "models.\(name).inputs", reason: "no inputs")
        }
        guard !entry.outputs.isEmpty else {
            throw BundleManifestError.invalidValue(path: "models.\(name).outputs", reason: "no outputs")
        }
        try checkFeatureNames(entry.inputs, path: "models.\(name).inputs")
        try checkFeatureNames(entry.outputs, path: "models.\(name).outputs")
        if expected != .onnx {
            for (i, feature) in entry.inputs.enumerated() {
                _ = try BundleManifest.numericShape(feature, path: "models.\(name).inputs[\(i)]")
            }
            for (i, feature) in entry.outputs.enumerated() {
                _ = try BundleManifest.numericShape(feature, path: "models.\(name).outputs[\(i)]")
            }
        }
    }

    private func checkFeatureNames(_ features: [Feature], path: String) throws {
        var seen = Set<String>()
        for (i, feature) in features.enumerated() {
            guard !feature.name.isEmpty else {
                throw BundleManifestError.invalidValue(path: "\(path)[\(i)].name", reason: "the name is empty")
            }
            guard seen.insert(feature.name).inserted else {
                throw BundleManifestError.inconsistent(path: "\(path)[\(i)].name",
                                                       reason: "\"\(feature.name)\" appears twice")
            }
        }
    }

    private func feature(_ name: String, in features: [Feature], model: String, kind: String) throws -> (Int, Feature) {
        guard let index = features.firstIndex(where: { $0.name == name }) else {
            throw BundleManifestError.featureNotFound(model: model, kind: kind, name: name)
        }
        return (index, features[index])
    }

    /// `shape_range` / `enumerated_shapes` of an encoder input agree with `sequence_length`.
    private func checkFlexibleLength(_ feature: Feature, path: String) throws {
        let seq = sequenceLength
        if let ranges = feature.shapeRange {
            guard ranges.count == feature.shape.count, ranges.allSatisfy({ $0.count == 2 && $0[0] <= $0[1] }),
                  let last = ranges.last, last == [seq.min, seq.max] else {
                throw BundleManifestError.inconsistent(
                    path: path + ".shape_range",
                    reason: "\(ranges) must have one [lower, upper] per dimension, the last [\(seq.min), \(seq.max)]")
            }
        }
        if let shapes = feature.enumeratedShapes {
            let lengths = shapes.compactMap(\.last).sorted() // the exporter lists the default shape first
            guard shapes.allSatisfy({ $0.count == feature.shape.count }), lengths == (seq.lengths ?? []) else {
                throw BundleManifestError.inconsistent(
                    path: path + ".enumerated_shapes",
                    reason: "the lengths \(lengths) differ from sequence_length.lengths \(seq.lengths ?? [])")
            }
        }
        if seq.kind == .range, feature.shapeRange == nil {
            throw BundleManifestError.missingField(path + ".shape_range")
        }
        if seq.kind == .enumerated, feature.enumeratedShapes == nil {
            throw BundleManifestError.missingField(path + ".enumerated_shapes")
        }
    }

    private func checkChoice(_ choice: Choice, path: String) throws {
        guard !choice.allowed.isEmpty, choice.allowed.allSatisfy({ $0 >= 1 }) else {
            throw BundleManifestError.invalidValue(path: path + ".allowed", reason: "\(choice.allowed) must be values ≥ 1")
        }
        guard choice.allowed.contains(choice.defaultValue) else {
            throw BundleManifestError.inconsistent(path: path + ".default",
                                                   reason: "\(choice.defaultValue) is not in allowed \(choice.allowed)")
        }
    }
}
