"""The teacher stage end to end: `train_teacher` on the demo's data, one row per recipe and seed.

    .venv/bin/python benchmarks/teacher_stage.py [--recipes before,default] [--seeds 0] [--model NAME]

Each row is one whole `train_teacher` call as the pipeline makes it (load, tokenize, train, dev every
epoch, write the best epoch): wall seconds, training samples/s, best epoch and dev accuracy on the
shipped to-do dev set. Recipes:

- `before`: the demo's teacher before issue 33 (3 epochs at 5e-5, the word table trained, max length 64);
- `frozen3`: the same with the word table kept as pretrained (the default from issue 30 on);
- `default`: the settings' defaults (mlx_edge/settings.py: 2 epochs at 1e-4, the table kept);
- `mlx`: the defaults with `--backend mlx`.

Run alone: the recipes share the machine's cores, so one at a time, in one process after another.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RECIPES = {
    "before": {"epochs": 3, "learning_rate": 5e-5, "freeze_embeddings": False, "max_length": 64},
    "frozen3": {"epochs": 3, "learning_rate": 5e-5},
    "default": {},
    "mlx": {"backend": "mlx"},
}


def one(recipe: str, seed: int, model: str, out: Path) -> dict:
    """A recipe in a process of its own (no allocator or thread-pool state carried between rows)."""
    from mlx_edge.datasets import todo_split
    from mlx_edge.teacher.train import train_teacher

    start = time.perf_counter()
    result = train_teacher(
        model=model,
        train=todo_split("train"),
        dev=todo_split("dev"),
        out=out,
        seed=seed,
        force=True,
        progress=False,
        **RECIPES[recipe],
    )
    return {
        "recipe": recipe,
        "seed": seed,
        "seconds": round(time.perf_counter() - start, 1),
        "samples_per_second": round(result.train_samples_per_second, 1),
        "best_epoch": result.best_epoch,
        "dev_accuracy": round(result.dev_accuracy * 100, 2),
        "device": result.device,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipes", default="before,default", help=f"comma-separated: {', '.join(RECIPES)}")
    parser.add_argument("--seeds", default="0", help="comma-separated seeds")
    parser.add_argument("--model", default="multilingual-e5-small", help="the base model (the demo's by default)")
    parser.add_argument("--child", nargs=2, metavar=("RECIPE", "SEED"), help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(one(args.child[0], int(args.child[1]), args.model, args.out)), flush=True)
        return
    recipes = args.recipes.split(",")
    unknown = [r for r in recipes if r not in RECIPES]
    if unknown:
        parser.error(f"unknown recipe {', '.join(unknown)}: choose from {', '.join(RECIPES)}")
    rows = []
    with tempfile.TemporaryDirectory() as work:
        for recipe in recipes:
            for seed in (int(s) for s in args.seeds.split(",")):
                child = [sys.executable, __file__, "--child", recipe, str(seed), "--model", args.model]
                done = subprocess.run(child + ["--out", str(Path(work) / f"{recipe}-{seed}")], capture_output=True,
                                      text=True, check=False)  # fmt: skip
                if done.returncode != 0:
                    sys.exit(f"{recipe} seed {seed} failed:\n{done.stderr[-2000:]}")
                rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
                print(json.dumps(rows[-1]), flush=True)
    print("\n| recipe | seed | seconds | samples/s | best epoch | dev accuracy | device |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['recipe']} | {r['seed']} | {r['seconds']:.0f} | {r['samples_per_second']:.1f} | "
              f"{r['best_epoch']} | {r['dev_accuracy']:.2f}% | {r['device']} |")  # fmt: skip


if __name__ == "__main__":
    main()
