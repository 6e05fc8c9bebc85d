"""A PyTorch mirror of the MLX BERT, written to be traced and converted by coremltools.

Not transformers' BERT: coremltools 9.0 cannot convert it (`new_ones`, FACTS.md). This one uses only
Linear, LayerNorm, gather, matmul, softmax, gelu and tanh; builds the additive float mask from an
int32 mask; and does no integer casts of shapes, so a `torch.jit.trace` with int32 inputs converts.
Parameter names are the Hugging Face ones (same as `mlx_edge.models.bert`), loaded strictly.
"""

from __future__ import annotations

import math
from pathlib import Path

import mlx.core as mx
import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from mlx_edge.errors import ModelError
from mlx_edge.models.bert import sanitize
from mlx_edge.models.safetensors_io import read_weights

# Added to padded positions' attention scores. Not the dtype's minimum (as in MLX): an fp16
# program casts finfo(float32).min to -inf, and a fully padded row then softmaxes to NaN.
MASK_VALUE = -1e4


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


class _Layer(nn.Module):
    def __init__(self, hidden: int, heads: int, ffn: int, eps: float, act: str):
        super().__init__()
        self.heads, self.head_dim = heads, hidden // heads
        self.query, self.key, self.value = (nn.Linear(hidden, hidden) for _ in range(3))
        self.attn_out = nn.Linear(hidden, hidden)
        self.attn_norm = nn.LayerNorm(hidden, eps=eps)
        self.inter = nn.Linear(hidden, ffn)
        self.out = nn.Linear(ffn, hidden)
        self.out_norm = nn.LayerNorm(hidden, eps=eps)
        self.act = _activation(act)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        # (B, L, H) -> (B, heads, L, head_dim); unflatten/flatten take no sizes read from a tensor's
        # shape, so the trace has no aten::Int casts (and B, L stay symbolic for flexible shapes)
        def split(t):
            return t.unflatten(-1, (self.heads, self.head_dim)).transpose(1, 2)

        q = split(self.query(x)) * (1.0 / math.sqrt(self.head_dim))
        k, v = split(self.key(x)), split(self.value(x))
        probs = torch.softmax(q @ k.transpose(-1, -2) + mask, dim=-1)
        context = (probs @ v).transpose(1, 2).flatten(2)  # back to (B, L, H)
        x = self.attn_norm(self.attn_out(context) + x)
        return self.out_norm(self.out(self.act(self.inter(x))) + x)


class MirrorBert(nn.Module):
    """`forward(input_ids, attention_mask)` (int32, (B, L)) -> (embedding (B, H), logits (B, N))."""

    def __init__(self, config):
        super().__init__()
        self.config = config
        h = config.hidden_size
        self.word = nn.Embedding(config.vocab_size, h)
        self.position = nn.Embedding(config.max_position_embeddings, h)
        self.token_type = nn.Embedding(config.type_vocab_size, h)
        self.emb_norm = nn.LayerNorm(h, eps=config.layer_norm_eps)
        self.layers = nn.ModuleList(
            _Layer(h, config.num_attention_heads, config.intermediate_size, config.layer_norm_eps, config.hidden_act)
            for _ in range(config.num_hidden_layers)
        )
        self.pooler = nn.Linear(h, h)
        self.classifier = nn.Linear(h, config.num_labels)
        # Set to the one sequence length a fixed-shape export takes (inputs must then have it).
        self.fixed_length: int | None = None

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor):
        if self.fixed_length is not None:  # a constant slice: folded into one const by the converter
            position = self.position.weight[: self.fixed_length]
        else:  # positions 0..L-1 counted from the ids: slicing by L would trace an aten::Int cast of a shape
            position = self.position(torch.cumsum(torch.ones_like(input_ids), dim=1, dtype=torch.int32) - 1)
        # token type 0 for every token, as the MLX model does without token_type_ids
        x = self.word(input_ids) + position + self.token_type.weight[0]
        x = self.emb_norm(x)
        # (B, L) int32 1/0 -> (B, 1, 1, L) float: 0 where attended, MASK_VALUE where padded
        mask = (1.0 - attention_mask.to(x.dtype))[:, None, None, :] * MASK_VALUE
        for layer in self.layers:
            x = layer(x, mask)
        embedding = torch.tanh(self.pooler(x[:, 0]))
        return embedding, self.classifier(embedding)


class ClassifierWrapper(nn.Module):
    """The mirror with a softmax: text ids -> probabilities (the non-updatable Classifier)."""

    def __init__(self, mirror: MirrorBert):
        super().__init__()
        self.mirror = mirror

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor):
        _, logits = self.mirror(input_ids, attention_mask)
        return torch.softmax(logits, dim=-1)


def _hf_names(config) -> dict[str, str]:
    """Mirror parameter name -> Hugging Face name (the checkpoint's)."""
    names = {
        "word.weight": "bert.embeddings.word_embeddings.weight",
        "position.weight": "bert.embeddings.position_embeddings.weight",
        "token_type.weight": "bert.embeddings.token_type_embeddings.weight",
        "emb_norm.weight": "bert.embeddings.LayerNorm.weight",
        "emb_norm.bias": "bert.embeddings.LayerNorm.bias",
        "pooler.weight": "bert.pooler.dense.weight",
        "pooler.bias": "bert.pooler.dense.bias",
        "classifier.weight": "classifier.weight",
        "classifier.bias": "classifier.bias",
    }
    parts = {
        "query": "attention.self.query",
        "key": "attention.self.key",
        "value": "attention.self.value",
        "attn_out": "attention.output.dense",
        "attn_norm": "attention.output.LayerNorm",
        "inter": "intermediate.dense",
        "out": "output.dense",
        "out_norm": "output.LayerNorm",
    }
    for i in range(config.num_hidden_layers):
        for ours, theirs in parts.items():
            for p in ("weight", "bias"):
                names[f"layers.{i}.{ours}.{p}"] = f"bert.encoder.layer.{i}.{theirs}.{p}"
    return names


def load_mirror(weights: dict[str, np.ndarray], config, *, source: str | Path = "checkpoint") -> MirrorBert:
    """A MirrorBert holding `weights` (HF names, as `sanitize` returns them): strict names and shapes."""
    model = MirrorBert(config)
    names = _hf_names(config)
    ours = model.state_dict()
    missing = sorted(hf for hf in names.values() if hf not in weights)
    unexpected = sorted(set(weights) - set(names.values()))
    if missing or unexpected:
        detail = "; ".join(
            p
            for p in (
                missing and f"missing {', '.join(missing[:3])}",
                unexpected and f"unexpected {', '.join(unexpected[:3])}",
            )
            if p
        )
        raise ModelError(
            f"{source}: weights do not match the PyTorch mirror ({detail})",
            "export a student written by mlx-edge (a BERT with a trained classifier head)",
        )
    state = {}
    for mine, hf in names.items():
        value = np.asarray(weights[hf], dtype=np.float32)
        if tuple(value.shape) != tuple(ours[mine].shape):
            raise ModelError(
                f"{source}: {hf} has shape {tuple(value.shape)}, the mirror expects {tuple(ours[mine].shape)}",
                "fix config.json or re-save the student",
            )
        state[mine] = torch.from_numpy(value.copy())
    model.load_state_dict(state, strict=True)
    return model.eval()


def read_student_weights(student_dir: Path) -> dict[str, np.ndarray]:
    """The student's safetensors as float32 NumPy arrays with canonical HF names."""

    weights = sanitize(read_weights(Path(student_dir)))
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
