"""Run a saved CoreML mlprogram in NumPy, op by op: the numeric check of a converted model off macOS.

coremltools cannot predict on Linux, and MIL's own constant folding does not evaluate linear,
layer_norm, softmax or gelu (MIL const folding leaves them; coremltools predicts only on macOS). This interpreter loads the saved `.mlpackage` back into a MIL
`Program` (weights included) and evaluates every operation. Each result is stored in the dtype the
program declares for it: an fp16 program's intermediates are rounded to fp16, so an activation that
overflows fp16 becomes inf/NaN here as it would on a device. Arithmetic itself runs in fp32.

An op type the interpreter does not know is an error that names it, never a silent skip.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from pathlib import Path

import numpy as np

from bridges.coreml_export import import_coremltools, quiet_coremltools
from bridges.mil_constexpr import affine_dequantize, blockwise_shift_scale, lut_to_dense, sparse_to_dense
from mlx_edge.errors import BundleError, UnsupportedOpError


def load_program(path: Path):
    """The MIL Program of a saved `.mlpackage`, weights included (works on Linux)."""
    ct = import_coremltools()
    from coremltools.converters.mil.frontend.milproto.load import (
        load,  # lazy: coremltools: ~4 s import, for conversion and checks only
    )

    with quiet_coremltools():
        model = ct.models.MLModel(str(path), skip_model_load=True)
    spec = model.get_spec()
    if spec.WhichOneof("Type") != "mlProgram":
        raise BundleError(f"{path} is not an mlprogram", "only .mlpackage mlprograms can be evaluated")
    return load(spec, spec.specificationVersion, model.weights_dir)


def op_types(program, function: str = "main") -> list[str]:
    return sorted({op.op_type for op in program.functions[function].operations})


def unsupported_ops(program, function: str = "main") -> list[str]:
    return [t for t in op_types(program, function) if t not in OPS and t != "const"]


def run_program(program, inputs: dict[str, np.ndarray], function: str = "main") -> dict[str, np.ndarray]:
    """Evaluate `function` on `inputs` (name -> array); returns every output by name."""
    unknown = unsupported_ops(program, function)
    if unknown:
        raise UnsupportedOpError(
            f"the MIL interpreter does not cover op type(s): {', '.join(unknown)}",
            "add them to bridges/mil_numpy.py OPS",
        )
    with _one_blas_thread():
        return _run(program.functions[function], inputs)


def _one_blas_thread():
    """Batch-1 matmuls are too small to share: with torch's and MLX's thread pools loaded in the same
    process, NumPy's multithreaded BLAS ran up to 10x slower here than on one thread."""
    try:
        from threadpoolctl import threadpool_limits  # lazy: only while the MIL interpreter runs
    except ImportError:  # optional (it comes with scikit-learn): only a speed-up
        return contextlib.nullcontext()
    return threadpool_limits(1, user_api="blas")


def _run(func, inputs):
    env: dict[str, object] = {}
    for name, var in func.inputs.items():
        if name not in inputs:
            raise BundleError(f"program input {name!r} was not given")
        env[name] = np.asarray(inputs[name]).astype(_np_dtype(var.dtype))
    for op in func.operations:
        if op.op_type == "const":
            env[op.outputs[0].name] = op.outputs[0].val
            continue
        args = {k: _resolve(v, env) for k, v in op.inputs.items()}
        try:
            results = OPS[op.op_type](**args)
        except UnsupportedOpError:
            raise
        except Exception as exc:  # a shape or value error inside one op: name the op
            raise BundleError(f"MIL op {op.op_type} ({op.outputs[0].name}) failed: {exc}") from exc
        if not isinstance(results, tuple):
            results = (results,)
        for var, value in zip(op.outputs, results):
            env[var.name] = _store(value, var.dtype)
    return {var.name: np.asarray(env[var.name]) for var in func.outputs}


def _resolve(var, env):
    if isinstance(var, (list, tuple)):
        return [_resolve(v, env) for v in var]
    return env[var.name] if var.name in env else var.val


def _np_dtype(mil_type):
    from coremltools.converters.mil.mil import (
        types,  # lazy: coremltools: ~4 s import, for conversion and checks only
    )

    return types.nptype_from_builtin(mil_type)


def _store(value, mil_type):
    """Round a result to the dtype the program declares (fp16 stays fp16: overflow shows)."""
    from coremltools.converters.mil.mil import (
        types,  # lazy: coremltools: ~4 s import, for conversion and checks only
    )

    if mil_type is None or types.is_str(mil_type) or not isinstance(value, (np.ndarray, np.generic, float, int)):
        return value
    with np.errstate(over="ignore", invalid="ignore"):
        return np.asarray(value).astype(_np_dtype(mil_type))


def _f(x) -> np.ndarray:
    """Compute in fp32 (fp16 storage, fp32 arithmetic, as the GPU does)."""
    x = np.asarray(x)
    return x.astype(np.float32) if x.dtype == np.float16 else x


# --- elementwise -------------------------------------------------------------------------------


def _erf(x: np.ndarray) -> np.ndarray:
    # Abramowitz & Stegun 7.1.26 in float64: |error| < 1.5e-7, far below the checks' tolerances.
    x = np.asarray(x, dtype=np.float64)
    t = 1.0 / (1.0 + 0.3275911 * np.abs(x))
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    return np.sign(x) * (1.0 - poly * np.exp(-x * x))


def _sigmoid(x):
    with np.errstate(over="ignore"):
        return 1.0 / (1.0 + np.exp(-_f(x)))


def _gelu(x, mode="EXACT"):
    x = _f(x)
    if mode == "EXACT":
        return (0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))).astype(x.dtype)
    if mode == "TANH_APPROXIMATION":
        return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))
    if mode == "SIGMOID_APPROXIMATION":
        return x * _sigmoid(1.702 * x)
    raise UnsupportedOpError(f"gelu mode {mode!r} is not covered")


def _binary(fn):
    def op(x, y):
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            return fn(_f(x), _f(y))

    return op


def _unary(fn):
    def op(x, **_):
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            return fn(_f(x))

    return op


# --- tensor ops --------------------------------------------------------------------------------


def _linear(x, weight, bias=None):
    out = _f(x) @ _f(weight).T
    return out if bias is None else out + _f(bias)


def _matmul(x, y, transpose_x=False, transpose_y=False):
    x, y = _f(x), _f(y)
    if transpose_x:
        x = np.swapaxes(x, -1, -2)
    if transpose_y:
        y = np.swapaxes(y, -1, -2)
    return x @ y


def _layer_norm(x, axes, gamma=None, beta=None, epsilon=1e-5):
    x = _f(x)
    axes = tuple(int(a) for a in np.atleast_1d(axes))
    mean = x.mean(axis=axes, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)
    out = (x - mean) / np.sqrt(var + np.float32(epsilon))
    if gamma is not None:
        out = out * _f(gamma)
    if beta is not None:
        out = out + _f(beta)
    return out


def _softmax(x, axis=-1):
    x = _f(x)
    with np.errstate(invalid="ignore", over="ignore"):
        e = np.exp(x - x.max(axis=int(axis), keepdims=True))
        return e / e.sum(axis=int(axis), keepdims=True)


def _gather(x, indices, axis=0, batch_dims=0, validate_indices=False):
    if int(batch_dims) != 0:
        raise UnsupportedOpError("gather with batch_dims != 0 is not covered")
    x, axis = np.asarray(x), int(axis)
    indices = np.asarray(indices).astype(np.int64)
    indices = np.where(indices < 0, indices + x.shape[axis], indices)
    return np.take(x, indices, axis=axis)


def _reshape(x, shape):
    x = np.asarray(x)
    shape = [x.shape[i] if int(s) == 0 else int(s) for i, s in enumerate(np.atleast_1d(shape))]
    return x.reshape(shape)


def _expand_dims(x, axes):
    x = np.asarray(x)
    rank = x.ndim + len(np.atleast_1d(axes))
    for a in sorted(int(a) % rank for a in np.atleast_1d(axes)):
        x = np.expand_dims(x, a)
    return x


def _squeeze(x, axes=None):
    x = np.asarray(x)
    return np.squeeze(x) if axes is None else np.squeeze(x, axis=tuple(int(a) for a in np.atleast_1d(axes)))


def _slice_by_index(x, begin, end, stride=None, begin_mask=None, end_mask=None, squeeze_mask=None):
    x = np.asarray(x)
    n = x.ndim
    stride = np.ones(n, int) if stride is None else np.atleast_1d(stride)
    begin_mask = np.zeros(n, bool) if begin_mask is None else np.atleast_1d(begin_mask)
    end_mask = np.zeros(n, bool) if end_mask is None else np.atleast_1d(end_mask)
    squeeze_mask = np.zeros(n, bool) if squeeze_mask is None else np.atleast_1d(squeeze_mask)
    index = []
    for i in range(n):
        if squeeze_mask[i]:
            index.append(int(begin[i]))
            continue
        b = None if begin_mask[i] else int(begin[i])
        e = None if end_mask[i] else int(end[i])
        index.append(slice(b, e, int(stride[i])))
    return x[tuple(index)]


def _concat(values, axis, interleave=False):
    if interleave:
        raise UnsupportedOpError("concat with interleave is not covered")
    return np.concatenate([np.atleast_1d(v) for v in values], axis=int(axis))


def _cast(x, dtype):
    names = {
        "fp16": np.float16,
        "fp32": np.float32,
        "int32": np.int32,
        "int16": np.int16,
        "int8": np.int8,
        "uint8": np.uint8,
        "uint16": np.uint16,
        "uint32": np.uint32,
        "int64": np.int64,
        "bool": np.bool_,
    }
    if dtype not in names:
        raise UnsupportedOpError(f"cast to {dtype!r} is not covered")
    with np.errstate(over="ignore", invalid="ignore"):
        return np.asarray(x).astype(names[dtype])


def _cumsum(x, axis=0, exclusive=False, reverse=False):
    x, axis = np.asarray(x), int(axis)
    if reverse:
        x = np.flip(x, axis)
    out = np.cumsum(x, axis=axis, dtype=x.dtype)
    if exclusive:
        out = out - x
    return np.flip(out, axis) if reverse else out


def _reduce(fn):
    def op(x, axes=None, keep_dims=False):
        axes = None if axes is None else tuple(int(a) for a in np.atleast_1d(axes))
        return fn(_f(x), axis=axes, keepdims=bool(keep_dims))

    return op


OPS: dict[str, Callable] = {
    "linear": _linear,
    "matmul": _matmul,
    "layer_norm": _layer_norm,
    "softmax": _softmax,
    "gelu": _gelu,
    "tanh": _unary(np.tanh),
    "sigmoid": _unary(_sigmoid),
    "relu": _unary(lambda x: np.maximum(x, 0)),
    "silu": _unary(lambda x: x * _sigmoid(x)),
    "exp": _unary(np.exp),
    "sqrt": _unary(np.sqrt),
    "rsqrt": lambda x, epsilon=1e-12: 1.0 / np.sqrt(_f(x) + np.float32(epsilon)),
    "erf": _unary(lambda x: _erf(x).astype(np.float32)),
    "add": _binary(np.add),
    "sub": _binary(np.subtract),
    "mul": _binary(np.multiply),
    "real_div": _binary(np.divide),
    "pow": _binary(np.power),
    "maximum": _binary(np.maximum),
    "clip": lambda x, alpha, beta: np.minimum(np.maximum(_f(x), _f(alpha)), _f(beta)),  # torch.clamp
    "minimum": _binary(np.minimum),
    "select": lambda cond, a, b: np.where(np.asarray(cond, bool), _f(a), _f(b)),
    "greater": _binary(np.greater),
    "greater_equal": _binary(np.greater_equal),
    "less": _binary(np.less),
    "less_equal": _binary(np.less_equal),
    "equal": _binary(np.equal),
    "not_equal": _binary(np.not_equal),
    "logical_and": _binary(np.logical_and),
    "logical_or": _binary(np.logical_or),
    "logical_not": _unary(np.logical_not),
    "reduce_mean": _reduce(np.mean),
    "reduce_sum": _reduce(np.sum),
    "reduce_max": _reduce(np.max),
    "gather": _gather,
    "reshape": _reshape,
    "transpose": lambda x, perm: np.transpose(np.asarray(x), [int(p) for p in perm]),
    "expand_dims": _expand_dims,
    "squeeze": _squeeze,
    "slice_by_index": _slice_by_index,
    "shape": lambda x: np.array(np.shape(x), dtype=np.int32),
    "fill_like": lambda ref_tensor, value=0.0: np.full(np.shape(ref_tensor), value),
    "fill": lambda shape, value=0.0: np.full([int(s) for s in np.atleast_1d(shape)], value),
    "cumsum": _cumsum,
    "concat": _concat,
    "cast": _cast,
    "identity": lambda x: x,
    "constexpr_affine_dequantize": affine_dequantize,
    "constexpr_lut_to_dense": lut_to_dense,
    "constexpr_blockwise_shift_scale": blockwise_shift_scale,
    "constexpr_sparse_to_dense": sparse_to_dense,
    "constexpr_cast": lambda source_val, output_dtype: _cast(source_val, output_dtype),
}


def program_constants(program, function: str = "main") -> dict[str, np.ndarray]:
    """Every weight-like constant of the program, decompressed: const name -> value.

    Compressed weights (constexpr_* ops) are evaluated, so a quantized program's weights can be
    compared with the student's.
    """
    out = {}
    env: dict[str, object] = {}
    for op in program.functions[function].operations:
        if op.op_type == "const":
            env[op.outputs[0].name] = op.outputs[0].val
            if isinstance(op.outputs[0].val, np.ndarray) and op.outputs[0].val.ndim >= 1:
                out[op.outputs[0].name] = op.outputs[0].val
        elif op.op_type.startswith("constexpr_"):
            if op.op_type not in OPS:
                raise UnsupportedOpError(f"the MIL interpreter does not cover op type(s): {op.op_type}")
            args = {k: _resolve(v, env) for k, v in op.inputs.items()}
            value = OPS[op.op_type](**args)
            env[op.outputs[0].name] = value
            out[op.outputs[0].name] = value
    return out
