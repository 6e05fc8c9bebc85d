"""Self-training: a teacher of a few labeled rows learns again from its surest answers on unlabeled text.

The first fit labels the unlabeled texts; of each label it answered, the more confident `SHARE` of the
texts become training rows with that label (pseudo-labels), and a second fit starts again from the base
model on the labeled rows and them. Dev judges both fits on the same labeled dev rows; the second is
the teacher. Per label, not over all texts, so that a label the first fit under-predicts keeps rows.
"""

from __future__ import annotations

import random
from collections import defaultdict
from pathlib import Path

import numpy as np

from mlx_edge.data import LabeledData
from mlx_edge.metrics import softmax
from mlx_edge.settings import SELF_TRAIN_BELOW

# of each label's predicted texts, the more confident half: measured on 100 to-do rows (docs/teacher.md)
SHARE = 0.5
# at most this many unlabeled texts are labeled by the first fit (a seeded sample of a larger transfer set):
# a second fit on 10,000 pseudo-labeled rows already costs several times the first
MAX_TEXTS = 20_000


def applies(self_train: str, train_rows: int, has_text: bool) -> bool:
    """Whether `self_train` ("auto", "yes", "no") trains twice on `train_rows` labeled training rows,
    given unlabeled text or not."""
    if not has_text or self_train == "no":
        return False
    return self_train == "yes" or train_rows < SELF_TRAIN_BELOW


def sample(texts: list[str], seed: int, limit: int = MAX_TEXTS) -> list[str]:
    """`texts`, or a seeded sample of `limit` of them in their file order."""
    if len(texts) <= limit:
        return texts
    keep = sorted(random.Random(seed).sample(range(len(texts)), limit))
    return [texts[i] for i in keep]


def pseudo_rows(texts: list[str], probabilities: np.ndarray, labels: list[str], share: float = SHARE) -> LabeledData:
    """The pseudo-labeled rows: per predicted label, the `share` of its texts with the highest top
    probability (at least one), in the texts' order. `probabilities`: (texts, labels)."""
    predicted = probabilities.argmax(axis=1)
    confidence = probabilities.max(axis=1)
    by_label: dict[int, list[int]] = defaultdict(list)
    for i, label in enumerate(predicted):
        by_label[int(label)].append(i)
    keep: list[int] = []
    for rows in by_label.values():
        rows.sort(key=lambda i: (-confidence[i], i))
        keep += rows[: max(1, round(len(rows) * share))]
    keep.sort()
    return LabeledData([texts[i] for i in keep], [labels[predicted[i]] for i in keep], source="<pseudo-labels>")


def predict(teacher_dir: Path, texts: list[str], *, max_length: int, device: str) -> tuple[np.ndarray, list[str]]:
    """The first fit's label probabilities on `texts` (MLX, the one inference path) and its labels."""
    from mlx_edge.models.classify import text_logits  # lazy: MLX loads only when a teacher self-trains
    from mlx_edge.runtime.devices import mlx_device  # lazy: as above

    mlx_device(device)
    logits, labels = text_logits(teacher_dir, texts, max_length=max_length, batch_size=64)
    return softmax(logits), labels
