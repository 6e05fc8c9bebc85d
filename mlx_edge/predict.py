"""Quick predictions from a teacher or student directory, in MLX."""

from __future__ import annotations

from pathlib import Path

import mlx.core as mx
import numpy as np

from mlx_edge.data import collate
from mlx_edge.models.checkpoint import load_model
from mlx_edge.models.tokenizer import load_tokenizer
from mlx_edge.runtime.devices import mlx_device


def predict_texts(
    model_dir: str | Path, texts: list[str], *, max_length: int = 128, device: str = "auto", batch_size: int = 32
) -> list[dict[str, float]]:
    """Label probabilities for each text, as {label: probability}."""

    mlx_device(device)
    model = load_model(Path(model_dir), require_head=True)
    tokenizer = load_tokenizer(model_dir)
    max_length = min(max_length, model.config.max_position_embeddings)
    ids = [np.asarray(x, dtype=np.int32) for x in tokenizer.encode_batch(texts, max_length=max_length)]
    results = []
    for start in range(0, len(ids), batch_size):
        input_ids, mask = collate(
            ids[start : start + batch_size], pad_id=tokenizer.pad_id, max_width=model.config.max_position_embeddings
        )
        probs = mx.softmax(model(mx.array(input_ids), mx.array(mask)).logits, axis=-1)
        for row in np.array(probs):
            results.append({label: float(p) for label, p in zip(model.config.labels, row)})
    return results
