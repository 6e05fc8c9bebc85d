"""Vocabulary pruning: a student keeps only the pieces its data uses, and the app ships only those.

A token id is its row in the word-embedding table. Keeping a subset of the pieces in their
original order (Unigram: with their original scores) gives a tokenizer that splits every text of
the training corpus exactly as the full one did, with ids renumbered by `remap`; the student's
embedding table keeps the same rows. Text the corpus never showed may split differently (into
smaller pieces), which is why single-character pieces are kept by default: unseen words then fall
back to characters instead of <unk>.

Modes: `seen` (pieces of the corpus and the special tokens), `seen+chars` (plus every
single-character piece), `seen+script` (plus the single-character pieces of the scripts the corpus
uses: far fewer for a 250k multilingual vocabulary), `all` (no pruning).
"""

from __future__ import annotations

import copy
import json
import shutil
import unicodedata
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer

from mlx_edge.data import english_rows
from mlx_edge.errors import ModelError
from mlx_edge.fileio import atomic_write_text

MODES = ("seen", "seen+chars", "seen+script", "all")
COPIED = ("tokenizer_config.json", "special_tokens_map.json")


@dataclass(frozen=True)
class VocabPlan:
    """Which rows of the full vocabulary a student keeps, in their original order."""

    mode: str
    keep: np.ndarray  # old ids, ascending
    full_size: int
    extra: int = 0  # of which the most likely pieces added beyond the mode's
    from_reference: int = 0  # of those, the pieces English reference text uses most

    @property
    def remap(self) -> np.ndarray:
        """Old id -> new id (-1 where dropped)."""
        table = np.full(self.full_size, -1, dtype=np.int32)
        table[self.keep] = np.arange(len(self.keep), dtype=np.int32)
        return table

    def to_dict(self) -> dict:
        return {
            "mode": self.mode,
            "extra": self.extra,
            "extra_from_english": self.from_reference,
            "kept": int(len(self.keep)),
            "full": self.full_size,
        }


def pieces(tokenizer_json: dict) -> list[str]:
    """Each id's piece text (WordPiece tokens or Unigram pieces), by id."""
    model = tokenizer_json.get("model") or {}
    if model.get("type") == "Unigram":
        return [piece for piece, _ in model["vocab"]]
    if model.get("type") == "WordPiece":
        by_id = sorted(model["vocab"].items(), key=lambda kv: kv[1])
        if [i for _, i in by_id] != list(range(len(by_id))):
            raise ModelError("tokenizer.json's WordPiece ids are not 0..N-1", "re-save the tokenizer")
        return [token for token, _ in by_id]
    raise ModelError(f"cannot prune a {model.get('type')!r} tokenizer", "mlx-edge prunes WordPiece and Unigram ones")


def _char_of(piece: str) -> str | None:
    """The one character a piece stands for ("a", "##a", "▁a" or "▁" itself), else None."""
    for prefix in ("##", "\u2581"):
        if piece.startswith(prefix) and len(piece) > len(prefix):
            piece = piece[len(prefix) :]
    return piece if len(piece) == 1 else None


def _script(char: str) -> str:
    """A coarse script name: the first word of the character's Unicode name (CJK, LATIN, ...)."""
    name = unicodedata.name(char, "")
    return name.split(" ")[0] if name else "UNNAMED"


def plan_vocab(
    tokenizer_dir: Path, texts: list[str], mode: str = "seen+chars", extra: int = 0, reference: Sequence[str] = ()
) -> VocabPlan:
    """The rows to keep for a student trained on `texts` with the tokenizer of `tokenizer_dir`.

    `extra`: also keep this many more pieces, the teacher's likeliest ones (Unigram scores; WordPiece:
    vocabulary order) among those written only in the scripts of `texts`, so that words the training
    data never showed keep their own row instead of splitting into smaller pieces.

    `reference`: English text (mlx-edge gives WordNet's example sentences): of the `extra` pieces, the
    share of `texts` that are English rows (Latin letters, no CJK) are instead the pieces `reference`
    uses most, in the data's scripts. A multilingual tokenizer's likeliest Latin-script pieces are
    many languages' (on the to-do data, 4,000 extra pieces by score left the student without 6.4% of
    the teacher's English test tokens; with half of them by WordNet's use, 5.1%: docs/distill.md).
    """
    if mode not in MODES:
        raise ModelError(f"vocabulary mode {mode!r} is not one of {', '.join(MODES)}")
    if extra < 0:
        raise ModelError(f"extra pieces must be 0 or more, not {extra}")
    data = _read_tokenizer_json(tokenizer_dir)
    table = pieces(data)
    if mode == "all":
        return VocabPlan(mode, np.arange(len(table)), len(table))
    backend = Tokenizer.from_str(json.dumps(data))
    backend.no_truncation()
    backend.no_padding()
    keep = {t["id"] for t in data.get("added_tokens", [])}
    for encoding in backend.encode_batch(list(texts)):
        keep.update(encoding.ids)
    scripts = {_script(c) for t in texts for c in t if not c.isspace()}
    if mode != "seen":
        for i, piece in enumerate(table):
            char = _char_of(piece)
            if char is not None and (mode == "seen+chars" or _script(char) in scripts or piece == "\u2581"):
                keep.add(i)
    used = []
    if extra:
        english = english_rows(texts)
        share = round(extra * english / max(1, len(texts)))
        if reference and share:
            used = _most_used(backend, reference, table, scripts, keep, share)
            keep.update(used)
        keep.update(_most_likely(data, table, scripts, keep, extra - len(used)))
    return VocabPlan(mode, np.array(sorted(keep), dtype=np.int64), len(table), extra, len(used))


def _in_scripts(piece: str, scripts: set[str]) -> bool:
    """Whether a piece is a word (not [unused7] or [MASK]) written only in `scripts`."""
    text = piece.replace("\u2581", "").removeprefix("##")
    if not text or (text.startswith("[") and text.endswith("]")):
        return False
    return all(_script(c) in scripts for c in text)


def _most_used(backend, reference: Sequence[str], table: list[str], scripts: set[str], kept: set[int], count: int):
    """The `count` pieces not in `kept`, written in `scripts`, that the tokenizer uses most on `reference`
    (ties: lower id first)."""
    uses = Counter(i for encoding in backend.encode_batch(list(reference)) for i in encoding.ids)
    ranked = sorted(uses, key=lambda i: (-uses[i], i))
    return [i for i in ranked if i not in kept and _in_scripts(table[i], scripts)][:count]


def _most_likely(data: dict, table: list[str], scripts: set[str], kept: set[int], count: int) -> list[int]:
    """The `count` likeliest pieces not in `kept` whose characters are all of `scripts`: by Unigram score,
    or for WordPiece (no scores) in vocabulary order, which is frequency order in Google's BERT files."""
    if data["model"]["type"] == "Unigram":
        scores = [score for _, score in data["model"]["vocab"]]
        ranked = sorted(range(len(table)), key=lambda i: -scores[i])
    else:
        ranked = range(len(table))
    out = []
    if count <= 0:
        return out
    for i in ranked:
        if i not in kept and _in_scripts(table[i], scripts):
            out.append(i)
            if len(out) == count:
                break
    return out


def plan_matching(full_dir: Path, student_dir: Path) -> VocabPlan:
    """The plan of a student that was pruned from `full_dir`'s vocabulary: its pieces looked up by text."""
    full, own = pieces(_read_tokenizer_json(full_dir)), pieces(_read_tokenizer_json(student_dir))
    index = {piece: i for i, piece in enumerate(full)}
    missing = [piece for piece in own if piece not in index]
    if missing:
        raise ModelError(
            f"{student_dir}'s vocabulary has {len(missing)} piece(s) the teacher's lacks (e.g. {missing[0]!r})",
            "continue a student of this teacher",
        )
    keep = np.array([index[piece] for piece in own], dtype=np.int64)
    if np.any(np.diff(keep) <= 0):
        raise ModelError(f"{student_dir}'s vocabulary is not a subset of the teacher's in its order")
    return VocabPlan("student", keep, len(full))


def pruned_tokenizer_json(data: dict, keep: np.ndarray) -> dict:
    """`data` (a tokenizer.json) with only the `keep` rows, renumbered in order; <unk> must stay."""
    # The vocabulary is rebuilt, not edited: only the small parts edited in place are copied (a deep copy
    # of e5's 250k-piece file took 5 s of every new student's distillation).
    out = {**data, "model": dict(data["model"]), "post_processor": copy.deepcopy(data.get("post_processor"))}
    remap = {int(old): new for new, old in enumerate(keep)}
    model = out["model"]
    if model["type"] == "Unigram":
        unk = model.get("unk_id")
        if unk is None or unk not in remap:
            raise ModelError("the pruned vocabulary lost <unk>", "keep the unknown token (plan_vocab always does)")
        model["vocab"] = [model["vocab"][int(i)] for i in keep]
        model["unk_id"] = remap[unk]
    else:
        vocab = model["vocab"]
        if model.get("unk_token") not in vocab or vocab[model["unk_token"]] not in remap:
            raise ModelError("the pruned vocabulary lost [UNK]", "keep the unknown token (plan_vocab always does)")
        model["vocab"] = {token: remap[i] for token, i in vocab.items() if i in remap}
    added = []
    for token in out.get("added_tokens", []):
        if token["id"] in remap:
            added.append({**token, "id": remap[token["id"]]})
    out["added_tokens"] = added
    _remap_post_processor(out.get("post_processor"), remap)
    return out


def _remap_post_processor(post: dict | None, remap: dict[int, int]) -> None:
    if not post:
        return
    if post.get("type") == "TemplateProcessing":
        for entry in post.get("special_tokens", {}).values():
            entry["ids"] = [remap[i] for i in entry["ids"]]
    for key in ("cls", "sep"):  # BertProcessing / RobertaProcessing: [token, id]
        if isinstance(post.get(key), list):
            post[key][1] = remap[post[key][1]]
    for inner in post.get("processors", []):  # a Sequence of processors
        _remap_post_processor(inner, remap)


def write_pruned_tokenizer(src: Path, dst: Path, plan: VocabPlan) -> None:
    """The tokenizer files of `src`, pruned to `plan`, into `dst` (a WordPiece one gets its vocab.txt)."""
    dst = Path(dst)
    dst.mkdir(parents=True, exist_ok=True)
    data = pruned_tokenizer_json(_read_tokenizer_json(src), plan.keep)
    atomic_write_text(dst / "tokenizer.json", json.dumps(data, ensure_ascii=False))
    for name in COPIED:
        if (Path(src) / name).is_file():
            shutil.copyfile(Path(src) / name, dst / name)
    if data["model"]["type"] == "WordPiece":
        table = pieces(data)
        atomic_write_text(dst / "vocab.txt", "".join(token + "\n" for token in table))


def _read_tokenizer_json(directory: Path) -> dict:
    path = Path(directory) / "tokenizer.json"
    if not path.is_file():
        raise ModelError(f"{directory} has no tokenizer.json", "vocabulary pruning needs the fast tokenizer's file")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise ModelError(f"{path} is not valid JSON ({exc})", "re-save the tokenizer") from exc
