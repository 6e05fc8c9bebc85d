"""A PyTorch mirror of the MLX BERT, written to be traced and converted by coremltools.

Not transformers' BERT: coremltools 9.0 cannot convert it (`new_ones` is not implemented in its PyTorch frontend). This one uses only
Linear, LayerNorm, gather, matmul, softmax, gelu and tanh; builds the additive float mask from an
int32 mask; and does no integer casts of shapes, so a `torch.jit.trace` with int32 inputs converts.
Modules nest as in transformers, so `state_dict()` keys are the Hugging Face names, the same as
`mlx_edge.models.bert`'s: weights move either way by name with strict loads and no rename table.
"""

from __future__ import annotations

import math
from pathlib import Path

import mlx.core as mx
import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from bridges.static_mirror import StaticMirror, load_static_mirror
from mlx_edge.errors import ModelError
from mlx_edge.models.checkpoint import read_float_weights
from mlx_edge.models.static import MODEL_TYPE as STATIC
from mlx_edge.teacher.source import masked_mean

# Added to padded positions' attention scores. Not the dtype's minimum (as in MLX): an fp16
# program casts finfo(float32).min to -inf, and a fully padded row then softmaxes to NaN.
MASK_VALUE = -1e4


def _dropout(module: nn.Module, x: torch.Tensor, p: float | None) -> torch.Tensor:
    """BERT's dropout while the mirror trains (`mlx-edge bench`'s training rows); a Python-level no-op
    in eval mode, so traced and exported programs have no dropout op at all."""
    return F.dropout(x, p, training=True) if module.training and p else x


def _activation(name: str):
    if name == "gelu":
        return lambda x: F.gelu(x)
    if name in ("gelu_new", "gelu_pytorch_tanh", "gelu_fast"):
        return lambda x: F.gelu(x, approximate="tanh")
    if name == "quick_gelu":
        return lambda x: x * torch.sigmoid(1.702 * x)
    if name == "relu":
        return F.relu
    if name in ("silu", "swish"):
        return F.silu
    if name == "tanh":
        return torch.tanh
    raise ModelError(f"hidden_act {name!r} has no mirror", "use gelu, gelu_new, relu, silu or tanh")


class _SelfAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        h = config.hidden_size
        self.heads, self.head_dim = config.num_attention_heads, h // config.num_attention_heads
        self.query, self.key, self.value = nn.Linear(h, h), nn.Linear(h, h), nn.Linear(h, h)
        self.p = config.attention_probs_dropout_prob

    def forward(self, x: torch.Tensor, mask: torch.Tensor, queries: torch.Tensor | None = None) -> torch.Tensor:
        """The context at the query rows (`queries`: their hidden states; default every row of `x`)."""

        # (B, L, H) -> (B, heads, L, head_dim); unflatten/flatten take no sizes read from a tensor's
        # shape, so the trace has no aten::Int casts (and B, L stay symbolic for flexible shapes)
        def split(t):
            return t.unflatten(-1, (self.heads, self.head_dim)).transpose(1, 2)

        q = split(self.query(x if queries is None else queries)) * (1.0 / math.sqrt(self.head_dim))
        k, v = split(self.key(x)), split(self.value(x))
        probs = _dropout(self, torch.softmax(q @ k.transpose(-1, -2) + mask, dim=-1), self.p)
        return (probs @ v).transpose(1, 2).flatten(2)  # back to (B, L, H)


class _ResidualOutput(nn.Module):
    """dense -> dropout -> + residual -> LayerNorm: HF's `BertSelfOutput` and `BertOutput` alike."""

    def __init__(self, config, in_features: int):
        super().__init__()
        self.dense = nn.Linear(in_features, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.p = config.hidden_dropout_prob

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(_dropout(self, self.dense(x), self.p) + residual)


class _Attention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.self = _SelfAttention(config)
        self.output = _ResidualOutput(config, config.hidden_size)

    def forward(self, x: torch.Tensor, mask: torch.Tensor, queries: torch.Tensor | None = None) -> torch.Tensor:
        return self.output(self.self(x, mask, queries), x if queries is None else queries)


class _Intermediate(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.intermediate_size)
        self.act = _activation(config.hidden_act)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.dense(x))


class _Layer(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.attention = _Attention(config)
        self.intermediate = _Intermediate(config)
        self.output = _ResidualOutput(config, config.intermediate_size)

    def forward(self, x: torch.Tensor, mask: torch.Tensor, queries: torch.Tensor | None = None) -> torch.Tensor:
        x = self.attention(x, mask, queries)
        return self.output(self.intermediate(x), x)


class _Encoder(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.layer = nn.ModuleList(_Layer(config) for _ in range(config.num_hidden_layers))


class _Embeddings(nn.Module):
    def __init__(self, config):
        super().__init__()
        h = config.hidden_size
        width = config.embedding_size or h  # a factorized table: narrow rows projected up to h
        self.word_embeddings = nn.Embedding(config.vocab_size, width)
        self.projection = nn.Linear(width, h) if config.embedding_size is not None else None
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, h)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, h)
        self.LayerNorm = nn.LayerNorm(h, eps=config.layer_norm_eps)
        self.p = config.hidden_dropout_prob

    def forward(self, input_ids: torch.Tensor, fixed_length: int | None) -> torch.Tensor:
        if fixed_length is not None:  # a constant slice: folded into one const by the converter
            position = self.position_embeddings.weight[:fixed_length]
        else:  # positions 0..L-1 counted from the ids: slicing by L would trace an aten::Int cast of a shape
            position = self.position_embeddings(torch.cumsum(torch.ones_like(input_ids), dim=1, dtype=torch.int32) - 1)
        # token type 0 for every token, as the MLX model does without token_type_ids
        words = self.word_embeddings(input_ids)
        if self.projection is not None:
            words = self.projection(words)
        x = words + position + self.token_type_embeddings.weight[0]
        return _dropout(self, self.LayerNorm(x), self.p)


class _Pooler(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.dense(hidden[:, 0]))


class _Bert(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.embeddings = _Embeddings(config)
        self.encoder = _Encoder(config)
        self.pooler = _Pooler(config)


class MirrorBert(nn.Module):
    """`forward(input_ids, attention_mask)` (int32, (B, L)) -> (embedding (B, H), logits (B, N)).

    In eval mode with [CLS] pooling the last layer computes the [CLS] row alone (its other rows feed
    nothing the outputs read): the same outputs, about 3/16 less work for a 4-layer student in every
    exported program (CoreML, ONNX) and in PyTorch inference.

    Modules nest as in transformers' `BertForSequenceClassification`, so `state_dict()` keys are the
    Hugging Face names (`bert.encoder.layer.0.attention.self.query.weight`, `classifier.weight`).
    """

    def __init__(self, config):
        super().__init__()
        self.config = config
        self.bert = _Bert(config)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        p = config.classifier_dropout
        self.p = config.hidden_dropout_prob if p is None else p
        # Set to the one sequence length a fixed-shape export takes (inputs must then have it).
        self.fixed_length: int | None = None

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor):
        x = self.bert.embeddings(input_ids, self.fixed_length)
        # (B, L) int32 1/0 -> (B, 1, 1, L) float: 0 where attended, MASK_VALUE where padded
        mask = (1.0 - attention_mask.to(x.dtype))[:, None, None, :] * MASK_VALUE
        mean = getattr(self.config, "classifier_pooling", "cls") == "mean"  # as models/bert.py
        layers = self.bert.encoder.layer
        for i, layer in enumerate(layers):
            # inference: the pooler reads [CLS] alone, so the last layer runs its query side for that row
            # only (as the MLX model's logits_only), a constant slice that keeps B and L symbolic in the
            # trace; training computes every row, as MLX's training step does
            cls_only = not (mean or self.training) and i == len(layers) - 1
            x = layer(x, mask, x[:, :1] if cls_only else None)
        embedding = masked_mean(x, attention_mask) if mean else self.bert.pooler(x)
        return embedding, self.classifier(_dropout(self, embedding, self.p))


class ClassifierWrapper(nn.Module):
    """The mirror with a softmax: text ids -> probabilities (the non-updatable Classifier)."""

    def __init__(self, mirror: MirrorBert):
        super().__init__()
        self.mirror = mirror

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor):
        _, logits = self.mirror(input_ids, attention_mask)
        return torch.softmax(logits, dim=-1)


def _check_names_and_shapes(expected: dict[str, torch.Tensor], weights: dict, source: str | Path) -> None:
    """Raise one ModelError line where `load_state_dict(strict=True)` would list every key."""
    missing = sorted(set(expected) - set(weights))
    unexpected = sorted(set(weights) - set(expected))
    if missing or unexpected:
        parts = []
        if missing:
            parts.append(f"missing {', '.join(missing[:3])}")
        if unexpected:
            parts.append(f"unexpected {', '.join(unexpected[:3])}")
        raise ModelError(
            f"{source}: weights do not match the PyTorch mirror ({'; '.join(parts)})",
            "export a student written by mlx-edge (a BERT with a trained classifier head)",
        )
    for name, ref in expected.items():
        shape = tuple(np.shape(weights[name]))
        if shape != tuple(ref.shape):
            raise ModelError(
                f"{source}: {name} has shape {shape}, the mirror expects {tuple(ref.shape)}",
                "fix config.json or re-save the student",
            )


def load_mirror(
    weights: dict[str, np.ndarray], config, *, source: str | Path = "checkpoint"
) -> MirrorBert | StaticMirror:
    """A MirrorBert holding `weights` (HF names, as `sanitize` returns them), loaded by name, strictly
    (a static student's config: its StaticMirror)."""
    if config.model_type == STATIC:
        return load_static_mirror(weights, config, source=source)
    model = MirrorBert(config)
    _check_names_and_shapes(model.state_dict(), weights, source)
    model.load_state_dict({k: torch.from_numpy(np.array(v, np.float32)) for k, v in weights.items()}, strict=True)
    return model.eval()


def read_student_weights(student_dir: Path) -> dict[str, np.ndarray]:
    """The student's safetensors as float32 NumPy arrays with canonical HF names."""

    weights = read_float_weights(Path(student_dir))  # a quantized student's dequantized, exactly
    return {k: np.array(v.astype(mx.float32)) for k, v in weights.items()}


def run_mirror(model: nn.Module, input_ids: np.ndarray, attention_mask: np.ndarray):
    """Run the mirror (or wrapper) on NumPy int arrays; returns NumPy outputs."""
    with torch.no_grad():
        out = model(
            torch.from_numpy(np.asarray(input_ids, np.int32)), torch.from_numpy(np.asarray(attention_mask, np.int32))
        )
    if isinstance(out, tuple):
        return tuple(t.numpy() for t in out)
    return out.numpy()
