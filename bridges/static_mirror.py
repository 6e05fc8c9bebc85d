"""The PyTorch mirror of the static-embedding student (mlx_edge/models/static.py), to be traced and
converted by coremltools as the BERT mirror is: ids -> gather -> masked mean -> classifier.

Its `state_dict()` keys are the MLX model's parameter names (`table.weight`, `classifier.weight`,
`classifier.bias`), so the weights move by name with a strict load. The converted program is
gather, cast, expand_dims, mul, reduce_sum, maximum, real_div and linear: ops the NumPy MIL
interpreter evaluates, and a gather of `input_ids` that `check` reads the vocabulary size from.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import nn

from mlx_edge.errors import ModelError


class StaticMirror(nn.Module):
    """`forward(input_ids, attention_mask)` (int32, (B, L)) -> (embedding (B, d), logits (B, N))."""

    def __init__(self, config):
        super().__init__()
        self.config = config
        self.table = nn.Embedding(config.vocab_size, config.hidden_size)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.fixed_length: int | None = None  # export sets it for the BERT mirror; no positions here

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor):
        rows = self.table(input_ids)  # (B, L, d)
        mask = attention_mask.to(rows.dtype).unsqueeze(-1)  # (B, L, 1)
        # the count is held at 1 so that an all-padding input gives zeros, not 0/0
        embedding = (rows * mask).sum(dim=1) / torch.clamp(mask.sum(dim=1), min=1.0)
        return embedding, self.classifier(embedding)


def load_static_mirror(weights: dict[str, np.ndarray], config, *, source: str | Path = "checkpoint") -> StaticMirror:
    """A StaticMirror holding `weights` (the student's names), loaded strictly by name and shape."""
    model = StaticMirror(config)
    expected = model.state_dict()
    if set(expected) != set(weights):
        raise ModelError(
            f"{source}: weights do not match the static mirror (expected {', '.join(sorted(expected))}; "
            f"found {', '.join(sorted(weights)[:4])})",
            "export a static student written by mlx-edge distill --student static",
        )
    wrong = [k for k, v in expected.items() if tuple(np.shape(weights[k])) != tuple(v.shape)]
    if wrong:
        raise ModelError(
            f"{source}: {wrong[0]} has shape {tuple(np.shape(weights[wrong[0]]))}, the mirror expects "
            f"{tuple(expected[wrong[0]].shape)}",
            "fix config.json or distill the student again",
        )
    model.load_state_dict({k: torch.from_numpy(np.array(v, np.float32)) for k, v in weights.items()}, strict=True)
    return model.eval()
