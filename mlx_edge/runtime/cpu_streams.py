"""Use every core with MLX on a CPU: one stream per core, each taking a slice of the batch.

MLX's CPU backend runs a stream's elementwise ops on a single thread, so one stream leaves all
but one core idle outside the matmuls. Work split over `mx.new_stream(mx.cpu)` streams runs side
by side; OpenBLAS is then limited to cores/streams threads (`blas_threads`) so the streams'
matmuls do not oversubscribe the cores. On a GPU none of this applies (one piece, one stream).
"""

from __future__ import annotations

import os
from contextlib import AbstractContextManager, nullcontext

import mlx.core as mx

from mlx_edge.runtime.blas import blas_threads

_STREAMS: list = []


def cpu_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS
        return os.cpu_count() or 1


def resolve_shards(requested: int | None, batch_size: int) -> int:
    """Streams per batch: 1 on a GPU; auto = one per core, at most 8, each shard at least 8 rows."""
    if mx.default_device() != mx.cpu:
        return 1
    if requested is not None:
        return max(1, min(requested, batch_size))
    return max(1, min(cpu_cores(), batch_size // 8, 8))


def cpu_streams(count: int) -> list:
    """`count` CPU streams, made once per process (a stream is a thread that lives as long as MLX)."""
    while len(_STREAMS) < count:
        _STREAMS.append(mx.new_stream(mx.cpu))
    return _STREAMS[:count]


def row_bounds(rows: int, shards: int) -> list[int]:
    """Boundaries of min(shards, rows) contiguous, near-equal row ranges: [0, ..., rows]."""
    count = max(1, min(shards, rows))
    return [rows * i // count for i in range(count + 1)]


def blas_limit(shards: int) -> AbstractContextManager:
    """OpenBLAS threads for work spread over `shards` streams (untouched for one)."""
    return blas_threads(max(1, cpu_cores() // shards)) if shards > 1 else nullcontext()


def sharded_forward(model, input_ids: mx.array, mask: mx.array, shards: int, **kwargs):
    """`model(input_ids, mask, **kwargs)` (a BertOutput) computed in row slices on CPU streams.

    Lazy like any MLX call: evaluate the result inside `blas_limit(shards)`.
    """
    bounds = row_bounds(input_ids.shape[0], shards)
    if len(bounds) == 2:
        return model(input_ids, mask, **kwargs)
    parts = []
    for stream, lo, hi in zip(cpu_streams(len(bounds) - 1), bounds, bounds[1:]):
        with mx.stream(stream):
            parts.append(model(input_ids[lo:hi], mask[lo:hi], **kwargs))
    return join_outputs(parts)


def join_outputs(parts: list):
    """The row slices' outputs (dataclasses of arrays, lists of arrays or None) as one, rows in order."""
    if len(parts) == 1:
        return parts[0]

    def join(values):
        if values[0] is None:
            return None
        if isinstance(values[0], list):
            return [mx.concatenate(layer, axis=0) for layer in zip(*values)]
        return mx.concatenate(values, axis=0)

    first = parts[0]
    return type(first)(**{name: join([getattr(p, name) for p in parts]) for name in vars(first)})
