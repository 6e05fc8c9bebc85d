"""`export_bundle`: a student directory -> the bundle the Swift app loads, verified before it exists.

safetensors -> PyTorch mirror (parity with MLX checked) -> `torch.jit.trace` -> coremltools:
Encoder.mlpackage (ids -> embedding, logits), the updatable Head.mlmodel (embedding -> probs), tokenizer
files (a Unigram student's as the spec MLXEdgeKit tokenizes from, unigram_spec.json, in place of its
tokenizer.json) and manifest.json: what the app loads, once. On request (`extras`) also
Classifier.mlpackage (ids -> probabilities: the encoder's weights again), model.onnx (fp32) and a
Unigram student's tokenizer.json. The CoreML models carry the labels
and the tokenizer files' sha256 in their metadata, for `check` to hold the manifest to. Everything is
written to a temporary directory beside `out_dir`, checked, and renamed into place at the end.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
from tqdm import tqdm

from bridges import coreml_export as cx
from bridges import io_names
from bridges.check_numeric import encode
from bridges.checks import bundle_files, check_files, check_io
from bridges.coreml_codes import check_student_codes, student_codes, write_codes
from bridges.coreml_export import BLOCK_MODES, COMPUTE_UNITS, MIN_TARGETS, PRECISIONS, QUANTIZE, parse_seq_len
from bridges.coreml_head import BATCH_SIZES, EPOCHS, HEAD_STEP, HeadTraining, build_head, describe_head, save_head
from bridges.onnx_export import export_onnx
from bridges.torch_mirror import ClassifierWrapper, load_mirror, read_student_weights
from mlx_edge.bundle.layout import (
    CLASSIFIER_FILE,
    ENCODER_FILE,
    EXTRAS,
    FORMAT,
    FORMAT_VERSION,
    HEAD_FILE,
    LABELS_KEY,
    MANIFEST,
    MODEL_FILES,
    ONNX_FILE,
    TOKENIZER_KEY,
    manifest_problems,
    tokenizer_digests,
    tokenizer_entry,
    tool_versions,
    weights_sha256,
)
from mlx_edge.bundle.tokenizer_spec import check_tokenizer_spec, spec_tokenizer, write_tokenizer_spec
from mlx_edge.bundle.verify import default_texts, verify_artifacts
from mlx_edge.errors import ExportError
from mlx_edge.fileio import (
    atomic_write_json,
    disk_bytes,
    refuse_overwriting_inputs,
    remove_stale_staging,
    sha256_file,
    staging_dir,
)
from mlx_edge.manifest import read_manifest
from mlx_edge.models.checkpoint import copy_tokenizer_files, load_config, load_model
from mlx_edge.models.tokenizer import load_tokenizer
from mlx_edge.runtime.devices import mlx_device
from mlx_edge.settings import EXPORT


@dataclass
class ExportResult:
    bundle: Path
    manifest: dict
    seconds: float
    sizes: dict[str, int] = field(default_factory=dict)  # each model's file or package -> bytes
    total_bytes: int = 0  # every file of the bundle, manifest.json included


def export_bundle(
    *,
    student_dir: Path,
    out_dir: Path,
    seq_len: str | int | None = EXPORT.seq_len,
    precision: str = EXPORT.precision,
    compute_units: str = EXPORT.compute_units,
    min_target: str = EXPORT.min_target,
    quantize: str = EXPORT.quantize,
    block_size: int = EXPORT.block_size,
    palettize_bits: int = EXPORT.palettize_bits,
    palettize_mode: str = EXPORT.palettize_mode,
    head_optimizer: str = EXPORT.head_optimizer,
    head_learning_rate: float | None = EXPORT.head_learning_rate,
    head_batch_size: int = EXPORT.head_batch_size,
    head_epochs: int = EXPORT.head_epochs,
    author: str = EXPORT.author,
    license: str = EXPORT.license,
    model_version: str = EXPORT.model_version,
    description: str = EXPORT.description,
    force: bool = False,
    parity_texts: list[str] | None = None,
    n_texts: int = EXPORT.n_texts,
    allow_failed_checks: bool = False,
    device: str = EXPORT.device,
    extras: tuple[str, ...] | list[str] = EXPORT.extras,
    progress: bool = True,
) -> ExportResult:
    """Export `student_dir` to `out_dir`; raise ExportError (leaving nothing behind) on any failure.

    `seq_len`: 128, "16-128" or "32,64,128"; None takes the max length the student was distilled
    with (its mlx_edge_manifest.json), else 128, within its position embeddings.
    `device` is where the MLX student runs for the parity reference (`--device`).
    `extras`: "classifier", "onnx" and/or "tokenizer-json", what the app does not load (see bundle/layout.py).
    `block_size`: the most weights per scale with quantize "int8-block" / "int4-block" (iOS18); each
    weight takes the largest divisor of its input width up to it (`bridges.coreml_export.block_for`).
    `head_*`: the updatable head's on-device training, baked into Head.mlmodel (apps may override some);
    `head_learning_rate` None: HEAD_STEP over the top eigenvalue of the check texts' embeddings' second moment.
    """
    start = time.perf_counter()
    student_dir, out_dir = Path(student_dir), Path(out_dir)
    _check_choice("precision", precision, PRECISIONS)
    _check_choice("compute units", compute_units, COMPUTE_UNITS)
    _check_choice("minimum target", min_target, MIN_TARGETS)
    _check_choice("quantize", quantize, QUANTIZE)
    _check_choice("head optimizer", head_optimizer, ("sgd", "adam"))
    for extra in extras:
        _check_choice("extra", extra, EXTRAS)
    extras = tuple(e for e in EXTRAS if e in extras)  # one order, no repeats
    rate_ok = head_learning_rate is None or 1e-5 <= head_learning_rate <= 1.0
    if head_batch_size not in BATCH_SIZES or head_epochs not in EPOCHS or not rate_ok:
        raise ExportError(
            f"head training settings out of range (batch {head_batch_size}, epochs {head_epochs}, "
            f"learning rate {head_learning_rate})",
            f"batch in {list(BATCH_SIZES)}, epochs 1-{EPOCHS[-1]}, learning rate 1e-5..1",
        )

    mlx_device(device)
    config = load_config(student_dir)  # ModelError for anything that is not a model directory
    _check_blocks(quantize, block_size, min_target, config)
    check_student_codes(quantize, block_size, config)
    if out_dir.exists() and not force:
        raise ExportError(f"{out_dir} already exists", "pass --force to replace it, or choose another --out")
    if out_dir.resolve() == student_dir.resolve() or student_dir.resolve() in out_dir.resolve().parents:
        raise ExportError(f"--out {out_dir} is inside the student directory", "write the bundle elsewhere")
    refuse_overwriting_inputs(out_dir, student_dir)  # --out PARENT_OF_STUDENT --force would delete the student
    if seq_len is None:
        seq_len = min((read_manifest(student_dir) or {}).get("max_length") or 128, config.max_position_embeddings)
    seq = parse_seq_len(seq_len, max_positions=config.max_position_embeddings)
    if seq.kind == "enumerated" and MIN_TARGETS.index(min_target) < MIN_TARGETS.index("iOS18"):
        raise ExportError(
            f"enumerated lengths ({seq}) need --min-target iOS18: below it CoreML takes only one "
            "input with enumerated shapes",
            f"use a range such as {seq.min}-{seq.max}, or --min-target iOS18",
        )
    training = HeadTraining(  # learning_rate None: set from the embeddings once the student is loaded (_build)
        optimizer=head_optimizer, learning_rate=head_learning_rate, batch_size=head_batch_size, epochs=head_epochs
    )
    texts = parity_texts if parity_texts is not None else default_texts(n_texts)

    remove_stale_staging(out_dir)  # what a killed export left beside it (a live one's is kept)
    tmp = staging_dir(out_dir)
    try:
        manifest = _build(
            student_dir,
            tmp,
            seq=seq,
            precision=precision,
            compute_units=compute_units,
            min_target=min_target,
            compression={
                "quantize": quantize,
                "palettize_bits": palettize_bits,
                "palettize_mode": palettize_mode,
                "block_size": block_size,
            },
            training=training,
            texts=texts,
            texts_source="given texts" if parity_texts is not None else "todo dev split (mlx_edge.datasets)",
            info={"author": author, "license": license, "version": model_version, "description": description},
            allow_failed_checks=allow_failed_checks,
            extras=extras,
            progress=progress,
        )
        _replace(tmp, out_dir, force=force)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    sizes = {entry["file"]: disk_bytes(out_dir / entry["file"]) for entry in manifest["models"].values()}
    return ExportResult(out_dir, manifest, time.perf_counter() - start, sizes, disk_bytes(out_dir))


def _check_choice(what: str, value: str, allowed) -> None:
    if value not in allowed:
        raise ExportError(f"{what} {value!r} is not one of {', '.join(allowed)}")


def _check_blocks(quantize: str, block_size: int, min_target: str, config) -> None:
    """A block-wise mode needs iOS 18, and each weight width a divisor near the block size: a weight
    takes the largest divisor of its input width up to --block-size (`block_for`), and one below
    half of it would spend many more scales than asked for (a prime width: one per weight)."""
    if quantize not in BLOCK_MODES:
        return
    if min_target != "iOS18":
        raise ExportError(
            f"--quantize {quantize} needs --min-target iOS18: block-wise weights "
            "(constexpr_blockwise_shift_scale) run on iOS 18 / macOS 15 and later",
            "add --min-target iOS18, or use --quantize int8 (per channel, iOS 16)",
        )
    if block_size < 1:
        raise ExportError(f"--block-size {block_size} is below 1", "use --block-size 32 (the default)")
    widths = _weight_widths(config)
    poor = {name: w for name, w in widths.items() if _poor_fit(w, block_size)}
    if poor:
        fits = [b for b in (8, 16, 24, 32, 48, 64, 96, 128, 256) if not any(_poor_fit(w, b) for w in widths.values())]
        listed = ", ".join(
            f"{name} {w} (largest divisor up to {block_size}: {cx.block_for(w, block_size)})"
            for name, w in poor.items()
        )
        raise ExportError(
            f"--block-size {block_size} fits the student's weight widths badly: {listed}",
            f"use --block-size {min(fits, key=lambda b: abs(b - block_size))}" if fits else "use --quantize int8",
        )


def _poor_fit(width: int, block_size: int) -> bool:
    """The block a `width`-wide weight gets is below half of what was asked (or of its width)."""
    return 2 * cx.block_for(width, block_size) < min(block_size, width)


def _weight_widths(config) -> dict[str, int]:
    embedding = getattr(config, "embedding_size", None)  # a factorized table's rows are weights too
    return {
        "hidden": config.hidden_size,
        "intermediate": config.intermediate_size,
        **({"embedding": embedding} if embedding else {}),
    }


def _replace(tmp: Path, out_dir: Path, *, force: bool) -> None:
    """Rename the finished bundle into place; an existing one (with --force) is swapped out first."""
    old = None
    if out_dir.exists():
        if not force:
            raise ExportError(f"{out_dir} appeared during the export", "pass --force to replace it")
        old = out_dir.with_name(f".{out_dir.name}.old-{os.getpid()}")
        os.replace(out_dir, old)
    os.replace(tmp, out_dir)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True) if old.is_dir() else old.unlink()


def _build(
    student_dir: Path,
    tmp: Path,
    *,
    seq,
    precision,
    compute_units,
    min_target,
    compression,
    training,
    texts,
    texts_source,
    info,
    allow_failed_checks,
    extras,
    progress,
) -> dict:
    programs = ["encoder", *(["classifier"] if "classifier" in extras else [])]
    steps = ["load student", *programs, "head", *(["onnx"] if "onnx" in extras else []), "verify", "manifest"]
    bar = tqdm(total=len(steps), file=sys.stderr, disable=not progress, unit="step", leave=False)

    def step(name):
        bar.set_description(f"export: {name}")

    step("load student")
    student = load_model(student_dir, require_head=True)
    config = student.config
    tokenizer = load_tokenizer(student_dir)
    spec_file = write_tokenizer_spec(tokenizer, student_dir, tmp)
    spec_only = spec_file is not None and "tokenizer-json" not in extras  # the app's one tokenizer file
    tokenizer_files = copy_tokenizer_files(student_dir, tmp, unigram_spec=spec_only) + (
        [spec_file] if spec_file else []
    )
    if spec_only:  # from here on, tokenize as the app will: from the spec (proven equal on texts and probes)
        tokenizer = spec_tokenizer(tokenizer, tmp, texts, max_length=max(seq.max, 512))
    weights = read_student_weights(student_dir)
    codes = student_codes(student_dir)  # a quantized student's own codes go into the programs as they are
    mirror = load_mirror(weights, config, source=student_dir)
    labels = config.labels
    versions = tool_versions()
    user = {
        LABELS_KEY: json.dumps(labels, ensure_ascii=False),
        # `check` ties the bundle's vocabulary to the models with these: a manifest's own sha256 can be recomputed.
        TOKENIZER_KEY: json.dumps(tokenizer_digests(tmp, tokenizer_files)),
        "mlx_edge.max_length": str(seq.max),
        "mlx_edge.sequence_length": str(seq),
        "mlx_edge.compute_units": compute_units,
        "mlx_edge.version": versions["mlx-edge"],
    }
    meta = dict(
        author=info["author"] or "mlx-edge",
        license=info["license"] or "unspecified",
        version=info["version"],
        user=user,
    )
    about = info["description"] or f"Text classifier distilled with mlx-edge ({len(labels)} labels)"
    bar.update()

    entries = {}
    mirror.fixed_length = seq.max if seq.kind == "fixed" else None  # reset before ONNX (dynamic axes)
    for name in programs:
        step(name)
        entries[name] = _program(
            name,
            mirror,
            tmp,
            seq=seq,
            labels=labels,
            hidden_size=config.hidden_size,
            pad_id=tokenizer.pad_id,
            about=about,
            meta=meta,
            convert={"precision": precision, "min_target": min_target, "compute_units": compute_units},
            compress=compression,
            codes=codes,
        )
        bar.update()
    mirror.fixed_length = None

    step("head")
    rate_from = None
    if training.learning_rate is None:
        rate, top = head_rate(mirror, encode(tokenizer, texts, seq))
        training = replace(training, learning_rate=rate)
        rate_from = {"rate_times_top_eigenvalue": HEAD_STEP, "top_eigenvalue": top, "texts": len(texts)}
    entries["head"] = _head(weights, training, tmp, about=about, meta=meta)
    if rate_from:
        entries["head"]["learning_rate_from"] = rate_from
    bar.update()

    if "onnx" in extras:
        step("onnx")
        onnx_info = export_onnx(mirror, tmp / ONNX_FILE, example_length=seq.max)
        entries["onnx"] = {"file": ONNX_FILE, "format": "onnx", **onnx_info}
        bar.update()

    manifest = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "model": {
            "description": about,
            "author": meta["author"],
            "license": meta["license"],
            "version": meta["version"],
        },
        "student": {
            "path": str(student_dir.resolve()),
            "config_sha256": sha256_file(student_dir / "config.json"),
            "weights_sha256": weights_sha256(student_dir),
            "hidden_size": config.hidden_size,
            "num_hidden_layers": config.num_hidden_layers,
            "vocab_size": config.vocab_size,
            **({"kind": "static"} if config.model_type == "static" else {}),  # absent: bert (older bundles)
        },
        "labels": labels,
        "max_length": seq.max,
        "sequence_length": seq.to_dict(),
        "precision": precision,
        "quantize": _quantize(compression, codes, config),
        "compute_units": compute_units,
        "minimum_deployment_target": min_target,
        "tokenizer": tokenizer_entry(tokenizer, tokenizer_files, seq, spec_file),
        # the app's models first, then the extras, in the order of MODEL_FILES
        "models": {key: entries[key] for key in MODEL_FILES if key in entries},
        "versions": versions,
    }

    step("verify")
    results = check_tokenizer_spec(tmp, manifest) + verify_artifacts(
        tmp, manifest, student=student, mirror=mirror, tokenizer=tokenizer, texts=texts
    )
    failed = [r for r in results if not r.ok]
    manifest["checks"] = {
        "texts": len(texts),
        "source": texts_source,
        "passed": not failed,
        "results": [r.to_dict() for r in results],
    }
    if failed and not allow_failed_checks:
        listed = "; ".join(f"{r.name}: {r.detail}" for r in failed[:3])
        raise ExportError(
            f"the exported bundle failed {len(failed)} check(s): {listed}",
            "try --precision fp32 or --quantize none, or --allow-failed-checks to keep it",
        )
    bar.update()

    step("manifest")
    manifest["files"] = bundle_files(tmp)
    _validate_manifest(manifest)
    atomic_write_json(tmp / MANIFEST, manifest)
    structural = check_files(tmp, manifest) + check_io(tmp, manifest)
    broken = [r for r in structural if not r.ok]
    if broken:  # our own bug, not the user's: say which
        raise ExportError(f"internal: the bundle disagrees with its manifest: {broken[0].detail}")
    bar.update()
    bar.close()
    return manifest


def _program(
    name, mirror, tmp: Path, *, seq, labels, hidden_size, pad_id, about, meta, convert, compress, codes
) -> dict:
    """Convert, compress (a quantized student: its own `codes`), describe and save one mlprogram:
    "encoder" (ids -> embedding, logits) or "classifier" (ids -> probabilities); returns its manifest entry."""
    if name == "encoder":
        file, module, kind = ENCODER_FILE, mirror, "sentence embedding and logits"
        docs = {
            io_names.EMBEDDING: f"Pooled sentence embedding ({hidden_size} floats): the head's input",
            io_names.LOGITS: f"Unnormalized scores of the {len(labels)} labels",
        }
    else:
        file, module, kind = CLASSIFIER_FILE, ClassifierWrapper(mirror), "label probabilities (not updatable)"
        docs = {io_names.PROBABILITIES: f"Probabilities of the labels {', '.join(labels)}"}
    model = cx.convert(module, outputs=list(docs), seq=seq, **convert)
    model = write_codes(model, codes) if codes else cx.compress(model, **compress)
    cx.set_metadata(
        model,
        description=f"{about}: {kind}",
        features={
            io_names.INPUT_IDS: f"Token ids, int32 (1, {seq}), [CLS] ... [SEP] then [PAD] (id {pad_id})",
            io_names.ATTENTION_MASK: "1 for real tokens, 0 for padding, int32, same shape as input_ids",
            **docs,
        },
        **meta,
    )
    cx.save(model, tmp / file)
    spec = cx.load_spec(tmp / file)
    entry = {
        "file": file,
        "format": "mlprogram",
        "inputs": cx.spec_features(spec, "input"),
        "outputs": cx.spec_features(spec, "output"),
    }
    entry["embedding_output" if name == "encoder" else "probabilities_output"] = list(docs)[0]
    return entry


def head_rate(mirror, examples: list[tuple[np.ndarray, np.ndarray]]) -> tuple[float, float]:
    """(the head's default learning rate, the top eigenvalue of the embeddings' second moment E[x x^T] it
    is scaled by). The cross-entropy's curvature in a linear head's weights is at most half that
    eigenvalue, so a step of 2 / eigenvalue is the edge of stable SGD and HEAD_STEP / eigenvalue a
    quarter of it: a correction is learned within the default epochs, on embeddings with one large shared
    direction (where the eigenvalue is near the squared norm) as on spread-out ones (where it is a
    fraction of it). Within the head's allowed 1e-5..1."""
    import torch  # lazy: the export imports torch through the mirror anyway

    was_training = mirror.training
    mirror.eval()
    with torch.no_grad():
        rows = [mirror(torch.from_numpy(ids), torch.from_numpy(mask))[0].double().numpy() for ids, mask in examples]
    x = np.concatenate([r.reshape(-1, r.shape[-1]) for r in rows])  # (texts, width)
    mirror.train(was_training)
    top = float(np.linalg.eigvalsh(x @ x.T / len(x))[-1])  # = that of x.T @ x / len(x), a smaller matrix
    return float(np.clip(HEAD_STEP / max(top, 1e-12), 1e-5, 1.0)), top


def _head(weights: dict, training: HeadTraining, tmp: Path, *, about: str, meta: dict) -> dict:
    """Build and save the updatable Head.mlmodel; returns its manifest entry."""
    head_spec = build_head(weights["classifier.weight"], weights["classifier.bias"], training)
    head_spec.description.metadata.shortDescription = f"{about}: updatable classifier head (MLUpdateTask)"
    head_spec.description.metadata.author = meta["author"]
    head_spec.description.metadata.license = meta["license"]
    head_spec.description.metadata.versionString = meta["version"]
    save_head(head_spec, tmp / HEAD_FILE, meta["user"])
    head = describe_head(head_spec)
    loss = head["losses"][0]
    label_input = next(f["name"] for f in head["training_inputs"] if f["name"] == loss["target"])
    return {
        "file": HEAD_FILE,
        "format": "neuralnetwork",
        "inputs": head["inputs"],
        "outputs": head["outputs"],
        "training_inputs": head["training_inputs"],
        "embedding_input": head["inputs"][0]["name"],
        "label_input": label_input,
        "probabilities_output": loss["input"],
        "updatable_layers": head["updatable_layers"],
        "loss": {"type": "categorical_cross_entropy", "input": loss["input"], "target": loss["target"]},
        "optimizer": head["optimizer"],
        "epochs": head["epochs"],
        "shuffle": head["shuffle"],
    }


def _quantize(compression: dict, codes, config) -> dict:
    """The manifest's quantize entry; a quantized student's codes keep its own (MLX) group size."""
    if codes:
        return _quantize_entry(**compression, widths={}) | {"codes": "student"}
    return _quantize_entry(**compression, widths=_weight_widths(config))


def _quantize_entry(
    *, quantize: str, palettize_bits: int, palettize_mode: str, block_size: int, widths: dict[str, int]
) -> dict:
    if quantize == "palettize":
        return {"mode": quantize, "bits": palettize_bits, "method": palettize_mode}
    if quantize in BLOCK_MODES:
        return {
            "mode": quantize,
            "bits": {"int8": 8, "int4": 4}[BLOCK_MODES[quantize]],
            "block_size": block_size,
            **({"block_sizes": {name: cx.block_for(w, block_size) for name, w in widths.items()}} if widths else {}),
        }
    return {"mode": quantize}


def _validate_manifest(manifest: dict) -> None:
    problems = manifest_problems(manifest)
    if problems:
        raise ExportError(f"internal: manifest violates its schema: {problems[0]}")
