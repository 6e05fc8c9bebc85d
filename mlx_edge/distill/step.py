"""The compiled train step and its state: the model (and hidden-state projections), AdamW, the RNG key,
and the layout of a batch over CPU streams.

`nn.value_and_grad` over `Trainable`, `mx.compile` with `state=[model, optimizer, RNG]`, as mlx-lm's
trainer does. On MLX's CPU device a step is split into shards, one per CPU stream: MLX runs each
stream's elementwise ops on a thread of its own (one stream uses one core for them), so a 2-core
machine computes both halves of a batch at once. Each shard's loss terms are weighted by its share
of the batch's rows, tokens or attention pairs, so the summed terms and gradients are those of the
whole batch (the tests compare them). On a GPU the step is one piece.
"""

from __future__ import annotations

from contextlib import nullcontext
from functools import partial
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import mlx.optimizers as optim
import numpy as np
from mlx.utils import tree_flatten, tree_map, tree_unflatten

from mlx_edge.distill import losses
from mlx_edge.distill.config import TERMS, LoopConfig
from mlx_edge.runtime.cpu_streams import cpu_streams, resolve_shards, row_bounds


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


def term_shares(mask: np.ndarray, bounds: list[int], attention_loss: str, gold: np.ndarray | None = None) -> np.ndarray:
    """(shards, len(TERMS)): each shard's share of what each term averages over in the whole batch.

    kd averages over rows, ce over rows with a gold label (`gold`; None: all), hidden/embedding over
    real tokens, attention MSE over real (query, key) pairs and attention KL over real queries: shard
    s's mean times its share is its part of the whole batch's mean (0 where the batch has none).
    """
    tokens = mask.sum(axis=1).astype(np.float64)
    per_row = {
        "kd": np.ones_like(tokens),
        "ce": np.ones_like(tokens) if gold is None else gold.astype(np.float64),
        "hidden": tokens,
        "embedding": tokens,
        "attention": tokens if attention_loss == "kl" else tokens**2,
    }
    starts = bounds[:-1]
    return np.stack([np.add.reduceat(per_row[k], starts) / max(per_row[k].sum(), 1e-12) for k in TERMS], axis=1).astype(
        np.float32
    )


def split_batch(
    b: dict, mask: np.ndarray, shards: int, attention_loss: str, scale: np.ndarray | None = None
) -> list[dict]:
    """The batch as `shards` (or fewer, for a short batch) contiguous row ranges with their term shares
    (times `scale`, per term: a rank's part of a batch spread over processes, see rank_rows)."""
    bounds = row_bounds(mask.shape[0], shards)
    gold = np.asarray(b["labels"]) >= 0 if "labels" in b else None
    shares = (
        term_shares(mask, bounds, attention_loss, gold) if len(bounds) > 2 else np.ones((1, len(TERMS)), np.float32)
    )
    if scale is not None:
        shares = shares * scale.astype(np.float32)

    def part(value, lo, hi):
        if isinstance(value, list):
            return [v[lo:hi] for v in value]
        return None if value is None else value[lo:hi]

    return [
        {**{k: part(v, lo, hi) for k, v in b.items()}, "frac": mx.array(shares[i])}
        for i, (lo, hi) in enumerate(zip(bounds, bounds[1:]))
    ]


def rank_rows(
    mask: np.ndarray, labels: np.ndarray, rank: int, world: int, attention_loss: str
) -> tuple[slice, np.ndarray]:
    """(this rank's contiguous rows of a batch spread over `world` processes, the scale of its terms).

    The scale is the rank's share of each term of the whole batch times `world`: averaged over the
    ranks (nn.average_gradients), the ranks' losses and gradients are the whole batch's. A batch too
    short to reach this rank gives it row 0 at scale 0: it computes, and adds nothing."""
    bounds = row_bounds(mask.shape[0], world)
    if rank >= len(bounds) - 1:
        return slice(0, 1), np.zeros(len(TERMS), np.float32)
    shares = term_shares(mask, bounds, attention_loss, labels >= 0)
    return slice(bounds[rank], bounds[rank + 1]), shares[rank] * world


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


class TrainStep:
    """One optimizer step (or one accumulation step) of `trainable` on a batch given as shards.

    The compiled functions capture the optimizer's state object: `restore` before the first call.
    `group`: MLX's group of `mlx.launch`'s processes (data parallel: each computes its rows of every
    batch, see rank_rows, and the gradients are averaged over them before the update); None: one process.
    """

    def __init__(
        self,
        trainable: Trainable,
        config: LoopConfig,
        layer_map: dict[int, int],
        terms_on: set[str],
        total_steps: int,
        group=None,
    ):
        self.trainable, self.config, self.group = trainable, config, group
        self.optimizer = optim.AdamW(
            learning_rate=learning_rate_schedule(config, total_steps), weight_decay=config.weight_decay
        )
        self.optimizer.init(trainable.trainable_parameters())
        self.shards = resolve_shards(config.cpu_shards, config.batch_size)
        self.loss_and_grad = nn.value_and_grad(trainable, make_loss(config, layer_map, terms_on))
        self.state: list | None = None  # [model, optimizer, RNG], fixed at the first step
        self.compiled: dict[int, tuple] = {}
        self.pending, self.pending_count = None, 0  # accumulated gradients not yet applied

    # ---------------------------------------------------------------- state on disk
    def save(self, directory: Path) -> list[int]:
        """Weights and optimizer state into `directory`; returns the RNG key to store beside them."""
        mx.save_safetensors(str(directory / "weights.safetensors"), dict(tree_flatten(self.trainable.parameters())))
        mx.save_safetensors(str(directory / "optimizer.safetensors"), dict(tree_flatten(self.optimizer.state)))
        return np.array(mx.random.state[0]).tolist()

    def restore(self, directory: Path, rng: list[int]) -> None:
        self.trainable.load_weights(list(mx.load(str(directory / "weights.safetensors")).items()), strict=True)
        self.optimizer.state = tree_unflatten(list(mx.load(str(directory / "optimizer.safetensors")).items()))
        hi, lo = rng  # the global key is not assignable; seed(k) sets it to [k >> 32, k & mask]
        mx.random.seed((int(hi) << 32) | int(lo))
        mx.eval(self.trainable.parameters(), self.optimizer.state)

    # ---------------------------------------------------------------- the step
    def split(self, b: dict, mask: np.ndarray, scale: np.ndarray | None = None) -> list[dict]:
        return split_batch(b, mask, self.shards, self.config.attention_loss, scale)

    def __call__(self, parts: list[dict], w: mx.array) -> tuple[mx.array, mx.array]:
        """(loss, terms) of the batch; the update is applied now, or at `apply_pending` when accumulating."""
        fused_step, grad_step = self._compiled_for(len(parts))
        if self.config.grad_accum == 1:
            loss, terms = fused_step(parts, w)
            mx.eval(self.state, loss, terms)
            return loss, terms
        gate, loss, terms, grads = grad_step(parts, w)
        self.pending = grads if self.pending is None else tree_map(mx.add, self.pending, grads)
        self.pending_count += 1
        mx.eval(gate, loss, terms, self.pending, mx.random.state)
        return loss, terms

    def apply_pending(self) -> None:
        """Apply the accumulated gradients' mean (also of a short last group)."""
        self._apply_accumulated(self.pending, mx.array(1.0 / self.pending_count))
        mx.eval(self.state)
        self.pending, self.pending_count = None, 0

    def _ensure_state(self) -> list:
        if self.state is None:
            self.state = [self.trainable.state, self.optimizer.state, mx.random.state]
            config, optimizer, trainable = self.config, self.optimizer, self.trainable

            @partial(mx.compile, inputs=self.state, outputs=self.state)
            def apply_accumulated(grads, scale: mx.array):
                grads, _ = optim.clip_grad_norm(tree_map(lambda g: g * scale, grads), config.max_grad_norm)
                optimizer.update(trainable, grads)

            self._apply_accumulated = apply_accumulated
        return self.state

    def _compiled_for(self, count: int):
        """(fused step, gradient step) for a batch in `count` shards, compiled once per count."""
        if count in self.compiled:
            return self.compiled[count]
        state = self._ensure_state()
        streams = cpu_streams(count) if count > 1 else [None]
        config, optimizer, trainable, loss_and_grad = self.config, self.optimizer, self.trainable, self.loss_and_grad
        group = self.group

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
            if group is None:
                return total
            loss, terms, grads = total  # each rank's part, scaled by the world size (rank_rows)
            # the small sums on the CPU stream, which every backend's distributed ops run on; the gradients
            # on the backend's own communication stream (nn.average_gradients' default)
            pair = mx.concatenate([loss.reshape(1), terms])
            summed = mx.distributed.all_sum(pair, group=group, stream=mx.cpu) / group.size()
            return summed[0], summed[1:], nn.average_gradients(grads, group=group)

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

        self.compiled[count] = fused_step, grad_step
        return self.compiled[count]
