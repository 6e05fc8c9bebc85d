"""The teacher as a filter: its label and confidence for every new example, in MLX (no torch)."""

from __future__ import annotations

from pathlib import Path

import mlx.core as mx
import numpy as np

from mlx_edge.data import collate
from mlx_edge.errors import ModelError
from mlx_edge.manifest import read_manifest
from mlx_edge.models.checkpoint import load_model
from mlx_edge.models.tokenizer import load_tokenizer


class TeacherJudge:
    """A trained teacher directory loaded once; `judge(texts)` gives (labels, confidences)."""

    def __init__(self, teacher: Path, *, classes: list[str], batch_size: int = 32, max_length: int | None = None):
        self.teacher = Path(teacher)
        self.model = load_model(self.teacher, require_head=True)
        self.labels = self.model.config.labels
        missing = [c for c in classes if c not in self.labels]
        if missing:
            raise ModelError(
                f"the teacher {teacher} does not know the class(es) {', '.join(missing)}",
                f"its labels are {', '.join(self.labels)}: augment classes the teacher was trained on",
            )
        self.tokenizer = load_tokenizer(self.teacher)
        trained = (read_manifest(self.teacher) or {}).get("max_length", 128)
        self.max_length = min(max_length or trained, self.model.config.max_position_embeddings)
        self.batch_size = batch_size

    def judge(self, texts: list[str]) -> tuple[list[str], list[float]]:

        ids = [np.asarray(x, dtype=np.int32) for x in self.tokenizer.encode_batch(texts, max_length=self.max_length)]
        labels, confidences = [], []
        for start in range(0, len(ids), self.batch_size):
            input_ids, mask = collate(
                ids[start : start + self.batch_size], pad_id=self.tokenizer.pad_id, max_width=self.max_length
            )
            probs = np.array(mx.softmax(self.model(mx.array(input_ids), mx.array(mask)).logits, axis=-1))
            for row in probs:
                best = int(row.argmax())
                labels.append(self.labels[best])
                confidences.append(float(row[best]))
        return labels, confidences
