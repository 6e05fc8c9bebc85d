"""`mlx-edge export` end to end on a tiny student, then `mlx-edge check` on what it wrote.

A random tiny student stands in for a distilled one until distill lands (see tests/helpers/exports.py).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from mlx_edge.cli import main
from tests.helpers.exports import SEQ_LEN, exported, tiny_student

# What the app loads, and nothing else: the classifier and the ONNX model are extras (--extras).
EXPECTED_FILES = {
    "Encoder.mlpackage",
    "Head.mlmodel",
    "manifest.json",
    "vocab.txt",
    "tokenizer.json",
    "tokenizer_config.json",
}
EXTRA_FILES = {"Classifier.mlpackage", "model.onnx"}


@pytest.fixture(scope="module")
def fp32_bundle():
    return exported("--precision", "fp32")


@pytest.fixture(scope="module")
def fp16_bundle():
    return exported("--precision", "fp16")


@pytest.fixture(scope="module")
def extras_bundle():
    return exported("--precision", "fp32", "--extras", "classifier,onnx")


def _manifest(bundle):
    return json.loads((bundle / "manifest.json").read_text())


def _result(manifest_or_report, name):
    results = (
        manifest_or_report["checks"]["results"] if "checks" in manifest_or_report else manifest_or_report["results"]
    )
    return next(r for r in results if r["name"] == name)


def test_bundle_holds_what_the_app_loads_once(fp32_bundle):
    names = {p.name for p in fp32_bundle.iterdir()}
    assert names == EXPECTED_FILES, names
    assert set(_manifest(fp32_bundle)["models"]) == {"encoder", "head"}
    assert not any(n.endswith(".partial") for n in (p.name for p in fp32_bundle.parent.iterdir()))


def test_extras_are_written_described_and_checked(extras_bundle, fp32_bundle):
    from mlx_edge.fileio import disk_bytes

    assert {p.name for p in extras_bundle.iterdir()} == EXPECTED_FILES | EXTRA_FILES
    m = _manifest(extras_bundle)
    assert list(m["models"]) == ["encoder", "head", "classifier", "onnx"]
    assert m["models"]["classifier"]["outputs"][0]["name"] == "probabilities"
    assert m["models"]["onnx"]["opset"] >= 13
    passed = {r["name"] for r in m["checks"]["results"] if r["ok"] and not r["skipped"]}
    assert {"weights.classifier", "onnx.checker", "parity.onnx"} <= passed
    assert {"parity.classifier.program", "program.ops.classifier"} <= passed
    report = CliRunner().invoke(main, ["check", str(extras_bundle), "--n-texts", "4", "--json"])
    assert report.exit_code == 0, report.output
    assert {"io.classifier", "io.onnx", "weights.classifier", "onnx.checker"} <= {
        r["name"] for r in json.loads(report.output)["results"] if r["ok"] and not r["skipped"]
    }
    # the lean bundle is the extras bundle less the two extras, to the byte
    assert disk_bytes(extras_bundle) - disk_bytes(fp32_bundle) == sum(
        disk_bytes(extras_bundle / n) for n in EXTRA_FILES
    ) + ((extras_bundle / "manifest.json").stat().st_size - (fp32_bundle / "manifest.json").stat().st_size)


def test_unknown_extra_is_a_usage_error(tmp_path):
    result = CliRunner().invoke(
        main, ["export", str(tiny_student()), "--out", str(tmp_path / "b"), "--extras", "onnx,tflite"]
    )
    assert result.exit_code == 2 and "'tflite' is not an extra: use classifier, onnx" in result.output
    assert not (tmp_path / "b").exists()


def test_manifest_is_the_swift_contract(fp32_bundle):
    from mlx_edge.bundle.layout import manifest_problems

    m = _manifest(fp32_bundle)
    assert manifest_problems(m) == []
    assert m["labels"] == ["finance", "health", "life", "study", "travel", "work"]
    assert m["max_length"] == int(SEQ_LEN) and m["sequence_length"]["kind"] == "fixed"
    enc = m["models"]["encoder"]
    assert enc["inputs"] == [
        {"name": "input_ids", "shape": [1, 32], "dtype": "int32"},
        {"name": "attention_mask", "shape": [1, 32], "dtype": "int32"},
    ]
    assert {o["name"]: o["shape"] for o in enc["outputs"]} == {"embedding": [1, 32], "logits": [1, 6]}
    assert all(o["dtype"] == "float32" for o in enc["outputs"])
    head = m["models"]["head"]
    assert head["embedding_input"] == "embedding" and head["label_input"] == "probs_true"
    assert head["training_inputs"] == [
        {"name": "embedding", "shape": [32], "dtype": "float32"},
        {"name": "probs_true", "shape": [1], "dtype": "int32"},
    ]
    assert head["loss"] == {"type": "categorical_cross_entropy", "input": "probs", "target": "probs_true"}
    assert head["optimizer"]["type"] == "sgd" and head["epochs"]["default"] == 20
    assert m["tokenizer"]["do_lower_case"] is True and m["tokenizer"]["pad_id"] == 0
    assert {"coremltools", "torch", "mlx", "onnx", "onnxruntime", "numpy"} <= set(m["versions"])
    assert "Encoder.mlpackage/Data/com.apple.CoreML/weights/weight.bin" in m["files"]
    assert m["checks"]["passed"] is True
    json.loads((fp32_bundle / "manifest.json").read_text(), parse_constant=lambda c: pytest.fail(c))  # strict JSON


def test_metadata_in_the_models(fp32_bundle):
    from bridges.coreml_export import load_spec

    spec = load_spec(fp32_bundle / "Encoder.mlpackage")
    meta = spec.description.metadata
    assert meta.author == "mlx-edge" and meta.versionString == "1.0"
    assert json.loads(meta.userDefined["mlx_edge.labels"]) == _manifest(fp32_bundle)["labels"]
    described = {f.name: f.shortDescription for f in spec.description.input}
    assert "Token ids" in described["input_ids"]
    assert all(f.shortDescription for f in spec.description.output)


@pytest.mark.parametrize("precision, tolerance", [("fp32", 1e-3), ("fp16", 2e-2)])
def test_program_parity_figures(precision, tolerance, fp32_bundle, fp16_bundle):
    m = _manifest(fp32_bundle if precision == "fp32" else fp16_bundle)
    r = _result(m, "parity.encoder.program")
    assert r["ok"] and r["figures"]["tolerance"] == tolerance and r["figures"]["max_abs_diff"] <= tolerance
    assert _result(m, "parity.mirror_vs_mlx")["figures"]["max_abs_diff"] <= 1e-4
    head = _result(m, "parity.head")  # Head.mlmodel on the program's embedding vs the program's own logits
    assert head["ok"] and head["figures"]["reference"] == "program"


def test_check_passes_on_the_export(fp32_bundle):
    result = CliRunner().invoke(main, ["check", str(fp32_bundle), "--n-texts", "8"])
    assert result.exit_code == 0, result.output
    assert "0 failed" in result.output
    for name in (
        "files.sha256",
        "io.encoder",
        "io.head",
        "weights.encoder",
        "parity.encoder.program",
        "extreme.all_padding",
        "extreme.emoji_mixed_scripts",
        "head.loss",
        "head.update",
    ):
        assert name in result.output


def test_check_json_report_fp16(fp16_bundle):
    result = CliRunner().invoke(main, ["check", str(fp16_bundle), "--n-texts", "8", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["ok"] and report["failed"] == 0
    update = _result(report, "head.update")["figures"]
    assert update["loss_after_default_epochs"] < update["loss_before"]
    assert update["epochs_to_flip_all"] is not None
    extremes = [r for r in report["results"] if r["name"].startswith("extreme.")]
    assert len(extremes) == 6 and all(r["ok"] for r in extremes)


def test_head_matches_student_classifier(fp32_bundle):
    from bridges.coreml_head import head_weights, load_head_spec
    from mlx_edge.models.checkpoint import load_model

    w, b = head_weights(load_head_spec(fp32_bundle / "Head.mlmodel"))
    student = load_model(tiny_student())
    np.testing.assert_array_equal(w, np.array(student.classifier.weight))
    np.testing.assert_array_equal(b, np.array(student.classifier.bias))


def test_force_replaces_and_no_force_refuses(tmp_path):
    out = tmp_path / "bundle"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    args = ["export", str(tiny_student()), "--out", str(out), "--seq-len", "16", "--n-texts", "2", "--quiet"]
    refused = CliRunner().invoke(main, args)
    assert refused.exit_code != 0
    assert "already exists" in refused.output and "--force" in refused.output
    assert (out / "keep.txt").read_text() == "mine"
    replaced = CliRunner().invoke(main, args + ["--force", "--precision", "fp32"])
    assert replaced.exit_code == 0, replaced.output
    assert not (out / "keep.txt").exists() and (out / "manifest.json").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bundle"]  # no temporary or old directories left


def test_failed_export_leaves_nothing(tmp_path, monkeypatch):
    import mlx_edge.export
    from mlx_edge.export import export_bundle

    def broken(*args, **kwargs):
        raise RuntimeError("simulated crash while writing model.onnx")

    monkeypatch.setattr(mlx_edge.export, "export_onnx", broken)  # where export looks it up

    with pytest.raises(RuntimeError, match="simulated crash"):
        export_bundle(
            student_dir=tiny_student(),
            out_dir=tmp_path / "bundle",
            seq_len=16,
            n_texts=2,
            extras=("onnx",),
            progress=False,
        )
    assert list(tmp_path.iterdir()) == []


def test_seq_len_defaults_to_the_students_max_length(tmp_path):
    import shutil

    from mlx_edge.manifest import write_manifest

    student = tmp_path / "student"
    shutil.copytree(tiny_student(), student)
    write_manifest(student, "student", max_length=24)
    result = CliRunner().invoke(
        main, ["export", str(student), "--out", str(tmp_path / "b"), "--n-texts", "2", "--quiet", "--precision", "fp32"]
    )
    assert result.exit_code == 0, result.output
    assert "seq-len 24," in result.output and "Encoder.mlpackage" in result.output
    assert _manifest(tmp_path / "b")["models"]["encoder"]["inputs"][0]["shape"] == [1, 24]
