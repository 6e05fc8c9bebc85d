"""The distillation loop, the standard MLX way, with exact resume and a NaN guard.

`nn.value_and_grad` over the student (plus the hidden-state projections), `mx.compile` with the
model, optimizer and RNG state, `mx.eval(state, loss)` every step. A checkpoint holds the
weights, the optimizer state, the RNG key and the position in the epoch, so a resumed run ends
with the same weights as one that was never interrupted.

On MLX's CPU device a step is split into shards, one per CPU stream: MLX runs each stream's
elementwise ops on a thread of its own (one stream uses one core for them), so a 2-core machine
computes both halves of a batch at once. Each shard's loss terms are weighted by its share of
the batch's rows, tokens or attention pairs, so the summed terms and gradients are those of the
whole batch (the tests compare them). On a GPU the step is one piece.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import mlx.optimizers as optim
import numpy as np
from mlx.utils import tree_flatten, tree_map, tree_unflatten

from mlx_edge.data import bucketed_batches, collate
from mlx_edge.distill import losses
from mlx_edge.errors import DistillError
from mlx_edge.progress import progress_bar
from mlx_edge.runtime.cpu_streams import blas_limit, cpu_streams, resolve_shards, row_bounds
from mlx_edge.settings import DISTILL, DistillSettings

TERMS = ("kd", "ce", "hidden", "attention", "embedding")


@dataclass
class Schedule:
    """A loss weight: constant, or linear from `start` to `end` over the whole run."""

    start: float
    end: float | None = None

    def at(self, progress: float) -> float:
        return self.start if self.end is None else self.start + (self.end - self.start) * progress

    @property
    def ever_on(self) -> bool:
        return self.start > 0 or (self.end or 0) > 0

    @classmethod
    def parse(cls, text: str | float) -> Schedule:
        if isinstance(text, (int, float)):
            return cls(float(text))
        parts = str(text).split(":")
        try:
            values = [float(p) for p in parts]
        except ValueError:
            raise DistillError(f"loss weight {text!r} is not a number or 'start:end'") from None
        if len(values) not in (1, 2) or min(values) < 0:
            raise DistillError(f"loss weight {text!r}: use W (constant) or START:END (linear), non-negative")
        return cls(values[0], values[1] if len(values) == 2 else None)


def default_weights(s: DistillSettings) -> dict[str, Schedule]:
    """Each term's weight schedule from the settings' `<term>_weight` strings."""
    return {k: Schedule.parse(getattr(s, f"{k}_weight")) for k in TERMS}


@dataclass
class LoopConfig:
    """The loop's settings; defaults are DistillSettings' (mlx_edge/settings.py), read by `from_settings`."""

    epochs: int = DISTILL.epochs
    batch_size: int = DISTILL.batch_size
    learning_rate: float = DISTILL.learning_rate
    warmup_ratio: float = DISTILL.warmup_ratio
    weight_decay: float = DISTILL.weight_decay
    grad_accum: int = DISTILL.grad_accum
    max_grad_norm: float = DISTILL.max_grad_norm
    seed: int = DISTILL.seed
    temperature: float = DISTILL.temperature
    weights: dict[str, Schedule] = field(default_factory=lambda: default_weights(DISTILL))
    attention_loss: str = DISTILL.attention_loss
    two_stage_epochs: int = DISTILL.two_stage  # TinyBERT: this many epochs of intermediate losses only
    patience: int | None = DISTILL.patience
    checkpoint_every: int = DISTILL.checkpoint_every
    max_steps: int | None = DISTILL.max_steps  # stop after this many optimizer steps (a trial, a benchmark)
    cpu_shards: int | None = DISTILL.cpu_shards  # CPU streams a step is split across; None: auto

    @classmethod
    def from_settings(cls, s: DistillSettings) -> LoopConfig:
        return cls(
            **s.kwargs(
                "epochs",
                "batch_size",
                "learning_rate",
                "warmup_ratio",
                "weight_decay",
                "grad_accum",
                "max_grad_norm",
                "seed",
                "temperature",
                "attention_loss",
                "patience",
                "checkpoint_every",
                "max_steps",
                "cpu_shards",
            ),
            weights=default_weights(s),
            two_stage_epochs=s.two_stage,
        )

    def weights_at(self, epoch: int, progress: float) -> dict[str, float]:
        w = {k: self.weights.get(k, Schedule(0.0)).at(progress) for k in TERMS}
        if self.two_stage_epochs:
            intermediate = epoch < self.two_stage_epochs
            for k in TERMS:
                if (k in ("kd", "ce")) == intermediate:
                    w[k] = 0.0
        return w


class Trainable(nn.Module):
    """What the optimizer updates: the student and, when widths differ, the hidden-state projections."""

    def __init__(self, student, teacher_width: int, with_hidden: bool, with_embedding: bool):
        super().__init__()
        self.student = student
        width = student.config.hidden_size
        self.hidden_proj = nn.Linear(width, teacher_width) if with_hidden and width != teacher_width else None
        self.embedding_proj = nn.Linear(width, teacher_width) if with_embedding and width != teacher_width else None


# A batch is a dict (mx.compile takes trees of arrays): input_ids, mask, labels, logits (teacher),
# frac (each term's share of the whole batch: ones unless the batch is a shard of one), and when
# used: hidden / attention (lists: the teacher's for each mapped student layer, in order),
# embedding (the teacher's embedding output).


def term_shares(mask: np.ndarray, bounds: list[int], attention_loss: str) -> np.ndarray:
    """(shards, len(TERMS)): each shard's share of what each term averages over in the whole batch.

    kd/ce average over rows, hidden/embedding over real tokens, attention MSE over real
    (query, key) pairs and attention KL over real queries: shard s's mean times its share is its
    part of the whole batch's mean.
    """
    tokens = mask.sum(axis=1).astype(np.float64)
    per_row = {
        "kd": np.ones_like(tokens),
        "ce": np.ones_like(tokens),
        "hidden": tokens,
        "embedding": tokens,
        "attention": tokens if attention_loss == "kl" else tokens**2,
    }
    starts = bounds[:-1]
    return np.stack([np.add.reduceat(per_row[k], starts) / per_row[k].sum() for k in TERMS], axis=1).astype(np.float32)


def split_batch(b: dict, mask: np.ndarray, shards: int, attention_loss: str) -> list[dict]:
    """The batch as `shards` (or fewer, for a short batch) contiguous row ranges with their term shares."""
    bounds = row_bounds(mask.shape[0], shards)
    shares = term_shares(mask, bounds, attention_loss) if len(bounds) > 2 else np.ones((1, len(TERMS)), np.float32)

    def part(value, lo, hi):
        if isinstance(value, list):
            return [v[lo:hi] for v in value]
        return None if value is None else value[lo:hi]

    return [
        {**{k: part(v, lo, hi) for k, v in b.items()}, "frac": mx.array(shares[i])}
        for i, (lo, hi) in enumerate(zip(bounds, bounds[1:]))
    ]


def make_loss(config: LoopConfig, layer_map: dict[int, int], terms_on: set[str]):
    student_layers = sorted(layer_map)
    attn_loss = losses.attention_kl if config.attention_loss == "kl" else losses.attention_mse

    def loss_fn(trainable: Trainable, b: dict, w: mx.array):
        mask = b["mask"]
        out = trainable.student(
            b["input_ids"],
            mask,
            output_hidden_states=bool(terms_on & {"hidden", "embedding"}),
            output_attentions="attention" in terms_on,
        )
        zero = mx.array(0.0)
        terms = {
            "kd": losses.soft_target_kl(out.logits, b["logits"], config.temperature) if "kd" in terms_on else zero,
            "ce": losses.hard_label_ce(out.logits, b["labels"]) if "ce" in terms_on else zero,
            "hidden": (
                sum(
                    losses.hidden_mse(out.hidden_states[i + 1], t, mask, trainable.hidden_proj)
                    for i, t in zip(student_layers, b["hidden"])
                )
                / len(student_layers)
                if "hidden" in terms_on
                else zero
            ),
            "attention": (
                sum(attn_loss(out.attentions[i], t, mask) for i, t in zip(student_layers, b["attention"]))
                / len(student_layers)
                if "attention" in terms_on
                else zero
            ),
            "embedding": (
                losses.hidden_mse(out.hidden_states[0], b["embedding"], mask, trainable.embedding_proj)
                if "embedding" in terms_on
                else zero
            ),
        }
        stacked = mx.stack([terms[k] for k in TERMS])
        if "frac" in b:  # a shard: its part of the whole batch's terms
            stacked = stacked * b["frac"]
        return (stacked * w).sum(), stacked

    return loss_fn


def learning_rate_schedule(config: LoopConfig, total_steps: int):
    warmup = int(total_steps * config.warmup_ratio)
    decay = optim.linear_schedule(config.learning_rate, 0.0, max(1, total_steps - warmup))
    if warmup == 0:
        return decay
    return optim.join_schedules(
        [optim.linear_schedule(config.learning_rate / (warmup + 1), config.learning_rate, warmup), decay], [warmup]
    )


# ------------------------------------------------------------------------------------ checkpoints


def save_checkpoint(work: Path, trainable: Trainable, optimizer, position: dict) -> None:
    """Weights, optimizer state, RNG key and position, swapped in as a whole directory."""
    new, current, old = work / "ckpt-new", work / "ckpt", work / "ckpt-old"
    shutil.rmtree(new, ignore_errors=True)
    new.mkdir(parents=True)
    mx.save_safetensors(str(new / "weights.safetensors"), dict(tree_flatten(trainable.parameters())))
    mx.save_safetensors(str(new / "optimizer.safetensors"), dict(tree_flatten(optimizer.state)))
    position = {**position, "rng": np.array(mx.random.state[0]).tolist()}
    (new / "position.json").write_text(json.dumps(position))
    shutil.rmtree(old, ignore_errors=True)
    if current.exists():
        os.replace(current, old)
    os.replace(new, current)
    shutil.rmtree(old, ignore_errors=True)


def load_checkpoint(work: Path, trainable: Trainable, optimizer) -> dict | None:
    for name in ("ckpt", "ckpt-old"):  # ckpt-old: a crash between the two renames of a save
        directory = work / name
        if (directory / "position.json").is_file():
            trainable.load_weights(list(mx.load(str(directory / "weights.safetensors")).items()), strict=True)
            optimizer.state = tree_unflatten(list(mx.load(str(directory / "optimizer.safetensors")).items()))
            position = json.loads((directory / "position.json").read_text())
            hi, lo = position.pop("rng")  # the global key is not assignable; seed(k) sets it to [k >> 32, k & mask]
            mx.random.seed((int(hi) << 32) | int(lo))
            mx.eval(trainable.parameters(), optimizer.state)
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
) -> LoopResult:
    """Train; `targets(rows, input_ids, mask)` gives the teacher's outputs for a batch."""
    lengths = np.array([len(x) for x in train_ids])
    batches_per_epoch = len(bucketed_batches(lengths, config.batch_size, seed=config.seed))
    total_steps = max(1, math.ceil(batches_per_epoch / config.grad_accum) * config.epochs)
    optimizer = optim.AdamW(learning_rate=learning_rate_schedule(config, total_steps), weight_decay=config.weight_decay)
    optimizer.init(trainable.trainable_parameters())
    mx.random.seed(config.seed)
    # Restore before building `state`: loading replaces optimizer.state, and compile captures the object.
    position = load_checkpoint(work, trainable, optimizer) or {
        "epoch": 0,
        "batch": 0,
        "step": 0,
        "best": None,
        "history": [],
        "patience_used": 0,
        "seen": 0,
        "seconds": 0.0,
    }
    loss_and_grad = nn.value_and_grad(trainable, make_loss(config, layer_map, terms_on))
    state = [trainable.state, optimizer.state, mx.random.state]
    shards = resolve_shards(config.cpu_shards, config.batch_size)
    compiled: dict[int, tuple] = {}

    def steps_for(count: int):
        """(fused step, gradient step) for a batch in `count` shards, compiled once per count."""
        if count in compiled:
            return compiled[count]
        streams = cpu_streams(count) if count > 1 else [None]

        def loss_terms_grads(parts: list, w: mx.array):
            total = None
            for stream, part in zip(streams, parts):
                with mx.stream(stream) if stream is not None else nullcontext():
                    (loss, terms), grads = loss_and_grad(trainable, part, w)
                total = (
                    (loss, terms, grads)
                    if total is None
                    else (total[0] + loss, total[1] + terms, tree_map(mx.add, total[2], grads))
                )
            return total

        @partial(mx.compile, inputs=state, outputs=state)
        def fused_step(parts: list, w: mx.array):
            loss, terms, grads = loss_terms_grads(parts, w)
            grads, _ = optim.clip_grad_norm(grads, config.max_grad_norm)
            optimizer.update(trainable, grads)
            return loss, terms

        @partial(mx.compile, inputs=state, outputs=state)
        def grad_step(parts: list, w: mx.array):
            loss, terms, grads = loss_terms_grads(parts, w)
            # Evaluated first, a value that needs every gradient makes MLX queue the shards' work
            # side by side; asked for leaf by leaf, the streams took turns (1.6x slower on 2 cores).
            gate = sum(g.reshape(-1)[0] for _, g in tree_flatten(grads))
            return gate, loss, terms, grads

        compiled[count] = fused_step, grad_step
        return compiled[count]

    @partial(mx.compile, inputs=state, outputs=state)
    def apply_accumulated(grads, scale: mx.array):
        grads, _ = optim.clip_grad_norm(tree_map(lambda g: g * scale, grads), config.max_grad_norm)
        optimizer.update(trainable, grads)

    history, best = position["history"], position["best"]
    step, seen, seconds = position["step"], position["seen"], position["seconds"]
    trainable.train()
    pending, pending_count = None, 0
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
            rows = batches[index]
            input_ids, mask = collate([train_ids[r] for r in rows], pad_id=pad_id, max_width=max_width)
            t = targets(rows, input_ids, mask)
            b = {
                "input_ids": mx.array(input_ids),
                "mask": mx.array(mask),
                "labels": mx.array(train_labels[rows]),
                "logits": mx.array(t["logits"]),
            }
            if "hidden" in terms_on:
                b["hidden"] = [mx.array(x) for x in t["hidden"]]
            if "attention" in terms_on:
                b["attention"] = [mx.array(x) for x in t["attention"]]
            if "embedding" in terms_on:
                b["embedding"] = mx.array(t["embedding"])
            w = config.weights_at(epoch, min(1.0, step / total_steps))
            w_arr = mx.array([w[k] for k in TERMS])
            parts = split_batch(b, mask, shards, config.attention_loss)
            fused_step, grad_step = steps_for(len(parts))
            with blas_limit(len(parts)):
                mx.eval(b)  # live teacher targets (themselves computed on the shards' streams)
                if config.grad_accum == 1:
                    loss, terms = fused_step(parts, w_arr)
                    mx.eval(state, loss, terms)
                    step += 1
                else:
                    gate, loss, terms, grads = grad_step(parts, w_arr)
                    pending = grads if pending is None else tree_map(mx.add, pending, grads)
                    pending_count += 1
                    mx.eval(gate, loss, terms, pending, mx.random.state)
            if pending is not None and ((index + 1) % config.grad_accum == 0 or index + 1 == len(batches)):
                apply_accumulated(pending, mx.array(1.0 / pending_count))  # the mean, also of a short last group
                mx.eval(state)
                pending, pending_count = None, 0
                step += 1
            values = np.array(terms)
            _nan_guard(values, loss, step, work)
            sums += values
            seen += len(rows)
            elapsed = seconds + time.perf_counter() - started
            if bar is not None:
                bar.set_postfix(
                    {k: f"{v:.3f}" for k, v in zip(TERMS, sums / (index - first + 1)) if w[k] > 0}
                    | {"samples/s": f"{seen / max(elapsed, 1e-9):.1f}"}
                )
                bar.update()
            if on_step is not None:
                on_step(step, dict(zip(TERMS, values.tolist())) | {"loss": float(loss.item()), "epoch": epoch + 1})
            at_boundary = pending is None
            if config.max_steps is not None and step >= config.max_steps:
                break
            if (
                at_boundary
                and config.checkpoint_every
                and step % config.checkpoint_every == 0
                and index + 1 < len(batches)
            ):
                save_checkpoint(
                    work,
                    trainable,
                    optimizer,
                    {
                        "epoch": epoch,
                        "batch": index + 1,
                        "step": step,
                        "best": best,
                        "history": history,
                        "patience_used": position["patience_used"],
                        "seen": seen,
                        "seconds": elapsed,
                    },
                )
        if bar is not None:
            bar.close()
        seconds += time.perf_counter() - started
        trainable.eval()
        metrics = {
            "epoch": epoch + 1,
            "step": step,
            **dict(zip([f"train_{k}" for k in TERMS], (sums / max(1, len(batches) - first)).tolist())),
            **evaluate(),
            "samples_per_second": seen / max(seconds, 1e-9),
        }
        trainable.train()
        history.append(metrics)
        with open(work / "metrics.jsonl", "a", encoding="utf-8") as f:
            f.write(json.dumps(metrics) + "\n")
        improved = best is None or (metrics["dev_accuracy"], metrics["dev_macro_f1"]) > (
            best["dev_accuracy"],
            best["dev_macro_f1"],
        )
        if improved:
            best = metrics
            save_best()
            position["patience_used"] = 0
        else:
            position["patience_used"] += 1
        if on_epoch is not None:
            on_epoch(metrics)
        save_checkpoint(
            work,
            trainable,
            optimizer,
            {
                "epoch": epoch + 1,
                "batch": 0,
                "step": step,
                "best": best,
                "history": history,
                "patience_used": position["patience_used"],
                "seen": seen,
                "seconds": seconds,
            },
        )
        if config.patience is not None and position["patience_used"] >= config.patience:
            stopped_early = True
            break
        if config.max_steps is not None and step >= config.max_steps:
            break
    return LoopResult(step, len(history), best["epoch"], best, history, seen / max(seconds, 1e-9), stopped_early)


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
        "lower --lr, or check the targets (a NaN/inf teacher logit?)",
    )
