"""A large transfer set end to end: labeling and distilling ~100k unlabeled sentences, peak memory,
minutes, and a distillation killed with SIGKILL and resumed, against one never interrupted.

    .venv/bin/python benchmarks/transfer_scale.py --teacher DIR [--rows 100000] [--epochs 1]
        [--work /tmp/transfer_scale] [--kill-after-step 400] [--json FILE]

`--teacher`: a trained teacher (e.g. the demo's `mlx-edge-demo/teacher`). The sentences are the
teacher's word-swap edits (augment/neighbours.py) of the shipped to-do training rows, as many per
row as it takes to reach `--rows`. Every stage runs as the CLI, in its own process, under
/usr/bin/time (peak resident memory). Run it alone on the machine: it reports minutes.

Steps: `teacher label` over train + the sentences (the teacher layers the default student's losses
read); `distill` at its defaults for `--epochs` (A); the same distillation again (B), killed with
SIGKILL once its checkpoint passes `--kill-after-step`, then run again to the end: B must equal A
bit for bit.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

import mlx_edge  # noqa: F401  (OpenBLAS before mlx)
from mlx_edge.datasets import todo_split

CLI = [sys.executable, "-m", "mlx_edge"]


def timed(command: list[str], log: Path) -> dict:
    """Run `command` under /usr/bin/time: {seconds, peak_rss_mb}; a failure stops the benchmark."""
    start = time.perf_counter()
    with open(log, "w") as out:
        proc = subprocess.run(["/usr/bin/time", "-f", "PEAK_RSS_KB %M", *command], stdout=out, stderr=subprocess.STDOUT)
    text = log.read_text(errors="replace")
    if proc.returncode != 0:
        sys.exit(f"{' '.join(command[2:4])} failed (exit {proc.returncode}); see {log}")
    peak = int(text.rsplit("PEAK_RSS_KB", 1)[1].split()[0])
    return {"seconds": time.perf_counter() - start, "peak_rss_mb": peak / 1024}


def sentences(teacher: Path, rows: int, out: Path) -> int:
    from mlx_edge.augment.neighbours import teacher_edits
    from mlx_edge.data import read_labeled

    texts = read_labeled(todo_split("train")).texts
    made = teacher_edits(teacher, texts, math.ceil(rows / len(texts)) + 2, seed=0)[:rows]
    out.write_text("".join(" ".join(s.split()) + "\n" for s in made), encoding="utf-8")
    return len(made)


def weights(directory: Path) -> dict[str, np.ndarray]:
    from safetensors.numpy import load_file

    return load_file(directory / "model.safetensors")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--teacher", type=Path, required=True)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--kill-after-step", type=int, default=400)
    parser.add_argument("--work", type=Path, default=Path("/tmp/transfer_scale"))
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    from mlx_edge.pipeline import _layers_needed
    from mlx_edge.settings import DISTILL

    work = args.work
    work.mkdir(parents=True, exist_ok=True)
    unlabeled = work / "unlabeled.txt"
    if not unlabeled.is_file():
        made = sentences(args.teacher, args.rows, unlabeled)
        print(f"{made} sentences in {unlabeled}", flush=True)
    rows = sum(1 for _ in open(unlabeled, encoding="utf-8"))
    train, dev = todo_split("train"), todo_split("dev")
    hidden, attention = _layers_needed(args.teacher, DISTILL, int4=False)
    result = {"rows": rows, "epochs": args.epochs}

    targets = work / "targets"
    label = [*CLI, "teacher", "label", "--teacher", str(args.teacher), "--data", str(train), "--unlabeled"]
    label += [str(unlabeled), "--out", str(targets), "--quiet", "--backend", "mlx"]
    label += ["--hidden-layers", ",".join(map(str, hidden)), "--attention-layers", ",".join(map(str, attention))]
    result["label"] = timed(label, work / "label.log")
    result["targets_gb"] = sum(p.stat().st_size for p in targets.iterdir()) / 1e9
    print(json.dumps(result), flush=True)

    distill = [*CLI, "distill", "--teacher", str(args.teacher), "--train", str(train), "--dev", str(dev)]
    distill += ["--targets", str(targets), "--unlabeled", str(unlabeled), "--epochs", str(args.epochs), "--quiet"]
    result["distill"] = timed([*distill, "--out", str(work / "A"), "--force"], work / "distill-A.log")
    print(json.dumps(result), flush=True)

    b = work / "B"
    position = b.with_name(".B.work") / "ckpt" / "position.json"
    proc = subprocess.Popen(
        [*distill, "--out", str(b), "--force"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    killed_at = None
    while proc.poll() is None:
        if position.is_file():
            try:
                step = json.loads(position.read_text())["step"]
            except (ValueError, KeyError):
                step = 0  # being replaced this moment
            if step >= args.kill_after_step:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait()
                killed_at = step
                break
        time.sleep(0.2)
    if killed_at is None:
        sys.exit(f"B finished before step {args.kill_after_step}: lower --kill-after-step")
    result["killed_after_checkpoint_step"] = killed_at
    result["resume"] = timed([*distill, "--out", str(b)], work / "distill-B.log")
    a, bw = weights(work / "A"), weights(b)
    result["bit_identical"] = a.keys() == bw.keys() and all(np.array_equal(a[k], bw[k]) for k in a)
    print(json.dumps(result, indent=2), flush=True)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
