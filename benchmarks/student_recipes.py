"""Student recipes on the shipped to-do data: dev/test accuracy, English and Chinese apart.

    .venv/bin/python benchmarks/student_recipes.py --teacher TEACHER_DIR [--out /tmp/recipes] [--only tiny-cut-extra]

TEACHER_DIR: a teacher fine-tuned on the to-do data, e.g.
    mlx-edge teacher train --model multilingual-e5-small --train mlx_edge/datasets/todo/train.jsonl \\
        --dev mlx_edge/datasets/todo/dev.jsonl --epochs 3 --learning-rate 5e-5 --batch-size 32 --max-length 64 --out teacher
Labels the training set once per layer set, distills each recipe with the CLI (a finished student
is reused), then scores teacher and students on dev and test. Prints docs/results.md's students table.
Runs one after another: about 5 min per tiny and 9 min per half student on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from mlx_edge.data import read_labeled
from mlx_edge.datasets import todo_split
from mlx_edge.predict import predict_texts

EVERY_THIRD = ["--hidden-layers", "0,3,6,9,12", "--attention-layers", "3,6,9,12"]  # tiny: teacher 2,5,8,11
EVERY_SECOND = ["--hidden-layers", "0,2,4,6,8,10,12", "--attention-layers", "2,4,6,8,10,12"]  # half
LOSSES = ["--hidden-weight", "1", "--attention-weight", "1"]

RECIPES = {  # name: (targets layer set, distill options)
    "half-extra-hidden": (EVERY_SECOND, ["--student", "half", "--init", "teacher", "--vocab-extra", "30000",
                                         *LOSSES, "--epochs", "6", "--learning-rate", "1e-4"]),
    "half-extra": (EVERY_SECOND, ["--student", "half", "--init", "teacher", "--vocab-extra", "30000",
                                  "--epochs", "6", "--learning-rate", "1e-4"]),
    "half": (EVERY_SECOND, ["--student", "half", "--init", "teacher", "--epochs", "6", "--learning-rate", "1e-4"]),
    "tiny-cut-extra": (EVERY_THIRD, ["--student", "tiny", "--init", "teacher", "--vocab-extra", "4000", *LOSSES,
                                     "--epochs", "10", "--learning-rate", "2e-4"]),
    "tiny-cut": (EVERY_THIRD, ["--student", "tiny", "--init", "teacher", *LOSSES, "--epochs", "10", "--learning-rate", "2e-4"]),
    "tiny-random": (EVERY_THIRD, ["--student", "tiny", "--init", "random", *LOSSES, "--epochs", "10", "--learning-rate", "5e-4"]),
}  # fmt: skip


def mlx_edge(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "mlx_edge", *args], check=True)


def scores(model: Path, split: str) -> dict[str, float]:
    data = read_labeled(todo_split(split))
    langs = [json.loads(line)["lang"] for line in todo_split(split).read_text().splitlines() if line.strip()]
    probs = predict_texts(model, data.texts, max_length=64).probabilities
    right = [max(p, key=p.get) == label for p, label in zip(probs, data.labels)]
    out = {"all": sum(right) / len(right)}
    for lang in ("en", "zh"):
        picked = [r for r, lg in zip(right, langs) if lg == lang]
        out[lang] = sum(picked) / len(picked)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--teacher", type=Path, required=True, help="Teacher fine-tuned on the to-do data.")
    parser.add_argument("--out", type=Path, default=Path("/tmp/recipes"), help="Working directory.")
    parser.add_argument("--only", nargs="*", choices=sorted(RECIPES), help="Run only these recipes.")
    args = parser.parse_args()
    train, dev = str(todo_split("train")), str(todo_split("dev"))
    teacher = {s: scores(args.teacher, s) for s in ("dev", "test")}
    rows = []
    for name in args.only or list(RECIPES):
        layers, options = RECIPES[name]
        targets = args.out / ("targets-" + ("half" if layers is EVERY_SECOND else "tiny"))
        if not targets.is_dir():
            mlx_edge("teacher", "label", "--teacher", str(args.teacher), "--data", train, "--out", str(targets),
                     "--backend", "mlx", *layers, "--quiet")  # fmt: skip
        student = args.out / name
        seconds = 0.0
        if not student.is_dir():
            start = time.perf_counter()
            mlx_edge("distill", "--teacher", str(args.teacher), "--train", train, "--dev", dev, "--targets",
                     str(targets), "--out", str(student), "--quiet", *options)  # fmt: skip
            seconds = time.perf_counter() - start
        report = json.loads((student / "report.json").read_text())
        rows.append((name, options, {s: scores(student, s) for s in ("dev", "test")}, report, seconds))

    def cell(s):
        return f"{s['all']:.1%} ({s['en']:.1%} / {s['zh']:.1%})"

    print(f"teacher: dev {cell(teacher['dev'])}, test {cell(teacher['test'])}  (en / zh)")
    print("| recipe | options | dev (en / zh) | retained | test (en / zh) | parameters | distill time |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name, options, s, report, seconds in rows:
        retained = s["dev"]["all"] / teacher["dev"]["all"]
        took = f"{seconds / 60:.1f} min" if seconds else "(reused)"
        print(
            f"| {name} | `{' '.join(options)}` | {cell(s['dev'])} | {retained:.1%} | {cell(s['test'])} "
            f"| {report['student_parameters'] / 1e6:.1f}M | {took} |"
        )


if __name__ == "__main__":
    main()
