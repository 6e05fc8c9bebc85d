"""HF directory ⇄ MLX BERT: strict loads, lossless round trip, clear refusals."""

from __future__ import annotations

import json
import shutil

import mlx.core as mx
import numpy as np
import pytest
import torch
from safetensors.numpy import load_file, save_file
from transformers import BertForSequenceClassification as HFBert
from transformers import BertModel as HFBertModel

from mlx_edge.errors import ModelError
from mlx_edge.models.checkpoint import load_model, save_model
from mlx_edge.models.tokenizer import load_tokenizer
from tests.helpers.tiny import LABELS, build_wordpiece, tiny_bert_config


def test_hf_to_mlx_to_hf_is_identical(tiny_bert_dir, tmp_path):
    model = load_model(tiny_bert_dir)
    out = save_model(model, tmp_path / "round", tokenizer_from=tiny_bert_dir)
    reloaded, info = HFBert.from_pretrained(out, output_loading_info=True)
    assert info["missing_keys"] == set() or not info["missing_keys"]
    assert not info["unexpected_keys"] and not info["mismatched_keys"]
    original = HFBert.from_pretrained(tiny_bert_dir)
    ref, got = original.state_dict(), reloaded.state_dict()
    assert set(ref) == set(got)
    for name in ref:
        assert torch.equal(ref[name], got[name]), name
    assert reloaded.config.id2label == original.config.id2label
    # and the saved safetensors hold exactly the HF names
    assert set(load_file(out / "model.safetensors")) == set(load_file(tiny_bert_dir / "model.safetensors"))
    for name in ("tokenizer.json", "vocab.txt", "tokenizer_config.json"):
        assert (out / name).read_bytes() == (tiny_bert_dir / name).read_bytes()


def test_bare_encoder_gets_a_new_head_for_the_given_labels(tmp_path):
    build_wordpiece(tmp_path)
    torch.manual_seed(0)
    encoder = HFBertModel(tiny_bert_config(vocab_size=400))
    encoder.save_pretrained(tmp_path)  # keys without the "bert." prefix, no classifier
    model = load_model(tmp_path, labels=["a", "b", "c"])
    assert model.config.labels == ["a", "b", "c"]
    assert model.classifier.weight.shape == (3, 32)
    ref = encoder.state_dict()["embeddings.word_embeddings.weight"].numpy()
    np.testing.assert_array_equal(np.array(model.bert.embeddings.word_embeddings.weight), ref)


def test_tf_era_gamma_beta_names_load(tiny_bert_dir, tmp_path):
    shutil.copytree(tiny_bert_dir, tmp_path / "m")
    weights = load_file(tmp_path / "m" / "model.safetensors")
    renamed = {
        k.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta"): v
        for k, v in weights.items()
    }
    save_file(renamed, tmp_path / "m" / "model.safetensors", metadata={"format": "pt"})
    a, b = load_model(tiny_bert_dir), load_model(tmp_path / "m")
    ids = mx.array(np.arange(5, 15, dtype=np.int32)[None])
    np.testing.assert_array_equal(np.array(a(ids).logits), np.array(b(ids).logits))


def test_sharded_checkpoint_loads(tiny_bert_dir, tmp_path):
    shutil.copytree(tiny_bert_dir, tmp_path / "m")
    weights = load_file(tmp_path / "m" / "model.safetensors")
    names = sorted(weights)
    half = len(names) // 2
    shards = {"model-00001-of-00002.safetensors": names[:half], "model-00002-of-00002.safetensors": names[half:]}
    for shard, keys in shards.items():
        save_file({k: weights[k] for k in keys}, tmp_path / "m" / shard, metadata={"format": "pt"})
    (tmp_path / "m" / "model.safetensors").unlink()
    index = {"weight_map": {k: shard for shard, keys in shards.items() for k in keys}}
    (tmp_path / "m" / "model.safetensors.index.json").write_text(json.dumps(index))
    ids = mx.array(np.arange(5, 15, dtype=np.int32)[None])
    np.testing.assert_array_equal(
        np.array(load_model(tiny_bert_dir)(ids).logits), np.array(load_model(tmp_path / "m")(ids).logits)
    )


def _broken_copy(src, dst, mutate):
    shutil.copytree(src, dst)
    weights = load_file(dst / "model.safetensors")
    mutate(weights)
    save_file(weights, dst / "model.safetensors", metadata={"format": "pt"})
    return dst


def test_missing_weight_is_refused_by_name(tiny_bert_dir, tmp_path):
    key = "bert.encoder.layer.1.output.dense.weight"
    broken = _broken_copy(tiny_bert_dir, tmp_path / "m", lambda w: w.pop(key))
    with pytest.raises(ModelError, match=r"missing 1 .*layer\.1\.output\.dense\.weight"):
        load_model(broken)


def test_unexpected_weight_is_refused(tiny_bert_dir, tmp_path):
    broken = _broken_copy(
        tiny_bert_dir,
        tmp_path / "m",
        lambda w: w.__setitem__("bert.encoder.layer.2.output.dense.weight", np.zeros((32, 48), np.float32)),
    )
    with pytest.raises(ModelError, match=r"unexpected 1 .*layer\.2"):
        load_model(broken)


def test_shape_mismatch_is_refused(tiny_bert_dir, tmp_path):
    key = "bert.pooler.dense.weight"
    broken = _broken_copy(tiny_bert_dir, tmp_path / "m", lambda w: w.__setitem__(key, np.zeros((32, 31), np.float32)))
    with pytest.raises(ModelError, match=r"shapes disagree.*pooler\.dense\.weight \(32, 31\) != \(32, 32\)"):
        load_model(broken)


def test_label_mismatch_shows_both_lists(tiny_bert_dir):
    with pytest.raises(ModelError, match=r"labels \['finance'.*differ from the data's labels \['neg', 'pos'\]"):
        load_model(tiny_bert_dir, labels=["neg", "pos"])
    assert load_model(tiny_bert_dir, labels=LABELS).config.labels == LABELS


@pytest.mark.parametrize(
    "config, message",
    [
        ({"model_type": "gpt2", "n_layer": 2}, "not a BERT-like encoder"),
        ({"model_type": "bert", "hidden_size": 32}, "missing num_hidden_layers"),
        (
            {
                "model_type": "roberta",
                "hidden_size": 32,
                "num_hidden_layers": 2,
                "num_attention_heads": 4,
                "intermediate_size": 48,
                "vocab_size": 400,
            },
            "weights are laid out differently",
        ),
    ],
)
def test_not_bert_like_config_is_refused(tmp_path, config, message):
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelError, match=message):
        load_model(tmp_path)


def test_pickle_only_checkpoint_is_refused(tiny_bert_dir, tmp_path):
    shutil.copytree(tiny_bert_dir, tmp_path / "m")
    (tmp_path / "m" / "model.safetensors").rename(tmp_path / "m" / "pytorch_model.bin")
    with pytest.raises(ModelError, match="no safetensors weights"):
        load_model(tmp_path / "m")


def test_truncated_weights_are_refused(tiny_bert_dir, tmp_path):
    shutil.copytree(tiny_bert_dir, tmp_path / "m")
    path = tmp_path / "m" / "model.safetensors"
    path.write_bytes(path.read_bytes()[:1000])
    with pytest.raises(ModelError, match="cannot read"):
        load_model(tmp_path / "m")


@pytest.mark.pretrained
def test_real_minilm_matches_transformers(minilm_dir):
    """The one real pretrained BERT here: MLX last hidden states equal transformers' within 1e-4."""
    texts = ["Email the Q3 deck to Lisa before Friday's standup", "Book dentist cleaning", "周五之前把报告发给王经理"]
    tokenizer = load_tokenizer(minilm_dir)
    ids = tokenizer.encode_batch(texts, max_length=32)
    width = max(map(len, ids))
    input_ids = np.array([x + [0] * (width - len(x)) for x in ids], dtype=np.int32)
    mask = (np.arange(width)[None] < np.array([len(x) for x in ids])[:, None]).astype(np.int32)
    ours = load_model(minilm_dir, labels=["a", "b"])
    hf = HFBertModel.from_pretrained(minilm_dir).eval()
    with torch.no_grad():
        ref = hf(input_ids=torch.tensor(input_ids, dtype=torch.long), attention_mask=torch.tensor(mask))
    out = ours(mx.array(input_ids), mx.array(mask))
    np.testing.assert_allclose(np.array(out.last_hidden), ref.last_hidden_state.numpy(), atol=1e-4, rtol=0)
    np.testing.assert_allclose(np.array(out.pooled), ref.pooler_output.numpy(), atol=1e-4, rtol=0)
