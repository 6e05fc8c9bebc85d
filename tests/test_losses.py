"""Every distillation loss against an independent reference (PyTorch or plain NumPy)."""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from mlx_edge.distill import losses

RNG = np.random.default_rng(0)


def mask_of(lengths, width):
    return (np.arange(width)[None] < np.array(lengths)[:, None]).astype(np.int32)


@pytest.mark.parametrize("temperature", [1.0, 2.0, 4.0])
def test_soft_target_kl_matches_torch_kl_div_times_t_squared(temperature):
    s, t = RNG.normal(size=(5, 6)).astype(np.float32), RNG.normal(size=(5, 6)).astype(np.float32) * 3
    ours = losses.soft_target_kl(mx.array(s), mx.array(t), temperature).item()
    ref = (
        F.kl_div(
            F.log_softmax(torch.tensor(s) / temperature, -1),
            F.softmax(torch.tensor(t) / temperature, -1),
            reduction="batchmean",
        ).item()
        * temperature**2
    )
    assert ours == pytest.approx(ref, rel=1e-5, abs=1e-6)
    assert losses.soft_target_kl(mx.array(t), mx.array(t), temperature).item() == pytest.approx(0.0, abs=1e-6)


def test_hard_label_ce_matches_torch():
    s, y = RNG.normal(size=(7, 4)).astype(np.float32), RNG.integers(0, 4, size=7)
    ours = losses.hard_label_ce(mx.array(s), mx.array(y)).item()
    assert ours == pytest.approx(F.cross_entropy(torch.tensor(s), torch.tensor(y)).item(), rel=1e-5)


def test_hidden_mse_counts_only_real_tokens_and_projects():
    B, L, Hs, Ht = 3, 6, 4, 8
    s, t = RNG.normal(size=(B, L, Hs)).astype(np.float32), RNG.normal(size=(B, L, Ht)).astype(np.float32)
    mask = mask_of([6, 3, 1], L)
    proj = nn.Linear(Hs, Ht)
    w, b = np.array(proj.weight), np.array(proj.bias)
    projected = s @ w.T + b
    ref = sum(((projected[i, :n] - t[i, :n]) ** 2).sum() for i, n in enumerate([6, 3, 1])) / (10 * Ht)
    ours = losses.hidden_mse(mx.array(s), mx.array(t.astype(np.float16)), mx.array(mask), proj).item()
    np.testing.assert_allclose(ours, ref, rtol=2e-3)  # teacher states arrive in fp16 from a cache
    same = RNG.normal(size=(B, L, Hs)).astype(np.float32)
    garbage = same.copy()
    garbage[1, 3:] = 1e3  # padding must not count
    assert losses.hidden_mse(mx.array(same), mx.array(garbage), mx.array(mask)).item() == 0.0


def softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def attention_pair(B, heads_s, heads_t, L, lengths):
    mask = mask_of(lengths, L)
    add = np.where(mask[:, None, None, :] == 1, 0.0, -1e9)
    s = softmax(RNG.normal(size=(B, heads_s, L, L)) + add).astype(np.float32)
    t = softmax(RNG.normal(size=(B, heads_t, L, L)) * 2 + add).astype(np.float32)
    return s, t, mask


def test_attention_mse_over_real_query_key_pairs():
    lengths = [5, 2]
    s, t, mask = attention_pair(2, 3, 3, 5, lengths)
    total, count = 0.0, 0
    for i, n in enumerate(lengths):
        total += ((s[i, :, :n, :n] - t[i, :, :n, :n]) ** 2).sum()
        count += 3 * n * n
    np.testing.assert_allclose(
        losses.attention_mse(mx.array(s), mx.array(t), mx.array(mask)).item(), total / count, rtol=1e-5
    )


def test_attention_kl_per_query_row():
    lengths = [4, 3]
    s, t, mask = attention_pair(2, 2, 2, 4, lengths)
    rows = []
    for i, n in enumerate(lengths):
        for h in range(2):
            for q in range(n):
                p, r = t[i, h, q, :n], s[i, h, q, :n]
                rows.append((p * (np.log(p + 1e-8) - np.log(r + 1e-8))).sum())
    np.testing.assert_allclose(
        losses.attention_kl(mx.array(s), mx.array(t), mx.array(mask)).item(), np.mean(rows), rtol=1e-4
    )


def test_attention_with_different_head_counts_compares_head_means():
    lengths = [3, 3]
    s, t, mask = attention_pair(2, 2, 4, 3, lengths)
    ref = ((s.mean(1) - t.mean(1)) ** 2).mean()
    np.testing.assert_allclose(losses.attention_mse(mx.array(s), mx.array(t), mx.array(mask)).item(), ref, rtol=1e-5)


def test_loss_terms_in_the_training_step_use_the_right_tensors():
    """make_loss wires each term to the right student output, including the embedding term (layer 0)."""
    from mlx_edge.distill.config import TERMS, LoopConfig, Schedule
    from mlx_edge.distill.step import Trainable, make_loss
    from mlx_edge.models.bert import BertConfig, BertForSequenceClassification

    config = BertConfig(
        vocab_size=50,
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=24,
        max_position_embeddings=32,
        id2label={0: "a", 1: "b", 2: "c"},
    )
    student = BertForSequenceClassification(config)
    student.eval()
    trainable = Trainable(student, teacher_width=24, with_hidden=True, with_embedding=True)
    ids = RNG.integers(1, 50, size=(2, 7)).astype(np.int32)
    mask = mask_of([7, 4], 7)
    teacher = {
        "logits": RNG.normal(size=(2, 3)).astype(np.float32),
        "hidden": [RNG.normal(size=(2, 7, 24)).astype(np.float32) for _ in range(2)],
        "attention": [attention_pair(2, 4, 4, 7, [7, 4])[1] for _ in range(2)],
        "embedding": RNG.normal(size=(2, 7, 24)).astype(np.float32),
    }
    batch = {
        "input_ids": mx.array(ids),
        "mask": mx.array(mask),
        "labels": mx.array([0, 2]),
        "logits": mx.array(teacher["logits"]),
        "hidden": [mx.array(x) for x in teacher["hidden"]],
        "attention": [mx.array(x) for x in teacher["attention"]],
        "embedding": mx.array(teacher["embedding"]),
    }
    loop = LoopConfig(temperature=3.0, weights={k: Schedule(1.0) for k in TERMS})
    total, terms = make_loss(loop, {0: 1, 1: 3}, set(TERMS))(trainable, batch, mx.ones(len(TERMS)))
    out = student(mx.array(ids), mx.array(mask), output_hidden_states=True, output_attentions=True)
    m = mx.array(mask)
    expected = [
        losses.soft_target_kl(out.logits, batch["logits"], 3.0),
        losses.hard_label_ce(out.logits, batch["labels"]),
        (
            losses.hidden_mse(out.hidden_states[1], batch["hidden"][0], m, trainable.hidden_proj)
            + losses.hidden_mse(out.hidden_states[2], batch["hidden"][1], m, trainable.hidden_proj)
        )
        / 2,
        (
            losses.attention_mse(out.attentions[0], batch["attention"][0], m)
            + losses.attention_mse(out.attentions[1], batch["attention"][1], m)
        )
        / 2,
        losses.hidden_mse(out.hidden_states[0], batch["embedding"], m, trainable.embedding_proj),
    ]
    np.testing.assert_allclose(np.array(terms), np.array(mx.stack(expected)), rtol=1e-5)
    assert total.item() == pytest.approx(float(np.array(terms).sum()), rel=1e-5)
    assert all(v > 0 for v in np.array(terms))


def test_term_shares_follow_rows_tokens_and_pairs():
    from mlx_edge.distill.config import TERMS
    from mlx_edge.distill.step import term_shares

    mask = mask_of([4, 2, 3], 4)  # shard 0 = rows 0-1, shard 1 = row 2
    shares = dict(zip(TERMS, term_shares(mask, [0, 2, 3], "mse").T))
    np.testing.assert_allclose(shares["kd"], [2 / 3, 1 / 3], rtol=1e-6)
    np.testing.assert_allclose(shares["hidden"], [6 / 9, 3 / 9], rtol=1e-6)  # real tokens
    np.testing.assert_allclose(shares["attention"], [20 / 29, 9 / 29], rtol=1e-6)  # real pairs: 16 + 4 | 9
    np.testing.assert_allclose(
        dict(zip(TERMS, term_shares(mask, [0, 2, 3], "kl").T))["attention"], [6 / 9, 3 / 9], rtol=1e-6
    )  # KL averages over real queries


# labels: all gold; or transfer-set rows (-1) among them, with a shard of no gold row at 3 shards
@pytest.mark.parametrize("labels", [[0, 2, 1, 1, 0], [-1, 2, -1, -1, 0]])
@pytest.mark.parametrize("attention_loss", ["mse", "kl"])
@pytest.mark.parametrize("shards", [2, 3])
def test_a_batch_split_over_cpu_streams_gives_the_whole_batch_terms_and_gradients(attention_loss, shards, labels):
    """The sharded step (one CPU stream a shard, terms weighted by share) equals the unsharded one."""
    from mlx.utils import tree_flatten, tree_map

    from mlx_edge.distill.config import TERMS, LoopConfig, Schedule
    from mlx_edge.distill.step import Trainable, make_loss, split_batch
    from mlx_edge.models.bert import BertConfig, BertForSequenceClassification
    from mlx_edge.runtime.cpu_streams import cpu_streams

    config = BertConfig(
        vocab_size=50,
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=24,
        max_position_embeddings=32,
        id2label={0: "a", 1: "b", 2: "c"},
    )
    mx.random.seed(5)
    student = BertForSequenceClassification(config)
    student.eval()  # no dropout: the two ways must see the same network
    trainable = Trainable(student, teacher_width=24, with_hidden=True, with_embedding=True)
    lengths = [9, 3, 7, 5, 9]
    ids = RNG.integers(1, 50, size=(5, 9)).astype(np.int32)
    mask = mask_of(lengths, 9)
    batch = {
        "input_ids": mx.array(ids),
        "mask": mx.array(mask),
        "labels": mx.array(labels),
        "logits": mx.array(RNG.normal(size=(5, 3)).astype(np.float32)),
        "hidden": [mx.array(RNG.normal(size=(5, 9, 24)).astype(np.float32)) for _ in range(2)],
        "attention": [mx.array(attention_pair(5, 2, 2, 9, lengths)[1]) for _ in range(2)],
        "embedding": mx.array(RNG.normal(size=(5, 9, 24)).astype(np.float32)),
    }
    loop = LoopConfig(temperature=2.0, weights={k: Schedule(1.0) for k in TERMS}, attention_loss=attention_loss)
    w = mx.array([1.0, 0.5, 2.0, 3.0, 0.25])
    loss_and_grad = nn.value_and_grad(trainable, make_loss(loop, {0: 0, 1: 1}, set(TERMS)))
    (whole_loss, whole_terms), whole_grads = loss_and_grad(trainable, batch, w)

    parts = split_batch(batch, mask, shards, attention_loss)
    assert [p["input_ids"].shape[0] for p in parts] == ([2, 3] if shards == 2 else [1, 2, 2])
    loss, terms, grads = None, None, None
    for stream, part in zip(cpu_streams(shards), parts):
        with mx.stream(stream):
            (l, t), g = loss_and_grad(trainable, part, w)
        loss, terms = (l, t) if loss is None else (loss + l, terms + t)
        grads = g if grads is None else tree_map(mx.add, grads, g)
    np.testing.assert_allclose(np.array(terms), np.array(whole_terms), rtol=2e-5)
    assert loss.item() == pytest.approx(whole_loss.item(), rel=2e-5)
    flat, whole_flat = dict(tree_flatten(grads)), dict(tree_flatten(whole_grads))
    assert flat.keys() == whole_flat.keys()
    for name, g in whole_flat.items():
        np.testing.assert_allclose(np.array(flat[name]), np.array(g), rtol=1e-4, atol=1e-6, err_msg=name)


def test_cross_entropy_skips_rows_without_a_gold_label():
    """A transfer-set row (NO_LABEL) adds nothing to the CE term: the mean is over gold rows only, and a
    batch of none gives 0 (not NaN)."""
    from mlx_edge.distill.losses import hard_label_ce
    from mlx_edge.transfer import NO_LABEL

    logits = RNG.normal(size=(4, 3)).astype(np.float32)
    labels = np.array([2, NO_LABEL, 0, NO_LABEL], np.int32)
    gold = labels >= 0
    log_p = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    expected = -log_p[gold, labels[gold]].mean()
    assert hard_label_ce(mx.array(logits), mx.array(labels)).item() == pytest.approx(expected, rel=1e-5)
    assert hard_label_ce(mx.array(logits), mx.array(np.full(4, NO_LABEL, np.int32))).item() == 0.0


def test_ce_shares_count_gold_rows_only():
    from mlx_edge.distill.config import TERMS
    from mlx_edge.distill.step import term_shares

    mask = mask_of([4, 2, 3], 4)
    shares = dict(zip(TERMS, term_shares(mask, [0, 2, 3], "mse", np.array([False, True, True])).T))
    np.testing.assert_allclose(shares["ce"], [1 / 2, 1 / 2], rtol=1e-6)
    np.testing.assert_allclose(shares["kd"], [2 / 3, 1 / 3], rtol=1e-6)  # the teacher's terms: every row
    none = dict(zip(TERMS, term_shares(mask, [0, 2, 3], "mse", np.zeros(3, bool)).T))
    np.testing.assert_array_equal(none["ce"], [0.0, 0.0])
