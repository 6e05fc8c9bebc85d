"""Which rows a student is chosen on when no dev file is given (distill/api.py student_rows).

The best epoch is the best on dev. A split of rows the teacher trained on scores every epoch on
sentences both models know, so with no --dev the teacher's own choice is reused. These tests write a
teacher's manifest the way `teacher train` does; no model is needed to pick the rows."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from mlx_edge.data import load_splits, read_labeled
from mlx_edge.distill.api import student_rows
from mlx_edge.errors import MlxEdgeWarning
from mlx_edge.manifest import file_fingerprint, write_manifest
from tests.helpers.tiny import toy_rows, write_jsonl

LABELS = ["finance", "health"]


def _teacher(tmp_path: Path, train: Path, dev: Path | None, fraction: float | None = None, seed: int = 0) -> Path:
    teacher = tmp_path / "teacher"
    teacher.mkdir()
    data = {"train": file_fingerprint(train), "dev": file_fingerprint(dev) if dev else None}
    write_manifest(teacher, "teacher", data=data | {"dev_fraction": fraction, "seed": seed})
    return teacher


def _rows(teacher, train, dev=None, fraction=0.1, seed=0):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rows = student_rows(teacher, train, dev, LABELS, fraction, seed)
    said = [str(w.message) for w in caught if issubclass(w.category, MlxEdgeWarning)]
    return rows, [m for m in said if "dev rows" in m]  # the toy files' repeated rows warn too


@pytest.fixture
def files(tmp_path):
    return write_jsonl(tmp_path / "train.jsonl", toy_rows(80, 0)), write_jsonl(tmp_path / "dev.jsonl", toy_rows(20, 1))


def test_no_dev_takes_the_teachers_dev_file_and_trains_on_every_row(tmp_path, files):
    train, dev = files
    rows, said = _rows(_teacher(tmp_path, train, dev), train)
    assert rows.dev_path == dev and rows.split is None
    assert rows.dev.texts == read_labeled(dev).texts
    assert len(rows.train.texts) == 80  # nothing held out of the training file
    assert "the teacher's dev file" in rows.dev_source and not said


def test_no_dev_takes_the_teachers_split_of_the_same_training_file(tmp_path, files):
    train, _ = files
    teacher_train, teacher_dev, _ = load_splits(train, None, dev_fraction=0.25, seed=7)  # what teacher train held out
    rows, said = _rows(_teacher(tmp_path, train, None, fraction=0.25, seed=7), train, fraction=0.1, seed=0)
    assert rows.dev.texts == teacher_dev.texts and rows.train.texts == teacher_train.texts
    assert rows.split == (0.25, 7) and rows.dev_path is None
    assert "the teacher's split" in rows.dev_source and not said


def test_a_changed_dev_file_falls_back_to_a_split_and_says_the_teacher_knows_those_rows(tmp_path, files):
    train, dev = files
    teacher = _teacher(tmp_path, train, dev)
    write_jsonl(dev, toy_rows(20, 2))  # not the rows the teacher was chosen on any more
    rows, said = _rows(teacher, train, fraction=0.2, seed=3)
    assert rows.dev_path is None and rows.split == (0.2, 3)
    assert len(rows.dev.texts) == 16 and len(rows.train.texts) == 64
    assert len(said) == 1 and "which the teacher trained on" in said[0] and "--dev" in said[0]


def test_another_training_file_is_split_as_asked_without_a_warning(tmp_path, files):
    train, dev = files
    teacher = _teacher(tmp_path, train, None, fraction=0.25, seed=7)  # its split is of another file
    other = write_jsonl(tmp_path / "more.jsonl", toy_rows(40, 5))
    rows, said = _rows(teacher, other, fraction=0.5, seed=1)
    assert rows.split == (0.5, 1) and len(rows.dev.texts) == 20 and not said


def test_a_dev_file_given_wins_over_the_teachers(tmp_path, files):
    train, dev = files
    mine = write_jsonl(tmp_path / "mine.jsonl", toy_rows(10, 9))
    rows, _ = _rows(_teacher(tmp_path, train, dev), train, dev=mine)
    assert rows.dev_path == mine and rows.dev.texts == read_labeled(mine).texts
    assert rows.dev_source == str(mine)


def test_a_teacher_without_a_manifest_splits_as_asked(tmp_path, files):
    train, _ = files
    bare = tmp_path / "bare"
    bare.mkdir()
    rows, said = _rows(bare, train, fraction=0.25, seed=0)
    assert rows.split == (0.25, 0) and len(rows.dev.texts) == 20 and not said
