"""The character ranges the augment stage tells scripts apart by, written once (the ideographs in data.py, where
language_of reads a text's half by the same ranges)."""

from __future__ import annotations

from mlx_edge.data import IDEOGRAPH, IDEOGRAPHS

__all__ = ["HANGUL", "IDEOGRAPH", "IDEOGRAPHS", "KANA"]

KANA = "\u3040-\u30ff"  # hiragana and katakana
HANGUL = "\uac00-\ud7af"  # hangul syllables
