"""runtime/kernels.py + cpu_kernels.cpp: mlx-edge's C++ CPU kernels for MLX build here, compute what
MLX's own ops compute (values and gradients, compiled, on a second CPU stream), and anything that
stops them leaves the MLX expressions in place with the reason said.

The references are MLX's native ops and a float64 NumPy LayerNorm; nothing is mocked. The
fallback tests run in fresh interpreters (the kernels load once per process)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import numpy as np
import pytest

from mlx_edge.models import fastmath
from mlx_edge.runtime import kernels

ROOT = Path(__file__).resolve().parents[1]
linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the C++ kernels are built on Linux only")


@pytest.fixture(scope="module")
def k():
    module = kernels.load()
    if module is None and sys.platform.startswith("linux"):
        pytest.fail(
            f"the C++ kernels should build on this Linux machine (scripts/setup.sh installs g++): {kernels.problem()}"
        )
    if module is None:
        pytest.skip(kernels.problem() or "no kernels")
    return module


def _rng(seed=0):
    return np.random.default_rng(seed)


@linux
def test_softmax_and_its_gradient_match_mlx_with_masked_keys_and_odd_widths(k):
    rng = _rng(1)
    for shape in [(2, 3, 7, 13), (5, 128), (1, 1)]:
        x = rng.normal(scale=4.0, size=shape).astype(np.float32)
        x[..., ::3] = np.finfo(np.float32).min  # masked keys: exactly 0 weight
        x = mx.array(x)
        g = mx.array(rng.normal(size=shape).astype(np.float32))
        ours, ref = k.softmax(x), mx.softmax(x, axis=-1, precise=True)
        np.testing.assert_allclose(np.array(ours), np.array(ref), atol=3e-7)
        if shape[-1] > 1:
            assert (np.array(ours)[..., ::3] == 0).all()
        got = mx.grad(lambda v, g=g: (k.softmax(v) * g).sum())(x)
        want = mx.grad(lambda v, g=g: (mx.softmax(v, axis=-1, precise=True) * g).sum())(x)
        np.testing.assert_allclose(np.array(got), np.array(want), atol=2e-6)
    transposed = mx.array(rng.normal(size=(6, 9)).astype(np.float32)).T  # a strided view: made contiguous first
    np.testing.assert_allclose(np.array(k.softmax(transposed)), np.array(mx.softmax(transposed, axis=-1)), atol=3e-7)


@linux
@pytest.mark.parametrize("tanh", [False, True], ids=["erf", "tanh"])
def test_gelu_value_derivative_and_gradient_match_mlx(k, tanh):
    native = nn.gelu_approx if tanh else nn.gelu
    x = mx.array(np.concatenate([np.linspace(-12, 12, 4001), [-100.0, 0.0, 100.0]]).astype(np.float32))
    g = mx.array(_rng(2).normal(size=x.shape).astype(np.float32))
    value, derivative = k.gelu_pair(x, tanh=tanh)
    np.testing.assert_allclose(np.array(k.gelu(x, tanh=tanh)), np.array(native(x)), atol=2e-6, rtol=1e-5)
    np.testing.assert_allclose(np.array(value), np.array(native(x)), atol=2e-6, rtol=1e-5)
    want = mx.grad(lambda v: (native(v) * g).sum())(x)
    np.testing.assert_allclose(np.array(derivative * g), np.array(want), atol=1e-5)
    for fn in (lambda v: k.gelu(v, tanh=tanh), lambda v: k.gelu_pair(v, tanh=tanh)[0]):
        np.testing.assert_allclose(np.array(mx.grad(lambda v, fn=fn: (fn(v) * g).sum())(x)), np.array(want), atol=1e-5)


@linux
def test_layer_norm_matches_float64_and_every_gradient_matches_mlx(k):
    rng = _rng(3)
    x = rng.normal(loc=2.0, scale=3.0, size=(4, 5, 37)).astype(np.float32)
    w = rng.normal(size=37).astype(np.float32)
    b = rng.normal(size=37).astype(np.float32)
    x64 = x.astype(np.float64)
    xhat = (x64 - x64.mean(-1, keepdims=True)) / np.sqrt(x64.var(-1, keepdims=True) + 1e-12)
    np.testing.assert_allclose(
        np.array(k.layer_norm(mx.array(x), mx.array(w), mx.array(b), 1e-12)), xhat * w + b, atol=2e-5
    )
    g = mx.array(rng.normal(size=x.shape).astype(np.float32))

    def loss(fn):
        return lambda w_, b_, x_: (fn(x_, w_, b_, 1e-12) * g).sum()

    args = (mx.array(w), mx.array(b), mx.array(x))
    ours = mx.grad(loss(k.layer_norm), argnums=(0, 1, 2))(*args)
    ref = mx.grad(loss(mx.fast.layer_norm), argnums=(0, 1, 2))(*args)
    for name, a, r in zip(("weight", "bias", "x"), ours, ref):
        np.testing.assert_allclose(np.array(a), np.array(r), atol=2e-5, err_msg=name)
    only_x = mx.grad(loss(k.layer_norm), argnums=2)(*args)  # one argnum: the VJP picks the right output
    np.testing.assert_allclose(np.array(only_x), np.array(ref[2]), atol=2e-5)
    with pytest.raises(ValueError, match="weight and bias"):
        k.layer_norm(mx.array(x), mx.array(w[:5]), mx.array(b), 1e-12)


@linux
def test_dropout_kernel_draws_the_same_mask_as_the_expression_path(k, monkeypatch):
    x = mx.array(_rng(4).normal(size=(3, 4, 33, 17)).astype(np.float32))
    drop = fastmath.Dropout(0.2)
    mx.random.seed(11)
    ours = np.array(drop(x))
    with monkeypatch.context() as patched:
        patched.setattr(fastmath, "cpu_kernels", lambda: None)
        mx.random.seed(11)
        expression = np.array(drop(x))
    np.testing.assert_array_equal(ours, expression)  # same seed draw, same hash, same scale
    assert abs((ours != 0).mean() - 0.8) < 0.02
    seed = mx.array(5, mx.uint32)
    g = mx.ones(x.shape)
    grad = np.array(mx.grad(lambda v: (k.dropout(v, seed, 0.8) * g).sum())(x))
    kept = np.array(k.dropout(mx.ones(x.shape), seed, 0.8)) != 0
    np.testing.assert_allclose(grad, np.where(kept, 1 / 0.8, 0.0), rtol=1e-6)  # the backward pass reuses the mask
    with pytest.raises(ValueError, match="seed"):
        k.dropout(x, mx.array([5], mx.uint32), 0.8)


@linux
def test_kernels_run_compiled_shapeless_and_on_another_cpu_stream(k):
    x = mx.array(_rng(5).normal(size=(4, 16)).astype(np.float32))
    stream = mx.new_stream(mx.cpu)
    compiled = mx.compile(lambda v: k.softmax(v * 2.0) + 1.0)
    with mx.stream(stream):
        np.testing.assert_allclose(np.array(compiled(x)), np.array(mx.softmax(x * 2.0, axis=-1) + 1.0), atol=3e-7)
    shapeless = mx.compile(lambda v: k.gelu(v), shapeless=True)
    for rows in (4, 3):
        np.testing.assert_allclose(np.array(shapeless(x[:rows])), np.array(nn.gelu(x[:rows])), atol=2e-6)
    with pytest.raises(ValueError, match="float32"):
        k.softmax(x.astype(mx.float16))


@linux
def test_the_build_is_cached_and_keyed_on_compiler_flags_and_cpu(k):
    path = kernels.build()
    stamp = path.stat().st_mtime_ns
    assert kernels.build() == path and path.stat().st_mtime_ns == stamp  # reused, not rebuilt
    assert "-march=native" in path.name or path.name.startswith("mlx-edge-kernels-")
    assert kernels._cpu_flags() and kernels._cpu_flags("/nonexistent") is not None


PROBE = """
import json, mlx_edge, mlx.core as mx
from mlx_edge.models import fastmath
from mlx_edge.runtime import kernels
x = mx.array([[0.0, 1.0, 2.0]])
print(json.dumps({"loaded": kernels.load() is not None, "problem": kernels.problem(),
                  "softmax": fastmath.softmax(x).tolist(), "describe": kernels.describe()}))
"""


@linux
def test_reading_mlxs_nanobind_registry_leaves_it_intact(k):
    # the registry key is read through the interpreter's state dict; a reference miscounted there
    # once freed the dict, and MLX's arrays stopped converting ("incompatible function arguments")
    for _ in range(5):
        version, domain = kernels._mlx_nanobind_abi()
    assert version.isdigit() and domain == "mlx"
    np.testing.assert_allclose(np.array(k.softmax(mx.zeros((1, 4)))), [[0.25] * 4])
    # and in a fresh interpreter, where the library is imported after the registry was read
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1])["loaded"] is True


def _probe(tmp_path, **env) -> dict:
    full = {**os.environ, "MLX_EDGE_CACHE": str(tmp_path / "cache"), **env}
    done = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=ROOT, env=full, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@linux
def test_a_compiler_that_fails_leaves_the_mlx_expressions_in_place(tmp_path):
    broken = tmp_path / "broken-g++"
    broken.write_text(
        "#!/bin/sh\n[ \"$1\" = --version ] && echo broken 1.0 && exit 0\necho 'fatal error: no can do' >&2\nexit 1\n"
    )
    broken.chmod(0o755)
    out = _probe(tmp_path, CXX=str(broken))
    assert out["loaded"] is False and "could not build" in out["problem"] and "no can do" in out["problem"]
    want = np.exp([0.0, 1.0, 2.0]) / np.exp([0.0, 1.0, 2.0]).sum()
    np.testing.assert_allclose(out["softmax"][0], want, atol=1e-6)  # still right, by the expressions
    assert out["describe"].startswith("MLX's own (")
    assert not list((tmp_path / "cache" / "kernels").glob(".*tmp"))  # no half-written library left


@linux
def test_switching_the_kernels_off(tmp_path):
    out = _probe(tmp_path, MLX_EDGE_CPU_KERNELS="0")
    assert out["loaded"] is False and "MLX_EDGE_CPU_KERNELS=0" in out["problem"]


@linux
def test_a_nanobind_that_is_not_mlxs_is_refused_before_building(tmp_path, monkeypatch):
    monkeypatch.setenv("MLX_EDGE_CACHE", str(tmp_path))
    monkeypatch.setattr(kernels, "_nanobind_abi", lambda _dir: "0")
    with pytest.raises(OSError, match="does not match the one mlx"):
        kernels.build()
    assert not (tmp_path / "kernels").exists()
