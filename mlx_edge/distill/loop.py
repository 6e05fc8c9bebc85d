"""The distillation loop: epochs over bucketed batches, checkpoints with exact resume, the NaN guard,
and each epoch's report. The step itself and its state live in step.py.

A checkpoint holds the weights, the optimizer state, the RNG key and the position in the epoch, so
a resumed run ends with the same weights as one that was never interrupted.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import mlx.core as mx
import numpy as np

from mlx_edge.data import bucketed_batches, collate, epochs_for
from mlx_edge.distill.config import TERMS, LoopConfig, Schedule, default_weights
from mlx_edge.distill.step import Trainable, TrainStep, rank_rows
from mlx_edge.errors import DistillError
from mlx_edge.progress import progress_bar
from mlx_edge.runtime.cpu_streams import blas_limit

__all__ = ["TERMS", "LoopConfig", "LoopResult", "Schedule", "default_weights", "run_loop"]


def fresh_position() -> dict:
    return {
        "epoch": 0,
        "batch": 0,
        "step": 0,
        "best": None,
        "history": [],
        "patience_used": 0,
        "seen": 0,
        "seconds": 0.0,
    }


# ------------------------------------------------------------------------------------ checkpoints


def save_checkpoint(work: Path, train_step: TrainStep, position: dict) -> None:
    """Weights, optimizer state, RNG key and position, swapped in as a whole directory."""
    new, current, old = work / "ckpt-new", work / "ckpt", work / "ckpt-old"
    shutil.rmtree(new, ignore_errors=True)
    new.mkdir(parents=True)
    rng = train_step.save(new)
    (new / "position.json").write_text(json.dumps({**position, "rng": rng}))
    shutil.rmtree(old, ignore_errors=True)
    if current.exists():
        os.replace(current, old)
    os.replace(new, current)
    shutil.rmtree(old, ignore_errors=True)


def load_checkpoint(work: Path, train_step: TrainStep) -> dict | None:
    for name in ("ckpt", "ckpt-old"):  # ckpt-old: a crash between the two renames of a save
        directory = work / name
        if (directory / "position.json").is_file():
            position = json.loads((directory / "position.json").read_text())
            train_step.restore(directory, position.pop("rng"))
            return position
    return None


# ------------------------------------------------------------------------------------------ loop


@dataclass
class LoopResult:
    steps: int
    epochs_run: int
    best_epoch: int
    best_metrics: dict
    history: list[dict]
    samples_per_second: float
    stopped_early: bool
    kept: str = "best"  # the epoch kept: "best" on dev or "last" (LoopConfig.select)


def make_batch(rows, input_ids: np.ndarray, mask: np.ndarray, labels: np.ndarray, t: dict, terms_on: set[str]):
    """The step's batch: a dict of arrays (mx.compile takes trees of arrays). `hidden`/`attention` are
    lists (the teacher's, for each mapped student layer in order); `embedding` the teacher's embedding output."""
    b = {
        "input_ids": mx.array(input_ids),
        "mask": mx.array(mask),
        "labels": mx.array(labels[rows]),
        "logits": mx.array(t["logits"]),
    }
    if "hidden" in terms_on:
        b["hidden"] = [mx.array(x) for x in t["hidden"]]
    if "attention" in terms_on:
        b["attention"] = [mx.array(x) for x in t["attention"]]
    if "embedding" in terms_on:
        b["embedding"] = mx.array(t["embedding"])
    return b


def run_epochs(config: LoopConfig, steps_per_epoch: int) -> int:
    """The epochs the loop trains (data.epochs_for): `config.epochs`, more for a few hundred rows
    (`min_steps`), fewer past `step_budget` (a large transfer set), and at least one past the two-stage phase."""
    return epochs_for(
        config.epochs, config.min_steps, steps_per_epoch, config.step_budget, fewest=config.two_stage_epochs + 1
    )


def run_loop(
    *,
    trainable: Trainable,
    config: LoopConfig,
    layer_map: dict[int, int],
    terms_on: set[str],
    train_ids: list[np.ndarray],
    train_labels: np.ndarray,
    pad_id: int,
    max_width: int,
    targets: Callable[[np.ndarray, np.ndarray, np.ndarray], dict],
    evaluate: Callable[[], dict],
    save_best: Callable[[], None],
    work: Path,
    progress: bool = True,
    on_step: Callable[[int, dict], None] | None = None,
    on_epoch: Callable[[dict], None] | None = None,
    group=None,
) -> LoopResult:
    """Train; `targets(rows, input_ids, mask)` gives the teacher's outputs for a batch.

    `group`: MLX's group of `mlx.launch`'s processes. Every process walks the same batches and
    computes its own rows of each (rank_rows); the step averages their gradients, so the weights
    stay the same everywhere. `work` must be the process's own; whether an epoch is the best so far
    (which keeps it and stops early) is rank 0's decision, on every rank."""
    rank = group.rank() if group is not None else 0
    world = group.size() if group is not None else 1
    lengths = np.array([len(x) for x in train_ids])
    batches_per_epoch = len(bucketed_batches(lengths, config.batch_size, seed=config.seed))
    steps_per_epoch = math.ceil(batches_per_epoch / config.grad_accum)
    config = replace(config, epochs=run_epochs(config, steps_per_epoch))
    total_steps = max(1, steps_per_epoch * config.epochs)
    train_step = TrainStep(trainable, config, layer_map, terms_on, total_steps, group=group)
    mx.random.seed(config.seed + rank)  # each process its own dropout draws
    position = load_checkpoint(work, train_step) or fresh_position()  # before the step compiles (see TrainStep)
    if group is not None:
        _check_same_step(position["step"], group, work)
    history, best = position["history"], position["best"]
    step, seen, seconds = position["step"], position["seen"], position["seconds"]
    trainable.train()
    stopped_early = False
    for epoch in range(position["epoch"], config.epochs):
        batches = bucketed_batches(lengths, config.batch_size, seed=config.seed, epoch=epoch)
        first = position["batch"] if epoch == position["epoch"] else 0
        bar = progress_bar(
            len(batches), desc=f"epoch {epoch + 1}/{config.epochs}", unit="batch", enabled=progress, initial=first
        )
        sums = np.zeros(len(TERMS))
        started = time.perf_counter()
        for index in range(first, len(batches)):
            rows = batch = batches[index]
            input_ids, mask = collate([train_ids[r] for r in rows], pad_id=pad_id, max_width=max_width)
            scale = None
            if world > 1:  # this process's rows, padded as the whole batch is
                mine, scale = rank_rows(mask, train_labels[rows], rank, world, config.attention_loss)
                rows, input_ids, mask = rows[mine], input_ids[mine], mask[mine]
            b = make_batch(rows, input_ids, mask, train_labels, targets(rows, input_ids, mask), terms_on)
            w = config.weights_at(epoch, min(1.0, step / total_steps))
            parts = train_step.split(b, mask, scale)
            with blas_limit(len(parts)):
                mx.eval(b)  # live teacher targets (themselves computed on the shards' streams)
                loss, terms = train_step(parts, mx.array([w[k] for k in TERMS]))
            if config.grad_accum == 1:
                step += 1
            elif (index + 1) % config.grad_accum == 0 or index + 1 == len(batches):
                train_step.apply_pending()
                step += 1
            values = np.array(terms)
            _nan_guard(values, loss, step, work)
            sums += values
            seen += len(batch)
            elapsed = seconds + time.perf_counter() - started
            if bar is not None:
                bar.set_postfix(
                    {k: f"{v:.3f}" for k, v in zip(TERMS, sums / (index - first + 1)) if w[k] > 0}
                    | {"samples/s": f"{seen / max(elapsed, 1e-9):.1f}"}
                )
                bar.update()
            if on_step is not None:
                on_step(step, dict(zip(TERMS, values.tolist())) | {"loss": float(loss.item()), "epoch": epoch + 1})
            if config.max_steps is not None and step >= config.max_steps:
                break
            at_boundary = train_step.pending is None
            if (
                at_boundary
                and config.checkpoint_every
                and step % config.checkpoint_every == 0
                and index + 1 < len(batches)
            ):
                position.update(
                    epoch=epoch, batch=index + 1, step=step, best=best, history=history, seen=seen, seconds=elapsed
                )
                save_checkpoint(work, train_step, position)
        if bar is not None:
            bar.close()
        seconds += time.perf_counter() - started
        metrics = _epoch_metrics(
            epoch, step, sums / max(1, len(batches) - first), trainable, evaluate, seen / max(seconds, 1e-9)
        )
        history.append(metrics)
        with open(work / "metrics.jsonl", "a", encoding="utf-8") as f:
            f.write(json.dumps(metrics) + "\n")
        if config.select == "last":
            improved = epoch == config.epochs - 1 or (config.max_steps is not None and step >= config.max_steps)
        else:
            improved = best is None or (metrics["dev_accuracy"], metrics["dev_macro_f1"]) > (
                best["dev_accuracy"],
                best["dev_macro_f1"],
            )
        if group is not None:
            improved = _rank0s(improved, group)
        if improved:
            best = metrics
            save_best()
            position["patience_used"] = 0
        else:
            position["patience_used"] += 1
        if on_epoch is not None:
            on_epoch(metrics)
        position.update(epoch=epoch + 1, batch=0, step=step, best=best, history=history, seen=seen, seconds=seconds)
        save_checkpoint(work, train_step, position)
        if config.patience is not None and position["patience_used"] >= config.patience:
            stopped_early = True
            break
        if config.max_steps is not None and step >= config.max_steps:
            break
    return LoopResult(
        step, len(history), best["epoch"], best, history, seen / max(seconds, 1e-9), stopped_early, config.select
    )


def _epoch_metrics(epoch: int, step: int, train_means: np.ndarray, trainable: Trainable, evaluate, speed: float):
    """The epoch's line of metrics.jsonl: mean train terms, dev metrics (in eval mode), samples/s."""
    trainable.eval()
    metrics = {
        "epoch": epoch + 1,
        "step": step,
        **dict(zip([f"train_{k}" for k in TERMS], train_means.tolist())),
        **evaluate(),
        "samples_per_second": speed,
    }
    trainable.train()
    return metrics


def _check_same_step(step: int, group, work: Path) -> None:
    """Every process resumes from the same step: a run killed between two processes' checkpoints cannot go on."""
    mine = np.zeros(group.size(), np.float32)
    mine[group.rank()] = step
    steps = np.array(mx.distributed.all_sum(mx.array(mine), group=group, stream=mx.cpu)).astype(int).tolist()
    if len(set(steps)) > 1:
        raise DistillError(
            f"the processes' checkpoints are at different steps ({', '.join(map(str, steps))}; this one's in {work})",
            "start over with --restart",
        )


def _rank0s(flag: bool, group) -> bool:
    """Rank 0's `flag` on every rank. The processes evaluate the same weights on the same rows, but a
    last-bit difference (another chip) must not make one rank keep another epoch or stop early alone."""
    mine = mx.array([1.0 if flag and group.rank() == 0 else 0.0])
    return bool(mx.distributed.all_sum(mine, group=group, stream=mx.cpu).item() > 0.5)


def _nan_guard(values: np.ndarray, loss: mx.array, step: int, work: Path) -> None:
    if np.all(np.isfinite(values)) and math.isfinite(loss.item()):
        return
    bad = [f"{k}={v}" for k, v in zip(TERMS, values.tolist()) if not math.isfinite(v)] or [f"total={loss.item()}"]
    kept = json.loads((work / "ckpt" / "position.json").read_text())["step"] if (work / "ckpt").exists() else None
    where = (
        f"the last good checkpoint (step {kept}) is kept in {work}"
        if kept is not None
        else "no checkpoint had been written yet"
    )
    raise DistillError(
        f"step {step}: loss went bad ({', '.join(bad)}); training stopped and {where}",
        "lower --learning-rate, or check the targets (a NaN/inf teacher logit?)",
    )
