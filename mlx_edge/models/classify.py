"""A trained model directory's label logits on texts, in MLX: what `mlx-edge predict` and the teacher's
self-training both read (one load, one encoding, the one batched inference path)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from mlx_edge.models.checkpoint import load_model
from mlx_edge.models.inference import predict_ids
from mlx_edge.models.quantized import cpu_float
from mlx_edge.models.tokenizer import load_tokenizer


def encode_texts(tokenizer, texts: list[str], max_length: int, positions: int) -> list[np.ndarray]:
    """Each text's token ids, cut to `max_length` and to the model's `positions`."""
    return [np.asarray(x, np.int32) for x in tokenizer.encode_batch(texts, max_length=min(max_length, positions))]


def text_logits(model_dir: str | Path, texts: list[str], *, max_length: int, batch_size: int = 32):
    """(logits (texts, labels) in input order, the labels in logit order) of the model in `model_dir`, run at
    float speed on a CPU (a quantized student is dequantized: the same labels)."""
    model = cpu_float(load_model(model_dir, require_head=True))
    tokenizer = load_tokenizer(model_dir)
    ids = encode_texts(tokenizer, texts, max_length, model.config.max_position_embeddings)
    logits, _, _ = predict_ids(model, ids, tokenizer.pad_id, batch_size=batch_size)
    return logits, list(model.config.labels)
