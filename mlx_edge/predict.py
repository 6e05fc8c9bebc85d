"""Quick predictions from a teacher or student directory: in MLX, or in ONNX Runtime on its exported program.

`backend="auto"` is MLX: a call of `predict` loads its model each time, and MLX loaded and answered
sooner than an ONNX Runtime session for a few texts (the demo student, 8 texts: 0.09 vs 0.14 s here);
from 32 texts on the two tie. ONNX Runtime's single-sentence latency is lower in a process that keeps
its session (`mlx-edge bench`, docs/performance.md "Which backend"). The ONNX program is the PyTorch
mirror exported as `export --extras onnx` does, once per weights, into mlx-edge's cache.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bridges.io_names import ATTENTION_MASK, INPUT_IDS, LOGITS
from mlx_edge import __version__
from mlx_edge.data import bucketed_batches, collate
from mlx_edge.errors import DataError, DeviceError
from mlx_edge.fileio import cache_root, fingerprint
from mlx_edge.models.checkpoint import load_config, load_model
from mlx_edge.models.classify import encode_texts, text_logits
from mlx_edge.models.tokenizer import load_tokenizer
from mlx_edge.runtime.devices import mlx_device
from mlx_edge.teacher.source import file_hash_of_weights

BACKENDS = ("auto", "mlx", "onnx")
ONNX = "onnxruntime-cpu"


@dataclass(frozen=True)
class Predictions:
    probabilities: list[dict[str, float]]  # per text, {label: probability}
    backend: str  # what answered: "mlx-cpu", "mlx-gpu" or "onnxruntime-cpu"
    why: str  # why that backend, in a few words


def choose_backend(backend: str, device: str) -> tuple[str, str]:
    """("mlx" | "onnx", why) for a `--backend`/`--device` pair."""
    if backend not in BACKENDS:
        raise DeviceError(f"unknown backend {backend!r}", f"choose one of {', '.join(BACKENDS)}")
    if backend == "onnx":
        if device not in ("auto", "cpu"):
            raise DeviceError(
                f"--backend onnx runs on the CPU (ONNX Runtime's CPU provider), not --device {device}",
                "drop --device, or use --backend mlx",
            )
        return "onnx", "--backend onnx"
    return "mlx", "--backend mlx" if backend == "mlx" else "auto: MLX loads and answers soonest"


def predict_texts(
    model_dir: str | Path,
    texts: list[str],
    *,
    max_length: int = 128,
    device: str = "auto",
    batch_size: int = 32,
    backend: str = "auto",
) -> Predictions:
    """Label probabilities for each text. An empty or blank text is refused: a model asked about
    nothing still answers with confident-looking probabilities."""
    blank = [i for i, text in enumerate(texts, 1) if not text.strip()]
    if blank:
        raise DataError(
            f"text {blank[0]} of {len(texts)} is empty or only spaces", "give every text some words to label"
        )
    model_dir = Path(model_dir)
    kind, why = choose_backend(backend, device)
    if kind == "onnx":
        config = load_config(model_dir)  # a directory that is not a model fails here, before any export
        tokenizer = load_tokenizer(model_dir)
        ids = encode_texts(tokenizer, texts, max_length, config.max_position_embeddings)
        logits = onnx_logits(onnx_program(model_dir), ids, tokenizer.pad_id, batch_size=batch_size)
        labels, answered = config.labels, ONNX
    else:
        placed = mlx_device(device)
        logits, labels = text_logits(model_dir, texts, max_length=max_length, batch_size=batch_size)
        answered = f"mlx-{'cpu' if 'cpu' in str(placed).lower() else 'gpu'}"
    probs = np.exp(logits - logits.max(axis=-1, keepdims=True))
    probs /= probs.sum(axis=-1, keepdims=True)
    rows = [{label: float(p) for label, p in zip(labels, row)} for row in probs]
    return Predictions(rows, answered, why)


def onnx_program(model_dir: Path, *, progress: bool = True) -> Path:
    """The model's ONNX program (its PyTorch mirror exported as `mlx-edge export --extras onnx` does),
    exported once per weights, config and mlx-edge version into `cache_root()/onnx/` and reused."""
    model_dir = Path(model_dir)
    key = fingerprint("onnx", __version__, file_hash_of_weights(model_dir), model_dir / "config.json")
    path = cache_root() / "onnx" / key[:24] / "model.onnx"
    if path.is_file():
        return path
    from bridges.onnx_export import export_onnx  # lazy: torch and the exporter load only to write a program
    from bridges.torch_mirror import load_mirror, read_student_weights  # lazy: torch, as above

    load_model(model_dir, require_head=True)  # what MLX would refuse (a bare encoder, bad weights), refused here
    if progress:
        print(f"exporting {model_dir.name} to ONNX once (cached in {path.parent})", file=sys.stderr)
    mirror = load_mirror(read_student_weights(model_dir), load_config(model_dir), source=model_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = path.with_name(f".model.{os.getpid()}.onnx")
    try:
        export_onnx(mirror, staging, example_length=8)
        os.replace(staging, path)
    finally:
        staging.unlink(missing_ok=True)
    return path


def onnx_logits(program: Path, ids: list[np.ndarray], pad_id: int, *, batch_size: int = 32) -> np.ndarray:
    """Logits in input order from ONNX Runtime on `program`, in length-bucketed batches."""
    from bridges.onnx_export import ort_session  # lazy: onnx and onnxruntime load only for this backend

    session = ort_session(program)
    logits = None
    for batch in bucketed_batches(np.array([len(x) for x in ids]), batch_size, shuffle=False):
        input_ids, mask = collate([ids[j] for j in batch], pad_id=pad_id)
        out = session.run([LOGITS], {INPUT_IDS: input_ids, ATTENTION_MASK: mask})[0]
        if logits is None:
            logits = np.zeros((len(ids), out.shape[-1]), np.float32)
        logits[batch] = out
    return logits
