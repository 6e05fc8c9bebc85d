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


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="OpenBLAS preloading is Linux-only")
@pytest.mark.parametrize("coretype", ["Haswell", "Sandybridge"])
def test_blas_info_names_the_openblas_kernels_in_use(coretype):
    # OPENBLAS_CORETYPE is read when the library loads; blas_info reports what OpenBLAS then runs, so a
    # machine pinned to AVX2 kernels on an AVX-512 CPU (half the GEMM speed) shows it in bench and doctor
    code = "import mlx_edge, mlx.core; from mlx_edge.runtime.blas import blas_info; print(blas_info().detail)"
    env = {k: v for k, v in os.environ.items() if k != "MLX_EDGE_BLAS"}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env={**env, "OPENBLAS_CORETYPE": coretype}
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().endswith(f", {coretype} kernels"), out.stdout


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="OpenBLAS preloading is Linux-only")
def test_doctor_hints_when_openblas_is_pinned_below_the_cpu(tmp_path):
    with_avx512 = tmp_path / "avx512"
    with_avx512.write_text(
        "vendor_id\t: AuthenticAMD\nflags\t\t: fpu sse2 avx2 avx512f avx512cd avx512bw avx512dq avx512vl\n"
    )
    avx2_only = tmp_path / "avx2"
    avx2_only.write_text("vendor_id\t: GenuineIntel\nflags\t\t: fpu sse2 avx avx2 fma\n")
    code = (
        "import sys, mlx_edge, mlx.core; from mlx_edge.runtime.blas import pinned_kernels_hint; "
        "print(pinned_kernels_hint(sys.argv[1]))"
    )
    env = {k: v for k, v in os.environ.items() if k != "MLX_EDGE_BLAS"}

    def hint(cpuinfo, **extra):
        run = subprocess.run(
            [sys.executable, "-c", code, str(cpuinfo)], capture_output=True, text=True, env={**env, **extra}
        )
        assert run.returncode == 0, run.stderr
        return run.stdout.strip()

    pinned = hint(with_avx512, OPENBLAS_CORETYPE="Haswell")
    assert pinned.startswith("OPENBLAS_CORETYPE=Haswell pins OpenBLAS to its Haswell kernels") and "unset it" in pinned
    assert hint(avx2_only, OPENBLAS_CORETYPE="Haswell") == "None"  # the CPU has nothing better
    from mlx_edge.runtime.blas import cpu_has_avx512

    if cpu_has_avx512():  # (elsewhere OpenBLAS refuses SkylakeX and falls back to Haswell)
        assert hint(with_avx512, OPENBLAS_CORETYPE="SkylakeX") == "None"  # pinned, but to AVX-512 kernels
    assert hint(tmp_path / "missing", OPENBLAS_CORETYPE="Haswell") == "None"  # no cpuinfo: no claim


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="OpenBLAS preloading is Linux-only")
def test_an_openblas_older_than_the_cpu_gets_its_avx512_kernels():
    # Debian 12's OpenBLAS 0.3.21 does not know Sapphire Rapids and picks its SSE3 "Prescott" kernels
    # there, 4-6x slower: with OPENBLAS_CORETYPE unset on an AVX-512 CPU, mlx-edge loads it with SkylakeX
    from mlx_edge.runtime.blas import _PRE_AVX512_CORES, blas_info, cpu_has_avx512

    if not cpu_has_avx512() or blas_info().name != "OpenBLAS":
        pytest.skip("needs an AVX-512 CPU and OpenBLAS (libopenblas0-pthread)")
    code = (
        "import os, mlx_edge, mlx.core; from mlx_edge.runtime.blas import openblas_core; "
        "print(openblas_core(), os.environ.get('OPENBLAS_CORETYPE'))"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("MLX_EDGE_BLAS", "OPENBLAS_CORETYPE")}
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert run.returncode == 0, run.stderr
    core, left = run.stdout.split()
    assert core not in _PRE_AVX512_CORES and left == "None"  # and the environment is as it was


def test_the_avx512_kernels_are_chosen_only_where_openblas_would_not(tmp_path, monkeypatch):
    from mlx_edge.runtime import blas

    avx512 = tmp_path / "avx512"
    avx512.write_text("flags\t\t: fpu sse2 avx2 avx512f avx512cd avx512bw avx512dq avx512vl\n")
    avx2 = tmp_path / "avx2"
    avx2.write_text("flags\t\t: fpu sse2 avx avx2 fma\n")
    monkeypatch.delenv("OPENBLAS_CORETYPE", raising=False)
    for picked, cpu, expected in [
        ("Prescott", avx512, "SkylakeX"),
        ("Haswell", avx512, "SkylakeX"),
        ("Cooperlake", avx512, None),  # its own AVX-512 kernels stand
        ("SapphireRapids", avx512, None),
        ("Haswell", avx2, None),  # the CPU has nothing better
        (None, avx512, None),  # not an OpenBLAS that says
    ]:
        monkeypatch.setattr(blas, "default_core", lambda path, picked=picked: picked)
        assert blas.better_core("lib.so", str(cpu)) == expected, (picked, cpu.name)
    monkeypatch.setattr(blas, "default_core", lambda path: "Prescott")
    for pinned in ("Haswell", ""):  # the user's choice, even an empty one, stands
        monkeypatch.setenv("OPENBLAS_CORETYPE", pinned)
        assert blas.better_core("lib.so", str(avx512)) is None


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="OpenBLAS preloading is Linux-only")
def test_the_kernels_openblas_picks_are_asked_once_per_library_and_cpu(tmp_path, monkeypatch):
    from mlx_edge.runtime import blas

    library = next((p for p in blas._candidate_paths() if os.path.isfile(p)), None)
    if library is None:
        pytest.skip("no OpenBLAS library here (libopenblas0-pthread)")
    monkeypatch.setenv("MLX_EDGE_CACHE", str(tmp_path))
    first = blas.default_core(library)
    assert first and first.isalnum()  # a kernel set's name, from a child process

    def no_child(*args, **kwargs):
        raise AssertionError("asked again")

    monkeypatch.setattr(blas.subprocess, "run", no_child)
    assert blas.default_core(library) == first  # from the cache
    monkeypatch.setenv("MLX_EDGE_CACHE", str(tmp_path / "other"))
    with pytest.raises(AssertionError, match="asked again"):
        blas.default_core(library)


_SYMBOLS = (
    "import ctypes, numpy as np, mlx_edge, mlx.core as mx; from mlx_edge.runtime.blas import blas_info\n"
    "g = ctypes.CDLL(None)\n"
    "a, b = mx.random.normal((64, 48)), mx.random.normal((48, 32))\n"
    "ok = np.allclose(np.array(a @ b), np.array(a) @ np.array(b), atol=1e-4)\n"
    "print(blas_info().name, hasattr(g, 'sgemm_'), hasattr(g, 'cblas_sgemm'), ok)\n"
    "print(blas_info().detail)\n"
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="OpenBLAS preloading is Linux-only")
def test_openblas_answers_mlx_through_the_shim_and_leaves_pytorchs_sgemm_alone(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("MLX_EDGE_BLAS", "CC")}
    env["MLX_EDGE_CACHE"] = str(tmp_path / "cache")  # a fresh cache: the shim is built here, then reused

    def run(**extra):
        out = subprocess.run([sys.executable, "-c", _SYMBOLS], capture_output=True, text=True, env={**env, **extra})
        assert out.returncode == 0, out.stderr
        return out.stdout.splitlines()

    first, detail = run()
    # MLX's cblas_sgemm comes from the shim; the Fortran sgemm_ that libtorch_cpu exports (and OpenBLAS
    # exports too) is not in the global scope, so PyTorch keeps its own BLAS
    assert first == "OpenBLAS False True True" and "behind mlx-edge's CBLAS shim" in detail
    assert len(list((tmp_path / "cache" / "blas").glob("cblas-shim-*.so"))) == 1
    assert run() == [first, detail]  # built once: the second process loads the cached library
    globally = run(MLX_EDGE_BLAS="global")
    assert globally[0] == "OpenBLAS True True True"  # the old way: OpenBLAS answers every BLAS symbol

    bad_cc = tmp_path / "bad-cc"
    bad_cc.write_text("#!/bin/sh\necho 'cc: broken' >&2\nexit 1\n")
    bad_cc.chmod(0o755)
    fallback, why = run(CC=str(bad_cc), MLX_EDGE_CACHE=str(tmp_path / "other-cache"))
    assert fallback == "OpenBLAS True True True"  # no shim: OpenBLAS globally, still fast for MLX
    assert "answers PyTorch's sgemm_ too" in why and "broken" in why
