"""Block-wise quantized exports (`--quantize int8-block|int4-block --block-size N`, iOS 18): every
layer compressed with one scale per block, the program run by the NumPy MIL interpreter against the
student within the mode's stated tolerances, a corrupted quantized weight caught by `check`, and a
block size or target that cannot work refused before any conversion.

The "wide" random student (hidden 64, FFN 128, tests/helpers/exports.py) has every linear weight
above coremltools' compression threshold, so the layers are compressed, not only the embeddings.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from click.testing import CliRunner

from bridges.checks import TOLERANCES
from mlx_edge.cli import main
from mlx_edge.errors import CHECK_FAILED, ExportError
from mlx_edge.fileio import sha256_file
from tests.helpers.cli import assert_one_line_error
from tests.helpers.exports import copy_bundle, exported, tiny_student

pytestmark = pytest.mark.slow  # each mode is a full export of its own

IOS18 = ("--min-target", "iOS18")
WEIGHT_BLOB = "Encoder.mlpackage/Data/com.apple.CoreML/weights/weight.bin"


def _bundle(mode: str, *extra: str):
    return exported("--quantize", mode, *IOS18, *extra, student="wide")


def _manifest(bundle) -> dict:
    return json.loads((bundle / "manifest.json").read_text())


def _results(manifest_or_report) -> dict:
    results = (
        manifest_or_report["checks"]["results"] if "checks" in manifest_or_report else manifest_or_report["results"]
    )
    return {r["name"]: r for r in results}


@pytest.mark.parametrize("mode, bits", [("int8-block", 8), ("int4-block", 4)])
def test_block_mode_exports_and_passes_its_stated_tolerances(mode, bits):
    m = _manifest(_bundle(mode))
    assert m["quantize"] == {
        "mode": mode,
        "bits": bits,
        "block_size": 32,
        "block_sizes": {"hidden": 32, "intermediate": 32},  # the wide student: 64 and 128 inputs
    }
    assert m["minimum_deployment_target"] == "iOS18"
    results = _results(m)
    assert all(r["ok"] for r in results.values()), [r for r in results.values() if not r["ok"]]
    assert "constexpr_blockwise_shift_scale" in results["program.ops.encoder"]["figures"]["op_types"]
    parity = results["parity.encoder.program"]["figures"]
    assert parity["compared"] == ["probabilities"] and parity["tolerance"] == TOLERANCES[f"probs_{mode}"]
    assert parity["min_top1_agreement"] == TOLERANCES[f"top1_{mode}"] <= parity["top1_agreement_decided"]
    weights = results["weights.encoder"]["figures"]
    assert 0 < weights["max_relative_error_compressed"] <= TOLERANCES[f"weights_{mode}"]


@pytest.mark.parametrize("mode", ["int8-block", "int4-block"])
def test_check_verifies_the_block_bundle_on_linux(mode):
    result = CliRunner().invoke(main, ["check", str(_bundle(mode)), "--n-texts", "8", "--json"])
    assert result.exit_code == 0, result.output
    results = _results(json.loads(result.output))
    # an iOS 18 program casts the ids to int16 and wraps negative ones before its embedding lookup
    vocab = results["tokenizer.vocabulary"]
    tokens = len((_bundle(mode) / "vocab.txt").read_text(encoding="utf-8").splitlines())
    assert vocab["ok"] and not vocab["skipped"] and f"{tokens} tokens, the encoder's embedding rows" in vocab["detail"]
    assert results["parity.encoder.program"]["figures"]["tolerance"] == TOLERANCES[f"probs_{mode}"]
    assert results["weights.encoder"]["ok"] and results["extreme.emoji_mixed_scripts"]["ok"]


def test_every_layer_is_compressed_block_by_block():
    from bridges.mil_numpy import load_program

    program = load_program(_bundle("int4-block") / "Encoder.mlpackage")
    ops = [o for o in program.functions["main"].operations if o.op_type.startswith("constexpr_")]
    names = {o.outputs[0].name.removesuffix("_to_fp16_quantized") for o in ops}
    # 2 layers x (q, k, v, attention out, FFN in, FFN out) and the word embeddings; the pooler stays
    # float (KEEP_FLOAT); the position table is sliced to the 32 positions used: 32 x 64 = 2048
    # elements, not above the threshold
    assert len(ops) == 2 * 6 + 1 and all(o.op_type == "constexpr_blockwise_shift_scale" for o in ops)
    assert {"bert_encoder_layer_1_output_dense_weight", "bert_embeddings_word_embeddings_weight"} <= names
    assert "bert_pooler_dense_weight" not in names
    consts = {o.outputs[0].name for o in program.functions["main"].operations if o.op_type == "const"}
    assert "bert_pooler_dense_weight_to_fp16" in consts  # there, in fp16, as the student has it
    for op in ops:
        data, scale = op.data.val, op.scale.val
        assert data.shape[1] // scale.shape[1] == 32 and scale.shape[0] == data.shape[0]  # [1, 32] blocks
        assert -8 <= data.min() and data.max() <= 7  # int4


def test_the_extra_classifier_is_compressed_and_checked_too():
    results = _results(_manifest(_bundle("int8-block", "--extras", "classifier")))
    assert results["parity.classifier.program"]["ok"] and results["weights.classifier"]["ok"]
    assert results["parity.classifier.program"]["figures"]["min_top1_agreement"] == TOLERANCES["top1_int8-block"]


def test_sizes_shrink_with_the_bits():
    from mlx_edge.fileio import disk_bytes

    sizes = {mode: disk_bytes(exported(*IOS18, "--quantize", mode, student="wide")) for mode in ("none", "int4-block")}
    sizes["int8-block"] = disk_bytes(_bundle("int8-block"))
    assert sizes["int4-block"] < sizes["int8-block"] < sizes["none"]


def _flip(blob, values: np.ndarray, replacement: np.ndarray) -> None:
    data = bytearray(blob.read_bytes())
    at = bytes(data).find(values.tobytes())
    assert at > 0
    data[at : at + values.nbytes] = replacement.tobytes()
    blob.write_bytes(bytes(data))


@pytest.mark.parametrize("mode, part", [("int8-block", "data"), ("int4-block", "scale")])
def test_a_corrupted_quantized_weight_is_caught(mode, part, tmp_path):
    from bridges.mil_numpy import load_program

    bundle = copy_bundle(_bundle(mode), tmp_path / "bundle")
    program = load_program(bundle / "Encoder.mlpackage")
    op = next(
        o
        for o in program.functions["main"].operations
        if o.op_type == "constexpr_blockwise_shift_scale"
        and o.outputs[0].name.startswith("bert_encoder_layer_0_intermediate_dense_weight")
    )
    # int8 data is stored as it is; int4 data is packed, so its fp16 scales are changed instead
    values = np.asarray(op.data.val if part == "data" else op.scale.val)
    _flip(bundle / WEIGHT_BLOB, values, -values)
    path = bundle / "manifest.json"  # reseal, as someone covering the edit would: the numbers must tell
    manifest = json.loads(path.read_text())
    blob = bundle / WEIGHT_BLOB
    manifest["files"][WEIGHT_BLOB] = {"sha256": sha256_file(blob), "bytes": blob.stat().st_size}
    path.write_text(json.dumps(manifest))

    result = CliRunner().invoke(main, ["check", str(bundle), "--n-texts", "8", "--json"])
    assert result.exit_code == CHECK_FAILED, result.output
    results = _results(json.loads(result.output))
    failed = {name for name, r in results.items() if not r["ok"]}
    assert "weights.encoder" in failed and "files.sha256" not in failed
    assert (
        "bert_encoder_layer_0_intermediate_dense_weight_to_fp16_quantized: relative error"
        in (results["weights.encoder"]["detail"])
    )


@pytest.mark.parametrize(
    "options, fragments",
    [
        (("--quantize", "int8-block"), ["needs --min-target iOS18", "constexpr_blockwise_shift_scale"]),
        (
            ("--quantize", "int4-block", *IOS18, "--block-size", "32"),
            [
                "--block-size 32 fits the student's weight widths badly",
                "intermediate 47 (largest divisor up to 32: 1)",  # a prime width: a scale per weight
                "use --block-size 48",
            ],
        ),
    ],
    ids=["target", "block-size"],
)
def test_a_block_mode_that_cannot_work_is_refused_before_converting(options, fragments, tmp_path, monkeypatch):
    import mlx_edge.export

    def no_conversion(*args, **kwargs):
        raise AssertionError("converted before refusing")

    monkeypatch.setattr(mlx_edge.export, "load_model", no_conversion)
    student = shutil.copytree(tiny_student(), tmp_path / "student")
    config = json.loads((student / "config.json").read_text())
    (student / "config.json").write_text(json.dumps({**config, "intermediate_size": 47}))
    out = tmp_path / "bundle"
    result = CliRunner().invoke(main, ["export", str(student), "--out", str(out), "--quiet", *options])
    assert result.exit_code == ExportError.exit_code
    assert_one_line_error(result, *fragments)
    assert not out.exists()


def test_the_tiny_student_with_a_block_that_divides_it():
    m = _manifest(exported("--quantize", "int4-block", *IOS18, "--block-size", "16"))
    assert m["quantize"]["block_size"] == 16 and m["checks"]["passed"]


def test_each_weight_takes_the_largest_divisor_of_its_width_up_to_the_block_size():
    """--block-size 24 on widths 32 and 48 (the tiny student): 16 for every 32-wide weight (24 does
    not divide 32), 24 for the 48-wide FFN output, which is under coremltools' 2048-element threshold
    here and stays fp16; the program's scales say so weight by weight, and it passes check."""
    from bridges.mil_numpy import load_program

    bundle = exported("--quantize", "int8-block", *IOS18, "--block-size", "24")
    m = _manifest(bundle)
    assert m["quantize"]["block_sizes"] == {"hidden": 16, "intermediate": 24} and m["checks"]["passed"]
    config = json.loads((tiny_student() / "config.json").read_text())
    program = load_program(bundle / "Encoder.mlpackage")
    blocks = {}
    for op in program.functions["main"].operations:
        if op.op_type == "constexpr_blockwise_shift_scale":
            rows, cols = op.data.val.shape
            assert op.scale.val.shape[0] == rows
            blocks[cols] = cols // op.scale.val.shape[1]
    assert blocks == {config["hidden_size"]: 16} and config["hidden_size"] * config["intermediate_size"] <= 2048
