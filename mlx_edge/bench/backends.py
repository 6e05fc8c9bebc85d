"""The backends a benchmark can run on, whether each is present here, and (if not) why.

A backend is a framework on a device: MLX on Metal/CUDA/CPU, PyTorch on MPS/CUDA/CPU, ONNX Runtime
on CPU, CoreML per compute unit. The runners (`mlx_runner`, `torch_runner`, `ort_runner`) build
a `tasks.Task` per workload; `run.create_runner` picks the runner for a spec.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from mlx_edge.errors import BenchError
from mlx_edge.runtime import devices


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


def select(names: list[str] | None) -> list[BackendSpec]:
    """Specs for `names` (or all), in the canonical order; an unknown name is an error."""

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
            kind = devices.mlx_gpu_kind()
            if spec.device == "metal" and kind != "metal":
                return "MLX has no Metal device here (Metal needs macOS on Apple silicon)"
            if spec.device == "cuda" and kind != "cuda":
                return "MLX has no CUDA backend here (an NVIDIA GPU and the mlx[cuda12] wheel are needed)"
            return None
        if spec.framework == "torch":
            present = devices.torch_backends_available()
            if not present.get(spec.device, False):
                import torch  # lazy: probing whether the framework imports is the point

                why = {
                    "cuda": f"PyTorch sees no CUDA device (torch {torch.__version__})",
                    "mps": "PyTorch MPS needs macOS on Apple silicon",
                }
                return why.get(spec.device, f"PyTorch cannot use {spec.device}")
            return None
        if spec.framework == "onnxruntime":
            import onnxruntime  # noqa: F401  # lazy: probing whether the framework imports is the point

            return None
        if spec.framework == "coreml":
            if not coreml_can_predict():
                return "CoreML runs predictions only on macOS (coremltools converts but cannot predict here)"
            import coremltools  # noqa: F401  # lazy: probing whether the framework imports is the point

            return None
    except ImportError as exc:
        return f"{spec.framework} is not importable ({exc})"
    return f"unknown framework {spec.framework}"


def coreml_can_predict() -> bool:
    """CoreML runs models only on macOS (tests replace this to run the CoreML path here)."""
    return sys.platform == "darwin"
