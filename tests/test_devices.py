"""Device choice. Real on this machine (CPU); CUDA/MPS paths are checked by faking what torch reports,
because no GPU exists here — the fakes stand in only for `torch.cuda`/`torch.backends.mps` answers."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from mlx_edge.errors import DeviceError
from mlx_edge.runtime import devices


def fake_available(monkeypatch, **present):
    table = {"cuda": False, "mps": False, "cpu": True, **present}
    monkeypatch.setattr(devices, "torch_backends_available", lambda: table)


def test_auto_prefers_cuda_then_mps_then_cpu(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    fake_available(monkeypatch, cuda=True, mps=True)
    assert devices.torch_placement("auto").device == "cuda"
    fake_available(monkeypatch, mps=True)
    assert devices.torch_placement("auto").device == "mps"
    fake_available(monkeypatch)
    assert devices.torch_placement("auto").device == "cpu"


def test_cuda_uses_bf16_autocast_or_fp16_with_a_scaler(monkeypatch):
    import torch

    fake_available(monkeypatch, cuda=True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    placement = devices.torch_placement("cuda")
    assert (placement.autocast_dtype, placement.needs_grad_scaler) == ("bfloat16", False)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)
    placement = devices.torch_placement("gpu")
    assert (placement.autocast_dtype, placement.needs_grad_scaler) == ("float16", True)


def test_mps_is_fp32_with_cpu_fallback(monkeypatch):
    monkeypatch.delenv("PYTORCH_ENABLE_MPS_FALLBACK", raising=False)
    fake_available(monkeypatch, mps=True)
    placement = devices.torch_placement("mps")
    assert placement.autocast_dtype is None and not placement.needs_grad_scaler
    assert os.environ["PYTORCH_ENABLE_MPS_FALLBACK"] == "1"


def test_absent_devices_are_refused_with_a_way_out():
    available = devices.torch_backends_available()
    for name in ("cuda", "mps"):
        if not available[name]:
            with pytest.raises(DeviceError, match=f"--device {name}.*--device auto"):
                devices.torch_placement(name)
    with pytest.raises(DeviceError, match="unknown device 'tpu'"):
        devices.torch_placement("tpu")


def test_real_cpu_placement_here():
    placement = devices.torch_placement("cpu")
    assert str(placement.torch_device()) == "cpu" and placement.autocast_dtype is None


def test_mlx_device_choice():
    import mlx.core as mx

    assert devices.mlx_device("cpu") == mx.cpu
    if devices.mlx_gpu_kind() is None:
        assert devices.mlx_device("auto") == mx.cpu
        with pytest.raises(DeviceError, match="MLX has no GPU backend here"):
            devices.mlx_device("gpu")
    else:
        assert devices.mlx_device("auto") == mx.gpu


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="OpenBLAS preloading is Linux-only")
def test_openblas_is_what_mlx_uses_and_can_be_turned_off():
    code = "import mlx_edge, mlx.core; from mlx_edge.runtime.blas import blas_info; print(blas_info().name)"
    env = {k: v for k, v in os.environ.items() if k != "MLX_EDGE_BLAS"}
    fast = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert fast.stdout.strip() == "OpenBLAS"
    slow = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={**env, "MLX_EDGE_BLAS": "bundled"},
    )
    assert slow.stdout.strip() == "bundled reference BLAS"
    late = subprocess.run(
        [sys.executable, "-c", "import mlx.core; " + code], capture_output=True, text=True, env=env, check=True
    )
    assert late.stdout.strip() == "bundled reference BLAS"  # mlx imported first: too late to swap
