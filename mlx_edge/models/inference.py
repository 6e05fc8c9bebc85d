"""The one MLX inference path: teacher labeling, dev evaluation, `predict` and `mlx-edge bench` all call it.

Batches: on MLX's CPU device a batch is cut into row slices, one per CPU stream (cpu_streams.py), so
every core runs the elementwise work, with OpenBLAS limited to cores/streams threads inside; on a
GPU it is one piece. On Linux CPUs the slices advance layer by layer (`staged_forward`), and the
attention softmax, GELU and LayerNorm run in mlx-edge's C++ kernels (runtime/kernels.py); where those
cannot be built, the softmax runs in NumPy (MLX's CPU exp is scalar, NumPy's is vectorized). Single sentences (`latency`): never sharded (one row
cannot be split, and a stream hop costs more than it saves), the forward compiled once per length.
"""

from __future__ import annotations

import functools
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import mlx.core as mx
import numpy as np

from mlx_edge.data import bucketed_batches, collate
from mlx_edge.models import fastmath
from mlx_edge.runtime.blas import blas_info
from mlx_edge.runtime.cpu_streams import (
    blas_limit,
    cpu_cores,
    cpu_streams,
    join_outputs,
    resolve_shards,
    row_bounds,
    sharded_forward,
)


@dataclass(frozen=True)
class Settings:
    """What a timing depends on: reported beside every figure made with this path."""

    shards: int
    blas_threads: int | None
    compiled: bool
    fast_math: bool
    blas: str | None
    device: str
    numpy_softmax: bool = False
    cpu_kernels: bool = False

    def describe(self) -> str:
        parts = [f"{self.shards} CPU stream{'s' * (self.shards > 1)}" if self.device == "cpu" else self.device]
        if self.blas_threads is not None:
            parts.append(f"{self.blas} x{self.blas_threads}")
        parts.append("compiled" if self.compiled else "eager")
        if self.fast_math:
            parts.append("fast math")
        if self.cpu_kernels:
            parts.append("mlx-edge C++ kernels")
        if self.numpy_softmax:
            parts.append("NumPy softmax")
        return ", ".join(parts)


def path_settings(model, *, shards: int, compiled: bool, numpy_softmax: bool = False) -> Settings:
    """The settings of a path running `model` over `shards` CPU streams (OpenBLAS gets cores/shards threads)."""
    cpu = mx.default_device() == mx.cpu
    return Settings(
        shards=shards,
        blas_threads=max(1, cpu_cores() // shards) if cpu and blas_info().name == "OpenBLAS" else None,
        compiled=compiled,
        fast_math=bool(getattr(model, "fast_math", False)),
        blas=blas_info().name if cpu else None,
        device="cpu" if cpu else "gpu",
        numpy_softmax=numpy_softmax,
        cpu_kernels=bool(getattr(model, "fast_math", False)) and cpu and fastmath.cpu_kernels() is not None,
    )


def numpy_softmax(scores: np.ndarray) -> np.ndarray:
    """Softmax over the last axis of float32 `scores`, in NumPy (a masked key, at the dtype's minimum,
    gets exactly 0)."""
    e = scores - scores.max(axis=-1, keepdims=True)
    np.exp(e, out=e)
    e *= 1.0 / e.sum(axis=-1, keepdims=True)
    return e


def layer_lockstep(model) -> bool:
    """Whether the eager batch path advances its CPU streams layer by layer (`staged_forward`): on
    MLX's CPU device with fast math on (Linux; fastmath.enabled). One lazy graph per stream, evaluated
    at the end, ran the streams largely one after the other (MLX's eval enqueues one slice's graph
    before the next, at most a few tasks ahead): tiny student, b32 L128, 337 vs 262 ms here."""
    return bool(getattr(model, "fast_math", False)) and hasattr(model, "steps") and mx.default_device() == mx.cpu


def softmax_in_numpy(model) -> bool:
    """Whether `staged_forward` takes the attention softmax out of MLX: when mlx-edge's C++ kernels
    are not built. The mlx-cpu wheel's exp runs one scalar at a time: MLX's attention took 40 ms for
    one 16 x 12 x 128 x 128 slice of scores, NumPy's vectorized softmax ~7 ms, the C++ kernel 2.4 ms."""
    return layer_lockstep(model) and fastmath.cpu_kernels() is None


@functools.cache
def _pool() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=cpu_cores(), thread_name_prefix="mlx-edge-softmax")


def staged_forward(model, input_ids: mx.array, mask: mx.array, shards: int, *, in_numpy: bool = True, **outputs):
    """`model(input_ids, mask, **outputs)` over `shards` CPU streams, the slices advancing layer by
    layer (`model.steps(softmax_outside=True)`): each layer's scores evaluated on all streams at once,
    then their softmaxes, by the model's own softmax on each stream, or (`in_numpy`) in NumPy on a
    thread per slice (NumPy releases the GIL) with the probabilities sent back. Lazy after the last
    layer, like sharded_forward."""
    bounds = row_bounds(input_ids.shape[0], shards)
    streams = cpu_streams(len(bounds) - 1)
    runs, pending, done = [], [], []
    for stream, lo, hi in zip(streams, bounds, bounds[1:]):
        with mx.stream(stream):
            runs.append(model.steps(input_ids[lo:hi], mask[lo:hi], softmax_outside=True, **outputs))
            scores, out = _advance(runs[-1], None)
        pending.append(scores)
        done.append(out)
    while any(s is not None for s in pending):
        live = [i for i, s in enumerate(pending) if s is not None]
        mx.eval([pending[i] for i in live])
        # NumPy has no bfloat16: a half-precision model keeps MLX's own softmax
        exact = [in_numpy and pending[i].dtype == mx.float32 for i in live]
        probs = _pool().map(numpy_softmax, [np.asarray(pending[i]) for i, f in zip(live, exact) if f])
        for i, f in zip(live, exact):
            with mx.stream(streams[i]):
                p = mx.array(next(probs)) if f else fastmath.softmax(pending[i])
                pending[i], done[i] = _advance(runs[i], p)
    return join_outputs(done)


def _advance(steps, probs):
    """Run `steps` to its next softmax: (the scores it yields, None), or (None, its output) at the end."""
    try:
        return steps.send(probs), None
    except StopIteration as finished:
        return None, finished.value


class BatchForward:
    """`forward(input_ids, mask, **outputs)` -> an evaluated BertOutput, split over CPU streams.

    `shards`: streams per batch (None: one per core, each slice at least 8 rows; see resolve_shards).
    On MLX's CPU device with fast math the streams advance layer by layer (`layer_lockstep`).
    """

    def __init__(self, model, *, batch_size: int, shards: int | None = None):
        self.model = model
        self.shards = resolve_shards(shards, batch_size)

    def __call__(self, input_ids, mask, **outputs):
        ids, m = mx.array(input_ids), mx.array(mask)
        with blas_limit(self.shards):
            if layer_lockstep(self.model) and not self.model.training:
                out = staged_forward(self.model, ids, m, self.shards, in_numpy=softmax_in_numpy(self.model), **outputs)
            else:
                out = sharded_forward(self.model, ids, m, self.shards, **outputs)
            mx.eval(out.logits, out.hidden_states or [], out.attentions or [])
        return out

    def logits(self, input_ids, mask) -> np.ndarray:
        """The logits alone (a [CLS]-pooled model's last layer then runs for the [CLS] row only)."""
        return np.array(self(input_ids, mask, logits_only=True).logits)

    def settings(self) -> Settings:
        return path_settings(self.model, shards=self.shards, compiled=False, numpy_softmax=softmax_in_numpy(self.model))


class Latency:
    """One sentence at a time: the compiled, unsharded forward (what an app's single request costs)."""

    def __init__(self, model):
        self.model = model
        self._forward = mx.compile(lambda i, m: model(i, m, logits_only=True).logits, inputs=model.state)

    def __call__(self, input_ids, mask) -> np.ndarray:
        logits = self._forward(mx.array(input_ids), mx.array(mask))
        mx.eval(logits)
        return np.array(logits)

    def settings(self) -> Settings:
        return path_settings(self.model, shards=1, compiled=True)


def predict_ids(
    model, ids: list[np.ndarray], pad_id: int, *, batch_size: int = 32, shards: int | None = None
) -> tuple[np.ndarray, np.ndarray, float]:
    """(logits in input order, argmax labels, seconds of the pass) for token ids, in length-bucketed
    batches through BatchForward. For a speed figure compare two models with compare_speed."""
    was_training = model.training
    model.eval()
    forward = BatchForward(model, batch_size=batch_size, shards=shards)
    logits = np.zeros((len(ids), model.config.num_labels), np.float32)
    start = time.perf_counter()
    for batch in bucketed_batches(np.array([len(x) for x in ids]), batch_size, shuffle=False):
        input_ids, mask = collate(
            [ids[j] for j in batch], pad_id=pad_id, max_width=model.config.max_position_embeddings
        )
        logits[batch] = forward.logits(input_ids, mask)
    seconds = time.perf_counter() - start
    model.train(was_training)
    return logits, logits.argmax(axis=-1).astype(np.int32), seconds


def compare_speed(fast, slow, *, pairs: int = 5) -> tuple[float, float, float]:
    """(median seconds of `fast()`, of `slow()`, median of the per-pair ratios slow/fast).

    One warm-up call each (compilation, allocator growth), then `pairs` interleaved pairs: a load
    change on a busy machine falls on both sides of a pair, so the ratio holds where separate
    best-of timings of each side (0.8x on one run, 2.1x on another) did not.
    """
    fast(), slow()
    fast_times, slow_times, ratios = [], [], []
    for _ in range(pairs):
        t0 = time.perf_counter()
        fast()
        t1 = time.perf_counter()
        slow()
        t2 = time.perf_counter()
        fast_times.append(t1 - t0)
        slow_times.append(t2 - t1)
        ratios.append((t2 - t1) / max(t1 - t0, 1e-12))
    return float(np.median(fast_times)), float(np.median(slow_times)), float(np.median(ratios))
