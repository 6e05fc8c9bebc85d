"""A factorized word embedding (ALBERT, MobileBERT): (vocab, k) rows projected up to the hidden width.

The table is most of a small student's weights (14,456 pieces x 312 is as much as its four layers),
and most of its rows are pieces the training data shows once or never. `embedding_size` k keeps a
k-dimensional row per piece and one shared (hidden, k) projection. A student is first built as if
unfactorized (random, the teacher's rows, or a cut of the teacher), then its table T is split by a
truncated SVD of the centred rows: T ~ mean + (U_k S_k) V_k^T. The rows become U_k S_k, the
projection's weight V_k and its bias the mean row, so the student starts from the best rank-k
approximation of the table it would have had, and distillation recovers the rest.
"""

from __future__ import annotations

from dataclasses import replace

import mlx.core as mx
import numpy as np
from mlx.utils import tree_flatten

from mlx_edge.errors import DistillError
from mlx_edge.models.bert import BertConfig, BertForSequenceClassification

WORDS, PROJECTION = "bert.embeddings.word_embeddings.weight", "bert.embeddings.projection"


def unfactorized(config: BertConfig) -> BertConfig:
    """The same student with hidden-width rows: what the init modes know how to fill."""
    return replace(config, embedding_size=None)


def check_factorizable(config: BertConfig) -> None:
    k = config.embedding_size
    if k is not None and k >= config.hidden_size:
        raise DistillError(
            f"embedding_size {k} is not below hidden_size {config.hidden_size}: the factorized table "
            "would be larger than the plain one",
            f"use an embedding_size below {config.hidden_size} (e.g. 128), or leave it out",
        )


def low_rank(table: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(rows (V, k), projection weight (H, k), projection bias (H,)): rows @ weight.T + bias is the
    best rank-k approximation of `table` (V, H) around its mean row."""
    table = np.asarray(table, np.float64)
    mean = table.mean(axis=0)
    u, s, vt = np.linalg.svd(table - mean, full_matrices=False)
    rows = u[:, :k] * s[:k]
    return rows.astype(np.float32), vt[:k].T.astype(np.float32), mean.astype(np.float32)


def factorized_from(full: BertForSequenceClassification, config: BertConfig) -> BertForSequenceClassification:
    """A student of `config` (embedding_size set) with `full`'s weights, its table split by `low_rank`."""
    check_factorizable(config)
    weights = dict(tree_flatten(full.parameters()))
    rows, weight, bias = low_rank(np.array(weights.pop(WORDS)), config.embedding_size)
    weights |= {WORDS: mx.array(rows), f"{PROJECTION}.weight": mx.array(weight), f"{PROJECTION}.bias": mx.array(bias)}
    model = BertForSequenceClassification(config, fast_math=full.fast_math)
    model.load_weights(list(weights.items()), strict=True)
    model.train(full.training)
    mx.eval(model.parameters())
    return model
