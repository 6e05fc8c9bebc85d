"""Vocabulary pruning keeps the corpus's segmentation exactly (ids renumbered) and the model's outputs."""

from __future__ import annotations

import json

import mlx.core as mx
import numpy as np
import pytest
from tokenizers import Tokenizer

from mlx_edge.errors import ModelError
from mlx_edge.models.checkpoint import load_model
from mlx_edge.models.prune import plan_vocab, pruned_tokenizer_json, write_pruned_tokenizer
from mlx_edge.models.tokenizer import load_tokenizer
from tests.helpers.tiny import CORPUS, build_tiny_bert, build_tiny_unigram_bert

TRAIN = CORPUS[:9]  # the pieces of these are kept; the others are "unseen" text
UNSEEN = CORPUS[9:] + ["Renew the deck", "一下季度"]


@pytest.fixture(scope="module", params=["wordpiece", "unigram"])
def model_dir(request, tmp_path_factory):
    build = build_tiny_bert if request.param == "wordpiece" else build_tiny_unigram_bert
    return build(tmp_path_factory.mktemp(request.param), seed=1, initializer_range=0.2)


def _ids(directory, texts):
    return load_tokenizer(directory).encode_batch(texts, max_length=64)


@pytest.mark.parametrize("mode", ["seen", "seen+chars", "seen+script"])
def test_pruned_tokenizer_splits_the_corpus_as_before(model_dir, tmp_path, mode):
    plan = plan_vocab(model_dir, TRAIN, mode)
    full_size = len(json.loads((model_dir / "tokenizer.json").read_text())["model"]["vocab"])
    assert plan.full_size == full_size and len(plan.keep) < full_size
    write_pruned_tokenizer(model_dir, tmp_path, plan)
    remap = plan.remap
    assert [[int(remap[i]) for i in row] for row in _ids(model_dir, TRAIN)] == _ids(tmp_path, TRAIN)
    pruned = load_tokenizer(tmp_path)  # special tokens survive, renumbered
    assert pruned.vocab_size == len(plan.keep)
    full = load_tokenizer(model_dir)
    for name in ("cls_id", "sep_id", "pad_id", "unk_id"):
        assert getattr(pruned, name) == remap[getattr(full, name)]


def test_single_character_pieces_keep_unseen_text_readable(model_dir, tmp_path):
    def unknown(directory):
        tok = load_tokenizer(directory)
        return sum(i == tok.unk_id for row in tok.encode_batch(UNSEEN, max_length=64) for i in row)

    seen, chars = tmp_path / "seen", tmp_path / "chars"
    write_pruned_tokenizer(model_dir, seen, plan_vocab(model_dir, TRAIN, "seen"))
    write_pruned_tokenizer(model_dir, chars, plan_vocab(model_dir, TRAIN, "seen+chars"))
    assert unknown(chars) == unknown(model_dir) < unknown(seen)


def test_pruned_model_gives_the_same_outputs(model_dir):
    plan = plan_vocab(model_dir, TRAIN, "seen")
    full = load_model(model_dir, require_head=True).eval()
    ids = _ids(model_dir, TRAIN)
    width = max(map(len, ids))
    pad = load_tokenizer(model_dir).pad_id
    batch = np.array([row + [pad] * (width - len(row)) for row in ids])
    mask = (np.arange(width)[None, :] < np.array([len(r) for r in ids])[:, None]).astype(np.int32)
    reference = np.array(full(mx.array(batch), mx.array(mask)).logits)
    full.bert.embeddings.word_embeddings.weight = full.bert.embeddings.word_embeddings.weight[mx.array(plan.keep)]
    pruned_logits = np.array(full(mx.array(plan.remap[batch]), mx.array(mask)).logits)
    assert np.abs(pruned_logits - reference).max() < 1e-6


def test_a_pruned_vocabulary_without_unk_is_refused(model_dir):
    data = json.loads((model_dir / "tokenizer.json").read_text())
    plan = plan_vocab(model_dir, TRAIN, "seen")
    unk = load_tokenizer(model_dir).unk_id
    with pytest.raises(ModelError, match="lost"):
        pruned_tokenizer_json(data, np.array([i for i in plan.keep if i != unk]))
    Tokenizer.from_str(json.dumps(pruned_tokenizer_json(data, plan.keep)))  # the kept one is a valid tokenizer
