"""The static student's first table, model2vec style, from the teacher.

Each kept piece's row is the teacher's last hidden state of it read alone (`<s> piece </s>`, the
mean of the three positions), reduced to the student's width with PCA and multiplied by a SIF
weight a / (a + p(piece)), so that frequent pieces ("▁the", "，") count for less in a sentence's
mean. p(piece) is exp(score) of a Unigram vocabulary; WordPiece has no scores, so its vocabulary
order stands in for frequency (Zipf: p ∝ 1 / rank), as model2vec does.

Or (`table_from="context"`) a piece the training texts use starts from the mean of its contextual
states over those texts: the better table if it is not trained further (to-do data: 88.0% vs 82.5%
dev, head only), slightly the worse one once it is (benchmarks/static_student.py).
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np

from mlx_edge.data import collate

SIF = 1e-3  # model2vec's SIF coefficient: a piece as likely as this counts half
CONTEXT_BATCH, ALONE_BATCH = 32, 512


def alone_states(teacher, keep: np.ndarray, cls_id: int, sep_id: int) -> np.ndarray:
    """(len(keep), H): the teacher's last hidden states of `<s> piece </s>`, averaged over the 3 positions."""
    out = []
    for start in range(0, len(keep), ALONE_BATCH):
        piece = keep[start : start + ALONE_BATCH].astype(np.int32)
        ids = np.stack([np.full_like(piece, cls_id), piece, np.full_like(piece, sep_id)], axis=1)
        hidden = teacher(mx.array(ids), mx.ones(ids.shape, dtype=mx.int32)).last_hidden
        out.append(np.array(hidden.mean(axis=1), dtype=np.float64))
    return np.concatenate(out)


def live_hidden(teacher, teacher_ids: list[np.ndarray], pad_id: int):
    """(batch of id arrays, the teacher's last hidden states (B, L, H)) over `teacher_ids`, computed here."""
    for start in range(0, len(teacher_ids), CONTEXT_BATCH):
        batch = teacher_ids[start : start + CONTEXT_BATCH]
        ids, mask = collate(batch, pad_id=pad_id)
        yield batch, np.array(teacher(mx.array(ids), mx.array(mask)).last_hidden)


def context_states(batches, remap: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(sums (V, H), counts (V,)) of the last hidden states of each kept piece over `batches`
    (live_hidden's pairs, or a targets cache's); `remap`: teacher id -> student row."""
    rows = int(remap.max()) + 1
    sums, counts = None, np.zeros(rows)
    for batch, hidden in batches:
        sums = np.zeros((rows, hidden.shape[-1])) if sums is None else sums
        for r, x in enumerate(batch):
            np.add.at(sums, remap[x], hidden[r, : len(x)].astype(np.float64))
            np.add.at(counts, remap[x], 1)
    return sums, counts


def pca(x: np.ndarray, dim: int) -> np.ndarray:
    """`x` centered and projected on its `dim` principal components (fewer columns than `dim`: all of them)."""
    centered = x - x.mean(axis=0)
    _, _, vt = np.linalg.svd(centered, full_matrices=False)
    return centered @ vt[:dim].T


def sif_weights(tokenizer_json: dict, keep: np.ndarray, a: float = SIF) -> np.ndarray:
    """a / (a + p) for each kept piece: p from Unigram scores (log probabilities), else Zipf by rank."""
    model = tokenizer_json["model"]
    if model.get("type") == "Unigram":
        p = np.exp(np.array([score for _, score in model["vocab"]], dtype=np.float64)[keep])
    else:  # WordPiece: vocabulary order is frequency order in BERT's files; p ∝ 1 / rank, summing to 1
        ranks = np.arange(1, int(max(keep)) + 2, dtype=np.float64)
        p = (1.0 / ranks / np.sum(1.0 / ranks))[keep]
    return a / (a + p)


def with_context(alone: np.ndarray, sums: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Each piece's contextual mean where the texts used it, its alone state elsewhere."""
    return np.where(counts[:, None] > 0, sums / np.maximum(counts, 1)[:, None], alone)


def initial_table(states: np.ndarray, weights: np.ndarray, dim: int) -> np.ndarray:
    """(V, dim) float32: the states reduced by PCA, each row times its SIF weight."""
    return (pca(states, dim) * weights[:, None]).astype(np.float32)
