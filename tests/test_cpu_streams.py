"""A forward pass split over CPU streams gives the same outputs as one pass over the whole batch."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

from mlx_edge.models.bert import BertConfig, BertForSequenceClassification
from mlx_edge.runtime.cpu_streams import row_bounds, sharded_forward


def test_row_bounds_are_contiguous_and_near_equal():
    assert row_bounds(32, 2) == [0, 16, 32]
    assert row_bounds(5, 3) == [0, 1, 3, 5]
    assert row_bounds(2, 8) == [0, 1, 2]  # never an empty shard
    assert row_bounds(7, 1) == [0, 7]


@pytest.mark.parametrize("shards", [2, 3])
def test_sharded_forward_equals_one_forward(shards):
    config = BertConfig(
        vocab_size=60,
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=24,
        max_position_embeddings=32,
        hidden_act="gelu_new",
        id2label={0: "a", 1: "b", 2: "c"},
    )
    mx.random.seed(1)
    model = BertForSequenceClassification(config)
    model.eval()
    rng = np.random.default_rng(0)
    lengths = [9, 4, 9, 6, 2]
    ids = mx.array(rng.integers(1, 60, size=(5, 9)).astype(np.int32))
    mask = mx.array((np.arange(9)[None] < np.array(lengths)[:, None]).astype(np.int32))
    whole = model(ids, mask, output_hidden_states=True, output_attentions=True)
    split = sharded_forward(model, ids, mask, shards, output_hidden_states=True, output_attentions=True)
    np.testing.assert_allclose(np.array(split.logits), np.array(whole.logits), atol=1e-6)
    np.testing.assert_allclose(np.array(split.pooled), np.array(whole.pooled), atol=1e-6)
    assert len(split.hidden_states) == 3 and len(split.attentions) == 2
    for a, b in zip(split.hidden_states + split.attentions, whole.hidden_states + whole.attentions):
        assert a.shape == b.shape
        np.testing.assert_allclose(np.array(a), np.array(b), atol=1e-6)
    plain = sharded_forward(model, ids, mask, shards)
    assert plain.hidden_states is None and plain.attentions is None
    np.testing.assert_allclose(np.array(plain.logits), np.array(whole.logits), atol=1e-5)
