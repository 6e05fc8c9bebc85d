"""The NumPy interpreter of MIL programs: op semantics, fp16 storage, compressed constants, and an
unknown op reported by name rather than skipped."""

from __future__ import annotations

import math

import numpy as np
import pytest

from bridges import mil_numpy
from bridges.mil_numpy import OPS, load_program, op_types, run_program, unsupported_ops
from mlx_edge.errors import UnsupportedOpError
from tests.helpers.exports import exported


def test_erf_is_accurate():
    x = np.linspace(-5, 5, 2001)
    want = np.array([math.erf(v) for v in x])
    assert np.max(np.abs(mil_numpy._erf(x) - want)) < 2e-7


def test_gelu_modes_match_torch():
    import torch

    x = np.linspace(-6, 6, 301).astype(np.float32)
    exact = torch.nn.functional.gelu(torch.from_numpy(x)).numpy()
    tanh = torch.nn.functional.gelu(torch.from_numpy(x), approximate="tanh").numpy()
    np.testing.assert_allclose(OPS["gelu"](x=x, mode="EXACT"), exact, atol=1e-6)
    np.testing.assert_allclose(OPS["gelu"](x=x, mode="TANH_APPROXIMATION"), tanh, atol=1e-6)


def test_slice_by_index_masks():
    x = np.arange(2 * 5 * 3).reshape(2, 5, 3)
    out = OPS["slice_by_index"](
        x=x,
        begin=np.array([0, 0, 0]),
        end=np.array([0, 1, 0]),
        stride=None,
        begin_mask=np.array([True, False, True]),
        end_mask=np.array([True, False, True]),
        squeeze_mask=np.array([False, True, False]),
    )
    np.testing.assert_array_equal(out, x[:, 0, :])


def test_fp16_storage_overflows_like_a_device():
    stored = mil_numpy._store(np.array([70000.0, 1.0], np.float32), _fp16())
    assert stored.dtype == np.float16 and np.isinf(stored[0]) and stored[1] == 1.0


def _fp16():
    from coremltools.converters.mil.mil import types

    return types.fp16


@pytest.mark.parametrize("nbits", [1, 2, 4, 6, 8])
def test_lut_unpacking_matches_coremltools(nbits):
    from coremltools.converters.mil.mil.ops.defs.iOS16.constexpr_ops import constexpr_lut_to_dense
    from coremltools.optimize import _utils

    rng = np.random.default_rng(nbits)
    shape = (7, 5)
    indices = rng.integers(0, 2**nbits, size=int(np.prod(shape))).astype(np.uint8)
    packed = _utils.pack_elements_into_bits(indices, nbits)
    lut = rng.normal(size=2**nbits).astype(np.float32)
    want = constexpr_lut_to_dense.decompress(lut, packed, np.array(shape, np.uint32))
    np.testing.assert_array_equal(OPS["constexpr_lut_to_dense"](indices=packed, lut=lut, shape=np.array(shape)), want)


def test_affine_dequantize_per_channel():
    q = np.array([[-127, 0, 127], [10, -10, 0]], np.int8)
    scale = np.array([0.5, 2.0], np.float32)
    out = OPS["constexpr_affine_dequantize"](quantized_data=q, zero_point=np.int8(0), scale=scale, axis=0)
    np.testing.assert_array_equal(out, q * scale[:, None])


def test_blockwise_shift_scale_by_hand():
    """output[i, j] = scale[i, j // block] * (data[i, j] - offset[i, j // block]), block 2 along the rows."""
    data = np.array([[0, 1, 2, 3], [4, 5, 6, 7]], np.uint8)  # uint4 values, unpacked as MIL loads them
    scale = np.array([[0.5, 2.0], [1.0, 3.0]], np.float16)
    offset = np.array([[1, 0], [2, 1]], np.uint8)
    out = OPS["constexpr_blockwise_shift_scale"](data=data, scale=scale, offset=offset)
    np.testing.assert_array_equal(out, np.array([[-0.5, 0, 4, 6], [2, 3, 15, 18]], np.float16))
    assert out.dtype == np.float16  # the scale's dtype, as the op declares
    symmetric = OPS["constexpr_blockwise_shift_scale"](data=np.array([[-8, 7, -1, 1]], np.int8), scale=scale[:1])
    np.testing.assert_array_equal(symmetric, np.array([[-4, 3.5, -2, 2]], np.float16))


def _blockwise_linear(mode: str, block_size: int, tmp_path, *, rows=24, cols=96):
    """A one-linear iOS18 program compressed by bridges.coreml_export.compress, saved and loaded back."""
    import coremltools as ct
    from coremltools.converters.mil import Builder as mb

    from bridges.coreml_export import compress

    weight = np.random.default_rng(0).normal(size=(rows, cols)).astype(np.float32)

    @mb.program(input_specs=[mb.TensorSpec(shape=(1, cols))], opset_version=ct.target.iOS18)
    def linear(x):
        return mb.linear(x=x, weight=weight, name="y")

    model = ct.convert(  # fp32, so that only the quantization moves the weights
        linear,
        convert_to="mlprogram",
        minimum_deployment_target=ct.target.iOS18,
        compute_precision=ct.precision.FLOAT32,
        skip_model_load=True,
    )
    compress(model, quantize=mode, block_size=block_size).save(str(tmp_path / "linear.mlpackage"))
    return weight, load_program(tmp_path / "linear.mlpackage")


@pytest.mark.parametrize("mode, levels", [("int8-block", 127), ("int4-block", 7)])
def test_blockwise_modes_emit_one_op_the_interpreter_evaluates_as_coremltools_does(mode, levels, tmp_path):
    from coremltools.converters.mil.mil.ops.defs.iOS18.compression import constexpr_blockwise_shift_scale as op

    weight, program = _blockwise_linear(mode, 16, tmp_path)
    ops = [o for o in program.functions["main"].operations if o.op_type.startswith("constexpr_")]
    assert [o.op_type for o in ops] == ["constexpr_blockwise_shift_scale"]  # what coremltools 9 emits for both
    data, scale = ops[0].data.val, ops[0].scale.val
    assert ops[0].offset is None and scale.shape == (24, 96 // 16)  # symmetric, one scale per 16 inputs
    assert data.min() >= -levels - 1 and data.max() <= levels
    ours = OPS["constexpr_blockwise_shift_scale"](data=data, scale=scale)
    np.testing.assert_array_equal(ours, op.decompress(data, scale, None))
    # within half a quantization step of the original weight, block by block
    step = np.repeat(np.abs(weight).reshape(24, -1, 16).max(axis=-1) / levels, 16, axis=1)
    assert np.all(np.abs(ours - weight) <= step / 2 + 1e-6)
    x = np.random.default_rng(1).normal(size=(1, 96)).astype(np.float32)
    np.testing.assert_allclose(run_program(program, {"x": x})["y"], x @ ours.T, rtol=1e-5, atol=1e-5)


@pytest.fixture(scope="module")
def fp16_program():
    return load_program(exported("--precision", "fp16") / "Encoder.mlpackage")


def test_every_op_of_the_exported_program_is_covered(fp16_program):
    assert unsupported_ops(fp16_program) == []
    assert {"linear", "layer_norm", "softmax", "gelu", "gather", "matmul", "cast"} <= set(op_types(fp16_program))


def test_fp16_program_keeps_fp16_intermediates(fp16_program, monkeypatch):
    seen = []
    real = mil_numpy._store

    def spy(value, mil_type):
        stored = real(value, mil_type)
        seen.append(np.asarray(stored).dtype)
        return stored

    monkeypatch.setattr(mil_numpy, "_store", spy)
    ids = np.zeros((1, 32), np.int32)
    out = run_program(fp16_program, {"input_ids": ids, "attention_mask": np.ones_like(ids)})
    assert np.float16 in seen
    assert out["embedding"].dtype == np.float32  # outputs are cast back: what the app reads


def test_unknown_op_is_named_not_skipped(fp16_program, monkeypatch):
    monkeypatch.delitem(OPS, "gelu")
    assert unsupported_ops(fp16_program) == ["gelu"]
    ids = np.zeros((1, 32), np.int32)
    with pytest.raises(UnsupportedOpError, match="op type.*gelu"):
        run_program(fp16_program, {"input_ids": ids, "attention_mask": ids})


def test_check_reports_an_unknown_op_by_name(monkeypatch):
    from mlx_edge.check import check_bundle

    monkeypatch.delitem(OPS, "layer_norm")
    report = check_bundle(exported("--precision", "fp16"), n_texts=2)
    results = {r.name: r for r in report.results}
    assert not results["program.ops.encoder"].ok
    assert "layer_norm" in results["program.ops.encoder"].detail
    assert not report.ok
