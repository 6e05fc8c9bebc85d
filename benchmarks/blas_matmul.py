"""MLX CPU matmul GFLOP/s with OpenBLAS preloaded vs the wheel's bundled reference BLAS.

    .venv/bin/python benchmarks/blas_matmul.py [--seconds 2]

Each setting runs in its own process (the BLAS is chosen at import time). NumPy and PyTorch on
the same shapes are printed for reference.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

SHAPES = [(4096, 312, 1200), (1024, 1024, 1024), (32 * 128, 384, 1536)]


def measure(seconds: float) -> dict:
    import mlx_edge  # noqa: F401, I001  (preloads OpenBLAS unless MLX_EDGE_BLAS=bundled: before mlx)
    import mlx.core as mx  # noqa: I001
    from mlx_edge.runtime.blas import blas_info

    results = {"blas": blas_info().name, "gflops": {}}
    for m, k, n in SHAPES:
        a, b = mx.random.normal((m, k)), mx.random.normal((k, n))
        mx.eval(a @ b)
        runs, start = 0, time.perf_counter()
        while runs < 2 or time.perf_counter() - start < seconds:
            mx.eval(a @ b)
            runs += 1
        results["gflops"][f"{m}x{k}@{k}x{n}"] = 2 * m * k * n * runs / (time.perf_counter() - start) / 1e9
    return results


def reference(seconds: float) -> dict:
    import numpy as np
    import torch

    out = {}
    for name, mm, make in (
        ("numpy", np.matmul, lambda s: np.random.randn(*s).astype(np.float32)),
        ("torch", torch.matmul, lambda s: torch.randn(*s)),
    ):
        out[name] = {}
        for m, k, n in SHAPES:
            a, b = make((m, k)), make((k, n))
            mm(a, b)
            runs, start = 0, time.perf_counter()
            while runs < 2 or time.perf_counter() - start < seconds:
                mm(a, b)
                runs += 1
            out[name][f"{m}x{k}@{k}x{n}"] = 2 * m * k * n * runs / (time.perf_counter() - start) / 1e9
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=2.0, help="time per shape and setting")
    parser.add_argument("--child", choices=["mlx", "reference"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.seconds) if args.child == "mlx" else reference(args.seconds)))
        return

    def child(kind: str, **env) -> dict:
        out = subprocess.run(
            [sys.executable, __file__, "--child", kind, "--seconds", str(args.seconds)],
            env={**os.environ, **env},
            capture_output=True,
            text=True,
            check=True,
        )
        return json.loads(out.stdout)

    rows = {"MLX + OpenBLAS": child("mlx"), "MLX bundled BLAS": child("mlx", MLX_EDGE_BLAS="bundled")}
    ref = child("reference")
    print(f"{'fp32 matmul GFLOP/s':<22}" + "".join(f"{s:>20}" for s in rows["MLX + OpenBLAS"]["gflops"]))
    for label, result in rows.items():
        print(f"{label:<22}" + "".join(f"{v:>20.1f}" for v in result["gflops"].values()))
    for name, values in ref.items():
        print(f"{name:<22}" + "".join(f"{v:>20.1f}" for v in values.values()))
    fast, slow = rows["MLX + OpenBLAS"], rows["MLX bundled BLAS"]
    print(f"(MLX ran on: {fast['blas']} / {slow['blas']})")
    if fast["blas"] != "OpenBLAS":
        print(f"note: OpenBLAS was not loaded ({fast['blas']}); install libopenblas0-pthread", file=sys.stderr)
    speedup = [f / s for f, s in zip(fast["gflops"].values(), slow["gflops"].values())]
    print(f"speed-up from OpenBLAS: {', '.join(f'{x:.0f}x' for x in speedup)}")


if __name__ == "__main__":
    main()
