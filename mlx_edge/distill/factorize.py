"""A factorized word embedding (ALBERT, MobileBERT): (vocab, k) rows projected up to the hidden width.

The table is most of a small student's weights (14,456 pieces x 312 is as much as its four layers),
and most of its rows are pieces the training data shows once or never. `embedding_size` k keeps a
k-dimensional row per piece and one shared (hidden, k) projection. A student is first built as if
unfactorized (random, the teacher's rows, a cut of the teacher, or a distilled student being
continued), then its table T is split by a truncated SVD of the centred rows: T ~ mean + R V_k^T.
The rows become R = (T - mean) V_k, the projection's weight V_k and its bias the mean row, each
column of R then scaled to one range and V_k's by the inverse (`balanced`: the same product).

The SVD is weighted by how often each piece occurs in the training data (count + 1): the k
directions kept are those that matter for the tokens the student will read, not for the thousands
of rows it rarely or never sees. Measured on the to-do 4-layer student (559/600 dev right with its
full 312-wide table), with no training after the split: k = 96 kept 534 unweighted and 549
weighted; k = 128 kept 543 and 554.
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


def with_embedding_size(config: BertConfig, k: int, source=None) -> BertConfig:
    """`config` with its table factorized to width k (`distill --embedding-size`); `source`: the
    directory of a student being continued, whose table is then the one split."""
    if config.embedding_size == k:
        return config
    if source is not None and config.embedding_size is not None:
        raise DistillError(
            f"student {source} is already factorized to embedding width {config.embedding_size}",
            f"continue it without --embedding-size, or pass the unfactorized student to split it to {k}",
        )
    if source is not None and config.quantization is not None:
        raise DistillError(
            f"student {source} is quantized: its table cannot be split",
            "pass the float student it was fine-tuned from, then --quantize the factorized one",
        )
    config = replace(config, embedding_size=k)
    check_factorizable(config)
    return config


def low_rank(
    table: np.ndarray, k: int, row_weights: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(rows (V, k), projection weight (H, k), projection bias (H,)): rows @ weight.T + bias is the
    rank-k approximation of `table` (V, H) around its (weighted) mean row that minimizes the sum
    over rows of row_weights[i] * squared error (the plain best rank-k one when no weights are given).
    The rows' k columns are balanced (`balanced`): the weight's columns are orthogonal, not unit."""
    table = np.asarray(table, np.float64)
    w = np.ones(len(table)) if row_weights is None else np.asarray(row_weights, np.float64)
    if w.shape != (len(table),) or not np.all(np.isfinite(w)) or np.any(w <= 0):
        raise ValueError(f"row_weights must be {len(table)} positive numbers")
    w = w / w.sum()
    mean = w @ table
    centred = table - mean
    _, _, vt = np.linalg.svd(np.sqrt(w)[:, None] * centred, full_matrices=False)
    basis = vt[:k]  # (k, H), orthonormal rows: the weighted error's best k directions
    rows, weight = balanced(centred @ basis.T, basis.T)
    return rows.astype(np.float32), weight.astype(np.float32), mean.astype(np.float32)


def balanced(rows: np.ndarray, weight: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """rows / c and weight * c, column by column, with c each row column's largest magnitude (over
    their geometric mean): the same product rows @ weight.T, but every column of the table spans the
    same range. An SVD's first columns are many times larger than its last, so a block of inputs
    quantized with one scale (export's int8-block) left the small ones a few codes. On the demo's
    `tiny` split to 160 and fine-tuned, int8 in blocks of 40 on the table alone moved the check
    texts' probabilities by up to 0.039; balanced, the table and the projection together by 0.018."""
    c = np.abs(rows).max(axis=0)
    c = np.where(c > 0, c, 1.0)
    c = c / np.exp(np.log(c).mean())
    return rows / c, weight * c


def piece_weights(ids: list[np.ndarray], vocab_size: int) -> np.ndarray:
    """count + 1 of each piece in tokenized training rows: the weights `low_rank` splits a table by."""
    counts = np.bincount(np.concatenate(ids).astype(np.int64), minlength=vocab_size) if ids else np.zeros(vocab_size)
    return counts[:vocab_size].astype(np.float64) + 1.0


def factorized_from(
    full: BertForSequenceClassification, config: BertConfig, row_weights: np.ndarray | None = None
) -> BertForSequenceClassification:
    """A student of `config` (embedding_size set) with `full`'s weights, its table split by `low_rank`
    (weighted by `row_weights`, e.g. `piece_weights` of the training data)."""
    check_factorizable(config)
    weights = dict(tree_flatten(full.parameters()))
    rows, weight, bias = low_rank(np.array(weights.pop(WORDS)), config.embedding_size, row_weights)
    weights |= {WORDS: mx.array(rows), f"{PROJECTION}.weight": mx.array(weight), f"{PROJECTION}.bias": mx.array(bias)}
    model = BertForSequenceClassification(config, fast_math=full.fast_math)
    model.load_weights(list(weights.items()), strict=True)
    model.train(full.training)
    mx.eval(model.parameters())
    return model
