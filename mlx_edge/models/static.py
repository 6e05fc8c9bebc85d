"""The static-embedding student in MLX: a token table, a masked mean, the classifier head.

model2vec-style: each kept vocabulary piece has one row (the teacher's embedding of it, reduced
with PCA and weighted, then trained); a sentence is the mean of its pieces' rows; the head is the
same `classifier` (Linear(width, labels)) the BERT student has, so the bundle's updatable
Head.mlmodel, and MLXEdgeKit's `learn()`, work unchanged on the encoder's `embedding` output.
Per-piece weights (SIF) are folded into the rows, so the export is gather + masked mean + linear.

A student directory holds config.json (`model_type: "static"`), model.safetensors (`table.weight`
(V, d), `classifier.weight` (N, d), `classifier.bias` (N,)) and the tokenizer files.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten

from mlx_edge.errors import ModelError
from mlx_edge.fileio import atomic_write_json
from mlx_edge.models.bert import BertOutput
from mlx_edge.models.safetensors_io import WEIGHTS_NAME, read_weights, write_weights

MODEL_TYPE = "static"


@dataclass
class StaticConfig:
    vocab_size: int = 1000
    hidden_size: int = 128  # the table's width: the pooled embedding the head takes
    pad_token_id: int = 0
    # No positions: the longest input an export accepts (the BERT student's position table bounds it).
    max_position_embeddings: int = 512
    id2label: dict[int, str] = field(default_factory=lambda: {0: "LABEL_0", 1: "LABEL_1"})
    model_type: str = MODEL_TYPE

    # What code written for the BERT config reads (export's manifest and block-size check).
    num_hidden_layers: int = 0
    num_attention_heads: int = 0

    quantization = None  # a static student is stored in fp32 (the export compresses it)

    @property
    def intermediate_size(self) -> int:  # every weight's input width is the table's
        return self.hidden_size

    @classmethod
    def from_dict(cls, params: dict[str, Any]) -> StaticConfig:
        known = inspect.signature(cls).parameters
        kwargs = {
            k: v for k, v in params.items() if k in known and k not in ("num_hidden_layers", "num_attention_heads")
        }
        if "id2label" in params:
            kwargs["id2label"] = {int(k): str(v) for k, v in params["id2label"].items()}
        config = cls(**kwargs)
        config.validate()
        return config

    def to_dict(self) -> dict[str, Any]:
        return {
            "model_type": MODEL_TYPE,
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "pad_token_id": self.pad_token_id,
            "max_position_embeddings": self.max_position_embeddings,
            "id2label": {str(i): label for i, label in sorted(self.id2label.items())},
            "label2id": {label: i for i, label in sorted(self.id2label.items())},
        }

    @property
    def num_labels(self) -> int:
        return len(self.id2label)

    @property
    def labels(self) -> list[str]:
        return [self.id2label[i] for i in range(self.num_labels)]

    def validate(self) -> None:
        sizes = ("vocab_size", "hidden_size", "max_position_embeddings")
        bad = [
            f"{n} {getattr(self, n)!r}"
            for n in sizes
            if not (isinstance(getattr(self, n), int) and getattr(self, n) > 0)
        ]
        if bad:
            raise ModelError(
                f"config.json has sizes that are not positive integers: {', '.join(bad)}", "fix config.json"
            )
        if sorted(self.id2label) != list(range(len(self.id2label))):
            raise ModelError("id2label must number labels 0..N-1 without gaps", "fix config.json")


class StaticModel(nn.Module):
    """`model(input_ids, attention_mask)` -> BertOutput(logits, pooled = the masked mean of the rows)."""

    def __init__(self, config: StaticConfig):
        super().__init__()
        self.config = config
        self.table = nn.Embedding(config.vocab_size, config.hidden_size)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)

    def __call__(
        self,
        input_ids: mx.array,
        attention_mask: mx.array | None = None,
        token_type_ids: mx.array | None = None,
        *,
        output_hidden_states: bool = False,
        output_attentions: bool = False,
        logits_only: bool = False,  # BERT's fast-path flag; a mean of rows has nothing to skip
    ) -> BertOutput:
        rows = self.table(input_ids)  # (B, L, d)
        pooled = masked_mean(rows, attention_mask)
        return BertOutput(self.classifier(pooled), pooled, rows, [rows] if output_hidden_states else None, None)


def masked_mean(rows: mx.array, attention_mask: mx.array | None) -> mx.array:
    """(B, L, d), (B, L) 1/0 -> (B, d); an all-padding row gives zeros (its count is held at 1)."""
    if attention_mask is None:
        return rows.mean(axis=1)
    mask = attention_mask.astype(rows.dtype)[..., None]
    return (rows * mask).sum(axis=1) / mx.maximum(mask.sum(axis=1), 1.0)


def is_static(params: dict) -> bool:
    """Whether a config.json dict is a static student's."""
    return params.get("model_type") == MODEL_TYPE


def load_static(model_dir: Path, params: dict, *, labels: list[str] | None = None) -> StaticModel:
    """The static student of `model_dir` (whose config.json is `params`), strictly by name and shape."""
    config = StaticConfig.from_dict(params)
    if labels is not None and config.labels != list(labels):
        raise ModelError(
            f"the model's labels {config.labels} differ from the data's labels {list(labels)}",
            "distill a student for these labels, or pass data with the model's labels",
        )
    model = StaticModel(config)
    weights = read_weights(model_dir)
    expected = dict(tree_flatten(model.parameters()))
    missing, unexpected = sorted(set(expected) - set(weights)), sorted(set(weights) - set(expected))
    wrong = [
        f"{k} {tuple(weights[k].shape)} != {tuple(v.shape)}"
        for k, v in expected.items()
        if k in weights and weights[k].shape != v.shape
    ]
    if missing or unexpected or wrong:
        what = "; ".join(
            part
            for part in (
                f"missing {', '.join(missing)}" if missing else "",
                f"unexpected {', '.join(unexpected[:3])}" if unexpected else "",
                f"shapes {wrong[0]}" if wrong else "",
            )
            if part
        )
        raise ModelError(
            f"{model_dir}: weights do not match a static student with this config.json ({what})", "distill it again"
        )
    model.load_weights(list(weights.items()))
    model.eval()
    mx.eval(model.parameters())
    return model


def save_static(model: StaticModel, out_dir: Path) -> Path:
    """config.json and model.safetensors (the caller copies the tokenizer files)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    write_weights(out_dir / WEIGHTS_NAME, dict(tree_flatten(model.parameters())))
    atomic_write_json(out_dir / "config.json", model.config.to_dict())
    return out_dir
