"""Does synthetic data help a student trained on few labeled rows? LLM rows vs token edits vs none.

    .venv/bin/python benchmarks/augment_effect.py [--rows 300] [--per-class 25,50] [--repeats 3]

From the shipped to-do data: a stratified sample of `--rows` training rows (the only labeled data),
a stratified half of the real dev set to pick each run's best epoch (distill also times the teacher
on it, so a smaller one saves minutes on a CPU) and the whole real test set to score it. The built-in
multilingual-e5-small teacher is fine-tuned once on the sample; it also cleans the synthetic rows
(`--min-confidence`). Arms, each distilled into the same tiny student `--repeats` times (seeds 0,
1, ...) with the same number of optimizer steps:
- none: the sample alone;
- llm N: the sample plus N rows per class written by `--llm` (one generation run at the largest N;
  smaller N take the first N rows kept per class of it);
- edits N: the sample plus N token edits per class (`mlx-edge augment` without --llm).
Everything lands in `--work` and is reused on a re-run (augment resumes where it stopped). Prints
a markdown table: held-out test accuracy (mean ± sd over repeats, and by language), what augment
kept, and the wall time of each phase.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from pathlib import Path

from mlx_edge.augment.api import augment
from mlx_edge.augment.report import format_details
from mlx_edge.data import language_of, read_labeled
from mlx_edge.datasets import todo_split
from mlx_edge.distill.api import distill
from mlx_edge.distill.loop import LoopConfig
from mlx_edge.predict import predict_texts
from mlx_edge.settings import DistillSettings
from mlx_edge.teacher.label import label_targets
from mlx_edge.teacher.train import train_teacher

MAX_LENGTH = 64  # the to-do texts are short; the demo's length


def stratified_sample(rows: int, seed: int, out: Path, split: str = "train") -> Path:
    """`rows` rows of `split`, the same share of every label, drawn with `seed`; written as JSONL."""
    data = read_labeled(todo_split(split))
    by_label: dict[str, list[str]] = {}
    for text, label in zip(data.texts, data.labels):
        by_label.setdefault(label, []).append(text)
    rng, each = random.Random(seed), rows // len(by_label)
    picked = [(t, label) for label in sorted(by_label) for t in rng.sample(by_label[label], each)]
    rng.shuffle(picked)
    return write_rows(out, picked)


def write_rows(path: Path, rows: list[tuple[str, str]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({"text": t, "label": y}, ensure_ascii=False) + "\n" for t, y in rows), "utf-8")
    return path


def first_per_class(synthetic: Path, n: int) -> list[tuple[str, str]]:
    """The first `n` rows of each class, in the order augment kept them."""
    taken: dict[str, int] = {}
    rows = []
    for line in synthetic.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        if taken.get(row["label"], 0) < n:
            taken[row["label"]] = taken.get(row["label"], 0) + 1
            rows.append((row["text"], row["label"]))
    return rows


def accuracy(student: Path, texts: list[str], labels: list[str]) -> dict[str, float]:
    probs = predict_texts(student, texts, max_length=MAX_LENGTH).probabilities
    right = [max(p, key=p.get) == y for p, y in zip(probs, labels)]
    out = {"all": sum(right) / len(right)}
    for language in ("en", "zh"):
        mine = [r for r, t in zip(right, texts) if language_of(t) == language]
        out[language] = sum(mine) / max(len(mine), 1)
    return out


def mean_sd(values: list[float]) -> str:
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{100 * statistics.mean(values):.1f} ± {100 * sd:.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=300, help="Labeled training rows (stratified sample).")
    parser.add_argument("--per-class", default="25,50", help="Synthetic rows per class, comma-separated.")
    parser.add_argument("--edits-per-class", type=int, default=None, help="Token edits per class (default: max N).")
    parser.add_argument("--repeats", type=int, default=3, help="Distillation seeds per arm.")
    parser.add_argument("--llm", default="smollm2-135m-instruct", help="Built-in name, mlx-lm directory or hub id.")
    parser.add_argument("--teacher", default="multilingual-e5-small", help="Model the teacher is fine-tuned from.")
    parser.add_argument("--teacher-epochs", type=int, default=5)
    parser.add_argument("--teacher-lr", type=float, default=8e-5, help="Few rows: more, smaller steps than the demo's.")
    parser.add_argument("--min-confidence", type=float, default=0.5, help="The teacher's cut for synthetic rows.")
    parser.add_argument("--max-tokens", type=int, default=160, help="Token limit per LLM answer.")
    parser.add_argument("--batch-size", type=int, default=16, help="LLM prompts per round.")
    parser.add_argument("--max-rounds", type=int, default=25, help="Stop generating after this many rounds.")
    parser.add_argument("--steps", type=int, default=200, help="Distillation steps per run (every arm the same).")
    parser.add_argument("--work", type=Path, default=Path("augment-effect"), help="Workspace (reused on a re-run).")
    args = parser.parse_args()
    sizes = sorted(int(n) for n in args.per_class.split(","))
    edits_n = args.edits_per_class or sizes[-1]
    work, clock = args.work, {}

    start = time.perf_counter()
    sample = stratified_sample(args.rows, 0, work / "train.jsonl")
    dev_file = stratified_sample(300, 0, work / "dev.jsonl", split="dev")
    dev, test = read_labeled(dev_file), read_labeled(todo_split("test"))
    teacher = work / "teacher"
    if not (teacher / "model.safetensors").is_file():
        train_teacher(
            model=args.teacher,
            train=sample,
            dev=dev_file,
            out=teacher,
            epochs=args.teacher_epochs,
            batch_size=8,
            learning_rate=args.teacher_lr,
            max_length=MAX_LENGTH,
            force=True,
            on_epoch=lambda m: print(f"[teacher epoch {m['epoch']}] dev {m['dev_accuracy']:.3f}", flush=True),
        )
    clock["teacher"] = time.perf_counter() - start

    made = {}
    for method, llm, n in (("llm", args.llm, sizes[-1]), ("edits", None, edits_n)):
        start = time.perf_counter()
        made[method] = augment(
            seeds=sample,
            out=work / method / "synthetic.jsonl",
            per_class=n,
            llm=llm,
            teacher=teacher,
            min_confidence=args.min_confidence,
            per_prompt=8,
            batch_size=args.batch_size,
            max_tokens=args.max_tokens,
            max_rounds=args.max_rounds,
        )
        clock[f"augment {method}"] = time.perf_counter() - start

    real = list(zip(read_labeled(sample).texts, read_labeled(sample).labels))
    arms = {"none": real}
    arms.update({f"llm {n}": real + first_per_class(Path(made["llm"].out), n) for n in sizes})
    arms[f"edits {edits_n}"] = real + first_per_class(Path(made["edits"].out), edits_n)
    scores: dict[str, list[dict]] = {}
    start = time.perf_counter()
    for name, rows in arms.items():
        directory = work / "arms" / name.replace(" ", "-")
        train = write_rows(directory / "train.jsonl", rows)
        targets = directory / "targets"
        label_targets(teacher=teacher, data=[train], out=targets, progress=False, force=True)
        batches = -(-len(rows) // 32)
        for seed in range(args.repeats):
            ds = DistillSettings(
                student="tiny",
                init="teacher",
                vocab_extra=4000,
                epochs=max(1, round(args.steps / batches)),
                learning_rate=2e-4,
                seed=seed,
            )
            student = directory / f"student-{seed}"
            distill(
                teacher=teacher,
                train=train,
                dev=dev_file,
                targets=targets,
                out=student,
                loop=LoopConfig.from_settings(ds),
                **ds.kwargs("student", "init", "vocab", "vocab_extra"),
                force=True,
                restart=True,
                progress=False,
            )
            scores.setdefault(name, []).append(
                {"test": accuracy(student, test.texts, test.labels), "dev": accuracy(student, dev.texts, dev.labels)}
            )
            print(f"[{name} seed {seed}] test {scores[name][-1]['test']['all']:.3f}", flush=True)
    clock["label + distill"] = time.perf_counter() - start

    teacher_test = accuracy(teacher, test.texts, test.labels)
    print()
    for method, result in made.items():
        print(f"augment {method}:\n{format_details(result)}\n")
    print(
        f"{args.rows} labeled rows; teacher ({args.teacher}, fine-tuned on them) test accuracy "
        f"{100 * teacher_test['all']:.1f}% (en {100 * teacher_test['en']:.1f}, zh {100 * teacher_test['zh']:.1f}); "
        f"student tiny, {args.steps} steps, {args.repeats} seeds\n"
    )
    print("| arm | training rows (real + synthetic) | student test accuracy % | en | zh | dev (best epoch) |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, runs in scores.items():
        cells = [mean_sd([r["test"][k] for r in runs]) for k in ("all", "en", "zh")]
        dev_cell = mean_sd([r["dev"]["all"] for r in runs])
        print(f"| {name} | {len(arms[name])} | {' | '.join(cells)} | {dev_cell} |")
    print("\nwall time: " + ", ".join(f"{k} {v / 60:.1f} min" for k, v in clock.items()))


if __name__ == "__main__":
    main()
