"""A tiny random static-embedding student (mlx_edge/models/static.py), built on the spot with the
tiny WordPiece tokenizer of tests/helpers/tiny.py: what the export, check and fixture tests export."""

from __future__ import annotations

from pathlib import Path

from tests.helpers.tiny import LABELS, build_wordpiece


def build_tiny_static(directory: Path, *, seed: int = 0, width: int = 16, scale: float = 0.5) -> Path:
    """A static student directory: config.json, model.safetensors, the tokenizer files."""
    import mlx.core as mx

    from mlx_edge.models.static import StaticConfig, StaticModel, save_static
    from mlx_edge.models.tokenizer import load_tokenizer

    build_wordpiece(directory)
    tokenizer = load_tokenizer(directory)
    config = StaticConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=width,
        pad_token_id=tokenizer.pad_id,
        max_position_embeddings=64,
        id2label=dict(enumerate(LABELS)),
    )
    model = StaticModel(config)
    key = mx.random.key(seed)
    table_key, head_key = mx.random.split(key)
    model.table.weight = scale * mx.random.normal(model.table.weight.shape, key=table_key)
    model.classifier.weight = scale * mx.random.normal(model.classifier.weight.shape, key=head_key)
    return save_static(model, directory)
