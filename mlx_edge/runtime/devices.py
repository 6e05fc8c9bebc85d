"""One place that picks devices, for PyTorch and for MLX.

PyTorch: CUDA > MPS > CPU. MLX: GPU (Metal on macOS, CUDA on Linux) > CPU.
Every command that computes takes `--device auto|cpu|gpu|cuda|mps` and passes it here.
Heavy imports happen inside the functions so that importing this module is free.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from mlx_edge.errors import DeviceError

DEVICE_CHOICES = ("auto", "cpu", "gpu", "cuda", "mps")


@dataclass(frozen=True)
class TorchPlacement:
    """Where a PyTorch computation runs and how: autocast only on CUDA, fp32 elsewhere."""

    device: str  # "cuda" | "mps" | "cpu"
    autocast_dtype: str | None  # "bfloat16" | "float16" | None
    needs_grad_scaler: bool

    def torch_device(self):
        import torch  # lazy: torch takes ~2 s to import and MLX-only paths never need it

        return torch.device(self.device)


def torch_backends_available() -> dict[str, bool]:
    import torch  # lazy: torch takes ~2 s to import and MLX-only paths never need it

    mps = getattr(torch.backends, "mps", None)
    return {
        "cuda": torch.cuda.is_available(),
        "mps": bool(mps and mps.is_available()),
        "cpu": True,
    }


def torch_placement(preference: str = "auto") -> TorchPlacement:
    """Resolve a `--device` value for PyTorch work."""
    preference = _normalize(preference)
    available = torch_backends_available()
    if preference == "auto":
        device = next(d for d in ("cuda", "mps", "cpu") if available[d])
    elif preference == "gpu":
        device = next((d for d in ("cuda", "mps") if available[d]), None)
        if device is None:
            raise DeviceError(
                "--device gpu: PyTorch sees neither CUDA nor MPS here", "use --device cpu or --device auto"
            )
    else:
        device = preference
        if not available[device]:
            raise DeviceError(
                f"--device {device}: PyTorch cannot use {device.upper()} on this machine",
                "use --device auto to take the best one present",
            )
    return _placement_for(device)


def _placement_for(device: str) -> TorchPlacement:
    if device == "cuda":
        import torch  # lazy: torch takes ~2 s to import and MLX-only paths never need it

        bf16 = torch.cuda.is_bf16_supported()
        return TorchPlacement("cuda", "bfloat16" if bf16 else "float16", needs_grad_scaler=not bf16)
    if device == "mps":
        # Ops MPS lacks fall back to CPU instead of failing; MPS trains in float32 (no autocast).
        os.environ.setdefault("PYTORCH_ENABLE_MPS_FALLBACK", "1")
    return TorchPlacement(device, None, needs_grad_scaler=False)


def mlx_backends_available() -> dict[str, bool]:
    import mlx.core as mx  # lazy: doctor reports a broken mlx through these probes

    gpu = False
    try:
        gpu = mx.is_available(mx.gpu)
    except (AttributeError, RuntimeError):
        gpu = bool(getattr(mx, "metal", None) and mx.metal.is_available())
    return {"gpu": gpu, "cpu": True}


def mlx_gpu_kind() -> str | None:
    """'metal', 'cuda' or None."""
    import mlx.core as mx  # lazy: doctor reports a broken mlx through these probes

    if not mlx_backends_available()["gpu"]:
        return None
    if getattr(mx, "metal", None) and mx.metal.is_available():
        return "metal"
    return "cuda"


def mlx_device(preference: str = "auto", *, set_default: bool = True):
    """Resolve a `--device` value for MLX work; sets MLX's default device unless told not to."""
    import mlx.core as mx  # lazy: doctor reports a broken mlx through these probes

    preference = _normalize(preference)
    gpu_kind = mlx_gpu_kind()
    if preference == "auto":
        device = mx.gpu if gpu_kind else mx.cpu
    elif preference == "cpu":
        device = mx.cpu
    else:
        wanted = {"gpu": gpu_kind, "cuda": "cuda", "mps": "metal"}[preference]
        if gpu_kind is None or gpu_kind != wanted:
            present = f"MLX's GPU backend here is {gpu_kind}" if gpu_kind else "MLX has no GPU backend here"
            raise DeviceError(f"--device {preference}: {present}", "use --device cpu or --device auto")
        device = mx.gpu
    if set_default:
        mx.set_default_device(device)
    return device


def _normalize(preference: str | None) -> str:
    value = (preference or "auto").lower()
    if value == "metal":
        value = "mps"
    if value not in DEVICE_CHOICES:
        raise DeviceError(f"unknown device {preference!r}", f"choose one of {', '.join(DEVICE_CHOICES)}")
    return value
