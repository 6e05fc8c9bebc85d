"""Word bags: a training row's words shuffled among broad words of its script, as transfer text.

A few-label run's teacher edits (neighbours.py) are its rows with a few words swapped:
the student sees the rows' own words in their own order. A bag is a short run of words (English) or
ideograph pieces (Chinese), each drawn with probability OWN_SHARE from one training row and otherwise
from a broad pool of that script: the words of WordNet's example sentences (weighted by the square
root of their count) or the teacher's HAN_VOCAB most probable Chinese pieces. Bags are not sentences;
the teacher answers them all the same, and the student learns the teacher's answers on the words and
characters its few rows never combine (to-do set, 100 labeled rows, labels only: docs/distill.md).
A row with Latin letters gets English words (WordNet's) when the rows are English (data.english_rows),
else the words of the other rows (a French set's bags are French); rows in other scripts (Cyrillic,
Arabic, ...) none.
"""

from __future__ import annotations

from collections import Counter
from functools import cache

import numpy as np

from mlx_edge.data import IDEOGRAPH, LATIN_WORD, wordnet_words

OWN_SHARE = 0.3  # the share of a bag's words drawn from its row
LATIN_WORDS = (3, 10)  # words in an English (Latin-script) bag, inclusive
HAN_PIECES = (4, 12)  # pieces in a Chinese bag, inclusive


@cache
def _broad_words() -> tuple[list[str], np.ndarray]:
    """WordNet's example words (lowercase) and their cumulative sampling weights (square root of the count)."""
    return _weighted(wordnet_words())


def _weighted(counts: Counter) -> tuple[list[str], np.ndarray]:
    """Words in order and their cumulative sampling weights (square root of the count)."""
    words = sorted(counts)
    weights = np.sqrt(np.array([counts[w] for w in words], dtype=np.float64))
    return words, np.cumsum(weights / weights.sum())


def han_pieces(pieces: list[str], most: int) -> list[str]:
    """The first `most` pieces of a vocabulary that are ideographs only (a SentencePiece vocabulary lists its
    pieces most probable first), without the word-start mark."""
    out: list[str] = []
    for piece in pieces:
        core = piece.lstrip("▁").removeprefix("##")
        if core and all(IDEOGRAPH.match(ch) for ch in core):
            out.append(core)
            if len(out) >= most:
                break
    return out


def word_bags(texts: list[str], total: int, *, han: list[str], seed: int = 0, english: bool = True) -> list[str]:
    """About `total` bags from `texts` (spread evenly over them, in text order), none equal to a text or to
    another bag. `han`: the Chinese pool (han_pieces); a Chinese row with an empty pool gets none.
    `english`: whether the Latin-script rows are English (their pool is WordNet's words, else the rows')."""
    if total < 0:
        raise ValueError("total must be >= 0")
    if total == 0 or not texts:
        return []
    if english:
        words, cumulative = _broad_words()
    else:
        words, cumulative = _weighted(Counter(w.lower() for text in texts for w in LATIN_WORD.findall(text)))
    rng = np.random.default_rng(seed)
    base, extra = divmod(total, len(texts))
    seen = {" ".join(t.split()) for t in texts}
    out = []
    for index, text in enumerate(texts):
        chinese = bool(IDEOGRAPH.search(text))
        own = IDEOGRAPH.findall(text) if chinese else [w.lower() for w in LATIN_WORD.findall(text)]
        pool = han if chinese else words
        if not own or not pool:
            continue
        low, high = HAN_PIECES if chinese else LATIN_WORDS
        for _ in range(base + (index < extra)):
            picked = []
            for _ in range(int(rng.integers(low, high + 1))):
                if rng.random() < OWN_SHARE:
                    picked.append(own[int(rng.integers(len(own)))])
                elif chinese:
                    picked.append(han[int(rng.integers(len(han)))])
                else:
                    picked.append(words[min(int(np.searchsorted(cumulative, rng.random())), len(words) - 1)])
            bag = ("" if chinese else " ").join(picked)
            if bag not in seen:
                seen.add(bag)
                out.append(bag)
    return out
