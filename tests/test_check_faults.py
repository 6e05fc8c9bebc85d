"""Each deliberate fault in a bundle is caught by `mlx-edge check` and named.

A random tiny student stands in for a distilled one until distill lands (see tests/helpers/exports.py).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from mlx_edge.cli import main
from mlx_edge.errors import CHECK_FAILED
from tests.helpers.exports import copy_bundle, exported, tiny_student


@pytest.fixture()
def bundle(tmp_path):
    return copy_bundle(exported("--precision", "fp32"), tmp_path / "bundle")


@pytest.fixture()
def extras_bundle(tmp_path):
    return copy_bundle(exported("--precision", "fp32", "--extras", "classifier,onnx"), tmp_path / "extras")


def _check(bundle) -> dict:
    result = CliRunner().invoke(main, ["check", str(bundle), "--n-texts", "4", "--json"])
    assert result.exit_code == CHECK_FAILED, result.output
    report = json.loads(result.output)
    assert not report["ok"]
    return {r["name"]: r for r in report["results"]}


def _failed(results: dict) -> set[str]:
    return {name for name, r in results.items() if not r["ok"]}


def test_flipped_weight_in_the_mlpackage(extras_bundle):
    bundle = extras_bundle  # with Classifier.mlpackage, which must stay unblamed
    from bridges.torch_mirror import read_student_weights

    # Flip the sign of one layer's FFN weights inside weight.bin (stored as raw fp32 in an fp32 program).
    target = read_student_weights(tiny_student())["bert.encoder.layer.0.intermediate.dense.weight"]
    blob = bundle / "Encoder.mlpackage/Data/com.apple.CoreML/weights/weight.bin"
    data = bytearray(blob.read_bytes())
    at = bytes(data).find(target.astype(np.float32).tobytes())
    assert at > 0
    data[at : at + target.nbytes] = (-target).astype(np.float32).tobytes()
    blob.write_bytes(bytes(data))

    results = _check(bundle)
    assert {"weights.encoder", "parity.encoder.program", "files.sha256"} <= _failed(results)
    assert (
        "bert_encoder_layer_0_intermediate_dense_weight differs from the student's "
        "bert.encoder.layer.0.intermediate.dense.weight" in results["weights.encoder"]["detail"]
    )
    assert "weight.bin: sha256 differs" in results["files.sha256"]["detail"]
    assert results["parity.encoder.program"]["figures"]["max_abs_diff"] > 1e-3
    assert results["parity.classifier.program"]["ok"]  # the other program is untouched


@pytest.mark.parametrize(
    "file", ["model.onnx", "Head.mlmodel", "Encoder.mlpackage/Data/com.apple.CoreML/model.mlmodel"]
)
def test_truncated_file(request, file):
    bundle = request.getfixturevalue("extras_bundle" if file == "model.onnx" else "bundle")
    path = bundle / file
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    results = _check(bundle)
    assert f"{file}: {len(data) // 2} bytes, manifest says {len(data)} (truncated" in results["files.sha256"]["detail"]
    model = {"model.onnx": "onnx", "Head.mlmodel": "head"}.get(file, "encoder")
    named = {n for n in _failed(results) if model in n}  # and the model itself is reported unreadable
    assert named & {f"io.{model}", f"load.{model}", "onnx.checker"}, _failed(results)


def test_manifest_shape_that_lies(bundle):
    path = bundle / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["models"]["encoder"]["inputs"][0]["shape"] = [1, 64]
    path.write_text(json.dumps(manifest))
    results = _check(bundle)
    assert _failed(results) == {"io.encoder"}
    assert "input_ids: shape [1, 32] in the model, [1, 64] in the manifest" in results["io.encoder"]["detail"]


def test_head_loss_wired_to_the_wrong_layer(bundle):
    import coremltools as ct

    from bridges.coreml_head import load_head_spec

    spec = load_head_spec(bundle / "Head.mlmodel")
    spec.neuralNetwork.updateParams.lossLayers[0].categoricalCrossEntropyLossLayer.input = "logits"
    ct.utils.save_spec(spec, str(bundle / "Head.mlmodel"))
    results = _check(bundle)
    assert "head.loss" in _failed(results)
    detail = results["head.loss"]["detail"]
    assert "loss input 'logits' comes from layer 'classifier' (innerProduct), not a softmax" in detail


def test_head_that_is_not_updatable(bundle):
    import coremltools as ct

    from bridges.coreml_head import load_head_spec

    spec = load_head_spec(bundle / "Head.mlmodel")
    spec.isUpdatable = False
    spec.neuralNetwork.layers[0].isUpdatable = False
    ct.utils.save_spec(spec, str(bundle / "Head.mlmodel"))
    results = _check(bundle)
    assert "isUpdatable is false" in results["head.updatable"]["detail"]


def _move_student_away(bundle, tmp_path) -> dict:
    path = bundle / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["student"]["path"] = str(tmp_path / "moved-away")
    path.write_text(json.dumps(manifest))
    result = CliRunner().invoke(main, ["check", str(bundle), "--n-texts", "4", "--json"])
    assert result.exit_code == 0, result.output
    results = {r["name"]: r for r in json.loads(result.output)["results"]}
    assert results["student"]["skipped"] and "weights.encoder" not in results
    return results


def test_check_without_the_student_uses_onnx(extras_bundle, tmp_path):
    results = _move_student_away(extras_bundle, tmp_path)
    assert results["parity.encoder.program"]["figures"]["reference"] == "onnx"
    assert results["parity.classifier.program"]["figures"]["reference"] == "onnx"


def test_check_without_the_student_or_onnx_says_what_it_could_not_compare(bundle, tmp_path):
    results = _move_student_away(bundle, tmp_path)
    assert "parity.encoder.program" not in results
    assert results["parity.reference"]["skipped"] and "--extras onnx" in results["parity.reference"]["detail"]
    assert results["parity.head"]["ok"] and not results["parity.head"]["skipped"]  # the head vs the program
    assert all(r["ok"] for name, r in results.items() if name.startswith("extreme."))


@pytest.mark.parametrize("extra, file", [("onnx", "model.onnx"), ("classifier", "Classifier.mlpackage")])
def test_an_extra_the_manifest_names_must_be_there(extras_bundle, extra, file):
    import shutil

    path = extras_bundle / file
    shutil.rmtree(path) if path.is_dir() else path.unlink()
    results = _check(extras_bundle)
    assert f"{file}" in results["files.sha256"]["detail"] and "missing" in results["files.sha256"]["detail"]
    assert f"io.{extra}" in _failed(results)


def test_an_extra_the_manifest_does_not_name_is_reported(bundle, tmp_path):
    (bundle / "model.onnx").write_bytes(b"not listed")
    results = _check(bundle)
    assert _failed(results) == {"files.sha256"}
    assert "model.onnx: not in the manifest" in results["files.sha256"]["detail"]


def test_a_check_that_fails_by_a_numpy_comparison_is_counted_and_printed_as_json():
    from bridges.checks import CheckResult
    from mlx_edge.bundle.verify import CheckReport

    # weights.encoder's verdict is `error <= tolerance` of NumPy floats: a numpy.bool_, not a bool
    failed = CheckResult("weights.encoder", np.float32(0.5) <= np.float32(0.01), "relative error 0.5")
    report = CheckReport(
        "b", [failed, CheckResult("labels", np.True_), CheckResult("coreml.predict", True, skipped=True)]
    )
    counts = {key: report.to_dict()[key] for key in ("ok", "passed", "failed", "skipped")}
    assert counts == {"ok": False, "passed": 1, "failed": 1, "skipped": 1}
    assert all(type(v) in (bool, int) for v in counts.values())
    assert json.loads(json.dumps(report.to_dict()))["results"][0]["ok"] is False
