"""Where a student follows its teacher: agreement and KL on each of a few text files.

    .venv/bin/python benchmarks/agreement.py --teacher RUN/teacher --student RUN/student \
        --texts RUN/bags.jsonl --texts RUN/broad.jsonl --texts mlx_edge/datasets/todo/test.jsonl [--sample 600]

For each file (one text per line, or .jsonl / .csv with a `text` column, as `--unlabeled` reads them):
a seeded sample of its texts (`--sample`, default 600; 0: all), both models' probabilities at T=1,
and per file the share of texts where the two pick the same label, the mean KL(teacher || student),
and each model's mean top probability. A student that agrees on its own transfer rows but not on
the test has learned the rows, not the teacher (docs/distill.md, "The training loop").
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

import numpy as np

import mlx_edge  # noqa: F401  (OpenBLAS before mlx)
from mlx_edge.errors import MlxEdgeError
from mlx_edge.predict import predict_texts
from mlx_edge.transfer import read_unlabeled


def probabilities(model: Path, texts: list[str], labels: list[str] | None) -> tuple[np.ndarray, list[str]]:
    rows = predict_texts(model, texts).probabilities
    labels = labels or list(rows[0])
    return np.array([[row[label] for label in labels] for row in rows]), labels


def compare(teacher: Path, student: Path, texts: list[str]) -> dict:
    t, labels = probabilities(teacher, texts, None)
    s, _ = probabilities(student, texts, labels)
    kl = (t * (np.log(np.clip(t, 1e-9, None)) - np.log(np.clip(s, 1e-9, None)))).sum(axis=1)
    return {
        "texts": len(texts),
        "agreement": float((t.argmax(1) == s.argmax(1)).mean()),
        "kl": float(kl.mean()),
        "teacher_top": float(t.max(1).mean()),
        "student_top": float(s.max(1).mean()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--teacher", type=Path, required=True)
    parser.add_argument("--student", type=Path, required=True)
    parser.add_argument("--texts", type=Path, action="append", required=True, help="a text file (repeat it)")
    parser.add_argument("--sample", type=int, default=600, help="texts drawn from each file, seeded (0: all)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(f"{'file':32s} {'texts':>6s} {'agree':>7s} {'KL':>6s} {'top t/s':>11s}")
    for path in args.texts:
        try:
            texts = read_unlabeled(path)
        except MlxEdgeError as exc:
            raise SystemExit(f"{path}: {exc}") from None
        if args.sample and len(texts) > args.sample:
            texts = random.Random(args.seed).sample(texts, args.sample)
        row = compare(args.teacher, args.student, texts)
        print(
            f"{path.name[-32:]:32s} {row['texts']:6d} {row['agreement']:7.1%} {row['kl']:6.3f} "
            f"{row['teacher_top']:5.2f}/{row['student_top']:.2f}"
        )


if __name__ == "__main__":
    main()
