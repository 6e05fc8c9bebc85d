"""The one MLX inference path (runtime/inference.py): batches over CPU streams give the model's own
logits in input order, the single-sentence path too, and the speed comparison is robust to a load spike."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest
from mlx.utils import tree_flatten

from mlx_edge.models import inference
from mlx_edge.models.bert import BertConfig, BertForSequenceClassification
from mlx_edge.models.inference import BatchForward, Latency, compare_speed, predict_ids


@pytest.fixture(scope="module")
def model():
    config = BertConfig(
        vocab_size=80,
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=24,
        max_position_embeddings=40,
        id2label={0: "a", 1: "b", 2: "c"},
    )
    mx.random.seed(3)
    m = BertForSequenceClassification(config)
    m.eval()
    return m


def _reference(model, ids: list[np.ndarray]) -> np.ndarray:
    """Each text alone, unpadded: what any batching must reproduce."""
    return np.concatenate(
        [np.array(model(mx.array(x[None]), mx.array(np.ones((1, len(x)), np.int32))).logits) for x in ids]
    )


@pytest.mark.parametrize("shards", [1, 2, 3])
def test_predict_ids_gives_each_texts_own_logits_in_input_order(model, shards):
    rng = np.random.default_rng(0)
    ids = [rng.integers(1, 80, size=n).astype(np.int32) for n in (3, 17, 9, 30, 5, 12, 12, 2, 25, 7)]
    logits, labels, seconds = predict_ids(model, ids, pad_id=0, batch_size=4, shards=shards)
    np.testing.assert_allclose(logits, _reference(model, ids), atol=2e-5)
    np.testing.assert_array_equal(labels, logits.argmax(-1))
    assert seconds > 0


def test_batch_forward_splits_over_streams_on_the_cpu_only_when_asked_or_big_enough(model):
    assert BatchForward(model, batch_size=32, shards=2).shards == 2
    assert BatchForward(model, batch_size=1).shards == 1  # one row cannot be split
    settings = BatchForward(model, batch_size=32, shards=2).settings()
    assert settings.shards == 2 and settings.device == "cpu" and not settings.compiled
    assert "2 CPU streams" in settings.describe()


def test_the_single_sentence_path_is_the_compiled_model(model):
    latency = Latency(model)
    x = np.array([[5, 9, 13, 2, 40, 41]], np.int32)
    mask = np.ones_like(x)
    np.testing.assert_allclose(latency(x, mask), _reference(model, [x[0]]), atol=2e-5)
    assert latency.settings().compiled and latency.settings().shards == 1


def test_compare_speed_is_the_median_of_interleaved_pairs(monkeypatch):
    """A fake clock: `fast` costs 1, `slow` 3, and a burst of load makes one pair 40 slower on both
    sides. Best-of timings of each side taken at different moments would give anything; the median
    of interleaved ratios stays 3."""
    clock = {"now": 0.0, "calls": 0}

    def tick(cost):
        def run():
            clock["calls"] += 1
            burst = 40.0 if clock["calls"] in (5, 6) else 0.0  # the second timed pair (after 2 warm-ups)
            clock["now"] += cost + burst

        return run

    monkeypatch.setattr(inference.time, "perf_counter", lambda: clock["now"])
    fast_s, slow_s, ratio = compare_speed(tick(1.0), tick(3.0), pairs=5)
    assert (fast_s, slow_s, ratio) == (1.0, 3.0, 3.0)
    assert clock["calls"] == 2 + 2 * 5  # one warm-up each, then the pairs


@pytest.mark.parametrize("kernels", ["cpu-kernels", "numpy-softmax"])
def test_batch_forward_advances_layer_by_layer_and_gives_the_models_own_outputs(model, kernels, monkeypatch):
    from mlx_edge.models import fastmath

    if kernels == "numpy-softmax":  # where the C++ kernels cannot build, the softmax goes to NumPy
        monkeypatch.setattr(fastmath, "cpu_kernels", lambda: None)
    elif fastmath.cpu_kernels() is None:
        pytest.skip("mlx-edge's C++ kernels are not in use here")
    # fast math is on for MLX's CPU device on Linux (the fixture's model): the path says so
    assert inference.layer_lockstep(model) == model.fast_math
    assert inference.softmax_in_numpy(model) == (model.fast_math and kernels == "numpy-softmax")
    rng = np.random.default_rng(1)
    ids = rng.integers(1, 80, size=(9, 14)).astype(np.int32)
    mask = np.ones_like(ids)
    mask[2:, 10:] = 0  # padded keys: their attention weight must be exactly 0
    outputs = dict(output_hidden_states=True, output_attentions=True)
    for shards in (1, 2):
        got = BatchForward(model, batch_size=9, shards=shards)(ids, mask, **outputs)
        want = model(mx.array(ids), mx.array(mask), **outputs)
        np.testing.assert_allclose(np.array(got.logits), np.array(want.logits), atol=2e-5)
        for g, w in zip(got.hidden_states + got.attentions, want.hidden_states + want.attentions, strict=True):
            np.testing.assert_allclose(np.array(g), np.array(w), atol=2e-5)
        assert np.all(np.array(got.attentions[0])[2:, :, :, 10:] == 0.0)
    described = BatchForward(model, batch_size=9, shards=2).settings().describe()
    assert ("NumPy softmax" in described) == (model.fast_math and kernels == "numpy-softmax")
    assert ("C++ kernels" in described) == (model.fast_math and kernels == "cpu-kernels")


def test_the_staged_forward_yields_each_layers_scores_and_takes_the_probabilities_back(model):
    ids = mx.array(np.arange(1, 13, dtype=np.int32).reshape(2, 6))
    steps = model.steps(ids, softmax_outside=True, output_attentions=True)
    scores = next(steps)
    yielded = 0
    while True:
        yielded += 1
        assert scores.shape == (2, model.config.num_attention_heads, 6, 6)
        try:
            scores = steps.send(mx.array(inference.numpy_softmax(np.array(scores))))
        except StopIteration as done:
            out = done.value
            break
    assert yielded == model.config.num_hidden_layers
    np.testing.assert_allclose(np.array(out.logits), np.array(model(ids).logits), atol=2e-5)
    # without softmax_outside the generator never yields: __call__ is one pass
    with pytest.raises(StopIteration):
        next(model.steps(ids))


def test_numpy_softmax_rows_sum_to_one_and_masked_keys_get_zero():
    scores = np.array([[1.0, 2.0, np.finfo(np.float32).min], [0.0, 0.0, 0.0]], np.float32)
    probs = inference.numpy_softmax(scores.copy())
    np.testing.assert_allclose(probs.sum(-1), 1.0, atol=1e-6)
    assert probs[0, 2] == 0.0
    np.testing.assert_allclose(probs[0, :2], np.exp([1.0, 2.0]) / np.exp([1.0, 2.0]).sum(), rtol=1e-6)
    np.testing.assert_allclose(probs[1], 1 / 3, rtol=1e-6)


def test_a_single_sentence_on_a_linux_cpu_skips_mlxs_fused_attention(model, monkeypatch):
    """With fast math (MLX's CPU device on Linux) the eval forward uses the explicit attention with fast
    math's softmax: MLX's fused attention falls back to its scalar-exp softmax there (5.5 of 5.9 ms of
    a 128-token sentence's attention). Without fast math (Metal) the fused kernel runs."""
    config = model.config
    ids = np.array([[2, 5, 9, 11, 4, 0]], np.int32)
    mask = np.array([[1, 1, 1, 1, 1, 0]], np.int32)
    weights = tree_flatten(model.parameters())
    fast, plain = (
        BertForSequenceClassification(config, fast_math=True),
        BertForSequenceClassification(config, fast_math=False),
    )
    for m in (fast, plain):
        m.load_weights(weights, strict=True)
        m.eval()
    calls = []
    fused = mx.fast.scaled_dot_product_attention
    monkeypatch.setattr(mx.fast, "scaled_dot_product_attention", lambda *a, **k: calls.append(1) or fused(*a, **k))
    fast_logits = Latency(fast)(ids, mask)
    assert calls == []
    plain_logits = Latency(plain)(ids, mask)
    assert len(calls) == config.num_hidden_layers
    np.testing.assert_allclose(fast_logits, plain_logits, atol=1e-5)


@pytest.mark.parametrize("fast_math", [True, False], ids=["fast-math", "plain"])
def test_logits_only_runs_the_last_layer_for_cls_alone_with_the_same_logits(model, fast_math):
    """A [CLS]-pooled classifier reads nothing of the last layer but its [CLS] row: `logits_only` computes
    that row alone (last_hidden is (B, 1, H)) and the logits stay the full forward's, eager, staged over
    CPU streams (scores yielded) and compiled; a mean-pooled model, or one asked for hidden states, runs
    every row as before."""
    config = model.config
    m = BertForSequenceClassification(config, fast_math=fast_math)
    m.load_weights(tree_flatten(model.parameters()), strict=True)
    m.eval()
    rng = np.random.default_rng(4)
    ids = rng.integers(1, 80, size=(5, 21)).astype(np.int32)
    mask = np.ones_like(ids)
    mask[1, 7:] = 0
    mask[4, 15:] = 0
    full = m(mx.array(ids), mx.array(mask))
    fast = m(mx.array(ids), mx.array(mask), logits_only=True)
    assert full.last_hidden.shape == (5, 21, config.hidden_size)
    assert fast.last_hidden.shape == (5, 1, config.hidden_size)
    np.testing.assert_allclose(np.array(fast.logits), np.array(full.logits), atol=2e-5)
    np.testing.assert_allclose(np.array(fast.last_hidden[:, 0]), np.array(full.last_hidden[:, 0]), atol=2e-5)
    for shards in (1, 2):  # the staged path (softmax outside the model) and the sharded one alike
        np.testing.assert_allclose(
            BatchForward(m, batch_size=5, shards=shards).logits(ids, mask), np.array(full.logits), atol=2e-5
        )
    staged = inference.staged_forward(m, mx.array(ids), mx.array(mask), 1, logits_only=True)
    assert staged.last_hidden.shape == (5, 1, config.hidden_size)
    np.testing.assert_allclose(np.array(staged.logits), np.array(full.logits), atol=2e-5)
    # hidden states asked for: every row of every layer, logits_only or not
    kept = m(mx.array(ids), mx.array(mask), output_hidden_states=True, logits_only=True)
    assert kept.hidden_states[-1].shape == (5, 21, config.hidden_size)
    # a mean-pooled head reads every row of the last layer: nothing is skipped
    config_mean = BertConfig(**{**vars(config), "classifier_pooling": "mean"})
    mean = BertForSequenceClassification(config_mean, fast_math=fast_math)
    mean.load_weights(tree_flatten(model.parameters()), strict=True)
    mean.eval()
    a = mean(mx.array(ids), mx.array(mask))
    b = mean(mx.array(ids), mx.array(mask), logits_only=True)
    assert b.last_hidden.shape == (5, 21, config.hidden_size)
    np.testing.assert_allclose(np.array(b.logits), np.array(a.logits), atol=1e-6)
