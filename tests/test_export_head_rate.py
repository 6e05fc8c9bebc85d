"""The updatable head's default learning rate: 0.5 over the top eigenvalue of the second moment of the
student's embeddings on the check texts.

A random tiny student (tests/helpers/exports.py) exported by the real CLI; the eigenvalue is recomputed
from the MLX student, not from the export's PyTorch mirror that set it."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.helpers.exports import N_TEXTS, SEQ_LEN, exported, tiny_student


def _mlx_top_eigenvalue(student, texts: list[str]) -> float:
    import mlx.core as mx

    from mlx_edge.models.checkpoint import load_model
    from mlx_edge.models.tokenizer import load_tokenizer

    model = load_model(student, require_head=True)
    model.eval()
    tokenizer = load_tokenizer(student)
    pooled = []
    for ids in tokenizer.encode_batch(texts, max_length=int(SEQ_LEN)):
        row = mx.array(np.asarray(ids, np.int32))[None]
        pooled.append(np.array(model(row, mx.ones(row.shape, dtype=mx.int32)).pooled[0], np.float64))
    x = np.stack(pooled)
    return float(np.linalg.eigvalsh(x.T @ x / len(x))[-1])


def test_the_default_rate_follows_the_embeddings_scale():
    """The manifest says what the rate came from, the rate baked into Head.mlmodel is 0.5 over the top
    eigenvalue of E[x x^T] of the MLX student's pooled embeddings on the same check texts, and `check`
    passed."""
    from bridges.coreml_head import describe_head, load_head_spec
    from mlx_edge.bundle.verify import default_texts

    bundle = exported("--precision", "fp32")
    manifest = json.loads((bundle / "manifest.json").read_text())
    head = manifest["models"]["head"]
    top = _mlx_top_eigenvalue(tiny_student(), default_texts(int(N_TEXTS)))
    assert head["learning_rate_from"]["top_eigenvalue"] == pytest.approx(top, rel=1e-3)
    assert head["learning_rate_from"]["texts"] == int(N_TEXTS)
    expected = min(1.0, 0.5 / top)
    assert head["optimizer"]["learning_rate"]["default"] == pytest.approx(expected, rel=1e-3)
    spec = describe_head(load_head_spec(bundle / "Head.mlmodel"))
    assert spec["optimizer"]["learning_rate"]["default"] == pytest.approx(expected, rel=1e-3)
    assert next(r for r in manifest["checks"]["results"] if r["name"] == "head.update")["ok"]


def test_a_given_rate_is_baked_as_given():
    manifest = json.loads(
        (exported("--precision", "fp32", "--head-learning-rate", "0.2") / "manifest.json").read_text()
    )
    head = manifest["models"]["head"]
    assert head["optimizer"]["learning_rate"]["default"] == pytest.approx(0.2)
    assert "learning_rate_from" not in head
