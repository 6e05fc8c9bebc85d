"""`[distill] select`: which epoch a student keeps. On a dev split of a few dozen rows (the pipeline's
10% of 100 or 300 labels) the best-on-dev epoch is whichever one the noise favours: a 100-row run kept
epoch 2 of 10 because 12 dev rows were all right then. `auto` keeps the last epoch below
metrics.SMALL_DEV dev rows, the best on dev above it or when --patience stops on dev gains."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from mlx_edge.cli import main
from mlx_edge.distill.api import distill
from mlx_edge.distill.config import LoopConfig, with_select
from mlx_edge.errors import DistillError
from mlx_edge.metrics import SMALL_DEV
from tests.helpers.cli import assert_one_line_error

MICRO = {"num_hidden_layers": 1, "hidden_size": 16, "num_attention_heads": 2, "intermediate_size": 24}


def test_auto_keeps_the_last_epoch_on_a_small_dev_split_and_the_best_on_a_large_one():
    loop = LoopConfig()
    assert loop.select == "auto"  # the library default is the CLI's and the pipeline's
    assert with_select(loop, 30).select == "last"
    assert with_select(loop, SMALL_DEV - 1).select == "last"
    assert with_select(loop, SMALL_DEV).select == "best"
    assert with_select(LoopConfig(patience=2), 30).select == "best"  # early stopping is judged on dev
    assert with_select(LoopConfig(select="best"), 30).select == "best"
    assert with_select(LoopConfig(select="last"), 10**6).select == "last"


def test_last_with_patience_and_an_unknown_select_are_refused():
    with pytest.raises(DistillError, match="--patience") as caught:
        LoopConfig(select="last", patience=2)
    assert "--select best" in caught.value.hint
    with pytest.raises(DistillError, match="'lastt' is not auto, best or last"):
        LoopConfig(select="lastt")


def test_the_cli_refuses_last_with_patience_before_writing(trained_teacher, toy_data, tmp_path):
    train, dev = toy_data
    out = tmp_path / "student"
    result = CliRunner().invoke(
        main,
        ["distill", "--teacher", str(trained_teacher), "--train", str(train), "--dev", str(dev),
         "--out", str(out), "--select", "last", "--patience", "2", "--quiet"],
    )  # fmt: skip
    assert_one_line_error(result, "--patience", "--select last")
    assert not out.exists() and not list(tmp_path.glob(".student*"))


def _history(out):
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def test_the_student_kept_is_the_last_epoch_or_the_best_on_dev(trained_teacher, toy_data, tmp_path):
    """Two runs that differ only in select see the same epochs (same seed); each keeps the epoch it
    should, and the student written scores on dev what that epoch scored."""
    train, dev = toy_data  # a 60-row dev file: auto means last
    config = tmp_path / "micro.json"
    config.write_text(json.dumps(MICRO))
    common = dict(teacher=trained_teacher, train=train, dev=dev, student=str(config), measure_speed=False)
    loop = dict(epochs=4, batch_size=16, learning_rate=3e-3, seed=5)
    last = distill(out=tmp_path / "auto", loop=LoopConfig(**loop), progress=False, **common)
    best = distill(out=tmp_path / "best", loop=LoopConfig(**loop, select="best"), progress=False, **common)
    history = _history(tmp_path / "auto")
    assert [e["dev_accuracy"] for e in history] == [e["dev_accuracy"] for e in _history(tmp_path / "best")]
    assert len(history) == 4

    assert last.kept == "last" and last.best_epoch == last.epochs_run == 4
    assert last.student_dev_accuracy == pytest.approx(history[-1]["dev_accuracy"])
    top = max(history, key=lambda e: (e["dev_accuracy"], e["dev_macro_f1"]))
    assert best.kept == "best" and best.best_epoch == top["epoch"]
    assert best.student_dev_accuracy == pytest.approx(top["dev_accuracy"])
    report = json.loads((tmp_path / "auto" / "report.json").read_text())
    assert report["kept"] == "last"
