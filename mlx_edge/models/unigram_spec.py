"""A SentencePiece Unigram tokenizer.json as plain data for MLXEdgeKit's `UnigramTokenizer`.

The Swift side cannot run the Rust `tokenizers` library, so the export ships what it needs to
tokenize identically in a JSON document it reads without any parser beyond JSON:

    {
      "format": "mlx-edge.unigram", "version": 1,
      "pieces": ["<s>", "<pad>", ...],           # id order; an id is its index
      "scores": [0.0, 0.0, ..., -9.7],            # float64, exactly tokenizer.json's
      "unk_id": 3, "bos_id": 0, "eos_id": 2, "pad_id": 1,
      "added_tokens": [{"id": 0, "content": "<s>"}, ...],  # matched in the raw text first
      "normalizer": [                             # applied in this order
        {"type": "charsmap", "max_key_bytes": 5, "unused_keys": 217148,
         "map": [["\\u00aa", "a"], ["s\\u0301", "\\u015b"], ...]},
        {"type": "collapse_spaces"}               # Replace(" {2,}", " ")
      ],
      "metaspace": {"replacement": "\\u2581", "prepend_scheme": "always", "split": true}
    }

The charsmap step is the Precompiled normalizer's darts trie decoded into key -> replacement pairs
(sorted by the key's UTF-8 bytes; a list, not an object, because Swift dictionaries keyed by String
merge canonically equivalent keys). The Rust normalizer looks up a whole grapheme cluster only when
it is shorter than 6 UTF-8 bytes, else each character alone, and takes the shortest key that
prefixes what it looks up: so a key of 6 bytes or more can never match, and the map keeps only the
shorter ones (`unused_keys` counts the others; XLM-R's charsmap has 224,711 keys, 7,563 usable).
"""

from __future__ import annotations

import base64
import binascii
import json
import struct
from pathlib import Path

from mlx_edge.errors import ModelError
from mlx_edge.fileio import atomic_write_text

SPEC_FORMAT = "mlx-edge.unigram"
SPEC_VERSION = 1
SPEC_FILE = "unigram_spec.json"
# tokenizers' Precompiled normalizer looks a grapheme up whole only below this many bytes.
GRAPHEME_LOOKUP_BYTES = 6
SPECIALS = {"unk": "<unk>", "bos": "<s>", "eos": "</s>", "pad": "<pad>"}
_MAX_KEY_DEPTH = 256  # a decoded key longer than this means a corrupt (cyclic) trie
COLLAPSE_SPACES = {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "}  # XLM-R's second normalizer
HINT = "export a SentencePiece Unigram tokenizer of the XLM-R kind (Precompiled normalizer, Metaspace, <s> $A </s>)"


def _fail(message: str) -> ModelError:
    return ModelError(f"tokenizer.json: {message}", HINT)


# --------------------------------------------------------------------------------------------
# The Precompiled charsmap: u32 trie size in bytes, the darts double array (u32 units), then the
# replacement strings, each ended by a NUL. A unit's low byte is its label, bit 8 says the node
# ends a key, bits 10-30 are the XOR offset to its children (shifted 8 more when bit 9 is set);
# a key's value unit (bit 31 set) holds the offset of its replacement in the string blob.
# --------------------------------------------------------------------------------------------


def _unit_offset(unit: int) -> int:
    return (unit >> 10) << ((unit & (1 << 9)) >> 6)


def charsmap_entries(blob: bytes) -> dict[str, str]:
    """Every key of a Precompiled charsmap with its replacement, multi-character keys included."""
    if len(blob) < 4:
        raise _fail("the precompiled charsmap is shorter than its 4-byte header")
    (trie_bytes,) = struct.unpack_from("<I", blob, 0)
    if trie_bytes % 4 or trie_bytes == 0 or 4 + trie_bytes > len(blob):
        raise _fail(f"the precompiled charsmap declares a {trie_bytes}-byte trie in {len(blob)} bytes")
    units = struct.unpack_from(f"<{trie_bytes // 4}I", blob, 4)
    strings = blob[4 + trie_bytes :]
    children = _children_index(units)
    entries: dict[str, str] = {}
    stack = [(0, b"")]
    while stack:
        pos, key = stack.pop()
        if len(key) > _MAX_KEY_DEPTH:
            raise _fail("the precompiled charsmap's trie has a key longer than 256 bytes (corrupt)")
        base = pos ^ _unit_offset(units[pos])
        if key and (units[pos] >> 8) & 1:
            entries[_decode_key(key)] = _replacement(strings, _leaf_value(units, base))
        for child in children.get(base, ()):
            if child != base:  # label 0 is the value unit
                stack.append((child, key + bytes([child ^ base])))
    return entries


def _children_index(units) -> dict[int, list[int]]:
    """base -> the units that are its children: a child of `base` with label c sits at base ^ c, in
    the same 256-unit block, and stores c. Grouping units by (block, label ^ position) finds every
    node's children at once instead of trying 255 labels per node."""
    index: dict[int, list[int]] = {}
    for pos, unit in enumerate(units):
        if not unit >> 31:  # value units are never children
            index.setdefault((pos & ~0xFF) | ((unit & 0xFF) ^ (pos & 0xFF)), []).append(pos)
    return index


def _leaf_value(units, pos: int) -> int:
    if pos >= len(units):
        raise _fail("the precompiled charsmap's trie points outside itself")
    return units[pos] & ((1 << 31) - 1)


def _decode_key(key: bytes) -> str:
    try:
        return key.decode("utf-8")
    except UnicodeDecodeError:
        raise _fail(f"the precompiled charsmap has a key that is not UTF-8 ({key!r})") from None


def _replacement(strings: bytes, start: int) -> str:
    end = strings.find(b"\0", start)
    if start >= len(strings) or end < 0:
        raise _fail("the precompiled charsmap's replacement offsets run past its strings")
    try:
        return strings[start:end].decode("utf-8")
    except UnicodeDecodeError:
        raise _fail("the precompiled charsmap has a replacement that is not UTF-8") from None


_OFFSET_LIMIT = 1 << 21  # a unit stores an XOR offset below this as it is (bits 10-30)


def charsmap_blob(pairs) -> bytes:
    """A Precompiled charsmap holding `pairs` ((key, replacement), keys non-empty): the darts double
    array `charsmap_entries` reads back and tokenizers' Precompiled normalizer looks keys up in.

    Built breadth first: each node takes the lowest base not used before whose slots (base ^ label
    for each child's byte, and base itself for the value unit when a key ends there) are all free.
    Distinct bases keep a lookup of an absent byte from landing on another node's child with the
    same label; the array is padded to whole 256-unit blocks, since a lookup may probe any slot of
    its node's block."""
    strings, where = bytearray(), {}
    root: dict = {}
    for key, value in pairs:
        if not key:
            raise ModelError("the charsmap has an empty key", "export the bundle again")
        if value not in where:
            where[value] = len(strings)
            strings += value.encode("utf-8") + b"\0"
        node = root
        for byte in key.encode("utf-8"):
            node = node.setdefault(byte, {})
        node[None] = where[value]  # the key ends here: its replacement's offset
    units, taken, bases = [0] * 256, bytearray(256), set()
    taken[0] = 1  # the root's unit
    queue, first_free = [(0, root)], 1
    for pos, node in queue:  # grows as children are placed: breadth first
        labels = sorted(b for b in node if b is not None)
        slots = labels + ([0] if None in node else [])
        first_free = _free_from(taken, first_free)
        free = first_free  # try the free slots in order as the first label's
        base = free ^ slots[0]
        while base in bases or any(_slot_taken(taken, base ^ c) for c in slots[1:]):
            free = _free_from(taken, free + 1)
            base = free ^ slots[0]
        if base >= len(taken):
            more = (base | 0xFF) + 1 - len(taken)
            taken += bytearray(more)
            units += [0] * more
        offset = pos ^ base
        if offset >= _OFFSET_LIMIT:
            raise ModelError("the charsmap is too large for a darts double array", "export the bundle again")
        bases.add(base)
        units[pos] |= offset << 10
        if None in node:
            units[base] = (1 << 31) | node[None]
            taken[base] = 1
        for c in labels:
            child = node[c]
            units[base ^ c] = c | ((None in child) << 8)
            taken[base ^ c] = 1
            queue.append((base ^ c, child))
    return struct.pack("<I", 4 * len(units)) + struct.pack(f"<{len(units)}I", *units) + bytes(strings)


def _free_from(taken: bytearray, pos: int) -> int:
    """The first free slot at or after `pos` (slots past the array are free)."""
    found = taken.find(0, pos)
    return found if found >= 0 else max(pos, len(taken))


def _slot_taken(taken: bytearray, pos: int) -> bool:
    return pos < len(taken) and taken[pos] == 1


# --------------------------------------------------------------------------------------------
# tokenizer.json -> spec
# --------------------------------------------------------------------------------------------


def unigram_spec(tokenizer_json: dict) -> dict:
    """The spec document (see the module docstring) of a Unigram `tokenizer.json`, or a ModelError."""
    if not isinstance(tokenizer_json, dict):
        raise _fail("the document is not a JSON object")
    pieces, scores, unk_id = _model(tokenizer_json.get("model"))
    ids = _special_ids(pieces, unk_id)
    _check_post_processor(tokenizer_json.get("post_processor"), ids)
    return {
        "format": SPEC_FORMAT,
        "version": SPEC_VERSION,
        "pieces": pieces,
        "scores": scores,
        **{f"{role}_id": i for role, i in ids.items()},
        "added_tokens": _added_tokens(tokenizer_json.get("added_tokens"), pieces),
        "normalizer": _normalizer_steps(tokenizer_json.get("normalizer")),
        "metaspace": _metaspace(tokenizer_json.get("pre_tokenizer")),
    }


def write_unigram_spec(tokenizer_dir: str | Path, out_path: str | Path) -> dict:
    """Reads `tokenizer_dir/tokenizer.json`, writes its spec to `out_path` (atomically), returns it."""
    path = Path(tokenizer_dir) / "tokenizer.json"
    if not path.is_file():
        raise ModelError(f"{tokenizer_dir} has no tokenizer.json", "the Unigram spec is made from the fast tokenizer")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise ModelError(f"{path} is not valid JSON ({exc})", "re-save the tokenizer") from exc
    spec = unigram_spec(data)
    atomic_write_text(Path(out_path), json.dumps(spec, ensure_ascii=False, separators=(",", ":")) + "\n")
    return spec


def _model(model) -> tuple[list[str], list[float], int]:
    if not isinstance(model, dict):
        raise _fail("it has no model object")
    if model.get("type") != "Unigram":
        raise _fail(f"its model is {model.get('type')!r}, not 'Unigram'")
    vocab = model.get("vocab")
    if not isinstance(vocab, list) or not vocab:
        raise _fail("the Unigram vocab is missing or empty")
    pieces, scores = [], []
    for i, entry in enumerate(vocab):
        ok = isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], str) and entry[0]
        if not ok or isinstance(entry[1], bool) or not isinstance(entry[1], (int, float)):
            raise _fail(f"vocab[{i}] is not a [piece, score] pair: {entry!r}")
        pieces.append(entry[0])
        scores.append(float(entry[1]))
    if model.get("byte_fallback"):
        raise _fail("the Unigram model uses byte_fallback, which MLXEdgeKit does not implement")
    unk_id = model.get("unk_id")
    if isinstance(unk_id, bool) or not isinstance(unk_id, int) or not 0 <= unk_id < len(pieces):
        raise _fail(f"the Unigram model has no usable unk_id ({unk_id!r})")
    return pieces, scores, unk_id


def _special_ids(pieces: list[str], unk_id: int) -> dict[str, int]:
    index: dict[str, int] = {}
    for i, piece in enumerate(pieces):
        index[piece] = i  # a repeated piece keeps its last id, as tokenizers' vocab map does
    missing = [token for token in SPECIALS.values() if token not in index]
    if missing:
        raise _fail(f"the vocabulary lacks {', '.join(missing)}")
    if pieces[unk_id] != SPECIALS["unk"]:
        raise _fail(f"unk_id {unk_id} is {pieces[unk_id]!r}, not '<unk>'")
    return {role: unk_id if role == "unk" else index[token] for role, token in SPECIALS.items()}


def _check_post_processor(post, ids: dict[str, int]) -> None:
    """Only `<s> $A </s>` (TemplateProcessing or RobertaProcessing) is what the Swift side adds."""
    kind = post.get("type") if isinstance(post, dict) else None
    if kind == "TemplateProcessing":
        single = post.get("single") if isinstance(post.get("single"), list) else []
        template = [
            _field(next(iter(item.values()), None), "id") if isinstance(item, dict) else None for item in single
        ]
        specials = post.get("special_tokens")
        if template == ["<s>", "A", "</s>"] and all(
            _field(_field(specials, token), "ids") == [ids[role]] for token, role in (("<s>", "bos"), ("</s>", "eos"))
        ):
            return
    elif kind == "RobertaProcessing":
        if post.get("cls") == ["<s>", ids["bos"]] and post.get("sep") == ["</s>", ids["eos"]]:
            return
    raise _fail(f"the post-processor ({kind}) is not '<s> $A </s>' with the vocabulary's ids")


def _field(obj, key):
    """obj[key] when obj is an object, else None (malformed documents read as 'absent')."""
    return obj.get(key) if isinstance(obj, dict) else None


def _added_tokens(added, pieces: list[str]) -> list[dict]:
    out = []
    for token in added or []:
        if not isinstance(token, dict) or not isinstance(token.get("content"), str) or not token["content"]:
            raise _fail(f"added token {token!r} has no content")
        content, i = token["content"], token.get("id")
        if not isinstance(i, int) or not 0 <= i < len(pieces) or pieces[i] != content:
            raise _fail(f"added token {content!r} (id {i!r}) is not the vocabulary's piece with that id")
        flags = [name for name in ("normalized", "lstrip", "rstrip", "single_word") if token.get(name)]
        if flags:
            raise _fail(f"added token {content!r} sets {', '.join(flags)}, which MLXEdgeKit does not implement")
        out.append({"id": i, "content": content})
    return out


def _normalizer_steps(normalizer) -> list[dict]:
    if normalizer is None:
        return []
    if not isinstance(normalizer, dict):
        raise _fail("the normalizer is not an object")
    if normalizer.get("type") == "Sequence":
        inner = normalizer.get("normalizers")
        if not isinstance(inner, list):
            raise _fail("the normalizer Sequence has no list of normalizers")
        return [step for n in inner for step in _normalizer_steps(n)]
    if normalizer.get("type") == "Precompiled":
        return [_charsmap_step(normalizer.get("precompiled_charsmap"))]
    if normalizer.get("type") == "Replace":
        if normalizer.get("pattern") == {"Regex": " {2,}"} and normalizer.get("content") == " ":
            return [{"type": "collapse_spaces"}]
        raise _fail(f"Replace {normalizer.get('pattern')!r} -> {normalizer.get('content')!r} is not ' {{2,}}' -> ' '")
    raise _fail(f"normalizer {normalizer.get('type')!r} is not supported (Precompiled and Replace(' {{2,}}') are)")


def _charsmap_step(encoded) -> dict:
    if not isinstance(encoded, str):
        raise _fail("the Precompiled normalizer has no precompiled_charsmap")
    try:
        blob = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        raise _fail("the precompiled_charsmap is not base64") from None
    entries = charsmap_entries(blob)
    usable = sorted(
        ((k.encode(), k, v) for k, v in entries.items() if len(k.encode()) < GRAPHEME_LOOKUP_BYTES),
    )
    return {
        "type": "charsmap",
        "max_key_bytes": GRAPHEME_LOOKUP_BYTES - 1,
        "unused_keys": len(entries) - len(usable),
        "map": [[k, v] for _, k, v in usable],
    }


def _metaspace(pre) -> dict:
    if not isinstance(pre, dict) or pre.get("type") != "Metaspace":
        kind = pre.get("type") if isinstance(pre, dict) else pre
        raise _fail(f"the pre-tokenizer is {kind!r}, not Metaspace")
    replacement = pre.get("replacement")
    if not isinstance(replacement, str) or len(replacement) != 1:
        raise _fail(f"the Metaspace replacement {replacement!r} is not one character")
    # tokenizers: add_prefix_space=false means "never"; prepend_scheme defaults to "always".
    scheme = "never" if pre.get("add_prefix_space") is False else pre.get("prepend_scheme", "always")
    split = pre.get("split", True)
    if scheme != "always" or split is not True:
        raise _fail(f"Metaspace prepend_scheme {scheme!r} split {split!r}: MLXEdgeKit implements 'always' with split")
    return {"replacement": replacement, "prepend_scheme": scheme, "split": True}


# --------------------------------------------------------------------------------------------
# spec -> tokenizer.json: a bundle ships the spec alone (what the app reads); Python rebuilds the
# `tokenizers` document from it to tokenize as the app does.
# --------------------------------------------------------------------------------------------


def spec_tokenizer_json(spec: dict) -> dict:
    """The tokenizer.json that `unigram_spec` turns into `spec` again (its charsmap holds only the
    keys a lookup can reach, so `unused_keys` comes back 0): Unigram pieces and scores, the
    Precompiled charsmap rebuilt from the spec's pairs, Metaspace, `<s> $A </s>`."""
    if not isinstance(spec, dict) or spec.get("format") != SPEC_FORMAT:
        raise ModelError(f"the document is not an {SPEC_FORMAT} spec", "export the bundle again")
    try:
        pieces, scores, steps = spec["pieces"], spec["scores"], spec["normalizer"]
        ids = {role: spec[f"{role}_id"] for role in SPECIALS}
        space = spec["metaspace"]["replacement"]
        added = [{"id": t["id"], "content": t["content"]} for t in spec["added_tokens"]]
    except (KeyError, TypeError) as exc:
        raise ModelError(f"the spec lacks {exc}", "export the bundle again") from None
    if len(pieces) != len(scores):
        raise ModelError(f"the spec has {len(pieces)} pieces and {len(scores)} scores", "export the bundle again")
    try:
        normalizers = [_normalizer_of(step) for step in steps]
    except (KeyError, TypeError, ValueError, AttributeError) as exc:  # a malformed step or charsmap pair
        raise ModelError(f"the spec's normalizer is malformed ({exc!r})", "export the bundle again") from None
    return xlmr_tokenizer_json(
        pieces, scores, unk_id=ids["unk"], bos_id=ids["bos"], eos_id=ids["eos"], added=added,
        normalizers=normalizers, replacement=space,
    )  # fmt: skip


def _normalizer_of(step: dict) -> dict:
    """One spec normalizer step as the `tokenizers` normalizer it came from."""
    if step.get("type") == "charsmap":
        blob = charsmap_blob((key, value) for key, value in step["map"])
        return {"type": "Precompiled", "precompiled_charsmap": base64.b64encode(blob).decode("ascii")}
    if step.get("type") == "collapse_spaces":
        return dict(COLLAPSE_SPACES)
    raise ModelError(f"the spec's normalizer step {step.get('type')!r} is unknown", "export the bundle again")


def xlmr_tokenizer_json(
    pieces: list[str],
    scores: list[float],
    *,
    unk_id: int,
    bos_id: int,
    eos_id: int,
    added: list[dict],
    normalizers: list[dict],
    replacement: str = "\u2581",
) -> dict:
    """XLM-R's `tokenizers` pipeline over Unigram `pieces` and `scores`: `normalizers` in sequence,
    Metaspace (always prepend, split), `<s> $A </s>`, the `added` ({"id", "content"}) as special
    tokens matched in the raw text."""
    metaspace = {"type": "Metaspace", "replacement": replacement, "prepend_scheme": "always", "split": True}
    bos, eos = pieces[bos_id], pieces[eos_id]

    def special(token: str) -> dict:
        return {"SpecialToken": {"id": token, "type_id": 0}}

    def sequence(name: str) -> dict:
        return {"Sequence": {"id": name, "type_id": 0}}

    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [
            {
                "id": t["id"],
                "content": t["content"],
                "single_word": False,
                "lstrip": False,
                "rstrip": False,
                "normalized": False,
                "special": True,
            }
            for t in added
        ],
        "normalizer": {"type": "Sequence", "normalizers": normalizers} if normalizers else None,
        "pre_tokenizer": metaspace,
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [special(bos), sequence("A"), special(eos)],
            "pair": [special(bos), sequence("A"), special(eos), special(eos), sequence("B"), special(eos)],
            "special_tokens": {
                bos: {"id": bos, "ids": [bos_id], "tokens": [bos]},
                eos: {"id": eos, "ids": [eos_id], "tokens": [eos]},
            },
        },
        "decoder": metaspace,
        "model": {
            "type": "Unigram",
            "unk_id": unk_id,
            "vocab": [[p, float(s)] for p, s in zip(pieces, scores)],
            "byte_fallback": False,
        },
    }
