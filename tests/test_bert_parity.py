"""MLX BERT vs transformers BERT: logits, every hidden state, every attention map (fp32, 1e-4)."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest
import torch
from transformers import BertForSequenceClassification as HFBert

from mlx_edge.models.bert import BertConfig, BertForSequenceClassification, sanitize
from tests.helpers.tiny import tiny_bert_config

TOL = 1e-4


def _pair(seed: int, **overrides):
    torch.manual_seed(seed)
    hf_config = tiny_bert_config(vocab_size=101, **overrides)
    hf = HFBert(hf_config).eval()
    weights = sanitize({k: mx.array(v.numpy()) for k, v in hf.state_dict().items()})
    ours = BertForSequenceClassification(BertConfig.from_dict(hf_config.to_dict()))
    ours.load_weights(list(weights.items()), strict=True)
    ours.eval()
    return hf, ours


def _padded_batch(seed: int, batch: int = 4, length: int = 13):
    rng = np.random.default_rng(seed)
    ids = rng.integers(5, 101, size=(batch, length)).astype(np.int32)
    mask = np.ones_like(ids)
    for row, keep in enumerate(rng.integers(2, length + 1, size=batch)):
        mask[row, keep:] = 0
        ids[row, keep:] = 0
    mask[0] = 1  # one full row
    types = (rng.random(ids.shape) > 0.5).astype(np.int32) * mask
    return ids, mask, types


CONFIGS = [
    dict(),
    dict(num_hidden_layers=3, num_attention_heads=2, hidden_act="gelu_new"),
    dict(hidden_size=48, num_attention_heads=6, intermediate_size=64, hidden_act="relu", layer_norm_eps=1e-5),
    dict(num_hidden_layers=1, hidden_act="gelu_pytorch_tanh"),
]


@pytest.mark.parametrize("overrides", CONFIGS, ids=lambda o: o.get("hidden_act", "gelu") + f"-{len(o)}")
@pytest.mark.parametrize("seed", [0, 1])
def test_logits_hidden_states_attentions_match(overrides, seed):
    hf, ours = _pair(seed, **overrides)
    ids, mask, types = _padded_batch(seed)
    with torch.no_grad():
        ref = hf(
            input_ids=torch.tensor(ids, dtype=torch.long),
            attention_mask=torch.tensor(mask),
            token_type_ids=torch.tensor(types, dtype=torch.long),
            output_hidden_states=True,
            output_attentions=True,
        )
    out = ours(mx.array(ids), mx.array(mask), mx.array(types), output_hidden_states=True, output_attentions=True)
    np.testing.assert_allclose(np.array(out.logits), ref.logits.numpy(), atol=TOL, rtol=0)
    assert len(out.hidden_states) == len(ref.hidden_states) == ours.config.num_hidden_layers + 1
    for mine, theirs in zip(out.hidden_states, ref.hidden_states):
        np.testing.assert_allclose(np.array(mine), theirs.numpy(), atol=TOL, rtol=0)
    assert len(out.attentions) == len(ref.attentions) == ours.config.num_hidden_layers
    for mine, theirs in zip(out.attentions, ref.attentions):
        np.testing.assert_allclose(np.array(mine), theirs.numpy(), atol=TOL, rtol=0)
        # padded keys get no attention at all
        padded_keys = np.broadcast_to(mask[:, None, None, :] == 0, mine.shape)
        assert np.all(np.array(mine)[padded_keys] == 0)


def test_fast_attention_path_matches_explicit_path():
    """Without output_attentions the fused SDPA kernel runs; it must agree with the explicit one."""
    _, ours = _pair(3)
    ids, mask, _ = _padded_batch(3)
    fast = ours(mx.array(ids), mx.array(mask))
    explicit = ours(mx.array(ids), mx.array(mask), output_attentions=True)
    np.testing.assert_allclose(np.array(fast.logits), np.array(explicit.logits), atol=TOL, rtol=0)


def test_padding_does_not_change_real_tokens():
    _, ours = _pair(4)
    ids, mask, _ = _padded_batch(4, batch=1, length=9)
    padded_ids = np.concatenate([ids, np.zeros((1, 7), np.int32)], axis=1)
    padded_mask = np.concatenate([mask, np.zeros((1, 7), np.int32)], axis=1)
    short = ours(mx.array(ids), mx.array(mask)).logits
    long = ours(mx.array(padded_ids), mx.array(padded_mask)).logits
    np.testing.assert_allclose(np.array(short), np.array(long), atol=TOL, rtol=0)


def test_dropout_only_in_training_mode():
    _, ours = _pair(5, hidden_dropout_prob=0.5, attention_probs_dropout_prob=0.5)
    ids, mask, _ = _padded_batch(5)
    ours.train()
    a = np.array(ours(mx.array(ids), mx.array(mask)).logits)
    b = np.array(ours(mx.array(ids), mx.array(mask)).logits)
    ours.eval()
    c = np.array(ours(mx.array(ids), mx.array(mask)).logits)
    d = np.array(ours(mx.array(ids), mx.array(mask)).logits)
    assert not np.allclose(a, b)
    np.testing.assert_array_equal(c, d)
