"""The backends a benchmark can run on, whether each is present here, and (if not) why.

A backend is a framework on a device: MLX on Metal/CUDA/CPU, PyTorch on MPS/CUDA/CPU, ONNX Runtime
on CPU, CoreML per compute unit. Each runner (`mlx_runner`, `torch_runner`, `ort_runner`) builds
a `Task` per workload: `check()` returns the numbers compared across backends, `step()` runs one
synchronized step.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Callable

import numpy as np


@dataclass(frozen=True)
class BackendSpec:
    name: str
    framework: str  # mlx | torch | onnxruntime | coreml
    device: str  # cpu | metal | cuda | mps | a CoreML compute unit
    inference_only: bool = False

    @property
    def gpu(self) -> bool:
        return self.device in ("metal", "cuda", "mps")


BACKENDS = (
    BackendSpec("mlx-metal", "mlx", "metal"),
    BackendSpec("mlx-cuda", "mlx", "cuda"),
    BackendSpec("mlx-cpu", "mlx", "cpu"),
    BackendSpec("torch-mps", "torch", "mps"),
    BackendSpec("torch-cuda", "torch", "cuda"),
    BackendSpec("torch-cpu", "torch", "cpu"),
    BackendSpec("onnxruntime-cpu", "onnxruntime", "cpu", inference_only=True),
    BackendSpec("coreml-cpu", "coreml", "CPU_ONLY", inference_only=True),
    BackendSpec("coreml-gpu", "coreml", "CPU_AND_GPU", inference_only=True),
    BackendSpec("coreml-ane", "coreml", "CPU_AND_NE", inference_only=True),
    BackendSpec("coreml-all", "coreml", "ALL", inference_only=True),
)
NAMES = tuple(b.name for b in BACKENDS)


@dataclass
class Task:
    """One workload on one backend, built and ready: `step()` returns only after the work is done."""

    check: Callable[[], dict[str, np.ndarray]]
    step: Callable[[], None]


def select(names: list[str] | None) -> list[BackendSpec]:
    """Specs for `names` (or all), in the canonical order; an unknown name is an error."""
    from mlx_edge.bench.workloads import BenchError

    if not names:
        return list(BACKENDS)
    wanted = set()
    for name in names:
        matches = [b.name for b in BACKENDS if name in (b.name, b.framework)]
        if not matches:
            raise BenchError(f"unknown backend {name!r}", f"choose from {', '.join(NAMES)} (or mlx, torch, coreml)")
        wanted.update(matches)
    return [b for b in BACKENDS if b.name in wanted]


def unavailable_reason(spec: BackendSpec) -> str | None:
    """None when `spec` can run here, else one line saying why not."""
    try:
        if spec.framework == "mlx":
            from mlx_edge import devices

            kind = devices.mlx_gpu_kind()
            if spec.device == "metal" and kind != "metal":
                return "MLX has no Metal device here (Metal needs macOS on Apple silicon)"
            if spec.device == "cuda" and kind != "cuda":
                return "MLX has no CUDA backend here (an NVIDIA GPU and the mlx[cuda12] wheel are needed)"
            return None
        if spec.framework == "torch":
            from mlx_edge import devices

            present = devices.torch_backends_available()
            if not present.get(spec.device, False):
                import torch

                why = {"cuda": f"PyTorch sees no CUDA device (torch {torch.__version__})",
                       "mps": "PyTorch MPS needs macOS on Apple silicon"}
                return why.get(spec.device, f"PyTorch cannot use {spec.device}")
            return None
        if spec.framework == "onnxruntime":
            import onnxruntime  # noqa: F401

            return None
        if spec.framework == "coreml":
            if not coreml_can_predict():
                return "CoreML runs predictions only on macOS (coremltools converts but cannot predict here)"
            import coremltools  # noqa: F401

            return None
    except ImportError as exc:
        return f"{spec.framework} is not importable ({exc})"
    return f"unknown framework {spec.framework}"


def coreml_can_predict() -> bool:
    """CoreML runs models only on macOS (tests replace this to run the CoreML path here)."""
    return sys.platform == "darwin"


def create_runner(spec: BackendSpec, models, work, *, threads: int):
    """The runner object for an available backend."""
    if spec.framework == "mlx":
        from mlx_edge.bench.mlx_runner import MlxRunner

        return MlxRunner(spec, models)
    if spec.framework == "torch":
        from mlx_edge.bench.torch_runner import TorchRunner

        return TorchRunner(spec, models, threads=threads)
    if spec.framework == "onnxruntime":
        from mlx_edge.bench.ort_runner import OrtRunner

        return OrtRunner(spec, models, work, threads=threads)
    from mlx_edge.bench.ort_runner import CoreMLRunner

    return CoreMLRunner(spec, models, work)
