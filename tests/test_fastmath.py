"""The polynomial exp and the custom-gradient GELUs used on Linux CPUs match MLX's native ones."""

from __future__ import annotations

import numpy as np
import pytest

import mlx.core as mx
import mlx.nn as nn
from mlx_edge.models import fastmath

X = mx.array(np.concatenate([np.linspace(-12, 12, 20001), [-100.0, -30.0, 0.0, 30.0, 100.0]]).astype(np.float32))


def test_exp_relative_error():
    x = mx.array(np.linspace(-80, 80, 100001).astype(np.float32))
    ours, ref = np.array(fastmath.exp(x)), np.array(mx.exp(x))
    assert np.max(np.abs(ours - ref) / ref) < 5e-6
    assert np.isfinite(np.array(fastmath.exp(mx.array([-1e4, 1e4])))).all()


@pytest.mark.parametrize("fast, native", [(fastmath.gelu, nn.gelu), (fastmath.gelu_tanh, nn.gelu_approx)],
                         ids=["gelu", "gelu_tanh"])
def test_gelu_values_and_gradients(fast, native):
    np.testing.assert_allclose(np.array(fast(X)), np.array(native(X)), atol=2e-6, rtol=1e-5)
    g_fast = mx.grad(lambda v: (fast(v) * mx.cos(v)).sum())(X)  # a non-trivial cotangent
    g_native = mx.grad(lambda v: (native(v) * mx.cos(v)).sum())(X)
    np.testing.assert_allclose(np.array(g_fast), np.array(g_native), atol=2e-5)
    compiled = mx.compile(mx.value_and_grad(lambda v: fast(v).sum()))
    value, grad = compiled(X)
    assert np.isfinite(value.item()) and np.isfinite(np.array(grad)).all()


def test_switch(monkeypatch):
    monkeypatch.setenv("MLX_EDGE_FAST_MATH", "0")
    assert fastmath.enabled() is False
    monkeypatch.setenv("MLX_EDGE_FAST_MATH", "1")
    assert fastmath.enabled() is True
