"""Factorized word embeddings (`distill --embedding-size`): the frequency-weighted split of a table and
the split of a distilled student's own table when it is continued.

The weighted SVD must put its k directions where the weighted rows are (tested on a table whose
frequent rows lie in a k-dimensional subspace and whose rare rows are noise); a continued student's
rows and projection must be that split of its own trained table. The tiny teacher and data come
from conftest.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from mlx_edge.cli import main
from mlx_edge.distill.factorize import low_rank, piece_weights
from mlx_edge.models.checkpoint import read_float_weights
from mlx_edge.models.tokenizer import load_tokenizer
from tests.helpers.cli import assert_one_line_error

WORDS = "bert.embeddings.word_embeddings.weight"
PROJECTION = "bert.embeddings.projection"


def _error(table, approx, rows) -> float:
    return float(np.square(table[rows] - approx[rows]).sum())


def test_the_weighted_split_keeps_the_frequent_rows_directions():
    rng = np.random.default_rng(0)
    frequent = rng.normal(size=(40, 4)) @ rng.normal(size=(4, 24))  # rank 4
    rare = 3.0 * rng.normal(size=(400, 24))  # full rank, larger: it owns the plain SVD's directions
    table = np.concatenate([frequent, rare])
    weights = np.concatenate([np.full(40, 1000.0), np.ones(400)])
    plain = np.add(*(lambda r, w, b: (r @ w.T, b))(*low_rank(table, 4)))
    weighted = np.add(*(lambda r, w, b: (r @ w.T, b))(*low_rank(table, 4, weights)))
    head = np.arange(40)
    assert _error(table, weighted, head) < 1e-3 * _error(table, plain, head)
    # over the weighted sum of squared errors the weighted split is the better one (it is the optimum)
    weighted_total = float((weights[:, None] * np.square(table - weighted)).sum())
    plain_total = float((weights[:, None] * np.square(table - plain)).sum())
    assert weighted_total < plain_total
    # equal weights: the plain split, exact at the table's rank around its mean
    exact = rng.normal(size=(30, 3)) @ rng.normal(size=(3, 16)) + rng.normal(size=16)
    rows, w, b = low_rank(exact, 3, np.full(30, 7.0))
    np.testing.assert_allclose(rows @ w.T + b, exact, atol=1e-5)
    gram = w.T @ w  # orthogonal columns, scaled so that the rows' columns span one range
    np.testing.assert_allclose(gram, np.diag(np.diag(gram)), atol=1e-5)
    np.testing.assert_allclose(np.abs(rows).max(axis=0), np.abs(rows).max(), rtol=1e-5)


def test_bad_row_weights_are_refused():
    table = np.ones((5, 4))
    for bad in (np.ones(4), np.array([1, 1, 0, 1, 1.0]), np.array([1, 1, np.nan, 1, 1])):
        with pytest.raises(ValueError, match="5 positive numbers"):
            low_rank(table, 2, bad)


def test_piece_weights_count_each_piece_once_per_occurrence_plus_one():
    ids = [np.array([0, 2, 2, 5]), np.array([2, 1])]
    np.testing.assert_array_equal(piece_weights(ids, 7), [2, 2, 4, 1, 1, 2, 1])


def _distill(teacher, train, out, *options):
    args = ["distill", "--teacher", str(teacher), "--train", str(train[0]), "--dev", str(train[1]), "--out", str(out)]
    return CliRunner().invoke(main, [*args, "--quiet", "--batch-size", "16", *options])


def test_a_distilled_student_is_split_by_its_training_datas_piece_counts(trained_teacher, toy_data, tmp_path):
    full = tmp_path / "full"
    config = tmp_path / "student.json"
    config.write_text(json.dumps({"num_hidden_layers": 1, "hidden_size": 32, "num_attention_heads": 4,
                                  "intermediate_size": 64}))  # fmt: skip
    made = _distill(
        trained_teacher, toy_data, full, "--student", str(config), "--epochs", "1", "--learning-rate", "2e-3"
    )
    assert made.exit_code == 0, made.output
    # an lr this small leaves the split as it was made: rows @ projection + bias is the weighted split
    split = _distill(trained_teacher, toy_data, tmp_path / "f8", "--student", str(full), "--embedding-size", "8",
                     "--epochs", "1", "--learning-rate", "1e-12", "--seed", "3")  # fmt: skip
    assert split.exit_code == 0, split.output
    saved = json.loads((tmp_path / "f8" / "config.json").read_text())
    assert saved["embedding_size"] == 8 and saved["hidden_size"] == 32
    weights = read_float_weights(tmp_path / "f8")
    assert weights[WORDS].shape[1] == 8
    table = np.array(read_float_weights(full)[WORDS])
    from mlx_edge.data import read_labeled

    tokenizer = load_tokenizer(full)
    ids = [np.asarray(x) for x in tokenizer.encode_batch(read_labeled(toy_data[0]).texts, max_length=128)]
    rows, w, b = low_rank(table, 8, piece_weights(ids, len(table)))
    got = np.array(weights[WORDS]) @ np.array(weights[f"{PROJECTION}.weight"]).T + np.array(
        weights[f"{PROJECTION}.bias"]
    )
    np.testing.assert_allclose(got, rows @ w.T + b, atol=1e-4)
    # the other weights are the source's
    np.testing.assert_allclose(
        np.array(weights["classifier.weight"]), np.array(read_float_weights(full)["classifier.weight"]), atol=1e-6
    )
    # mistakes: one line each
    again = ["--student", str(tmp_path / "f8"), "--embedding-size", "4", "--epochs", "1"]
    assert_one_line_error(
        _distill(trained_teacher, toy_data, tmp_path / "x", *again), "already factorized to embedding width 8"
    )
    assert_one_line_error(
        _distill(trained_teacher, toy_data, tmp_path / "y", "--student", str(full), "--embedding-size", "32"),
        "embedding_size 32 is not below hidden_size 32",
    )
    assert_one_line_error(
        _distill(trained_teacher, toy_data, tmp_path / "z", "--student", "static", "--embedding-size", "8"),
        "--embedding-size does not apply to a static student",
    )


def test_a_distilled_student_can_be_split_and_quantized_in_one_run(trained_teacher, toy_data, tmp_path):
    config = tmp_path / "student.json"
    config.write_text(json.dumps({"num_hidden_layers": 1, "hidden_size": 64, "num_attention_heads": 4,
                                  "intermediate_size": 64}))  # fmt: skip
    full = tmp_path / "full"
    made = _distill(
        trained_teacher, toy_data, full, "--student", str(config), "--epochs", "1", "--learning-rate", "2e-3"
    )
    assert made.exit_code == 0, made.output
    options = ["--student", str(full), "--embedding-size", "32", "--quantize", "int8", "--block-size", "32"]
    done = _distill(trained_teacher, toy_data, tmp_path / "q", *options, "--epochs", "1", "--learning-rate", "1e-5")
    assert done.exit_code == 0, done.output
    saved = json.loads((tmp_path / "q" / "config.json").read_text())
    assert saved["embedding_size"] == 32
    assert saved["quantization"] == {"bits": 8, "group_size": 32, "mode": "affine"}
    # a quantized student's table cannot be split (its codes are not a float table): one line
    options = ["--student", str(full), "--quantize", "int8", "--block-size", "32"]
    options += ["--epochs", "1", "--learning-rate", "1e-5"]
    assert _distill(trained_teacher, toy_data, tmp_path / "q2", *options).exit_code == 0
    again = ["--student", str(tmp_path / "q2"), "--embedding-size", "16", "--quantize", "int8", "--epochs", "1"]
    assert_one_line_error(
        _distill(trained_teacher, toy_data, tmp_path / "r", *again), "is quantized: its table cannot be split"
    )
