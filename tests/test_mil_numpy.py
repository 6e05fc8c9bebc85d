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
