"""The character ranges the augment stage tells scripts apart by, written once."""

from __future__ import annotations

import re

IDEOGRAPHS = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"  # CJK ideographs: extension A, unified, compatibility
KANA = "\u3040-\u30ff"  # hiragana and katakana
HANGUL = "\uac00-\ud7af"  # hangul syllables

IDEOGRAPH = re.compile(f"[{IDEOGRAPHS}]")
