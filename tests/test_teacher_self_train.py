"""The teacher's self-training: a first fit labels the unlabeled text, a second learns its surest answers too.

Real tiny BERTs (tests/helpers/tiny.py) fine-tuned on the toy set; nothing is mocked."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers.tiny import toy_rows

from mlx_edge.errors import ConfigError
from mlx_edge.manifest import MANIFEST_NAME
from mlx_edge.teacher import self_train


def test_the_surer_half_of_each_label_is_kept_in_text_order():
    """Label 0 is predicted for texts a-d (top probabilities .9 .6 .8 .7): a and c are kept; label 1 for e
    alone: one row is always kept, so a label the first fit rarely answers still has one."""
    texts = ["a", "b", "c", "d", "e"]
    p = np.array([[0.9, 0.1], [0.6, 0.4], [0.8, 0.2], [0.7, 0.3], [0.45, 0.55]])
    rows = self_train.pseudo_rows(texts, p, ["finance", "health"])
    assert rows.texts == ["a", "c", "e"]
    assert rows.labels == ["finance", "finance", "health"]


def test_when_self_training_applies():
    assert self_train.applies("auto", self_train.SELF_TRAIN_BELOW - 1, True)
    assert not self_train.applies("auto", self_train.SELF_TRAIN_BELOW, True)
    assert self_train.applies("yes", 5000, True)
    assert not self_train.applies("yes", 10, False)  # no unlabeled text: nothing to learn from
    assert not self_train.applies("no", 10, True)
    assert self_train.sample(["x", "y", "z"], 0, limit=5) == ["x", "y", "z"]
    picked = self_train.sample([str(i) for i in range(100)], 0, limit=10)
    assert len(picked) == 10 and picked == sorted(picked, key=int)  # a sample, in file order


def _train(base_dir, train, out, **settings):
    from mlx_edge.teacher.train import train_teacher

    lines = []
    kwargs = dict(epochs=2, min_steps=0, learning_rate=1e-3, batch_size=16, head="probe", select="last") | settings
    result = train_teacher(model=str(base_dir), train=train, out=out, progress=False, on_epoch=lines.append, **kwargs)
    return result, lines


@pytest.mark.parametrize("backend", ["torch", "mlx"])
def test_the_second_fit_learns_the_first_fits_surest_answers(base_dir, toy_data, tmp_path, backend):
    """240 toy rows (a 24-row dev split) and 120 unlabeled toy texts, some of them equal to a training or dev
    text and two given as held out (test texts): those are never pseudo-labeled. The first fit is the plain
    fit (the same dev figures epoch by epoch); the second trains on about half of the remaining texts
    besides, so its weights differ; its own dev figures are the teacher's; the first fit's folder is gone."""
    from safetensors.numpy import load_file

    from mlx_edge.data import load_splits

    train, _ = toy_data
    unlabeled_texts = [r["text"] for r in toy_rows(120, 7)]
    unlabeled = tmp_path / "notes.txt"
    unlabeled.write_text("\n".join(unlabeled_texts) + "\n", encoding="utf-8")
    tr, dv, _ = load_splits(train, None, dev_fraction=0.1, seed=0)
    fresh = list(dict.fromkeys(t for t in unlabeled_texts if t not in set(tr.texts) | set(dv.texts)))
    held_out = fresh[:2]
    pool = len(fresh) - 2
    assert pool > 20  # the toy texts are varied enough for the test to mean something

    plain, plain_lines = _train(base_dir, train, tmp_path / "plain", backend=backend, self_train="no")
    out = tmp_path / "t"
    result, lines = _train(
        base_dir, train, out, backend=backend, self_train="yes", unlabeled=[unlabeled], held_out_texts=held_out
    )
    first = [m for m in lines if not m.get("self_train")]
    second = [m for m in lines if m.get("self_train")]
    assert [m["dev_accuracy"] for m in first] == pytest.approx([m["dev_accuracy"] for m in plain_lines], abs=1e-9)
    assert [m["epoch"] for m in second] == [0, 1, 2]
    assert result.dev_accuracy == second[-1]["dev_accuracy"]
    record = json.loads((out / MANIFEST_NAME).read_text())["self_train"]
    assert record["unlabeled_texts"] == pool
    assert result.self_trained == record["pseudo_labeled"]
    assert abs(record["pseudo_labeled"] - pool / 2) <= 1  # half of each label's, rounded per label (2 labels)
    assert record["first_fit"]["dev_accuracy"] == first[-1]["dev_accuracy"]
    a, b = load_file(str(tmp_path / "plain" / "model.safetensors")), load_file(str(out / "model.safetensors"))
    assert any(not np.allclose(a[k], b[k]) for k in a if "encoder.layer" in k)
    assert not list(tmp_path.glob(".t.first-fit")) and not list(tmp_path.glob(".*partial"))


def test_auto_leaves_a_teacher_of_enough_rows_alone(base_dir, toy_data, tmp_path, monkeypatch):
    """216 training rows, at least SELF_TRAIN_BELOW (lowered to 100 here: the toy set is small): `auto`
    trains once and the unlabeled file is unused."""
    monkeypatch.setattr(self_train, "SELF_TRAIN_BELOW", 100)
    train, _ = toy_data
    unlabeled = tmp_path / "notes.txt"
    unlabeled.write_text("\n".join(r["text"] for r in toy_rows(40, 7)) + "\n", encoding="utf-8")
    result, lines = _train(base_dir, train, tmp_path / "t", unlabeled=[unlabeled], epochs=1)
    assert result.self_trained == 0 and not any(m.get("self_train") for m in lines)
    assert "self_train" not in json.loads((tmp_path / "t" / MANIFEST_NAME).read_text())


def test_self_training_needs_text_and_no_refit(base_dir, toy_data, tmp_path):
    train, _ = toy_data
    unlabeled = tmp_path / "notes.txt"
    unlabeled.write_text("pay the bill\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="self_train and refit"):
        _train(base_dir, train, tmp_path / "t", unlabeled=[unlabeled], self_train="yes", refit="yes")
    with pytest.raises(ConfigError, match="needs unlabeled text"):
        _train(base_dir, train, tmp_path / "t", self_train="yes")
    assert not (tmp_path / "t").exists()


def test_the_cli_self_trains_and_says_so(base_dir, toy_data, tmp_path):
    """`teacher train --unlabeled F --self-train yes` says how many pseudo-labeled texts it learned; an
    empty unlabeled file is one error line and nothing written."""
    from click.testing import CliRunner

    from mlx_edge.cli import main

    train, _ = toy_data
    notes = tmp_path / "notes.txt"
    notes.write_text("\n".join(r["text"] for r in toy_rows(60, 9)) + "\n", encoding="utf-8")
    common = ["teacher", "train", "--model", str(base_dir), "--train", str(train), "--epochs", "1", "--min-steps", "0"]
    result = CliRunner().invoke(
        main, [*common, "--unlabeled", str(notes), "--self-train", "yes", "--out", str(tmp_path / "t")]
    )
    assert result.exit_code == 0, result.output
    record = json.loads((tmp_path / "t" / MANIFEST_NAME).read_text())["self_train"]
    assert f"self-trained with {record['pseudo_labeled']} pseudo-labeled texts" in result.output
    empty = tmp_path / "empty.txt"
    empty.write_text("\n", encoding="utf-8")
    result = CliRunner().invoke(
        main, [*common, "--unlabeled", str(empty), "--self-train", "yes", "--out", str(tmp_path / "u")]
    )
    assert result.exit_code != 0 and "has no text" in result.output
    assert not (tmp_path / "u").exists()
