"""The polynomial exp and the custom-gradient GELUs used on Linux CPUs match MLX's native ones.

Every test runs twice: with mlx-edge's C++ kernels (runtime/kernels.py; what Linux runs when g++
and nanobind are there) and with the MLX expressions they fall back to (the kernels switched off).
"""

from __future__ import annotations

import math

import mlx.core as mx
import mlx.nn as nn
import numpy as np
import pytest
from mlx.utils import tree_flatten

from mlx_edge.models import fastmath
from mlx_edge.runtime import kernels


@pytest.fixture(autouse=True, params=["cpu-kernels", "mlx-expressions"])
def backend(request, monkeypatch):
    if request.param == "cpu-kernels":
        if fastmath.cpu_kernels() is None:
            pytest.skip(f"mlx-edge's C++ kernels are not in use here: {kernels.problem()}")
    else:
        monkeypatch.setattr(fastmath, "cpu_kernels", lambda: None)
    return request.param


X = mx.array(np.concatenate([np.linspace(-12, 12, 20001), [-100.0, -30.0, 0.0, 30.0, 100.0]]).astype(np.float32))


def test_exp_relative_error():
    x = mx.array(np.linspace(-80, 80, 100001).astype(np.float32))
    ours, ref = np.array(fastmath.exp(x)), np.array(mx.exp(x))
    assert np.max(np.abs(ours - ref) / ref) < 5e-6
    assert np.isfinite(np.array(fastmath.exp(mx.array([-1e4, 1e4])))).all()


@pytest.mark.parametrize(
    "fast, native", [(fastmath.gelu, nn.gelu), (fastmath.gelu_tanh, nn.gelu_approx)], ids=["gelu", "gelu_tanh"]
)
def test_gelu_values_and_gradients(fast, native):
    np.testing.assert_allclose(np.array(fast(X)), np.array(native(X)), atol=2e-6, rtol=1e-5)
    g_fast = mx.grad(lambda v: (fast(v) * mx.cos(v)).sum())(X)  # a non-trivial cotangent
    g_native = mx.grad(lambda v: (native(v) * mx.cos(v)).sum())(X)
    np.testing.assert_allclose(np.array(g_fast), np.array(g_native), atol=2e-5)
    compiled = mx.compile(mx.value_and_grad(lambda v: fast(v).sum()))
    value, grad = compiled(X)
    assert np.isfinite(value.item()) and np.isfinite(np.array(grad)).all()


@pytest.mark.parametrize(
    "train, native, reference",
    [(fastmath.gelu_train, nn.gelu, "erf"), (fastmath.gelu_tanh_train, nn.gelu_approx, "tanh")],
    ids=["gelu", "gelu_tanh"],
)
def test_training_gelus_keep_the_derivative_from_the_forward_pass(train, native, reference):
    import torch

    # against PyTorch's float64 GELU and its autograd: an independent reference for the derivative
    # the forward pass writes and the one-multiply backward pass reads
    rng = np.random.default_rng(1)
    cot = rng.normal(size=X.shape).astype(np.float32)
    t = torch.tensor(np.array(X), dtype=torch.float64, requires_grad=True)
    torch.nn.functional.gelu(t, approximate="none" if reference == "erf" else "tanh").mul(
        torch.tensor(cot, dtype=torch.float64)
    ).sum().backward()
    expected = t.grad.numpy()
    np.testing.assert_allclose(np.array(train(X)), np.array(native(X)), atol=2e-6, rtol=1e-5)
    for grad_fn in (
        mx.grad(lambda v: (train(v) * mx.array(cot)).sum()),
        mx.compile(mx.grad(lambda v: (train(v) * mx.array(cot)).sum())),  # as the train step runs it
    ):
        np.testing.assert_allclose(np.array(grad_fn(X)), expected, atol=3e-6 * np.abs(cot).max())
    x2 = mx.array(rng.normal(scale=3.0, size=(2, 5, 8)).astype(np.float32))  # another shape, same kernels
    np.testing.assert_allclose(np.array(train(x2)), np.array(native(x2)), atol=2e-6, rtol=1e-5)


HUGE = [1e4, 1e8, 1e30, float("inf")]


@pytest.mark.parametrize("tanh", [False, True], ids=["gelu", "gelu_tanh"])
@pytest.mark.parametrize("path", ["grad", "train"])
def test_gelu_derivative_is_right_far_out(tanh, path):
    """Far from 0 GELU' is 1 (x > 0) or 0 (x < 0). A Gaussian factor clamped at |x| = 4 sqrt 2 once leaked
    into x e^(-x^2/2): 1.00045 at 1e4, 5.49 at 1e8, -4.49 at -1e8; and inf * 0 is NaN."""
    x = mx.array([v * s for v in HUGE for s in (1.0, -1.0)], dtype=mx.float32)
    if path == "train":
        fn = fastmath.gelu_tanh_train if tanh else fastmath.gelu_train
    else:
        fn = fastmath.gelu_tanh if tanh else fastmath.gelu
    grad = np.array(mx.grad(lambda v: fn(v).sum())(x))
    np.testing.assert_array_equal(grad, [1.0, 0.0] * len(HUGE))


@pytest.mark.parametrize(
    "fast, native", [(fastmath.gelu, nn.gelu), (fastmath.gelu_tanh, nn.gelu_approx)], ids=["gelu", "gelu_tanh"]
)
def test_gelu_forward_is_right_for_every_shape_it_is_called_with(fast, native):
    # the forward is compiled shapeless (one kernel for all shapes): a shape-dependent trace would
    # return the first call's shape or values for the later ones
    rng = np.random.default_rng(0)
    for shape in [(5, 3, 16), (7,), (2, 9, 4, 3), (5, 3, 16)]:
        x = mx.array(rng.normal(scale=4.0, size=shape).astype(np.float32))
        got = fast(x)
        assert got.shape == x.shape
        np.testing.assert_allclose(np.array(got), np.array(native(x)), atol=2e-6, rtol=1e-5)


def test_switch(monkeypatch):
    monkeypatch.setenv("MLX_EDGE_FAST_MATH", "0")
    assert fastmath.enabled() is False
    monkeypatch.setenv("MLX_EDGE_FAST_MATH", "1")
    assert fastmath.enabled() is True


def test_softmax_values_and_gradients_with_masked_keys():
    rng = np.random.default_rng(0)
    scores = rng.normal(scale=4.0, size=(3, 2, 5, 7)).astype(np.float32)
    scores[0, :, :, 4:] = np.finfo(np.float32).min  # padded keys, as the additive mask makes them
    scores[1, 0, 2, :] = np.finfo(np.float32).min  # a row with every key masked: uniform, not NaN
    x = mx.array(scores)
    ours, ref = np.array(fastmath.softmax(x)), np.array(mx.softmax(x, axis=-1, precise=True))
    np.testing.assert_allclose(ours, ref, atol=1e-6)
    assert np.all(ours[0, :, :, 4:] == 0)
    np.testing.assert_allclose(ours[1, 0, 2], np.full(7, 1 / 7), rtol=1e-6)
    cotangent = mx.array(rng.normal(size=scores.shape).astype(np.float32))
    g_fast = mx.grad(lambda v: (fastmath.softmax(v) * cotangent).sum())(x)
    g_native = mx.grad(lambda v: (mx.softmax(v, axis=-1, precise=True) * cotangent).sum())(x)
    np.testing.assert_allclose(np.array(g_fast), np.array(g_native), atol=1e-6)
    compiled = mx.compile(mx.grad(lambda v: (fastmath.softmax(v) * cotangent).sum()))
    np.testing.assert_allclose(np.array(compiled(x)), np.array(g_native), atol=1e-6)
    half = fastmath.softmax(x[2].astype(mx.float16))  # (row 2: no float32-min scores, -inf in float16)
    assert half.dtype == mx.float16
    np.testing.assert_allclose(np.array(half.astype(mx.float32)), ref[2], atol=2e-3)


def test_fast_math_is_decided_when_the_model_is_built(monkeypatch):
    from mlx_edge.models.bert import BertConfig, BertForSequenceClassification

    config = BertConfig(vocab_size=50, hidden_size=32, num_hidden_layers=1, num_attention_heads=4, intermediate_size=48)
    monkeypatch.setenv("MLX_EDGE_FAST_MATH", "1")
    fast = BertForSequenceClassification(config)
    monkeypatch.setenv("MLX_EDGE_FAST_MATH", "0")  # read at build time only: `fast` keeps its choice
    native = BertForSequenceClassification(config)
    native.load_weights(list(tree_flatten(fast.parameters())))
    assert fast.fast_math and not native.fast_math
    layer = fast.layers[0]
    assert layer.intermediate.act is fastmath.gelu and layer.attention.self.softmax is fastmath.softmax
    assert layer.intermediate.train_act is fastmath.gelu_train  # the derivative-keeping form, for training
    assert native.layers[0].intermediate.act is nn.gelu and native.layers[0].intermediate.train_act is nn.gelu
    # every dropout of the fast model draws a hashed mask (MLX's threefry is scalar on CPU); native keeps nn's
    fast_drops = [m for _, m in fast.named_modules() if "ropout" in type(m).__name__]
    native_drops = [m for _, m in native.named_modules() if "ropout" in type(m).__name__]
    assert len(fast_drops) == len(native_drops) == 1 + 3 * config.num_hidden_layers + 1
    assert all(type(m) is fastmath.Dropout for m in fast_drops)
    assert all(type(m) is nn.Dropout for m in native_drops)
    assert (
        type(layer.output.LayerNorm) is fastmath.LayerNorm
        and type(fast.bert.embeddings.LayerNorm) is fastmath.LayerNorm
    )
    assert type(native.layers[0].output.LayerNorm) is nn.LayerNorm
    ids = mx.array([[1, 5, 7, 2, 0, 0]])
    mask = (ids != 0).astype(mx.int32)
    a = fast.eval()(ids, mask, output_attentions=True)
    b = native.eval()(ids, mask, output_attentions=True)
    assert np.abs(np.array(a.logits) - np.array(b.logits)).max() < 1e-5
    assert np.abs(np.array(a.attentions[0]) - np.array(b.attentions[0])).max() < 1e-5


def test_hashed_dropout_keeps_the_right_share_independently_and_reproducibly():
    import mlx.nn as nn

    shape = (4, 12, 64, 64)  # 196,608 draws: the keep rate's sd is ~7e-4
    mx.random.seed(7)
    a = np.array(fastmath.keep_mask(shape, 0.9))
    b = np.array(fastmath.keep_mask(shape, 0.9))
    mx.random.seed(7)
    again = np.array(fastmath.keep_mask(shape, 0.9))
    np.testing.assert_array_equal(a, again)  # MLX's seed decides the mask
    assert abs(a.mean() - 0.9) < 0.005 and abs(b.mean() - 0.9) < 0.005
    assert abs((a == b).mean() - (0.9**2 + 0.1**2)) < 0.005  # two calls: independent masks
    rows = a.reshape(-1, 64).mean(axis=1)  # no structure along the rows the attention reads
    assert abs(rows.std() - (0.09 / 64) ** 0.5) < 0.01

    drop = fastmath.Dropout(0.25)
    x = mx.ones(shape)
    y = np.array(drop(x))
    assert set(np.unique(y)) == {0.0, np.float32(1 / 0.75)} and abs((y > 0).mean() - 0.75) < 0.005
    drop.eval()
    np.testing.assert_array_equal(np.array(drop(x)), np.array(x))
    assert nn.Dropout(0.25).state == drop.state == {}  # no parameters: checkpoints are unchanged


def test_fast_and_native_models_train_with_the_same_gradients(monkeypatch):
    from mlx_edge.models.bert import BertConfig, BertForSequenceClassification

    config = BertConfig(
        vocab_size=50, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48,
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, hidden_act="gelu_new",
    )  # fmt: skip
    fast = BertForSequenceClassification(config, fast_math=True)
    native = BertForSequenceClassification(config, fast_math=False)
    native.load_weights(list(tree_flatten(fast.parameters())))
    ids = mx.array([[1, 5, 7, 2, 0, 0], [3, 9, 4, 8, 6, 2]])
    mask = (ids != 0).astype(mx.int32)
    labels = mx.array([0, 1])

    def loss(model):
        return nn.losses.cross_entropy(model(ids, mask).logits, labels, reduction="mean")

    grads = []
    for model in (fast.train(), native.train()):  # training mode: the fast model's derivative-keeping GELU
        _, g = nn.value_and_grad(model, loss)(model)
        grads.append(dict(tree_flatten(g)))
    assert grads[0].keys() == grads[1].keys()
    for name, g in grads[0].items():
        np.testing.assert_allclose(np.array(g), np.array(grads[1][name]), atol=2e-5, err_msg=name)


def _gelu64(x: np.ndarray, tanh: bool) -> np.ndarray:
    if tanh:
        return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))
    return 0.5 * x * (1 + np.vectorize(math.erf)(x / np.sqrt(2)))


@pytest.mark.parametrize("dtype", [mx.float16, mx.bfloat16], ids=["float16", "bfloat16"])
def test_half_precision_inputs_are_computed_in_float32(dtype):
    """The expressions' polynomials and constants are float32's: in float16 the tanh GELU once gave
    0.17 at x = -12 (GELU(-12) is ~0). Against float64 NumPy at the half-precision inputs themselves."""
    eps = {mx.float16: 2.0**-10, mx.bfloat16: 2.0**-7}[dtype]  # one step of the output's rounding
    x = mx.array(np.linspace(-20, 20, 4001).astype(np.float32)).astype(dtype)
    x64 = np.array(x.astype(mx.float32)).astype(np.float64)

    def check(got: mx.array, want: np.ndarray, name: str):
        assert got.dtype == dtype, name
        ours = np.array(got.astype(mx.float32)).astype(np.float64)
        np.testing.assert_allclose(ours, want, rtol=eps, atol=eps * 1e-2, err_msg=name)

    for tanh in (False, True):
        want = _gelu64(x64, tanh)
        check(fastmath.gelu_tanh(x) if tanh else fastmath.gelu(x), want, f"gelu tanh={tanh}")
        check(fastmath.gelu_tanh_train(x) if tanh else fastmath.gelu_train(x), want, f"gelu_train tanh={tanh}")
        assert abs(np.array(fastmath.gelu_tanh(x).astype(mx.float32))[x64 == -12.0]).max() < 1e-6
    rows = x[:4000].reshape(40, 100)  # 40 rows of 100 scores in [-20, 20]
    r64 = np.array(rows.astype(mx.float32)).astype(np.float64)
    softmax = np.exp(r64 - r64.max(-1, keepdims=True))
    check(fastmath.softmax(rows), softmax / softmax.sum(-1, keepdims=True), "softmax")
    norm = fastmath.LayerNorm(100, eps=1e-5)
    norm.update({"weight": norm.weight.astype(dtype), "bias": norm.bias.astype(dtype)})
    xhat = (r64 - r64.mean(-1, keepdims=True)) / np.sqrt(r64.var(-1, keepdims=True) + 1e-5)
    got = norm(rows)
    assert got.dtype == dtype
    np.testing.assert_allclose(np.array(got.astype(mx.float32)), xhat, rtol=eps, atol=4 * eps)  # |xhat| up to ~2


def test_second_derivatives_are_right_or_refused(backend):
    """A GELU whose backward pass reads a kept derivative has no second derivative: differentiating it
    again once gave 0 without a word. It raises now; the expressions' `gelu` differentiates twice."""
    # (not at 0 itself: there the expressions' erf(|x|) sign trick halves GELU'' by abs's 0 subgradient)
    x = mx.array(np.linspace(-5, 5, 100).astype(np.float32))

    def second(fn):
        first = mx.grad(lambda v: fn(v).sum())
        return mx.grad(lambda v: first(v).sum())(x)

    for train in (fastmath.gelu_train, fastmath.gelu_tanh_train):
        with pytest.raises(ValueError, match="no second derivative|first derivative only"):
            mx.eval(second(train))
    for fast, native in ((fastmath.gelu, nn.gelu), (fastmath.gelu_tanh, nn.gelu_approx)):
        if backend == "cpu-kernels":
            with pytest.raises(ValueError, match="set MLX_EDGE_CPU_KERNELS=0 for higher-order gradients"):
                mx.eval(second(fast))
        else:
            # (2e-5 off at +-5, where the tanh form's clamp makes GELU'' 0 instead of -3e-5)
            np.testing.assert_allclose(np.array(second(fast)), np.array(second(native)), atol=5e-5)
