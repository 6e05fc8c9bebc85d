"""Classification metrics in NumPy (no scikit-learn dependency)."""

from __future__ import annotations

import numpy as np


def accuracy(pred: np.ndarray, gold: np.ndarray) -> float:
    pred, gold = np.asarray(pred), np.asarray(gold)
    return float((pred == gold).mean()) if len(gold) else 0.0


def macro_f1(pred: np.ndarray, gold: np.ndarray, num_labels: int) -> float:
    """Unweighted mean of per-class F1 over the classes present in gold or pred."""
    pred, gold = np.asarray(pred), np.asarray(gold)
    scores = []
    for c in range(num_labels):
        tp = np.sum((pred == c) & (gold == c))
        fp = np.sum((pred == c) & (gold != c))
        fn = np.sum((pred != c) & (gold == c))
        if tp + fp + fn == 0:
            continue
        scores.append(2 * tp / (2 * tp + fp + fn))
    return float(np.mean(scores)) if scores else 0.0


def majority_accuracy(train_labels: np.ndarray, gold: np.ndarray) -> float:
    """Accuracy of always answering the most frequent training label."""
    majority = np.bincount(np.asarray(train_labels)).argmax()
    return accuracy(np.full(len(gold), majority), gold)
