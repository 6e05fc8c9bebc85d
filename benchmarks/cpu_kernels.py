"""mlx-edge's C++ CPU kernels (mlx_edge/runtime/kernels.py) against the MLX expressions they replace
and MLX's native ops, per op, forward and value-and-grad, at a distillation step's shapes.

    .venv/bin/python benchmarks/cpu_kernels.py [--repeats 20]

Medians of `--repeats` evaluations after one warm-up, on MLX's CPU device, one stream (the step runs
one such stream per core). Linux only: elsewhere MLX's own kernels are used. The attention rows are
inference's (forward only): the C++ kernel, the explicit chain with the softmax kernel that it
replaces ("fastmath" column), and MLX's scaled_dot_product_attention.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import mlx_edge  # noqa: F401  # first: OpenBLAS behind MLX (runtime/blas.py)

import mlx.core as mx  # isort: skip
import mlx.nn as nn  # isort: skip

from mlx_edge.models import fastmath
from mlx_edge.runtime import kernels


def timed(fn, *args, repeats: int) -> float:
    mx.eval(fn(*args))
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        mx.eval(fn(*args))
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def value_and_grad(fn, cotangent):
    return mx.grad(lambda x: (fn(x) * cotangent).sum())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    k = kernels.load()
    if k is None:
        print(f"the C++ kernels are not in use: {kernels.problem()}", file=sys.stderr)
        return 1
    mx.set_default_device(mx.cpu)
    mx.random.seed(0)
    scores = mx.random.normal((16, 12, 128, 128))  # one shard's attention scores (tiny student, b32 L128)
    ffn = mx.random.normal((2048, 1536))  # FFN activations
    rows = mx.random.normal((4096, 312))  # LayerNorm input
    w, b = mx.ones((312,)), mx.zeros((312,))
    # cotangents: other arrays than the inputs (a compiled function may not close over its own input)
    d_scores, d_ffn, d_rows = (mx.random.normal(a.shape) for a in (scores, ffn, rows))
    mx.eval(scores, ffn, rows, w, b, d_scores, d_ffn, d_rows)
    # inference attention on the projections (tiny student: 12 heads of 26): one sentence, one shard
    attention_inputs = {}
    for batch in (1, 16):
        q, kk, v = (mx.random.normal((batch, 128, 312)) for _ in range(3))
        key_mask = mx.zeros((batch, 1, 1, 128))
        mx.eval(q, kk, v, key_mask)
        attention_inputs[batch] = (q, kk, v, key_mask)

    def attention(batch, how):
        _, kk, v, key_mask = attention_inputs[batch]
        if how == "kernel":
            return lambda q: k.attention(q, kk, v, key_mask, 12, 26**-0.5)
        if how == "explicit":  # the chain it replaces: head split, scores + mask, the softmax kernel, merge
            return mx.compile(lambda q: fastmath._explicit_attention(q, kk, v, key_mask, 12, 26**-0.5))

        def native(q):
            heads = [t.reshape(batch, 128, 12, 26).transpose(0, 2, 1, 3) for t in (q, kk, v)]
            out = mx.fast.scaled_dot_product_attention(*heads, scale=26**-0.5, mask=key_mask)
            return out.transpose(0, 2, 1, 3).reshape(batch, 128, -1)

        return native

    seed = mx.array(7, mx.uint32)
    drop = fastmath.Dropout(0.1)
    drop.train()

    def expressions(fn):  # fastmath with the kernels switched off: what runs where they cannot build
        def run(*a):
            saved, fastmath.cpu_kernels = fastmath.cpu_kernels, lambda: None
            try:
                return fn(*a)
            finally:
                fastmath.cpu_kernels = saved

        return run

    cases = [
        ("softmax 16x12x128x128", "forward", scores,
         k.softmax, mx.compile(expressions(fastmath.softmax)), lambda x: mx.softmax(x, axis=-1, precise=True)),
        ("softmax 16x12x128x128", "value+grad", scores,
         value_and_grad(k.softmax, d_scores), mx.compile(value_and_grad(expressions(fastmath.softmax), d_scores)),
         value_and_grad(lambda x: mx.softmax(x, axis=-1, precise=True), d_scores)),
        ("GELU (erf) 2048x1536", "forward", ffn, k.gelu, expressions(fastmath.gelu), nn.gelu),
        ("GELU (erf) 2048x1536", "value+grad", ffn,
         value_and_grad(lambda x: k.gelu_pair(x)[0], d_ffn), mx.compile(value_and_grad(expressions(fastmath.gelu_train), d_ffn)),
         value_and_grad(nn.gelu, d_ffn)),
        ("LayerNorm 4096x312", "forward", rows,
         lambda x: k.layer_norm(x, w, b, 1e-12), None, lambda x: mx.fast.layer_norm(x, w, b, 1e-12)),
        ("LayerNorm 4096x312", "value+grad", rows,
         value_and_grad(lambda x: k.layer_norm(x, w, b, 1e-12), d_rows), None,
         mx.compile(value_and_grad(lambda x: mx.fast.layer_norm(x, w, b, 1e-12), d_rows))),
        ("dropout 0.1 16x12x128x128", "value+grad", scores,
         value_and_grad(lambda x: k.dropout(x, seed, 0.9), d_scores),
         mx.compile(value_and_grad(expressions(drop), d_scores), inputs=mx.random.state, outputs=mx.random.state),
         value_and_grad(nn.Dropout(0.1), d_scores)),
        *((f"attention {b}x128, 12x26 (infer)", "forward", attention_inputs[b][0],
           attention(b, "kernel"), attention(b, "explicit"), attention(b, "native")) for b in (1, 16)),
    ]  # fmt: skip
    print(f"{'op':28s} {'pass':11s} {'C++ kernel':>11s} {'fastmath':>9s} {'MLX':>9s}   (ms, median of {args.repeats})")
    for name, kind, x, ours, expression, native in cases:
        cells = [timed(fn, x, repeats=args.repeats) if fn is not None else None for fn in (ours, expression, native)]
        print(f"{name:28s} {kind:11s} " + " ".join(f"{c:>9.2f}  " if c is not None else f"{'-':>9s}  " for c in cells))
    print(f"kernels: {kernels.describe()}; MLX {mx.__version__}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
