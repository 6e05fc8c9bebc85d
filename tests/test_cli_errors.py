"""Every bad input named in the foundation issue gets one clear line and a non-zero exit, no traceback."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from click.testing import CliRunner

from mlx_edge.cli import main
from mlx_edge.errors import DataError
from tests.helpers.cli import assert_one_line_error


def run_cli(*args):
    result = CliRunner().invoke(main, [str(a) for a in args])
    return result


def test_missing_file(tmp_path):
    assert_one_line_error(run_cli("data", tmp_path / "nope.csv"), "nope.csv does not exist")


def test_empty_file(tmp_path):
    (tmp_path / "empty.csv").write_text("")
    assert_one_line_error(run_cli("data", tmp_path / "empty.csv"), "empty.csv is empty")
    (tmp_path / "header.csv").write_text("text,label\n")
    assert_one_line_error(run_cli("data", tmp_path / "header.csv"), "header.csv is empty")


def test_unknown_column_lists_the_columns_found(tmp_path):
    (tmp_path / "a.csv").write_text("body,tag\nhello,a\nworld,b\n")
    assert_one_line_error(
        run_cli("data", tmp_path / "a.csv", "--text-column", "text"), "no column 'text'", "columns found: body, tag"
    )
    (tmp_path / "b.csv").write_text("body,text\nhello,a\nworld,b\n")
    assert_one_line_error(run_cli("data", tmp_path / "b.csv"), "which column is the label", "columns found: body, text")


def test_one_class_only(tmp_path):
    (tmp_path / "a.jsonl").write_text("".join(json.dumps({"text": f"t{i}", "label": "work"}) + "\n" for i in range(5)))
    assert_one_line_error(run_cli("data", tmp_path / "a.jsonl"), "one class only", "'work'", "at least two labels")


def test_dev_label_not_seen_in_training(tmp_path):
    (tmp_path / "train.csv").write_text("text,label\na,work\nb,life\n")
    (tmp_path / "dev.csv").write_text("text,label\nc,work\nd,travel\ne,space\n")
    assert_one_line_error(
        run_cli("data", tmp_path / "train.csv", "--dev", tmp_path / "dev.csv"),
        "not seen in training: space, travel",
        "training labels are: life, work",
    )


def test_not_utf8_names_the_line(tmp_path):
    good = "text,label\n买菜,life\n"
    (tmp_path / "gbk.csv").write_bytes(good.encode("utf-8") + "交房租,finance\n".encode("gbk"))
    line = assert_one_line_error(run_cli("data", tmp_path / "gbk.csv"), "line 3 is not UTF-8", "iconv")
    assert "gbk.csv" in line


BACKENDS = pytest.mark.parametrize("backend", ["mlx", "onnx"])


@BACKENDS
def test_config_that_is_not_bert_like(tmp_path, backend):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": 64}))
    result = run_cli("predict", tmp_path, "hello", "--backend", backend)
    assert_one_line_error(result, "not a BERT-like encoder", "'llama'")


@BACKENDS
def test_directory_that_is_not_a_model(tmp_path, backend):
    result = run_cli("predict", tmp_path, "hello", "--backend", backend)
    assert_one_line_error(result, "not a model directory (no config.json)")


@BACKENDS
def test_bare_encoder_cannot_predict(minilm_dir, backend, tmp_path, monkeypatch):
    monkeypatch.setenv("MLX_EDGE_CACHE", str(tmp_path))
    assert_one_line_error(run_cli("predict", minilm_dir, "hello", "--backend", backend), "no trained classifier head")
    assert not (tmp_path / "onnx").exists()  # refused before any export


def test_exit_code_and_stderr_from_a_real_process(tmp_path):
    """Outside CliRunner: the installed entry point exits non-zero with the message on stderr."""
    proc = subprocess.run(
        [sys.executable, "-m", "mlx_edge", "data", str(tmp_path / "missing.tsv")], capture_output=True, text=True
    )
    assert proc.returncode == DataError.exit_code
    assert proc.stderr.strip().splitlines() == [
        f"Error: data file {tmp_path / 'missing.tsv'} does not exist (check the path)"
    ]
    assert proc.stdout == ""


def test_ctrl_c_exits_130_with_one_line_about_resuming(monkeypatch, tmp_path):
    import mlx_edge.data
    from mlx_edge.errors import INTERRUPTED

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(mlx_edge.data, "load_splits", interrupted)  # `data` looks it up when it runs
    (tmp_path / "t.tsv").write_text("a b\tx\nc d\ty\n")
    result = CliRunner().invoke(main, ["data", str(tmp_path / "t.tsv")])
    assert result.exit_code == INTERRUPTED == 130
    assert "Traceback" not in result.output and "run the same command again" in result.output
