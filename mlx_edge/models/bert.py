"""BERT in MLX, with Hugging Face parameter names.

One implementation serves the student and the teacher (when the teacher runs in MLX). Parameter
paths are exactly those of `transformers.BertForSequenceClassification`
(`bert.encoder.layer.0.attention.self.query.weight`, `classifier.weight`, ...), so a checkpoint
moves between the two with no renaming beyond `sanitize()`.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten

from mlx_edge.errors import ModelError
from mlx_edge.models import fastmath


def _softmax(x: mx.array) -> mx.array:  # over the last axis, in float32
    return mx.softmax(x, axis=-1, precise=True)


# Hugging Face `hidden_act` names -> MLX functions.
ACTIVATIONS = {
    "gelu": nn.gelu,  # exact (erf)
    "gelu_new": nn.gelu_approx,  # the tanh approximation
    "gelu_pytorch_tanh": nn.gelu_approx,
    "gelu_fast": nn.gelu_approx,
    "quick_gelu": nn.gelu_fast_approx,  # x * sigmoid(1.702 x)
    "relu": nn.relu,
    "silu": nn.silu,
    "swish": nn.silu,
    "tanh": mx.tanh,
}
# The same functions from cheap elementwise ops (fastmath.py): chosen once, when a model is built.
FAST_ACTIVATIONS = {
    "gelu": fastmath.gelu,
    "gelu_new": fastmath.gelu_tanh,
    "gelu_pytorch_tanh": fastmath.gelu_tanh,
    "gelu_fast": fastmath.gelu_tanh,
}


# While training: the same values, with the derivative kept from the forward pass (fastmath.py).
FAST_TRAIN_ACTIVATIONS = {
    "gelu": fastmath.gelu_train,
    "gelu_new": fastmath.gelu_tanh_train,
    "gelu_pytorch_tanh": fastmath.gelu_tanh_train,
    "gelu_fast": fastmath.gelu_tanh_train,
}


def activation(name: str, fast: bool, training: bool = False):
    if not fast:
        return ACTIVATIONS[name]
    table = FAST_TRAIN_ACTIVATIONS if training else FAST_ACTIVATIONS
    return table.get(name, ACTIVATIONS[name])


def _dropout(p: float, fast: bool) -> nn.Module:
    """fastmath.Dropout (a hashed mask, no threefry: MLX's CPU RNG draws one scalar at a time) or nn.Dropout."""
    return (fastmath.Dropout if fast else nn.Dropout)(p)


def _layer_norm(config, fast: bool) -> nn.LayerNorm:
    """fastmath.LayerNorm (the C++ kernel where it runs) or nn.LayerNorm: the same parameters."""
    return (fastmath.LayerNorm if fast else nn.LayerNorm)(config.hidden_size, eps=config.layer_norm_eps)


def _positive_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


CLASSIFIER_POOLING = ("cls", "mean")
BERT_LIKE_TYPES = {"bert", "roberta", "xlm-roberta", "distilbert", "electra", "camembert", "ernie"}


@dataclass
class BertConfig:
    vocab_size: int = 30522
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu"
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    layer_norm_eps: float = 1e-12
    pad_token_id: int = 0
    initializer_range: float = 0.02
    position_embedding_type: str = "absolute"
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    classifier_dropout: float | None = None
    id2label: dict[int, str] = field(default_factory=lambda: {0: "LABEL_0", 1: "LABEL_1"})
    model_type: str = "bert"
    # A factorized word embedding (ALBERT's key): (vocab, embedding_size) rows projected up to
    # hidden_size by `bert.embeddings.projection`. None: rows of hidden_size, as in BERT.
    embedding_size: int | None = None
    # Group-quantized weights (mlx-lm's key): {"bits", "group_size", "mode"}; which layers hold
    # codes is read from the checkpoint (their `scales`). None: float weights.
    quantization: dict[str, Any] | None = None
    # The classifier's input: "cls", BERT's pooler (tanh(dense(h[CLS]))); "mean", the mean of the last
    # hidden states over real tokens (as ModernBERT names it): what sentence encoders such as e5 were
    # trained to make meaningful, so a head on it starts from a linear probe (teacher `head = "probe"`).
    classifier_pooling: str = "cls"

    @classmethod
    def from_dict(cls, params: dict[str, Any]) -> BertConfig:
        """Build from an HF `config.json` dict; unknown keys are ignored, BERT-likeness is checked."""
        _check_bert_like(params)
        known = inspect.signature(cls).parameters
        kwargs = {k: v for k, v in params.items() if k in known}
        if "id2label" in params:
            kwargs["id2label"] = {int(k): str(v) for k, v in params["id2label"].items()}
        elif "num_labels" in params:
            kwargs["id2label"] = {i: f"LABEL_{i}" for i in range(int(params["num_labels"]))}
        config = cls(**kwargs)
        config.validate()
        return config

    def to_dict(self) -> dict[str, Any]:
        """An HF-compatible `config.json` for BertForSequenceClassification."""
        out = {k: getattr(self, k) for k in inspect.signature(type(self)).parameters}
        for key in ("embedding_size", "quantization"):  # a plain BERT's config.json stays as HF writes it
            if out[key] is None:
                del out[key]
        if out["classifier_pooling"] == "cls":
            del out["classifier_pooling"]
        out["id2label"] = {str(i): label for i, label in sorted(self.id2label.items())}
        out["label2id"] = {label: i for i, label in sorted(self.id2label.items())}
        out["model_type"] = "bert"
        out["architectures"] = ["BertForSequenceClassification"]
        return out

    @property
    def num_labels(self) -> int:
        return len(self.id2label)

    @property
    def labels(self) -> list[str]:
        return [self.id2label[i] for i in range(self.num_labels)]

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    def validate(self) -> None:
        sizes = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                 "max_position_embeddings", "type_vocab_size")  # fmt: skip
        bad = [f"{name} {getattr(self, name)!r}" for name in sizes if not _positive_int(getattr(self, name))]
        if self.embedding_size is not None and not _positive_int(self.embedding_size):
            bad.append(f"embedding_size {self.embedding_size!r}")
        if bad:
            raise ModelError(
                f"config.json has sizes that are not positive integers: {', '.join(bad)}", "fix config.json"
            )
        if self.hidden_size % self.num_attention_heads:
            raise ModelError(
                f"hidden_size {self.hidden_size} is not divisible by num_attention_heads {self.num_attention_heads}",
                "fix config.json",
            )
        if self.hidden_act not in ACTIVATIONS:
            raise ModelError(
                f"hidden_act {self.hidden_act!r} is not supported", f"use one of {', '.join(sorted(ACTIVATIONS))}"
            )
        if self.position_embedding_type != "absolute":
            raise ModelError(
                f"position_embedding_type {self.position_embedding_type!r} is not supported",
                "only absolute position embeddings (BERT, MiniLM, TinyBERT) are",
            )
        if sorted(self.id2label) != list(range(len(self.id2label))):
            raise ModelError("id2label must number labels 0..N-1 without gaps", "fix config.json")
        if self.classifier_pooling not in CLASSIFIER_POOLING:
            raise ModelError(
                f"classifier_pooling {self.classifier_pooling!r} is not supported",
                f"use one of {', '.join(CLASSIFIER_POOLING)}",
            )


def _check_bert_like(params: dict[str, Any]) -> None:
    model_type = params.get("model_type")
    needed = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size")
    missing = [k for k in needed if k not in params]
    if model_type not in BERT_LIKE_TYPES or missing:
        what = f"model_type {model_type!r}" if model_type not in BERT_LIKE_TYPES else f"missing {', '.join(missing)}"
        raise ModelError(
            f"config.json is not a BERT-like encoder ({what})",
            "pass a BERT-family model such as bert-base-chinese or all-MiniLM-L6-v2",
        )
    if model_type != "bert":
        raise ModelError(
            f"model_type {model_type!r} is BERT-like but its weights are laid out differently",
            "mlx-edge loads BERT-architecture checkpoints (BERT, MiniLM, TinyBERT, MacBERT)",
        )


@dataclass
class BertOutput:
    logits: mx.array  # (B, num_labels)
    pooled: mx.array  # (B, H): the head's input: tanh(dense(h[CLS])), or the masked mean of h (classifier_pooling)
    last_hidden: mx.array  # (B, L, H): the last layer's output
    hidden_states: list[mx.array] | None = None  # num_layers + 1 tensors (B, L, H); [0] = embeddings
    attentions: list[mx.array] | None = None  # num_layers tensors (B, heads, L, L), probabilities


class BertEmbeddings(nn.Module):
    def __init__(self, config: BertConfig, fast: bool = False):
        super().__init__()
        width = config.embedding_size or config.hidden_size
        self.word_embeddings = nn.Embedding(config.vocab_size, width)
        self.projection = nn.Linear(width, config.hidden_size) if config.embedding_size is not None else None
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, config.hidden_size)
        self.LayerNorm = _layer_norm(config, fast)
        self.dropout = _dropout(config.hidden_dropout_prob, fast)

    def __call__(self, input_ids: mx.array, token_type_ids: mx.array | None) -> mx.array:
        positions = mx.arange(input_ids.shape[1])
        words = self.word_embeddings(input_ids)
        if self.projection is not None:
            words = self.projection(words)
        x = words + self.position_embeddings(positions)
        if token_type_ids is None:
            x = x + self.token_type_embeddings.weight[0]
        else:
            x = x + self.token_type_embeddings(token_type_ids)
        return self.dropout(self.LayerNorm(x))


class BertSelfAttention(nn.Module):
    def __init__(self, config: BertConfig, fast: bool):
        super().__init__()
        self.softmax = fastmath.softmax if fast else _softmax
        self.num_heads = config.num_attention_heads
        self.scale = 1.0 / math.sqrt(config.head_dim)
        self.query = nn.Linear(config.hidden_size, config.hidden_size)
        self.key = nn.Linear(config.hidden_size, config.hidden_size)
        self.value = nn.Linear(config.hidden_size, config.hidden_size)
        # the attention maps are the largest dropout input: a hashed mask is 2.2x cheaper on Linux CPUs
        self.dropout = _dropout(config.attention_probs_dropout_prob, fast)

    def _heads(self, x: mx.array, queries: mx.array | None = None) -> tuple[mx.array, mx.array, mx.array]:
        """Q (from `queries`, default `x`), K and V, each (B, heads, rows, head_dim)."""
        q_in = x if queries is None else queries
        return tuple(
            proj(h).reshape(h.shape[0], h.shape[1], self.num_heads, -1).transpose(0, 2, 1, 3)
            for proj, h in ((self.query, q_in), (self.key, x), (self.value, x))
        )

    def scores(self, x: mx.array, mask: mx.array, queries: mx.array | None = None) -> tuple[mx.array, mx.array]:
        """(masked attention scores before the softmax, values): the first half of the attention.
        `queries`: the hidden states of the rows that attend (default: every row of `x`)."""
        q, k, v = self._heads(x, queries)
        return (q * self.scale) @ k.transpose(0, 1, 3, 2) + mask, v

    def attend(self, probs: mx.array, v: mx.array) -> mx.array:
        """The second half: the attention probabilities applied to the values, heads merged back."""
        return _merge_heads(self.dropout(probs) @ v)

    def __call__(
        self, x: mx.array, mask: mx.array, return_probs: bool, queries: mx.array | None = None
    ) -> tuple[mx.array, mx.array | None]:
        """(the context at the query rows, the probabilities when asked). `queries`: the hidden states
        of the rows that attend (default: every row of `x`, whose rows are the keys and values)."""
        # MLX's fused attention where it is fused (Metal); on a Linux CPU it falls back to MLX's
        # scalar-exp softmax (5.5 ms of one 12 x 128 x 128 sentence's 5.9 ms attention here), so
        # there the explicit form with fast math's softmax (the C++ kernel: 0.4 ms) runs instead
        q_in = x if queries is None else queries
        if not (return_probs or self.training) and self.softmax is fastmath.softmax:
            # inference on a Linux CPU: the whole attention in one C++ kernel (runtime/cpu_kernels.cpp)
            context = fastmath.attention(self.query(q_in), self.key(x), self.value(x), mask, self.num_heads, self.scale)
            if context is not None:
                return context, None
        if return_probs or self.training or self.softmax is fastmath.softmax:
            scores, v = self.scores(x, mask, queries)
            probs = self.softmax(scores)
            return self.attend(probs, v), probs
        q, k, v = self._heads(x, queries)
        return _merge_heads(mx.fast.scaled_dot_product_attention(q, k, v, scale=self.scale, mask=mask)), None


def _merge_heads(context: mx.array) -> mx.array:
    """(B, heads, L, head_dim) -> (B, L, heads * head_dim)."""
    B, _, L, _ = context.shape
    return context.transpose(0, 2, 1, 3).reshape(B, L, -1)


class BertResidualOutput(nn.Module):
    """dense → dropout → + residual → LayerNorm: HF's `BertSelfOutput` and `BertOutput` alike."""

    def __init__(self, config: BertConfig, in_features: int, fast: bool = False):
        super().__init__()
        self.dense = nn.Linear(in_features, config.hidden_size)
        self.LayerNorm = _layer_norm(config, fast)
        self.dropout = _dropout(config.hidden_dropout_prob, fast)

    def __call__(self, x: mx.array, residual: mx.array) -> mx.array:
        return self.LayerNorm(self.dropout(self.dense(x)) + residual)


class BertAttention(nn.Module):
    def __init__(self, config: BertConfig, fast: bool):
        super().__init__()
        self.self = BertSelfAttention(config, fast)
        self.output = BertResidualOutput(config, config.hidden_size, fast)

    def __call__(self, x, mask, return_probs, queries=None):
        context, probs = self.self(x, mask, return_probs, queries)
        return self.output(context, x if queries is None else queries), probs


class BertIntermediate(nn.Module):
    def __init__(self, config: BertConfig, fast: bool):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.intermediate_size)
        self.act = activation(config.hidden_act, fast)
        self.train_act = activation(config.hidden_act, fast, training=True)

    def __call__(self, x: mx.array) -> mx.array:
        return (self.train_act if self.training else self.act)(self.dense(x))


class BertLayer(nn.Module):
    def __init__(self, config: BertConfig, fast: bool):
        super().__init__()
        self.attention = BertAttention(config, fast)
        self.intermediate = BertIntermediate(config, fast)
        self.output = BertResidualOutput(config, config.intermediate_size, fast)

    def __call__(self, x, mask, return_probs, queries=None):
        """(the layer's output at the query rows, the attention probabilities when asked). `queries`:
        the rows of `x` whose output is wanted (default: all; keys and values are always all of `x`)."""
        attended, probs = self.attention(x, mask, return_probs, queries)
        return self.output(self.intermediate(attended), attended), probs

    def after_softmax(self, x: mx.array, probs: mx.array, v: mx.array) -> mx.array:
        """The layer's output from its attention probabilities (`attention.self.scores` gave the
        scores and values): what `__call__` computes when the softmax is taken elsewhere. `x`: the
        hidden states of the query rows (the residual)."""
        attended = self.attention.output(self.attention.self.attend(probs, v), x)
        return self.output(self.intermediate(attended), attended)


class BertEncoder(nn.Module):
    def __init__(self, config: BertConfig, fast: bool):
        super().__init__()
        self.layer = [BertLayer(config, fast) for _ in range(config.num_hidden_layers)]


class BertPooler(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)

    def __call__(self, hidden: mx.array) -> mx.array:
        return mx.tanh(self.dense(hidden[:, 0]))


class BertModel(nn.Module):
    def __init__(self, config: BertConfig, fast: bool):
        super().__init__()
        self.embeddings = BertEmbeddings(config, fast)
        self.encoder = BertEncoder(config, fast)
        self.pooler = BertPooler(config)


class BertForSequenceClassification(nn.Module):
    """The classifier. `model(input_ids, attention_mask)` -> BertOutput.

    `fast_math`: GELU and the attention softmax from fastmath.py (same values within ~1e-6, faster
    on Linux CPUs); None decides once, here, by `fastmath.enabled()` (MLX's CPU device on Linux).
    """

    def __init__(self, config: BertConfig, fast_math: bool | None = None):
        super().__init__()
        self.config = config
        self.fast_math = fastmath.enabled() if fast_math is None else fast_math
        self.bert = BertModel(config, self.fast_math)
        dropout = config.classifier_dropout if config.classifier_dropout is not None else config.hidden_dropout_prob
        self.dropout = _dropout(dropout, self.fast_math)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)

    def __call__(
        self,
        input_ids: mx.array,
        attention_mask: mx.array | None = None,
        token_type_ids: mx.array | None = None,
        *,
        output_hidden_states: bool = False,
        output_attentions: bool = False,
        logits_only: bool = False,
    ) -> BertOutput:
        steps = self.steps(
            input_ids, attention_mask, token_type_ids, output_hidden_states, output_attentions, logits_only=logits_only
        )
        try:
            next(steps)
        except StopIteration as done:
            return done.value
        raise AssertionError("steps(softmax_outside=False) never yields")  # pragma: no cover

    def steps(
        self,
        input_ids: mx.array,
        attention_mask: mx.array | None = None,
        token_type_ids: mx.array | None = None,
        output_hidden_states: bool = False,
        output_attentions: bool = False,
        softmax_outside: bool = False,
        logits_only: bool = False,
    ) -> Generator[mx.array, mx.array, BertOutput]:
        """The forward pass as a generator; its return value is the BertOutput.

        `softmax_outside`: each layer yields its masked attention scores (B, heads, L, L) and takes
        the probabilities back through `send`, so a caller can run the softmax itself (inference on
        Linux CPUs, models/inference.py: NumPy's vectorized exp); otherwise it never yields.
        `logits_only`: only the logits (and pooled) are wanted. With [CLS] pooling and no hidden states
        or attentions asked for, the last layer then runs its query side (Q, attention, output, FFN)
        for the [CLS] row alone: the other rows' last outputs feed nothing the classifier reads, so
        the logits are the same and `last_hidden` is (B, 1, H). A 4-layer student saves ~3/16 of its
        forward (the last layer's Q, O and FFN products over every other row)."""
        if attention_mask is None:
            attention_mask = mx.ones(input_ids.shape, dtype=mx.int32)
        x = self.bert.embeddings(input_ids, token_type_ids)
        mask = additive_mask(attention_mask, x.dtype)
        hidden_states = [x] if output_hidden_states else None
        attentions = [] if output_attentions else None
        cls_only = (
            logits_only and self.config.classifier_pooling == "cls" and not (output_hidden_states or output_attentions)
        )
        last = len(self.bert.encoder.layer) - 1
        for i, layer in enumerate(self.bert.encoder.layer):
            queries = x[:, :1] if cls_only and i == last else None
            if softmax_outside:
                scores, v = layer.attention.self.scores(x, mask, queries)
                probs = yield scores
                x = layer.after_softmax(x if queries is None else queries, probs, v)
            else:
                x, probs = layer(x, mask, output_attentions, queries)
            if output_hidden_states:
                hidden_states.append(x)
            if output_attentions:
                attentions.append(probs)
        pooled = mean_pool(x, attention_mask) if self.config.classifier_pooling == "mean" else self.bert.pooler(x)
        logits = self.classifier(self.dropout(pooled))
        return BertOutput(logits, pooled, x, hidden_states, attentions)

    @property
    def layers(self) -> list[BertLayer]:
        return self.bert.encoder.layer


def mean_pool(hidden: mx.array, attention_mask: mx.array) -> mx.array:
    """(B, L, H) hidden states, (B, L) 1/0 mask -> (B, H): the mean over real tokens."""
    keep = attention_mask.astype(hidden.dtype)[..., None]
    return (hidden * keep).sum(axis=1) / mx.maximum(keep.sum(axis=1), 1)


def additive_mask(attention_mask: mx.array, dtype: mx.Dtype) -> mx.array:
    """(B, L) 1/0 mask -> (B, 1, 1, L) additive mask: 0 where attended, dtype-min where padded."""
    # The dtype's minimum rather than -inf: a fully padded row stays finite (as in transformers).
    neg = mx.finfo(dtype).min
    keep = attention_mask.astype(mx.bool_)[:, None, None, :]
    return mx.where(keep, mx.array(0.0, dtype), mx.array(neg, dtype))


def init_weights(model: BertForSequenceClassification, seed: int = 0) -> None:
    """BERT's initialization: N(0, initializer_range) weights, zero biases, unit LayerNorm."""
    std = model.config.initializer_range
    params = _flat(model.parameters())
    keys = mx.random.split(mx.random.key(seed), num=len(params))
    new = {}
    for i, (name, value) in enumerate(params):
        if "LayerNorm" in name:
            new[name] = mx.ones_like(value) if name.endswith("weight") else mx.zeros_like(value)
        elif name.endswith("bias"):
            new[name] = mx.zeros_like(value)
        else:
            new[name] = std * mx.random.normal(value.shape, key=keys[i])
    model.load_weights(list(new.items()))


def _flat(tree, prefix: str = ""):

    return tree_flatten(tree, prefix)


def sanitize(weights: dict[str, Any]) -> dict[str, Any]:
    """Map an HF BERT checkpoint's names onto this model's (pure; the only renaming there is).

    Handles bare `BertModel` checkpoints (no `bert.` prefix), TF-era `gamma`/`beta` LayerNorm names,
    and drops buffers and pre-training heads that a classifier does not use.
    """
    out = {}
    for name, value in weights.items():
        if name.endswith(("position_ids", "token_type_ids")) or name.startswith(("cls.", "lm_head.")):
            continue
        if name.startswith(("embeddings.", "encoder.", "pooler.")):
            name = "bert." + name
        name = name.replace("LayerNorm.gamma", "LayerNorm.weight").replace("LayerNorm.beta", "LayerNorm.bias")
        out[name] = value
    return out
