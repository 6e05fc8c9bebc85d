"""Augmentation without an LLM: small token-level edits of real seeds (EDA-style).

Each new text is a seed with one to three edits: delete a token, swap two neighbours, replace a
token with one from another seed of the same class, or insert one. Tokens are words for
space-separated text and single characters inside CJK runs. Crude but free; the teacher filter
(`--teacher`) removes edits that changed the meaning.
"""

from __future__ import annotations

import random
import re

from mlx_edge.data import IDEOGRAPHS

_TOKEN = re.compile(f"[{IDEOGRAPHS}]|[^\\s{IDEOGRAPHS}]+")
_CJK_CHAR = re.compile(f"^[{IDEOGRAPHS}]$")
EDITS = ("delete", "swap", "replace", "insert")


def tokens(text: str) -> list[str]:
    return _TOKEN.findall(text)


def detokenize(parts: list[str]) -> str:
    out = ""
    for i, part in enumerate(parts):
        if i and not (_CJK_CHAR.match(part) or _CJK_CHAR.match(parts[i - 1])):
            out += " "
        out += part
    return out


def edit_once(parts: list[str], vocab: list[str], rng: random.Random) -> list[str]:
    parts = list(parts)
    edit = rng.choice(EDITS if len(parts) > 1 else ("replace", "insert"))
    i = rng.randrange(len(parts))
    if edit == "delete":
        del parts[i]
    elif edit == "swap":
        j = min(i + 1, len(parts) - 1) if i < len(parts) - 1 else i - 1
        parts[i], parts[j] = parts[j], parts[i]
    elif edit == "replace" and vocab:
        parts[i] = rng.choice(vocab)
    elif vocab:
        parts.insert(i, rng.choice(vocab))
    return parts


def propose_edits(seeds: list[str], count: int, rng: random.Random, *, max_edits: int = 3) -> list[str]:
    """`count` edited copies of random seeds; the vocabulary for replacements is the class's own."""
    vocab = sorted({t for s in seeds for t in tokens(s)})
    out = []
    for _ in range(count):
        parts = tokens(rng.choice(seeds))
        if not parts:
            continue
        for _ in range(rng.randint(1, max_edits)):
            parts = edit_once(parts, vocab, rng) or parts
        out.append(detokenize(parts))
    return out
