"""The character ranges the augment stage tells scripts apart by, written once; the CJK ideographs' are
data.py's (IDEOGRAPHS, IDEOGRAPH), where language_of reads a text's half by the same ranges."""

from __future__ import annotations

KANA = "\u3040-\u30ff"  # hiragana and katakana
HANGUL = "\uac00-\ud7af"  # hangul syllables
