"""The few-label teacher against a linear probe on its own frozen embeddings, head by head.

    .venv/bin/python benchmarks/teacher_few_labels.py [--dataset todo] [--sizes 300,100] [--seeds 0,1,2]
        [--heads new,probe] [--self-train no|yes|auto] [--teacher multilingual-e5-small] [--work DIR]

For each size and seed: the same seeded, stratified draw of labeled training rows as
benchmarks/transfer_set.py, and its frozen-embedding probe (logistic regression on the mean-pooled
embeddings, "query: " prefix). Then `train_teacher` on all the drawn rows for each `--heads` value at
its defaults, with `select="last"`: the last epoch is kept whatever dev says, so the test set can be
passed as dev to trace each epoch's test accuracy without choosing anything on it. Prints one JSON
line per run: the probe, the curve, and the last epoch (the teacher kept).

`--self-train yes` (or `auto`) gives the rest of the training file's texts, labels removed, as unlabeled
text (teacher/self_train.py): the first fit's curve is then `first`, its last epoch `first_last`, and
`curve`/`last` are the self-trained second fit's.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import mlx_edge  # noqa: F401  (OpenBLAS before mlx)
from mlx_edge.teacher.train import train_teacher

sys.path.insert(0, str(Path(__file__).resolve().parent))
from transfer_set import DATASETS, dataset_split, probe, read_rows, sample, write_jsonl  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", default="todo", choices=DATASETS)
    parser.add_argument("--sizes", default="300,100")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--heads", default="new,probe", help="[teacher] head values to train: new, probe")
    parser.add_argument("--self-train", choices=("no", "yes", "auto"), default="no", help="[teacher] self_train")
    parser.add_argument("--teacher", default="multilingual-e5-small")
    parser.add_argument("--work", type=Path, default=Path("/tmp/teacher_few_labels"))
    args = parser.parse_args()
    rows = read_rows(dataset_split(args.dataset, "train"))
    test = dataset_split(args.dataset, "test")
    test_rows = read_rows(test)
    args.work.mkdir(parents=True, exist_ok=True)
    for size in [int(s) for s in args.sizes.split(",")]:
        for seed in [int(s) for s in args.seeds.split(",")]:
            labeled, rest = sample(rows, size, seed)
            labeled_path = write_jsonl(args.work / f"labeled-{size}-{seed}.jsonl", labeled)
            rest_path = args.work / f"rest-{size}-{seed}.txt"
            rest_path.write_text("".join(r["text"] + "\n" for r in rest), encoding="utf-8")
            baseline = probe(args.teacher, labeled, test_rows)["all"]
            for head in args.heads.split(","):
                curve: list[float] = []
                first: list[float] = []

                def trace(metrics, curve=curve, first=first):
                    (curve if metrics.get("self_train") else first).append(round(metrics["dev_accuracy"], 4))

                start = time.perf_counter()
                train_teacher(
                    model=args.teacher,
                    train=labeled_path,
                    dev=test,  # traced, not chosen on: select="last"
                    out=args.work / f"teacher-{size}-{seed}-{head}",
                    head=head,
                    select="last",
                    seed=seed,
                    force=True,
                    progress=False,
                    self_train=args.self_train,
                    unlabeled=[rest_path] if args.self_train != "no" else [],
                    on_epoch=trace,
                )
                if not curve:  # one fit: its curve is the teacher's
                    curve, first = first, []
                line = {"dataset": args.dataset, "size": size, "seed": seed, "head": head, "probe": round(baseline, 4)}
                line.update(last=curve[-1], curve=curve, seconds=round(time.perf_counter() - start))
                if first:
                    line.update(first_last=first[-1], first=first, self_train=args.self_train)
                print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
