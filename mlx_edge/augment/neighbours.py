"""Augmentation guided by the teacher (TinyBERT's data augmentation, with the teacher's own embeddings).

Each new sentence is a labeled training text with some of its words replaced: every word that is
one piece of the teacher's vocabulary (and every piece of a Chinese/Japanese run, where pieces are the
words) is replaced with probability `rate` by one of its `k` nearest pieces in the teacher's word-
embedding table (cosine). The candidates are the pieces that stand as whole words somewhere in the
same texts, of the same script and the same place in a word: a multilingual table's nearest
neighbours of an English word are mostly other languages' words (`dentist`: `stomatolog`, `zębów`,
`Zahn`), and a prefix piece in a word's place makes a non-word. A Chinese piece's candidates also
include the vocabulary's HAN_VOCAB most frequent ideograph pieces: a few hundred rows use a few
hundred characters, and the student then learns the teacher on others (on 300 to-do rows the Chinese
student rose from 79.0% to 82.8%; Latin words stay with the rows' own, for the reason above).
TinyBERT replaced words by a masked LM's and GloVe's neighbours at rate 0.4, 20 sentences per example.

The sentences carry no label: the student learns the teacher's answers on them (transfer.py), so
an edit that changed the meaning teaches the teacher's view of the new sentence, not a wrong label.
A text's sentences depend on the seed, that text and the pool of whole words (all the texts given):
`write_teacher_edits` writes them to a file once, and labeling and distillation both read that file.
"""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from pathlib import Path

import mlx.core as mx
import numpy as np

from mlx_edge.augment.bags import han_pieces, word_bags
from mlx_edge.augment.scripts import KANA
from mlx_edge.data import IDEOGRAPH, IDEOGRAPHS, english_rows
from mlx_edge.errors import ModelError, OutputError
from mlx_edge.fileio import atomic_write_text, refuse_overwriting_inputs
from mlx_edge.models.checkpoint import load_config
from mlx_edge.models.safetensors_io import read_weights
from mlx_edge.models.tokenizer import TextTokenizer, load_tokenizer

RATE = 0.4  # TinyBERT's replacement probability per word
NEIGHBOURS = 10  # candidates per piece
MAX_TRIES = 4  # draws per wanted sentence before a text gives fewer (a short text has few variants)
HAN_VOCAB = 8000  # Chinese candidates from the teacher's vocabulary as well: its first N ideograph pieces of each kind
EDITS_VERSION = 4  # in the edits stage's fingerprint: 2 HAN_VOCAB, 3 word bags, 4 bags of a non-English Latin set (old edits redone)
_HAN = re.compile(f"[{KANA}{IDEOGRAPHS}]")
_SPACED_HAN = re.compile(f"(?<=[{KANA}{IDEOGRAPHS}]) (?=[{KANA}{IDEOGRAPHS}])")


def teacher_edits(
    teacher: Path,
    texts: list[str],
    per_text: int,
    *,
    seed: int = 0,
    rate: float = RATE,
    k: int = NEIGHBOURS,
    max_length: int = 128,
    han_vocab: int | None = None,
    tokenizer: TextTokenizer | None = None,
) -> list[str]:
    """Up to `per_text` new sentences for each of `texts`, in text order, none equal to its source
    or to another of its own (a text with few replaceable words gives fewer). `tokenizer`: the teacher's,
    when the caller has it loaded already."""
    if per_text < 0:
        raise ValueError("per_text must be >= 0")
    if per_text == 0 or not texts:
        return []
    tokenizer = tokenizer or load_tokenizer(teacher)
    ids = [list(x) for x in tokenizer.encode_batch(texts, max_length=max_length)]
    plan = _Plan(tokenizer, ids, _word_table(Path(teacher)), k, HAN_VOCAB if han_vocab is None else han_vocab)
    out = []
    for text, row in zip(texts, ids):
        spots = [i for i in plan.replaceable(row) if row[i] in plan.neighbours]
        if not spots:
            continue  # nothing in this text can be replaced
        rng = np.random.default_rng(_text_seed(seed, text))
        made = {" ".join(text.split())}
        for _ in range(per_text * MAX_TRIES):
            if len(made) > per_text:
                break
            new = plan.edit(row, spots, rng, rate)
            key = " ".join(new.split())
            if key and key not in made:
                made.add(key)
                out.append(new)
    return out


def _text_seed(seed: int, text: str) -> int:
    digest = hashlib.sha256(f"{seed}\x00{' '.join(text.split())}".encode()).digest()
    return int.from_bytes(digest[:8], "little")


def _word_table(teacher: Path) -> np.ndarray:
    """The teacher's word-embedding table as float32 NumPy (vocabulary x width)."""
    weights = read_weights(teacher)
    name = next((n for n in weights if n.endswith("word_embeddings.weight")), None)
    if name is None:
        raise ModelError(
            f"{teacher} has no word-embedding table (*word_embeddings.weight)", "pass a BERT-family teacher"
        )
    return np.array(weights[name].astype(mx.float32))


def _kind(piece: str, unigram: bool) -> str | None:
    """What a piece may be swapped with: its script and whether it starts a word; None: never
    replaced (digits, punctuation, mixed scripts, special tokens)."""
    start = piece.startswith("▁") if unigram else not piece.startswith("##")
    core = piece.lstrip("▁") if unigram else piece.removeprefix("##")
    if not core or (piece.startswith("[") and piece.endswith("]")) or (piece.startswith("<") and piece.endswith(">")):
        return None
    if all(_HAN.match(ch) for ch in core):
        script = "han"
    elif all(ch.isalpha() for ch in core):
        scripts = {unicodedata.name(ch, "?").split()[0] for ch in core}
        if len(scripts) != 1:
            return None
        script = scripts.pop().lower()
    else:
        return None
    return f"{script}{'|start' if start else ''}"


class _Plan:
    """Which positions of a text can be replaced, and by what (the neighbours among whole-word pieces)."""

    def __init__(self, tokenizer: TextTokenizer, ids: list[list[int]], table: np.ndarray, k: int, han_vocab: int = 0):
        self.tokenizer = tokenizer
        self.pieces = tokenizer.pieces()
        self.unigram = tokenizer.settings.kind == "unigram"
        self.special = tokenizer.special_ids | {tokenizer.unk_id}
        self.kinds: dict[int, str] = {}
        whole: dict[str, set[int]] = {}
        for row in ids:
            for i in self.replaceable(row):
                whole.setdefault(self.kinds[row[i]], set()).add(row[i])
        extra = self._vocabulary_ideographs(han_vocab) if han_vocab > 0 else {}
        self.neighbours: dict[int, np.ndarray] = {}
        for kind, members in whole.items():
            members = np.array(sorted(members))
            pool = np.array(sorted(set(members.tolist()) | extra.get(kind, set())))
            if len(pool) < 2:
                continue
            unit = table[pool] / np.maximum(np.linalg.norm(table[pool], axis=1, keepdims=True), 1e-12)
            where = np.searchsorted(pool, members)
            similar = unit[where] @ unit.T
            similar[np.arange(len(members)), where] = -np.inf  # not itself
            nearest = np.argsort(-similar, axis=1)[:, : min(k, len(pool) - 1)]
            for member, row in zip(members, nearest):
                self.neighbours[int(member)] = pool[row]

    def _vocabulary_ideographs(self, most: int) -> dict[str, set[int]]:
        """The vocabulary's first `most` pieces made of Chinese ideographs only, by kind (a SentencePiece
        vocabulary lists its pieces most probable first)."""
        out: dict[str, set[int]] = {}
        for token, piece in enumerate(self.pieces):
            if token in self.special:
                continue
            core = piece.lstrip("▁") if self.unigram else piece.removeprefix("##")
            if not core or not all(IDEOGRAPH.match(ch) for ch in core):
                continue
            kind = _kind(piece, self.unigram)
            group = out.setdefault(kind, set())
            if len(group) < most:
                group.add(token)
        return out

    def replaceable(self, row: list[int]) -> list[int]:
        """Positions of `row` holding a whole word (one piece, or a Han piece) with a known kind."""
        pieces, special = self.pieces, self.special
        out = []
        for i, token in enumerate(row):
            if token in special:
                continue
            kind = self.kinds.get(token)
            if kind is None:
                kind = _kind(pieces[token], self.unigram)
                if kind is None:
                    continue
                self.kinds[token] = kind
            following = pieces[row[i + 1]] if i + 1 < len(row) and row[i + 1] not in special else None
            continues = following is not None and (
                not following.startswith("▁") if self.unigram else following.startswith("##")
            )
            if kind.startswith("han") or (kind.endswith("|start") and not continues):
                out.append(i)
        return out

    def edit(self, row: list[int], spots: list[int], rng: np.random.Generator, rate: float) -> str:
        """`row` with the word at each of `spots` (positions with neighbours) swapped at `rate`, at least
        one, as text."""
        chosen = [i for i in spots if rng.random() < rate] or [spots[int(rng.integers(len(spots)))]]
        new = list(row)
        for i in chosen:
            options = self.neighbours[row[i]]
            new[i] = int(options[int(rng.integers(len(options)))])
        return _SPACED_HAN.sub("", self.tokenizer.decode(new)).strip()


def write_teacher_edits(
    *,
    teacher: Path,
    train: Path,
    out: Path,
    per_text: int,
    dev: Path | None = None,
    dev_fraction: float = 0.1,
    seed: int = 0,
    text_column: str | None = None,
    label_column: str | None = None,
    column: str = "text",
    force: bool = False,
    bags: int = 0,
    bags_out: Path | None = None,
) -> tuple[int, int, int]:
    """Write the edits of the rows a student of `teacher` trains on (distill's own choice of rows: a dev
    file's, the teacher's or a seeded split's dev rows are left out) to `out` for `distill --unlabeled`
    and `teacher label --unlabeled`: one sentence per line, or to a .jsonl one object per line with the
    sentence under `column`; then about `bags` word bags of the same rows (bags.py), or to `bags_out` in the
    same form, written first. Returns (sentences, bags, source rows)."""
    from mlx_edge.distill.api import student_rows  # lazy: the distill stack loads only for this command

    teacher, out = Path(teacher), Path(out)
    refuse_overwriting_inputs(out, teacher, train, dev)
    if out.exists() and not force:
        raise OutputError(f"{out} exists", "pass --force to replace it, or another --out")
    labels = load_config(teacher).labels
    rows = student_rows(teacher, train, dev, labels, dev_fraction, seed, text_column, label_column)
    tokenizer = load_tokenizer(teacher)  # once, for the edits and the bags' Chinese pool
    sentences = teacher_edits(teacher, rows.train.texts, per_text, seed=seed, tokenizer=tokenizer)
    made_bags = (
        word_bags(
            rows.train.texts,
            bags,
            han=han_pieces(tokenizer.pieces(), HAN_VOCAB),
            seed=seed,
            english=english_rows(rows.train.texts) > 0,
        )
        if bags
        else []
    )

    def text(path: Path, texts: list[str]) -> str:
        lines = [" ".join(s.split()) for s in texts]
        if path.suffix.lower() == ".jsonl":
            lines = [json.dumps({column: line}, ensure_ascii=False) for line in lines]
        return "".join(line + "\n" for line in lines)

    if bags_out is not None:  # before `out`, which marks the work done
        atomic_write_text(Path(bags_out), text(Path(bags_out), made_bags))
    atomic_write_text(out, text(out, sentences if bags_out is not None else [*sentences, *made_bags]))
    return len(sentences), len(made_bags), len(rows.train.texts)
