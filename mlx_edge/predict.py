"""Quick predictions from a teacher or student directory, in MLX."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from mlx_edge.errors import DataError
from mlx_edge.models.checkpoint import load_model
from mlx_edge.models.inference import predict_ids
from mlx_edge.models.quantized import cpu_float
from mlx_edge.models.tokenizer import load_tokenizer
from mlx_edge.runtime.devices import mlx_device


def predict_texts(
    model_dir: str | Path, texts: list[str], *, max_length: int = 128, device: str = "auto", batch_size: int = 32
) -> list[dict[str, float]]:
    """Label probabilities for each text, as {label: probability}. An empty or blank text is refused: a
    model asked about nothing still answers with confident-looking probabilities."""
    blank = [i for i, text in enumerate(texts, 1) if not text.strip()]
    if blank:
        raise DataError(
            f"text {blank[0]} of {len(texts)} is empty or only spaces", "give every text some words to label"
        )
    mlx_device(device)
    model = cpu_float(load_model(Path(model_dir), require_head=True))  # same labels, at float speed on a CPU
    tokenizer = load_tokenizer(model_dir)
    max_length = min(max_length, model.config.max_position_embeddings)
    ids = [np.asarray(x, dtype=np.int32) for x in tokenizer.encode_batch(texts, max_length=max_length)]
    logits, _, _ = predict_ids(model, ids, tokenizer.pad_id, batch_size=batch_size)  # the one MLX inference path
    probs = np.exp(logits - logits.max(axis=-1, keepdims=True))
    probs /= probs.sum(axis=-1, keepdims=True)
    return [{label: float(p) for label, p in zip(model.config.labels, row)} for row in probs]
