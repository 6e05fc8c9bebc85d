"""GELU and softmax for MLX on Linux CPUs, from cheap elementwise ops, with hand-written gradients.

The Linux mlx-cpu wheel evaluates transcendental functions one scalar at a time (2-core x86 box:
`mx.exp` of 4.9M floats ~50 ms, an add ~3 ms), and GELU's forward plus its autodiff backward was
most of a TinyBERT training step. Here `exp` is a Cody-Waite range reduction plus a degree-7
polynomial (multiply/add/floor/bit ops, which `mx.compile` fuses). GELU's forward is one
shape-free compiled kernel (below) and each GELU has a custom VJP: value-and-grad 3x faster, error
a few 1e-7, far inside the 1e-4 parity the tests hold the model to. The attention softmax uses the
same exp (forward 2.5x, value-and-grad 1.9x faster at 16x12x128x128). On Metal and macOS the
native functions are used.
"""

from __future__ import annotations

import math
import os
import sys
from functools import lru_cache, partial

import mlx.core as mx
import mlx.nn as nn

from mlx_edge.runtime import kernels as _cpu_kernels

_LOG2E = 1.4426950408889634
_LN2_HI, _LN2_LO = 0.693145751953125, 1.428606765330187e-06  # ln 2 split for an exact n * ln2
_C = math.sqrt(2.0 / math.pi)
_K = 0.044715
_SQRT1_2 = 0.7071067811865476
_INV_SQRT_2PI = 0.3989422804014327


def enabled() -> bool:
    """On for MLX's CPU device on Linux, unless MLX_EDGE_FAST_MATH=0 (1 forces it on)."""
    setting = os.environ.get("MLX_EDGE_FAST_MATH", "auto").lower()
    if setting in ("0", "off", "false"):
        return False
    if setting in ("1", "on", "true"):
        return True
    return sys.platform.startswith("linux") and mx.default_device() == mx.cpu


def cpu_kernels():
    """mlx-edge's C++ kernels when they can run this op: built and loaded (kernels.load), and MLX's
    default device is the CPU (they have no GPU code)."""
    module = _cpu_kernels.load()
    return module if module is not None and mx.default_device() == mx.cpu else None


def _kernels_for(x: mx.array):
    return cpu_kernels() if x.dtype == mx.float32 else None


def exp(x: mx.array) -> mx.array:
    r = mx.clip(x, -87.0, 88.0)
    # round(r log2 e) as floor(y + 0.5) by truncating y + 128.5 > 0: mx.floor is a scalar libm call
    # on this wheel (7 ms for 2.4M floats, the rest of exp ~3x less); off by one only at a tie, harmless
    n = (r * _LOG2E + 128.5).astype(mx.int32) - 128
    nf = n.astype(mx.float32)
    f = r - nf * _LN2_HI - nf * _LN2_LO  # |f| <= ln2 / 2 (+ a rounding step)
    p = 1.0 + f * (1.0 + f * (0.5 + f * (1 / 6 + f * (1 / 24 + f * (1 / 120 + f * (1 / 720 + f / 5040))))))
    value = p * mx.stop_gradient(mx.left_shift(n + 127, 23).view(mx.float32))  # * 2**n
    return mx.where(x < -87.0, 0.0, value)  # below float32's normal range: 0, as a masked key's weight must be


# ---------------------------------------------------------------------------------------------
# GELU's forward pass as one shape-free fused kernel. Inference runs the model eagerly (batches of
# every width: compiling per shape retraced each), and eagerly each of GELU's ~30 elementwise ops
# is its own pass over the FFN activations: 14 ms for a 64 x 10 x 1536 batch here against
# PyTorch's 0.3 ms, most of a MiniLM labeling pass. Written without `exp` (whose 2^n is a bit cast
# that `mx.compile(shapeless=True)` cannot trace), the forward compiles once for every shape:
# ~1.5 ms for the same batch, error 5e-7 (erf, as MLX's own GELU) and 4e-7 (tanh).
# ---------------------------------------------------------------------------------------------

# erf by Abramowitz-Stegun 7.1.26 (|error| <= 1.5e-7), with its exp(-z^2) (z clamped to 4, beyond
# which float32's erf is 1) as (e^(-z^2/32))^32: a degree-8 Taylor polynomial on [-0.5, 0] then five
# squarings, no bit cast; erf's error stays ~2e-7 (GELU's ~5e-7, as the bit-cast exp gave).
_ERF_P = 0.3275911
_ERF_A = (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)
_EXP_TAYLOR = tuple(1.0 / math.factorial(k) for k in range(9))
# tanh(z) = z P(z^2) / Q(z^2) on |z| <= 7.905 (clamped beyond, where float32's tanh is +-1):
# a minimax rational fit, |error| <= 4e-7 (measured over a 2M-point grid of [-12, 12])
_TANH_P = (4.89352455891786e-03, 6.37261928875436e-04, 1.48572235717979e-05, 5.12229709037114e-08,
           -8.60467152213735e-11, 2.00018790482477e-13, -2.76076847742355e-16)  # fmt: skip
_TANH_Q = (4.89352518554385e-03, 2.26843463243900e-03, 1.18534705686654e-04, 1.19825839466702e-06)
_TANH_CLAMP = 7.90531110763549805


def _polynomial(z: mx.array, coefficients: tuple[float, ...]) -> mx.array:
    """c0 + c1 z + c2 z^2 + ... by Horner's rule."""
    value = coefficients[-1]
    for c in coefficients[-2::-1]:
        value = c + z * value
    return value


def _erf_and_gaussian(x: mx.array) -> tuple[mx.array, mx.array]:
    """(erf(x), e^(-x^2)): the exp is erf's own factor, which GELU's derivative reuses."""
    a = mx.abs(x)
    a = mx.where(a > 4.0, 4.0, a)
    e = _polynomial(a * a * (-1.0 / 32), _EXP_TAYLOR)  # e^(-a^2/32)
    for _ in range(5):
        e = e * e  # ^32: e^(-a^2)
    t = 1.0 / (1.0 + _ERF_P * a)
    y = 1.0 - t * _polynomial(t, _ERF_A) * e  # 1 - (a1 t + ... + a5 t^5) e^(-a^2)
    return mx.where(x < 0, -y, y), e


def _erf_shapefree(x: mx.array) -> mx.array:
    return _erf_and_gaussian(x)[0]


def _tanh_rational(z: mx.array) -> mx.array:
    c = mx.clip(z, -_TANH_CLAMP, _TANH_CLAMP)
    s = c * c
    return c * _polynomial(s, _TANH_P) / _polynomial(s, _TANH_Q)


# Past these |x| GELU is x or 0 in float32 (erf and tanh round to +-1): the value and derivative are
# taken as those limits there. The clamped Gaussian factor would otherwise leak into x e^(-a^2)
# (GELU' = 1.00045 at 1e4, 5.49 at 1e8), and inf * 0 would be NaN.
_ERF_FAR = 4.0 / _SQRT1_2  # erf's argument clamped at 4


def _tanh_far(z: mx.array) -> mx.array:
    """z = sqrt(2/pi) (x + 0.044715 x^3), unclamped: tanh(z) is +-1 in float32 past the clamp."""
    return mx.abs(z) >= _TANH_CLAMP


def _limits(far: mx.array, x: mx.array, value: mx.array, derivative: mx.array | None = None):
    value = mx.where(far, mx.maximum(x, 0.0), value)
    if derivative is None:
        return value
    return value, mx.where(far, (x > 0).astype(x.dtype), derivative)


@partial(mx.compile, shapeless=True)
def _gelu_erf_forward(x: mx.array) -> mx.array:
    return _limits(mx.abs(x) >= _ERF_FAR, x, 0.5 * x * (1.0 + _erf_shapefree(x * _SQRT1_2)))


@partial(mx.compile, shapeless=True)
def _gelu_tanh_forward(x: mx.array) -> mx.array:
    z = _C * (x + _K * x * x * x)
    return _limits(_tanh_far(z), x, 0.5 * x * (1.0 + _tanh_rational(z)))


def _in_float32(fn, x: mx.array) -> mx.array:
    """fn computed in float32 for float16/bfloat16 inputs, cast back: the expressions' constants and
    polynomials are float32's (in float16 the tanh GELU gave 0.17 at x = -12)."""
    if x.dtype in (mx.float16, mx.bfloat16):
        return fn(x.astype(mx.float32)).astype(x.dtype)
    return fn(x)


def gelu_tanh(x: mx.array) -> mx.array:
    """0.5 x (1 + tanh(√(2/π) (x + 0.044715 x³))): HF `gelu_new` / `gelu_pytorch_tanh`."""
    k = _kernels_for(x)
    return k.gelu(x, tanh=True) if k is not None else _in_float32(_gelu_tanh_expr, x)


def gelu(x: mx.array) -> mx.array:
    """Exact GELU, 0.5 x (1 + erf(x / √2))."""
    k = _kernels_for(x)
    return k.gelu(x) if k is not None else _in_float32(_gelu_erf_expr, x)


@mx.custom_function
def _gelu_tanh_expr(x: mx.array) -> mx.array:
    return _gelu_tanh_forward(x)


@_gelu_tanh_expr.vjp
def _gelu_tanh_vjp(primals, cotangent, output):
    x = primals
    return (cotangent * _gelu_tanh_pair(x)[1],)


@mx.custom_function
def _gelu_erf_expr(x: mx.array) -> mx.array:
    return _gelu_erf_forward(x)


@_gelu_erf_expr.vjp
def _gelu_vjp(primals, cotangent, output):
    x = primals
    return (cotangent * _gelu_erf_pair(x)[1],)


# ---------------------------------------------------------------------------------------------
# GELU for training: the forward pass also returns GELU's derivative, which shares its erf (or
# tanh) and exp(-x^2/2) (erf's own e^(-a^2)), so the backward pass is one multiply. Recomputing erf
# and an exp in the VJP, as `gelu` does, gave MLX's fuser ~14 kernels and two strided ones (its
# depth-11 cuts leave broadcast constants as stride-0 inputs): value-and-grad of a 2048 x 1536
# batch took 33.5 ms here, this pair 9.6 ms (one strided multiply kernel). The saved derivative is
# one array the size of the FFN activations, which the backward pass keeps alive anyway (the
# matmul's input). For inference use `gelu`: it writes only the value.
# ---------------------------------------------------------------------------------------------


def _gelu_erf_pair(x: mx.array) -> tuple[mx.array, mx.array]:
    erf, e = _erf_and_gaussian(x * _SQRT1_2)  # e = e^(-x^2/2)
    half = 0.5 + 0.5 * erf  # (1 + erf(x / sqrt 2)) / 2
    return _limits(mx.abs(x) >= _ERF_FAR, x, x * half, half + x * e * _INV_SQRT_2PI)


def _gelu_tanh_pair(x: mx.array) -> tuple[mx.array, mx.array]:
    x2 = x * x
    z = _C * (x + _K * x2 * x)
    t = _tanh_rational(z)
    half = 0.5 + 0.5 * t
    return _limits(_tanh_far(z), x, x * half, half + 0.5 * x * (1.0 - t * t) * _C * (1.0 + 3.0 * _K * x2))


@mx.custom_function
def _first_order_only(derivative: mx.array) -> mx.array:
    """The kept derivative as the backward pass reads it. The pair's VJP reads only the value's
    cotangent, so a gradient flowing into the derivative (a second derivative) would be dropped
    without a word: this identity raises instead."""
    return derivative


@_first_order_only.vjp
def _no_second_derivative(primals, cotangent, output):
    raise ValueError(
        "fastmath's training GELU keeps its first derivative only; use fastmath.gelu or nn.gelu for "
        "higher-order gradients"
    )


def _times_kept_derivative(primals, cotangents, outputs):
    """The VJP of a (value, derivative) pair: the value's cotangent times the derivative."""
    return (cotangents[0] * _first_order_only(outputs[1]),)


_gelu_pair_erf = mx.custom_function(mx.compile(_gelu_erf_pair, shapeless=True))
_gelu_pair_tanh = mx.custom_function(mx.compile(_gelu_tanh_pair, shapeless=True))
_gelu_pair_erf.vjp(_times_kept_derivative)
_gelu_pair_tanh.vjp(_times_kept_derivative)


def gelu_train(x: mx.array) -> mx.array:
    """`gelu` whose forward pass also keeps the derivative for a one-multiply backward pass."""
    k = _kernels_for(x)
    return k.gelu_pair(x)[0] if k is not None else _in_float32(lambda v: _gelu_pair_erf(v)[0], x)


def gelu_tanh_train(x: mx.array) -> mx.array:
    """`gelu_tanh` whose forward pass also keeps the derivative for a one-multiply backward pass."""
    k = _kernels_for(x)
    return k.gelu_pair(x, tanh=True)[0] if k is not None else _in_float32(lambda v: _gelu_pair_tanh(v)[0], x)


def softmax(x: mx.array) -> mx.array:
    """Softmax over the last axis (in float32, like `mx.softmax(..., precise=True)`); a masked key
    (score = the dtype's minimum) gets exactly 0."""
    k = _kernels_for(x)
    return k.softmax(x) if k is not None else _softmax_expr(x)


def attention(q: mx.array, k: mx.array, v: mx.array, mask: mx.array, heads: int, scale: float) -> mx.array | None:
    """softmax(q k^T * scale + mask) v per head, heads merged: k and v are the (B, L, heads * head_dim)
    projections, q the (B, Lq, heads * head_dim) ones of the rows that attend (Lq <= L: all rows, or
    [CLS] alone), mask the (B, 1, 1, L) additive key mask. The forward is one C++ kernel; a gradient
    (e.g. through an eval-mode model) comes from the explicit form. None where the kernel cannot
    run (not built, not float32), and the caller runs the explicit form."""
    if _kernels_for(q) is None or not all(a.dtype == mx.float32 for a in (k, v, mask)):
        return None
    if mask.size != k.shape[0] * k.shape[1]:
        return None
    return _attention_function(heads, float(scale))(q, k, v, mask)


def _explicit_attention(q, k, v, mask, heads: int, scale: float) -> mx.array:
    B, L, _ = k.shape
    qh, kh, vh = (t.reshape(B, t.shape[1], heads, -1).transpose(0, 2, 1, 3) for t in (q, k, v))
    probs = softmax((qh * scale) @ kh.transpose(0, 1, 3, 2) + mask.reshape(B, 1, 1, L))
    return (probs @ vh).transpose(0, 2, 1, 3).reshape(B, q.shape[1], -1)


@lru_cache(maxsize=64)
def _attention_function(heads: int, scale: float):
    @mx.custom_function
    def fused(q, k, v, mask):
        return cpu_kernels().attention(q, k, v, mask, heads, scale)

    @fused.vjp
    def fused_vjp(primals, cotangent, output):
        q, k, v, mask = primals
        _, grads = mx.vjp(lambda a, b, c: _explicit_attention(a, b, c, mask, heads, scale), [q, k, v], [cotangent])
        return (*grads, mx.zeros_like(mask))

    return fused


@mx.custom_function
def _softmax_expr(x: mx.array) -> mx.array:
    dtype = x.dtype
    if dtype != mx.float32:
        x = x.astype(mx.float32)
    e = exp(x - mx.stop_gradient(x.max(axis=-1, keepdims=True)))
    y = e * (1.0 / e.sum(axis=-1, keepdims=True))
    return y if dtype == mx.float32 else y.astype(dtype)


@_softmax_expr.vjp
def _softmax_vjp(primals, cotangent, output):
    y = output
    return (y * (cotangent - (cotangent * y).sum(axis=-1, keepdims=True)),)


_U32 = mx.uint32


def keep_mask(shape: tuple[int, ...], keep: float) -> mx.array:
    """A Bernoulli(`keep`) bool mask from a counter hash (murmur3's finalizer over element index +
    one random seed per call): integer ops `mx.compile` fuses, 2.2x faster here than
    mx.random.bernoulli's threefry on the 16x12x128x128 attention maps (measured interleaved).
    Independent enough for dropout, not for anything cryptographic or statistical."""
    # draws from (and advances) MLX's key; a 0-d seed keeps the fused hash kernel on MLX's contiguous
    # (vectorized) path, where a (1,) seed is a broadcast input that makes it strided: 11.2 -> 8.1 ms
    # for dropout's value-and-grad at 16x12x128x128 here
    return _hashed(_dropout_seed(), shape) < mx.array(_threshold(keep), _U32)


def _threshold(keep: float) -> int:
    """A uint32 hash is kept below this: P(kept) = keep."""
    return min(int(keep * 2**32), 2**32 - 1)


def _dropout_seed() -> mx.array:
    """One 0-d uint32 seed per mask, drawn from (and advancing) MLX's key."""
    return mx.random.randint(0, 2**31 - 1, ()).astype(_U32)


def _hashed(seed: mx.array, shape: tuple[int, ...]) -> mx.array:
    size = math.prod(shape)
    h = mx.arange(size, dtype=_U32).reshape(shape) * mx.array(0x9E3779B1, _U32) + seed * mx.array(0x85EBCA77, _U32)
    for shift, multiplier in ((16, 0x85EBCA6B), (13, 0xC2B2AE35)):
        h = mx.bitwise_xor(h, mx.right_shift(h, mx.array(shift, _U32))) * mx.array(multiplier, _U32)
    return mx.bitwise_xor(h, mx.right_shift(h, mx.array(16, _U32)))


class Dropout(nn.Module):
    """nn.Dropout with its mask from `keep_mask`: same semantics (scale kept values by 1/(1-p) while training)."""

    def __init__(self, p: float = 0.5):
        super().__init__()
        if not 0 <= p < 1:
            raise ValueError(f"dropout probability {p} must be in [0, 1)")
        self._keep = 1 - p

    def __call__(self, x: mx.array) -> mx.array:
        if self._keep == 1 or not self.training:
            return x
        k = _kernels_for(x)
        if k is not None:  # the same mask (same seed, same hash), applied in one vectorized pass
            return k.dropout(x, _dropout_seed(), self._keep)
        return mx.where(keep_mask(x.shape, self._keep), x * (1 / self._keep), mx.zeros((), x.dtype))


class LayerNorm(nn.LayerNorm):
    """nn.LayerNorm (same parameters, same checkpoints) computed by the C++ kernels when they run here."""

    def __call__(self, x: mx.array) -> mx.array:
        k = _kernels_for(x)
        if k is None or "weight" not in self or "bias" not in self or self.weight.dtype != mx.float32:
            return super().__call__(x)
        return k.layer_norm(x, self.weight, self.bias, self.eps)
