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


# How close to a trivial answer a score may come before the report says so, in accuracy points.
TRIVIAL_MARGIN = 0.02
# Soft labels whose mean top probability lies within this share of the way from uniform (1/labels) to
# certain (1.0) carry almost nothing for a student to learn (a 2-label teacher at <= 0.55).
FLAT_SHARE = 0.1


def trivial_note(who: str, acc: float, *, majority: float, num_labels: int, split: str = "dev") -> str | None:
    """One line when `acc` is no better than guessing (1/labels) or than always answering the most
    common training label (`majority`, its accuracy on the same rows), within TRIVIAL_MARGIN; else None."""
    chance = 1.0 / max(num_labels, 1)
    floor, name = (majority, "always answering the most common label") if majority >= chance else (chance, "chance")
    if acc > floor + TRIVIAL_MARGIN:
        return None
    return (
        f"the {who}'s {split} accuracy {acc:.1%} is no better than {name} ({floor:.1%}): it has not learned "
        "the task; more labeled rows, more epochs or another base model"
    )


def flat_soft_labels_note(probs: np.ndarray) -> str | None:
    """One line when the teacher's probabilities (rows x labels) are near uniform on average: its soft
    labels then carry little for a student (a teacher may still rank right, as a barely trained one on
    a separable set does; the gold labels then do the teaching); else None."""
    probs = np.asarray(probs, np.float64)
    if probs.size == 0:
        return None
    uniform = 1.0 / probs.shape[1]
    top = float(probs.max(axis=1).mean())
    if top > uniform + FLAT_SHARE * (1.0 - uniform):
        return None
    return (
        f"the teacher's soft labels are nearly uniform (mean top probability {top:.2f}, uniform {uniform:.2f}): "
        "distillation has little to learn from them (unlabeled rows least of all); train the teacher longer or "
        "on more labels first"
    )


def softmax(logits: np.ndarray) -> np.ndarray:
    """Probabilities over the last axis, in float64."""
    z = np.asarray(logits, np.float64)
    z = np.exp(z - z.max(axis=-1, keepdims=True))
    return z / z.sum(axis=-1, keepdims=True)


def smoothed_accuracy(pred: np.ndarray, gold: np.ndarray) -> float:
    """(right + 1) / (rows + 2): an accuracy that is never 0 or 1 on a small split (Laplace)."""
    pred, gold = np.asarray(pred), np.asarray(gold)
    return smoothed_share(float((pred == gold).sum()), len(gold))


# select = "auto" (teacher and distill): keep the last epoch when the dev split has fewer rows than this
# (each row moves its accuracy by 0.5 points or more, and the best-on-dev epoch follows that noise), else
# the best on dev
SMALL_DEV = 200


def keeps_last(select: str, dev_rows: int) -> bool:
    """Whether `select` ("auto", "best" or "last") keeps the last epoch for a dev split of `dev_rows` rows."""
    return select == "last" or (select == "auto" and dev_rows < SMALL_DEV)


def smoothed_share(right: float, rows: int) -> float:
    """(right + 1) / (rows + 2), from the count of right answers among `rows`."""
    return (right + 1.0) / (rows + 2.0)


def softening_temperature(logits: np.ndarray, confidence: float, *, most: float = 1000.0) -> float:
    """The temperature T >= 1 at which the mean top probability of softmax(logits / T) over these rows
    comes down to `confidence`, found by bisection (it falls as T grows); at most `most`.

    distill passes the teacher's logits on the rows the student learns and the teacher's smoothed dev
    accuracy: soft labels as sure as the teacher is right. 1.0 for a teacher no more confident than
    that: only over-confidence is corrected. A teacher fitted to a few hundred rows is certain of
    every row it was trained on (logits in the tens, top probability 0.996 where it is right 88% of
    the time on new text); a student learning those soft labels learns the same steep logits, which
    rank none of the other labels and turn a weight's rounding into a jump in probability (an int8
    bundle failing its check)."""
    z = np.asarray(logits, np.float64)
    if z.ndim != 2 or len(z) == 0 or z.shape[1] < 2:
        return 1.0

    def mean_top(t: float) -> float:
        return float(softmax(z / t).max(axis=1).mean())

    if mean_top(1.0) <= confidence:
        return 1.0
    if mean_top(most) > confidence:
        return most
    low, high = 0.0, float(np.log(most))
    for _ in range(60):
        mid = (low + high) / 2
        low, high = (mid, high) if mean_top(float(np.exp(mid))) > confidence else (low, mid)
    return float(np.exp(high))
