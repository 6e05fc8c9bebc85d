"""Export variants: compressed weights (int8, palettized), flexible sequence lengths, iOS18 targets,
Adam. Each must pass its own checks, with every op type covered by the NumPy interpreter.

A random tiny student stands in for a distilled one until distill lands (see tests/helpers/exports.py).
"""

from __future__ import annotations

import json

import pytest

from tests.helpers.exports import exported

# each variant is a full export of its own (3-4 s here); the fp16/fp32 bundles are tested in the fast tier
pytestmark = pytest.mark.slow

VARIANTS = {
    "int8": ("--quantize", "int8", "--extras", "classifier"),  # the extra is compressed and checked too
    "palettize": ("--quantize", "palettize", "--palettize-mode", "uniform", "--palettize-bits", "6"),
    "range": ("--seq-len", "8-48", "--precision", "fp32"),
    "enumerated-ios18-int8": ("--seq-len", "16,32,48", "--min-target", "iOS18", "--quantize", "int8"),
}


def _manifest(bundle):
    return json.loads((bundle / "manifest.json").read_text())


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_variant_exports_and_passes_its_checks(variant):
    m = _manifest(exported(*VARIANTS[variant]))
    failed = [r for r in m["checks"]["results"] if not r["ok"]]
    assert not failed, failed
    ops = {r["name"]: r for r in m["checks"]["results"] if r["name"].startswith("program.ops.")}
    programs = {"encoder", *({"classifier"} & set(m["models"]))}
    assert set(ops) == {f"program.ops.{p}" for p in programs}
    if "int8" in variant:
        assert m["quantize"] == {"mode": "int8"}
        assert any(t.startswith("constexpr_") for t in ops["program.ops.encoder"]["figures"]["op_types"])
    weights = next(r for r in m["checks"]["results"] if r["name"] == "weights.encoder")
    if m["quantize"]["mode"] != "none":
        assert 0 < weights["figures"]["max_relative_error_compressed"] <= 0.25


def test_range_lengths_in_the_manifest():
    m = _manifest(exported(*VARIANTS["range"]))
    assert m["sequence_length"] == {"kind": "range", "default": 48, "max": 48, "min": 8}
    ids = m["models"]["encoder"]["inputs"][0]
    assert ids["shape"] == [1, 48] and ids["shape_range"] == [[1, 1], [8, 48]]


def test_enumerated_lengths_in_the_manifest():
    m = _manifest(exported(*VARIANTS["enumerated-ios18-int8"]))
    assert m["sequence_length"]["lengths"] == [16, 32, 48]
    assert sorted(m["models"]["encoder"]["inputs"][0]["enumerated_shapes"]) == [[1, 16], [1, 32], [1, 48]]


def test_compressed_bundle_is_smaller():
    from mlx_edge.fileio import disk_bytes

    plain = disk_bytes(exported("--precision", "fp16") / "Encoder.mlpackage")
    int8 = disk_bytes(exported(*VARIANTS["int8"]) / "Encoder.mlpackage")
    assert int8 < plain


def test_adam_head():
    m = _manifest(
        exported(
            "--precision",
            "fp32",
            "--head-optimizer",
            "adam",
            "--head-learning-rate",
            "0.01",
            "--head-batch-size",
            "4",
            "--head-epochs",
            "30",
        )
    )
    head = m["models"]["head"]
    assert head["optimizer"]["type"] == "adam"
    assert head["optimizer"]["learning_rate"]["default"] == pytest.approx(0.01)
    assert head["optimizer"]["mini_batch_size"]["default"] == 4 and head["epochs"]["default"] == 30
    update = next(r for r in m["checks"]["results"] if r["name"] == "head.update")
    assert update["ok"], update
