"""MLX ⇄ safetensors: read a Hugging Face directory's weights, write ours atomically.

Only safetensors are read: a pickle (`pytorch_model.bin`) can run code when loaded.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import mlx.core as mx

from mlx_edge.errors import ModelError

WEIGHTS_NAME = "model.safetensors"
INDEX_NAME = "model.safetensors.index.json"


def read_weights(model_dir: Path) -> dict[str, mx.array]:
    """All tensors of `model.safetensors` or of the shards listed in its index."""
    model_dir = Path(model_dir)
    single, index = model_dir / WEIGHTS_NAME, model_dir / INDEX_NAME
    if single.is_file():
        return _load_file(single)
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text())["weight_map"]
        except (ValueError, KeyError) as exc:
            raise ModelError(f"{index} is not a valid safetensors index ({exc})") from exc
        weights: dict[str, mx.array] = {}
        for shard in sorted(set(weight_map.values())):
            weights.update(_load_file(model_dir / shard))
        return weights
    if any((model_dir / n).exists() for n in ("pytorch_model.bin", "tf_model.h5", "flax_model.msgpack")):
        raise ModelError(
            f"{model_dir} has no safetensors weights (only a pickle/TF/Flax file)",
            "re-save it with transformers: model.save_pretrained(dir, safe_serialization=True)",
        )
    raise ModelError(f"{model_dir} has no {WEIGHTS_NAME}", "pass a Hugging Face model directory")


def _load_file(path: Path) -> dict[str, mx.array]:
    if not path.is_file():
        raise ModelError(f"weights shard {path} is missing", "re-download or re-save the model")
    try:
        return mx.load(str(path))
    except Exception as exc:  # mlx raises RuntimeError/ValueError for truncated or foreign files
        raise ModelError(f"cannot read {path}: {exc}", "the file is damaged or not safetensors") from exc


def write_weights(path: Path, weights: dict[str, mx.array]) -> None:
    """Write `weights` to `path` via a temporary file renamed into place (never a half file)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=".safetensors", dir=path.parent)
    os.close(fd)
    try:
        # "pt" format metadata: transformers refuses files without a format it knows.
        mx.save_safetensors(tmp, weights, metadata={"format": "pt"})
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
