"""Student shapes against each other: the same teacher, targets cache and data, several seeds each.

    .venv/bin/python benchmarks/student_shapes.py --workspace WORK [--students auto,tiny] [--seeds 0,1]
        [--train FILE] [--dev FILE] [--test FILE] [--out /tmp/student_shapes]

WORK is a finished `mlx-edge run`/`demo` workspace: its `teacher/` and `targets/` are reused, so only
the distillation differs between rows. Each student is distilled at the [distill] defaults with
`--student NAME --seed S` (the `mlx-edge distill` command line), then scored on the test file (the
to-do set's test split unless given). `--train`/`--dev` default to the to-do set's (the demo's data);
for a run on other data pass the workspace's own files (no `--dev`: distill cuts its own dev split).
One line per distillation (JSON), then the mean and range per student.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import replace
from pathlib import Path

import numpy as np


def score(student_dir: Path, test: Path) -> float:
    from mlx_edge.data import read_labeled
    from mlx_edge.models.checkpoint import load_config, load_model
    from mlx_edge.models.inference import predict_ids
    from mlx_edge.models.tokenizer import load_tokenizer

    config = load_config(student_dir)
    tokenizer = load_tokenizer(student_dir)
    data = read_labeled(test)
    ids = [np.asarray(x, np.int32) for x in tokenizer.encode_batch(data.texts, max_length=128)]
    _, pred, _ = predict_ids(load_model(student_dir, require_head=True), ids, tokenizer.pad_id)
    gold = np.array([config.labels.index(y) for y in data.labels])
    return float((pred == gold).mean())


def main() -> None:
    from mlx_edge.datasets import todo_split
    from mlx_edge.distill.api import distill
    from mlx_edge.distill.config import LoopConfig
    from mlx_edge.settings import DistillSettings

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workspace", type=Path, required=True, help="a finished run's directory (teacher/, targets/)")
    parser.add_argument("--students", default="auto,tiny")
    parser.add_argument("--seeds", default="0,1")
    parser.add_argument("--train", type=Path, default=None, help="default: the to-do set's train split")
    parser.add_argument("--dev", type=Path, default=None, help="default: the to-do set's dev split with --train unset")
    parser.add_argument("--test", type=Path, default=None, help="default: the to-do set's test split")
    parser.add_argument("--out", type=Path, default=Path("/tmp/student_shapes"))
    args = parser.parse_args()
    train = args.train or todo_split("train")
    dev = args.dev if args.train else (args.dev or todo_split("dev"))
    test = args.test or todo_split("test")
    scores: dict[str, list[float]] = {}
    for student in args.students.split(","):
        for seed in [int(s) for s in args.seeds.split(",")]:
            out = args.out / f"{student.replace('/', '_')}-s{seed}"
            settings = replace(DistillSettings(), seed=seed)
            start = time.perf_counter()
            report = distill(
                teacher=args.workspace / "teacher",
                targets=args.workspace / "targets",
                train=train,
                dev=dev,
                out=out,
                student=student,
                loop=LoopConfig.from_settings(settings),
                force=True,
                progress=False,
                measure_speed=False,
            )
            test_acc = score(out, test)
            scores.setdefault(student, []).append(test_acc)
            line = {"student": student, "seed": seed, "dev": report.student_dev_accuracy, "test": test_acc}
            print(json.dumps({**line, "seconds": round(time.perf_counter() - start)}), flush=True)
    for student, values in scores.items():
        print(
            f"{student}: test mean {statistics.mean(values):.1%}, range {min(values):.1%}-{max(values):.1%} "
            f"over {len(values)} seeds"
        )


if __name__ == "__main__":
    main()
