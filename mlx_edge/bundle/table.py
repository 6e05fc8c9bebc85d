"""One row per bundle: student kind x precision -> parameters, sizes, accuracy, agreement, CPU latency.

The table `mlx-edge run`/`demo` print for the bundle they made, and benchmarks/bundle_table.py prints
for several (README "Choose a bundle"). Latency is per sentence at the bundle's own input shape
(batch 1, its fixed sequence length: what the app's Encoder call costs), the median over the texts
after a warm-up, on two paths that run here: the MLX student (the compiled single-sentence path)
and the exported program's PyTorch mirror. CoreML's own latency needs a Mac.
"""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from bridges.torch_mirror import load_mirror, read_student_weights, run_mirror
from mlx_edge.data import collate
from mlx_edge.fileio import disk_bytes
from mlx_edge.metrics import accuracy
from mlx_edge.models.checkpoint import load_config, load_model
from mlx_edge.models.inference import Latency, predict_ids
from mlx_edge.models.quantized import cpu_float, parameter_count
from mlx_edge.models.tokenizer import load_tokenizer

LATENCY_TEXTS = 64
LATENCY_MIN_TEXTS, LATENCY_BUDGET_S = 8, 2.0


@dataclass
class BundleRow:
    kind: str  # "bert 4x312", "static 128"
    precision: str  # fp16, int8-block, int4-block (+ " QAT" for a quantization-aware student)
    parameters: int
    encoder_bytes: int
    head_bytes: int
    bundle_bytes: int  # every file in the bundle directory
    dev_accuracy: float
    retained: float  # of the teacher's dev accuracy
    agreement: float  # same top label as the teacher
    mlx_ms: float
    mirror_ms: float

    def to_dict(self) -> dict:
        return asdict(self)


def bundle_row(
    student_dir: Path, bundle_dir: Path, texts: list[str], labels: np.ndarray, teacher_pred: np.ndarray
) -> BundleRow:
    """Measure one bundle against dev `texts` (gold label ids `labels`, the teacher's predictions)."""
    student_dir, bundle_dir = Path(student_dir), Path(bundle_dir)
    manifest = json.loads((bundle_dir / "manifest.json").read_text(encoding="utf-8"))
    config = load_config(student_dir)
    model = load_model(student_dir, require_head=True)
    tokenizer = load_tokenizer(student_dir)
    width = int(manifest["max_length"])
    ids = [np.asarray(x, np.int32) for x in tokenizer.encode_batch(texts, max_length=width)]
    _, pred, _ = predict_ids(cpu_float(model), ids, tokenizer.pad_id)  # Latency below times `model` itself
    teacher_acc = accuracy(teacher_pred, labels)
    dev_acc = accuracy(pred, labels)
    fixed = [collate([x], pad_id=tokenizer.pad_id, multiple=width, max_width=width) for x in ids[:LATENCY_TEXTS]]
    mlx_ms = _median_ms(Latency(model), fixed)
    mirror = load_mirror(read_student_weights(student_dir), config, source=student_dir)
    mirror_ms = _median_ms(lambda i, m: run_mirror(mirror, i, m), fixed)
    models = manifest["models"]
    return BundleRow(
        kind=_kind(config),
        precision=_precision(manifest, config),
        parameters=_parameters(student_dir, model),
        encoder_bytes=disk_bytes(bundle_dir / models["encoder"]["file"]),
        head_bytes=disk_bytes(bundle_dir / models["head"]["file"]),
        bundle_bytes=disk_bytes(bundle_dir),
        dev_accuracy=dev_acc,
        retained=dev_acc / teacher_acc if teacher_acc else 0.0,
        agreement=accuracy(pred, teacher_pred),
        mlx_ms=mlx_ms,
        mirror_ms=mirror_ms,
    )


def format_rows(rows: list[BundleRow], *, markdown: bool = False) -> str:
    header = [
        "student",
        "precision",
        "params",
        "encoder MB",
        "head kB",
        "bundle MB",
        "dev acc",
        "% teacher",
        "agreement",
        "MLX ms",
        "mirror ms",
    ]
    cells = [
        [
            r.kind,
            r.precision,
            f"{r.parameters / 1e6:.2f}M",
            f"{r.encoder_bytes / 1e6:.2f}",
            f"{r.head_bytes / 1e3:.1f}",
            f"{r.bundle_bytes / 1e6:.2f}",
            f"{r.dev_accuracy:.1%}",
            f"{r.retained:.1%}",
            f"{r.agreement:.1%}",
            f"{r.mlx_ms:.2f}",
            f"{r.mirror_ms:.2f}",
        ]
        for r in rows
    ]
    if markdown:
        lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
        return "\n".join(lines + ["| " + " | ".join(c) + " |" for c in cells])
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(header)]
    return "\n".join("  ".join(v.rjust(w) for v, w in zip(line, widths)) for line in [header, *cells])


def _median_ms(forward, batches, *, budget_s: float = LATENCY_BUDGET_S) -> float:
    """The median over the texts, or over those timed within `budget_s` (at least LATENCY_MIN_TEXTS):
    MLX's int4 kernels on a Linux CPU take ~0.3 s a sentence, and 64 of them added 20 s to each report."""
    forward(*batches[0])  # compile / warm up once (every batch has the bundle's one shape)
    times = []
    for input_ids, mask in batches:
        start = time.perf_counter()
        forward(input_ids, mask)
        times.append(time.perf_counter() - start)
        if len(times) >= LATENCY_MIN_TEXTS and sum(times) > budget_s:
            break
    return statistics.median(times) * 1e3


def _kind(config) -> str:
    if getattr(config, "model_type", "bert") == "static":
        return f"static {config.hidden_size}"
    factorized = f", emb {config.embedding_size}" if getattr(config, "embedding_size", None) else ""
    return f"bert {config.num_hidden_layers}x{config.hidden_size}{factorized}"


def _precision(manifest: dict, config) -> str:
    mode = (manifest.get("quantize") or {}).get("mode", "none")
    name = manifest.get("precision", "fp16") if mode == "none" else mode
    return f"{name} QAT" if getattr(config, "quantization", None) else name


def _parameters(student_dir: Path, model) -> int:
    """Logical weights: the distill report's count, else parameter_count (a quantized layer's codes count once each)."""
    manifest = student_dir / "mlx_edge_manifest.json"
    if manifest.is_file():
        report = json.loads(manifest.read_text(encoding="utf-8")).get("report") or {}
        if report.get("student_parameters"):
            return int(report["student_parameters"])
    return parameter_count(model)
