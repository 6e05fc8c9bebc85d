"""Exact and near-duplicate detection on normalized text.

Near duplicates: Jaccard similarity of shingles at or above a threshold. Shingles are words and
word bigrams for space-separated text, character bigrams for text with CJK characters (Chinese has
no spaces, so words would make every sentence one "word").
"""

from __future__ import annotations

import re
import unicodedata
from collections import defaultdict

from mlx_edge.augment.scripts import HANGUL, KANA
from mlx_edge.data import IDEOGRAPHS

_CJK = re.compile(f"[{IDEOGRAPHS}{KANA}{HANGUL}]")
_PUNCT = re.compile(r"[^\w\s]", re.UNICODE)


def has_cjk(text: str) -> bool:
    return _CJK.search(text) is not None


def normalize(text: str) -> str:
    """NFKC, case-folded, punctuation removed, whitespace collapsed: what 'the same text' means."""
    text = unicodedata.normalize("NFKC", text).casefold()
    return " ".join(_PUNCT.sub(" ", text).split())


def shingles(text: str) -> frozenset[str]:
    norm = normalize(text)
    if has_cjk(norm):
        chars = norm.replace(" ", "")
        grams = {chars[i : i + 2] for i in range(len(chars) - 1)}
        return frozenset(grams or {chars})
    words = norm.split()
    return frozenset(words + [f"{a} {b}" for a, b in zip(words, words[1:])])


def jaccard(a: frozenset, b: frozenset) -> float:
    if not a and not b:
        return 1.0
    return len(a & b) / len(a | b)


class Deduper:
    """Remembers texts; `check` says whether a new one repeats a remembered one.

    Seeds are remembered too: an exact copy of a seed is `seed_copy`; with `near_seeds`, so is a
    near copy (off for token edits, whose whole point is to stay close to a seed).
    """

    def __init__(self, threshold: float = 0.8, *, near_seeds: bool = True):
        self.threshold = threshold
        self.near_seeds = near_seeds
        self._exact: dict[str, bool] = {}  # normalized text -> is a seed
        self._shingles: list[tuple[frozenset, bool]] = []
        self._index: dict[str, list[int]] = defaultdict(list)  # shingle -> entries holding it

    def add(self, text: str, *, seed: bool = False) -> None:
        self._exact.setdefault(normalize(text), seed)
        grams = shingles(text)
        number = len(self._shingles)
        self._shingles.append((grams, seed))
        for gram in grams:
            self._index[gram].append(number)

    def check(self, text: str) -> str | None:
        """None for a new text, else 'seed_copy' or 'duplicate'."""
        norm = normalize(text)
        if not norm:
            return "duplicate"
        if norm in self._exact:
            return "seed_copy" if self._exact[norm] else "duplicate"
        if self.threshold >= 1.0:
            return None
        grams = shingles(text)
        candidates = {n for g in grams for n in self._index.get(g, ())}
        for number in sorted(candidates):
            other, is_seed = self._shingles[number]
            if is_seed and not self.near_seeds:
                continue
            if jaccard(grams, other) >= self.threshold:
                return "seed_copy" if is_seed else "duplicate"
        return None
