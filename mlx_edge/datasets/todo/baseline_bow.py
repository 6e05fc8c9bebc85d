#!/usr/bin/env python3
"""Bag-of-words baselines for the to-do set (plain numpy).

Tokens: lowercased English/ASCII words, plus Chinese character unigrams and
bigrams (within runs of CJK characters).  Two models, both trained on train:

* multinomial Naive Bayes (add-one smoothing), the headline baseline;
* multinomial logistic regression on binary features (L2, full-batch gradient
  descent; lr / epochs / L2 picked once on dev, never on test).

Naive Bayes uses plain add-one smoothing (alpha = 1), untuned.  Runs in ~20 s on
CPU (the logistic regression is dense full-batch numpy).

    python mlx_edge/datasets/todo/baseline_bow.py
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
WORD_RE = re.compile(r"[a-z0-9']+")
CJK_RUN_RE = re.compile(r"[\u4e00-\u9fff]+")


def tokenize(text: str) -> list[str]:
    text = text.lower()
    toks = WORD_RE.findall(text)
    for run in CJK_RUN_RE.findall(text):
        toks.extend(run)
        toks.extend(run[i : i + 2] for i in range(len(run) - 1))
    return toks


def load(split: str) -> list[dict]:
    with open(HERE / f"{split}.jsonl", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def featurize(rows, vocab):
    X = np.zeros((len(rows), len(vocab)), dtype=np.float32)
    for i, r in enumerate(rows):
        for tok, c in Counter(tokenize(r["text"])).items():
            j = vocab.get(tok)
            if j is not None:
                X[i, j] += c
    return X


def naive_bayes(Xtr, ytr, n_cls, alpha=1.0):
    log_prior = np.log(np.bincount(ytr, minlength=n_cls) / len(ytr))
    counts = np.stack([Xtr[ytr == k].sum(0) for k in range(n_cls)]) + alpha
    log_lik = np.log(counts / counts.sum(1, keepdims=True))
    return lambda X: (X @ log_lik.T + log_prior).argmax(1)


def logistic_regression(Xtr, ytr, n_cls, l2=1e-4, lr=2.0, epochs=1500):
    Xb = (Xtr > 0).astype(np.float32)
    W = np.zeros((Xb.shape[1], n_cls), dtype=np.float32)
    b = np.zeros(n_cls, dtype=np.float32)
    Y = np.eye(n_cls, dtype=np.float32)[ytr]
    for _ in range(epochs):
        z = Xb @ W + b
        z -= z.max(1, keepdims=True)
        p = np.exp(z)
        p /= p.sum(1, keepdims=True)
        g = (p - Y) / len(Xb)
        W -= lr * (Xb.T @ g + l2 * W)
        b -= lr * g.sum(0)
    return lambda X: ((X > 0).astype(np.float32) @ W + b).argmax(1)


def main() -> None:
    train, dev, test = load("train"), load("dev"), load("test")
    labels = sorted({r["label"] for r in train})
    lab_id = {l: i for i, l in enumerate(labels)}
    vocab: dict[str, int] = {}
    for r in train:
        for tok in tokenize(r["text"]):
            vocab.setdefault(tok, len(vocab))
    Xtr = featurize(train, vocab)
    ytr = np.array([lab_id[r["label"]] for r in train])
    print(f"train {len(train)}  dev {len(dev)}  test {len(test)}  vocab {len(vocab)}")

    models = {"naive_bayes": naive_bayes(Xtr, ytr, len(labels)), "logreg": logistic_regression(Xtr, ytr, len(labels))}
    for name, predict in models.items():
        for split_name, rows in (("dev", dev), ("test", test)):
            y = np.array([lab_id[r["label"]] for r in rows])
            pred = predict(featurize(rows, vocab))
            acc = (pred == y).mean()
            by_lang = {
                lang: (pred[m] == y[m]).mean()
                for lang in ("en", "zh")
                for m in [np.array([r["lang"] == lang for r in rows])]
            }
            print(f"{name:12s} {split_name:4s} acc {acc:.3f}  (en {by_lang['en']:.3f}, zh {by_lang['zh']:.3f})")
        if name == "naive_bayes":
            y = np.array([lab_id[r["label"]] for r in test])
            pred = predict(featurize(test, vocab))
            cm = np.zeros((len(labels), len(labels)), dtype=int)
            np.add.at(cm, (y, pred), 1)
            print("  test confusion (rows = gold, cols = predicted):")
            print("  " + " ".join(f"{l[:7]:>7s}" for l in ["", *labels]))
            for i, l in enumerate(labels):
                print("  " + f"{l[:7]:>7s} " + " ".join(f"{v:7d}" for v in cm[i]))


if __name__ == "__main__":
    main()
