"""The PyTorch mirror: strict loading by Hugging Face name both ways, and parity with the MLX BERT (fp32, 1e-4)."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest
import torch
from mlx.utils import tree_flatten
from transformers import BertForSequenceClassification as HFBert

from bridges.torch_mirror import MASK_VALUE, MirrorBert, load_mirror, read_student_weights, run_mirror
from mlx_edge.errors import ModelError
from mlx_edge.models.bert import BertConfig, BertForSequenceClassification, init_weights, sanitize
from mlx_edge.models.checkpoint import save_model
from tests.helpers.tiny import tiny_bert_config

CONFIGS = [
    dict(),
    dict(hidden_act="gelu_new", num_hidden_layers=3, num_attention_heads=2),
    dict(hidden_act="relu", hidden_size=48, num_attention_heads=6, intermediate_size=64, layer_norm_eps=1e-5),
]


def _weights_and_config(seed, **overrides):
    torch.manual_seed(seed)
    hf_config = tiny_bert_config(vocab_size=101, initializer_range=0.2, **overrides)
    weights = sanitize({k: v.numpy() for k, v in HFBert(hf_config).state_dict().items()})
    return weights, BertConfig.from_dict(hf_config.to_dict())


@pytest.mark.parametrize("overrides", CONFIGS, ids=lambda o: o.get("hidden_act", "gelu"))
def test_mirror_matches_mlx(overrides):
    weights, config = _weights_and_config(0, **overrides)
    mlx_model = BertForSequenceClassification(config)
    mlx_model.load_weights([(k, mx.array(v)) for k, v in weights.items()], strict=True)
    _assert_parity(load_mirror(weights, config), mlx_model)


def _assert_parity(mirror, mlx_model):
    mlx_model.eval()
    rng = np.random.default_rng(0)
    ids = rng.integers(5, mlx_model.config.vocab_size, size=(4, 13)).astype(np.int32)
    mask = np.ones_like(ids)
    for row, keep in enumerate([13, 9, 2, 5]):
        mask[row, keep:] = 0
        ids[row, keep:] = 0
    emb, logits = run_mirror(mirror, ids, mask)
    out = mlx_model(mx.array(ids), mx.array(mask))
    np.testing.assert_allclose(logits, np.array(out.logits), atol=1e-4, rtol=0)
    np.testing.assert_allclose(emb, np.array(out.pooled), atol=1e-4, rtol=0)


@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_the_mirrors_last_layer_runs_for_cls_alone_when_the_head_reads_cls(pooling):
    """Every exported program is traced from the mirror: with [CLS] pooling its last layer's FFN sees
    one row per sentence (the MLX model's full forward, which computes every row, gives the same
    outputs); a mean-pooled head reads every row, so there it sees all of them."""
    weights, config = _weights_and_config(1, num_hidden_layers=3)
    config.classifier_pooling = pooling
    mirror = load_mirror(weights, config)
    seen = []
    last = mirror.bert.encoder.layer[-1]
    last.intermediate.dense.register_forward_hook(lambda module, args, out: seen.append(tuple(args[0].shape)))
    mirror.bert.encoder.layer[0].intermediate.dense.register_forward_hook(
        lambda module, args, out: seen.append(tuple(args[0].shape))
    )
    mlx_model = BertForSequenceClassification(config)
    mlx_model.load_weights([(k, mx.array(v)) for k, v in weights.items()], strict=True)
    _assert_parity(mirror, mlx_model)
    first, final = seen[0], seen[1]
    assert first == (4, 13, config.hidden_size)
    assert final == ((4, 1, config.hidden_size) if pooling == "cls" else (4, 13, config.hidden_size))
    # training computes every row, as MLX's training step does
    seen.clear()
    mirror.train()
    mirror(torch.ones((2, 6), dtype=torch.int32), torch.ones((2, 6), dtype=torch.int32))
    assert seen == [(2, 6, config.hidden_size), (2, 6, config.hidden_size)]


def test_student_safetensors_load_into_the_mirror_by_name(tmp_path):
    config = BertConfig.from_dict(tiny_bert_config(vocab_size=101, num_hidden_layers=3).to_dict())
    student = BertForSequenceClassification(config)
    init_weights(student, seed=4)
    save_model(student, tmp_path)
    mirror = load_mirror(read_student_weights(tmp_path), config)  # load_state_dict(strict=True), no renaming
    mlx_params = dict(tree_flatten(student.parameters()))
    assert sorted(mirror.state_dict()) == sorted(mlx_params)
    for name, value in mirror.state_dict().items():
        np.testing.assert_array_equal(value.numpy(), np.array(mlx_params[name]), err_msg=name)
    _assert_parity(mirror, student)


def test_mirror_state_dict_loads_into_mlx_strictly():
    config = BertConfig.from_dict(tiny_bert_config(vocab_size=101, hidden_act="gelu_new").to_dict())
    torch.manual_seed(5)
    mirror = MirrorBert(config).eval()
    mlx_model = BertForSequenceClassification(config)
    mlx_model.load_weights([(k, mx.array(v.numpy())) for k, v in mirror.state_dict().items()], strict=True)
    _assert_parity(mirror, mlx_model)


def test_mask_value_is_fp16_safe():
    assert np.isfinite(np.float16(MASK_VALUE))


def test_strict_names():
    weights, config = _weights_and_config(1)
    missing = dict(weights)
    missing.pop("bert.pooler.dense.weight")
    with pytest.raises(ModelError, match="missing bert.pooler.dense.weight"):
        load_mirror(missing, config)
    extra = dict(weights, **{"bert.encoder.layer.9.output.dense.weight": np.zeros((32, 48), np.float32)})
    with pytest.raises(ModelError, match="unexpected bert.encoder.layer.9"):
        load_mirror(extra, config)


def test_strict_shapes():
    weights, config = _weights_and_config(2)
    weights["classifier.weight"] = np.zeros((5, 32), np.float32)
    with pytest.raises(ModelError, match=r"classifier.weight has shape \(5, 32\), the mirror expects \(6, 32\)"):
        load_mirror(weights, config)


@pytest.mark.parametrize("fixed_length", [None, 8])
def test_trace_has_no_dynamic_integer_casts(fixed_length):
    weights, config = _weights_and_config(3)
    mirror = load_mirror(weights, config)
    mirror.fixed_length = fixed_length
    example = (torch.ones(1, 8, dtype=torch.int32),) * 2
    traced = torch.jit.trace(mirror, example)
    kinds = {node.kind() for node in traced.inlined_graph.nodes()}
    assert "aten::Int" not in kinds and "aten::new_ones" not in kinds
    mirror.fixed_length = None
    np.testing.assert_array_equal(traced(*example)[1].detach().numpy(), run_mirror(mirror, *example)[1])


def test_mirror_trains_with_dropout_and_traces_without_it():
    """The mirror applies BERT's dropout only while training (bench's PyTorch training rows); an eval
    trace, what export converts, has no dropout op and gives the same values every call."""
    config = BertConfig.from_dict(tiny_bert_config(vocab_size=101, hidden_act="gelu_new").to_dict())
    assert config.hidden_dropout_prob > 0 and config.attention_probs_dropout_prob > 0
    torch.manual_seed(5)
    mirror = MirrorBert(config)
    ids = torch.randint(1, 101, (2, 9), dtype=torch.int32)
    mask = torch.ones(2, 9, dtype=torch.int32)
    mirror.train()
    first, second = mirror(ids, mask)[1], mirror(ids, mask)[1]
    assert not torch.equal(first, second)  # a new mask each call
    mirror.eval()
    with torch.no_grad():
        assert torch.equal(mirror(ids, mask)[1], mirror(ids, mask)[1])
        traced = torch.jit.trace(mirror, (ids, mask))
    assert "dropout" not in str(traced.inlined_graph)
