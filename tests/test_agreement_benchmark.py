"""benchmarks/agreement.py: a student's agreement and KL with its teacher, on tiny random BERTs built here."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np

from tests.helpers.tiny import build_tiny_bert

ROOT = Path(__file__).resolve().parents[1]
TEXTS = ["pay the rent", "book a flight to tokyo", "call mom tonight", "read chapter three", "buy milk"]


def _agreement():
    spec = importlib.util.spec_from_file_location("agreement", ROOT / "benchmarks" / "agreement.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_model_agrees_with_itself_and_a_different_one_is_measured_apart(tiny_bert_dir, tmp_path):
    agreement = _agreement()
    same = agreement.compare(tiny_bert_dir, tiny_bert_dir, TEXTS)
    assert same["texts"] == len(TEXTS) and same["agreement"] == 1.0 and abs(same["kl"]) < 1e-6
    assert same["teacher_top"] == same["student_top"]
    other = build_tiny_bert(tmp_path / "other", seed=7, initializer_range=0.5)
    apart = agreement.compare(tiny_bert_dir, other, TEXTS)
    t, labels = agreement.probabilities(tiny_bert_dir, TEXTS, None)
    s, _ = agreement.probabilities(other, TEXTS, labels)
    assert apart["kl"] > 1e-3  # two random models answer differently
    assert apart["agreement"] == float(np.mean(t.argmax(1) == s.argmax(1)))
    expected = float(np.mean(np.sum(t * np.log(t / s), axis=1)))
    assert abs(apart["kl"] - expected) < 1e-6
