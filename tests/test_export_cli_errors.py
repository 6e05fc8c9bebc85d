"""Mistakes reach the user of `mlx-edge export` / `check` as one clear line, never a traceback."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from mlx_edge.cli import main
from mlx_edge.errors import CHECK_FAILED, BundleError, ExportError, ModelError
from tests.helpers.exports import tiny_student
from tests.helpers.tiny import build_tiny_bert


def _run(*args):
    result = CliRunner().invoke(main, list(args))
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in result.output
    return result


def _one_error_line(result) -> str:
    lines = [line for line in result.output.splitlines() if line.startswith("Error")]
    assert len(lines) == 1, result.output
    return lines[0]


def test_not_a_student_dir(tmp_path):
    result = _run("export", str(tmp_path), "--out", str(tmp_path / "b"), "--quiet")
    assert result.exit_code == ModelError.exit_code
    assert "not a model directory (no config.json)" in _one_error_line(result)
    missing = _run("export", str(tmp_path / "nope"), "--out", str(tmp_path / "b"), "--quiet")
    assert missing.exit_code == ModelError.exit_code and "does not exist" in _one_error_line(missing)


def test_bare_encoder_without_head_is_refused(tmp_path):
    d = build_tiny_bert(tmp_path / "bare")
    from safetensors.numpy import load_file, save_file

    weights = {k: v for k, v in load_file(d / "model.safetensors").items() if not k.startswith("classifier.")}
    save_file(weights, d / "model.safetensors", metadata={"format": "pt"})
    result = _run("export", str(d), "--out", str(tmp_path / "b"), "--quiet", "--seq-len", "16")
    assert result.exit_code == ModelError.exit_code and "no trained classifier head" in _one_error_line(result)


@pytest.mark.parametrize(
    "value, message",
    [
        ("abc", "not a length, a range or a list"),
        ("1", "at least 2"),
        ("64-16", "is empty"),
    ],
)
def test_bad_seq_len(tmp_path, value, message):
    result = _run("export", str(tiny_student()), "--out", str(tmp_path / "b"), "--seq-len", value)
    assert result.exit_code == 2 and "--seq-len" in result.output and message in result.output
    assert not (tmp_path / "b").exists()


def test_seq_len_beyond_the_students_positions(tmp_path):
    result = _run("export", str(tiny_student()), "--out", str(tmp_path / "b"), "--seq-len", "512", "--quiet")
    assert result.exit_code != 0
    assert "max_position_embeddings (64)" in _one_error_line(result)


def test_enumerated_lengths_need_ios18(tmp_path):
    result = _run("export", str(tiny_student()), "--out", str(tmp_path / "b"), "--seq-len", "16,32", "--quiet")
    assert result.exit_code == ExportError.exit_code and "--min-target iOS18" in _one_error_line(result)


def test_check_on_a_non_bundle(tmp_path):
    result = _run("check", str(tmp_path))
    assert result.exit_code == BundleError.exit_code and "no manifest.json" in _one_error_line(result)
    (tmp_path / "manifest.json").write_text("{not json")
    broken = _run("check", str(tmp_path))
    assert broken.exit_code == BundleError.exit_code and "not valid JSON" in _one_error_line(broken)


def test_check_reports_a_manifest_that_breaks_the_schema(tmp_path):
    (tmp_path / "manifest.json").write_text(json.dumps({"models": {}, "format": "other"}))
    result = _run("check", str(tmp_path))
    assert result.exit_code == CHECK_FAILED and "FAIL" in result.output and "manifest.schema" in result.output
