#!/usr/bin/env python3
"""Probe the grapheme cluster rules that tokenizers' Precompiled normalizer uses, for MLXEdgeKit.

The Rust normalizer (XLM-R's, multilingual-e5's) walks the text by extended grapheme cluster
(the `unicode-segmentation` crate, compiled into `tokenizers`): a cluster shorter than 6 UTF-8
bytes is looked up whole. The Swift side must cut clusters at the same places, so it carries
frozen break-property tables rather than the OS's own (which change with each release).

This script reads those properties off the installed `tokenizers` itself: it builds a charsmap
that maps every BMP character to itself, so a short cluster comes out as its first character
alone, and runs probe strings whose output says whether a break fell between two characters.
One probe per property, over every scalar. Regenerate from the repository root:

    .venv/bin/python scripts/make_grapheme_tables.py [--swift-tables]

Writes swift/Tests/MLXEdgeKitTests/Fixtures/unigram/grapheme_reference.json (the classes as
ranges); with --swift-tables also swift/Sources/MLXEdgeKit/Tokenizer/GraphemeBreakTables.swift.
A property the probes cannot observe (regional indicators: every cluster holding one is 4+ bytes,
so never looked up whole) is taken from the Unicode standard and marked so in the JSON.
"""

from __future__ import annotations

import argparse
import json
import struct
from importlib import metadata
from pathlib import Path

from tokenizers import normalizers

ROOT = Path(__file__).resolve().parent.parent
OUT_JSON = ROOT / "swift" / "Tests" / "MLXEdgeKitTests" / "Fixtures" / "unigram" / "grapheme_reference.json"
OUT_SWIFT = ROOT / "swift" / "Sources" / "MLXEdgeKit" / "Tokenizer" / "GraphemeBreakTables.swift"

SCALARS = [c for c in range(0x110000) if not 0xD800 <= c < 0xE000]
SEP = "\n"  # LF breaks on both sides (GB4, GB5) and stops every look-back rule
X = "\u0300"  # an Extend mark: a cluster "c X" is short whenever c is at most 3 bytes
COPY = "\u00a9"  # © : Extended_Pictographic, 2 bytes
ZWJ = "\u200d"
KA, VIRAMA = "\u0915", "\u094d"  # InCB Consonant and Linker
L0, V0, T0 = "\u1100", "\u1161", "\u11a8"  # Hangul L, V, T jamo
REGIONAL = [(0x1F1E6, 0x1F1FF)]


# ------------------------------------------------------------------------------------------
# A darts double array in the layout spm_precompiled reads (see mlx_edge/models/unigram_spec.py)
# ------------------------------------------------------------------------------------------


def build_charsmap(mapping: dict[str, str]) -> bytes:
    """A Precompiled charsmap blob for `mapping` (keys without NUL). Greedy XOR placement."""
    blob, offsets, trie = bytearray(), {}, {}
    for key, replacement in sorted(mapping.items()):
        if replacement not in offsets:
            offsets[replacement] = len(blob)
            blob += replacement.encode() + b"\0"
        node = trie
        for byte in key.encode():
            node = node.setdefault(byte, {})
        node[None] = offsets[replacement]
    units, used, free = [0], {0}, 1
    queue = [(0, trie)]
    while queue:
        pos, node = queue.pop()
        labels = [0 if k is None else k for k in node]
        base = free
        while any((base ^ label) in used for label in labels):
            base += 1
        used.update(base ^ label for label in labels)
        units.extend([0] * (max(base ^ label for label in labels) + 1 - len(units)))
        while free in used:
            free += 1
        offset = pos ^ base
        assert offset < 1 << 21, "trie too large for the short offset form"
        units[pos] = (units[pos] & 0xFF) | (int(None in node) << 8) | (offset << 10)
        for key, child in node.items():
            if key is None:
                units[base] = (1 << 31) | child
            else:
                units[base ^ key] = key
                queue.append((base ^ key, child))
    units.extend([0] * (-len(units) % 256))  # whole blocks: the reader indexes base ^ byte unchecked
    return struct.pack("<I", 4 * len(units)) + struct.pack(f"<{len(units)}I", *units) + bytes(blob)


IDENTITY = normalizers.Precompiled(build_charsmap({chr(c): chr(c) for c in SCALARS if 0 < c < 0x10000}))


def run(probes: list[str]) -> list[str]:
    """The identity normalizer's output for each probe (batched, LF-separated)."""
    out: list[str] = []
    for i in range(0, len(probes), 20000):
        chunk = probes[i : i + 20000]
        result = IDENTITY.normalize_str(SEP.join(chunk)).split(SEP)
        assert len(result) == len(chunk)
        out.extend(result)
    return out


def probe(template: str, scalars, kept) -> set[int]:
    """The scalars c for which the output of template.format(c) satisfies `kept(output, probe)`."""
    scalars = [c for c in scalars if chr(c) not in "\n\r"]
    texts = [template.format(c=chr(c)) for c in scalars]
    return {c for c, text, out in zip(scalars, texts, run(texts)) if kept(out, text)}


def whole(out: str, text: str) -> bool:
    return out == text


def properties() -> dict[str, set[int]]:
    """Each break property as the set of scalars the installed tokenizers gives it."""
    every = SCALARS
    # c joins a preceding letter (GB9 Extend/ZWJ, GB9a SpacingMark): "a c" comes out as "a".
    joins = probe("a{c}", every, lambda out, text: out == "a")
    # Prepend (GB9b): "c a X" is one cluster, so X survives only if "a X" was not its own cluster.
    prepend = probe("{c}a" + X, every, lambda out, text: out != text[0] + "a")
    # Control/CR/LF (GB4): "c X X" splits after c; the short "X X" keeps one X.
    control = probe("{c}" + X + X, every, lambda out, text: out == text[0] + X) | {0x0A, 0x0D}
    # GB11: "© ZWJ c" stays whole only when c is Extended_Pictographic.
    pictographic = probe(COPY + ZWJ + "{c}", sorted(set(every) - joins), whole)
    joiners = sorted(joins)
    extend = probe(COPY + "{c}" + ZWJ + COPY + X, joiners, whole)  # GB11's Extend* before the ZWJ
    zwj = probe(COPY + "{c}" + COPY + X, joiners, whole)
    spacing = joins - extend - zwj
    # InCB (GB9c): consonant [extend|linker]* linker [extend|linker]* x consonant.
    consonant = probe("{c}" + VIRAMA + KA + X, every, whole)
    linker = probe(KA + "{c}" + KA + X, joiners, whole)
    incb_extend = probe(KA + VIRAMA + "{c}" + KA + X, joiners, whole) - linker
    # Hangul and Kirat Rai (GB6-8): which L, V or T c stays with, and which V stays with c.
    before_l = probe("{c}" + L0 + X, every, whole) - prepend  # L
    before_v = probe("{c}" + V0 + X, every, whole) - prepend  # L, V, LV
    before_t = probe("{c}" + T0 + X, every, whole) - prepend  # V, LV, T, LVT
    # "V0 c X" says V or T from LV or LVT; for a 4-byte c it cannot (LV and LVT are all BMP Hangul).
    after_v = (probe(V0 + "{c}" + X, [c for c in every if c < 0x10000], whole) - joins) | set(range(0x10000, 0x110000))
    v_lv, t_lvt = before_v - before_l, before_t - before_v
    return {
        "control": control - {0x0A, 0x0D},
        "extend": extend,
        "zwj": zwj,
        "spacing_mark": spacing,
        "prepend": prepend,
        "l": before_l,
        "v": v_lv & after_v,
        "lv": v_lv - after_v,
        "t": t_lvt & after_v,
        "lvt": t_lvt - after_v,
        "extended_pictographic": pictographic,
        "incb_consonant": consonant,
        "incb_linker": linker,
        "incb_extend": incb_extend,
    }


def ranges(values: set[int]) -> list[list[int]]:
    out: list[list[int]] = []
    for v in sorted(values):
        if out and out[-1][1] == v - 1:
            out[-1][1] = v
        else:
            out.append([v, v])
    return out


def check(props: dict[str, set[int]]) -> None:
    """The general-category classes must not overlap (InCB linker/extend lie within Extend)."""
    exclusive = [k for k in props if k not in ("incb_linker", "incb_extend")]
    seen: dict[int, str] = {}
    for name in exclusive:
        for c in props[name]:
            assert c not in seen, f"U+{c:04X} is both {seen[c]} and {name}"
            seen[c] = name
    assert props["zwj"] == {0x200D}, props["zwj"]


def reference(props: dict[str, set[int]]) -> dict:
    return {
        "tokenizers_version": metadata.version("tokenizers"),
        "note": "probed from tokenizers' Precompiled normalizer; regional_indicator is not observable and "
        "comes from the Unicode standard; CR is U+000D and LF U+000A",
        **{name: ranges(values) for name, values in props.items()},
        "regional_indicator": REGIONAL,
    }


SWIFT_CLASSES = [
    ("control", "control"), ("extend", "extend"), ("zwj", "zwj"), ("spacing_mark", "spacingMark"),
    ("prepend", "prepend"), ("l", "l"), ("v", "v"), ("t", "t"), ("lv", "lv"), ("lvt", "lvt"),
    ("regional_indicator", "regionalIndicator"), ("extended_pictographic", "extendedPictographic"),
    ("incb_consonant", "incbConsonant"),
]  # fmt: skip


def swift_tables(ref: dict) -> str:
    rows = sorted((lo, hi, swift) for name, swift in SWIFT_CLASSES for lo, hi in ref[name])
    lines = [
        "// Generated by scripts/make_grapheme_tables.py --swift-tables. Do not edit by hand.",
        f"// Probed from tokenizers {ref['tokenizers_version']} (its unicode-segmentation tables).",
        "",
        "extension GraphemeBreak {",
        "    /// (first, last, class) for every scalar whose class is not `.other`, sorted.",
        "    static let classRanges: [(UInt32, UInt32, Category)] = [",
    ]
    lines += [f"        (0x{lo:X}, 0x{hi:X}, .{swift})," for lo, hi, swift in rows]
    lines += ["    ]", ""]
    for name, swift in (("incb_linker", "incbLinkerRanges"), ("incb_extend", "incbExtendRanges")):
        lines.append(f"    static let {swift}: [(UInt32, UInt32)] = [")
        lines += [f"        (0x{lo:X}, 0x{hi:X})," for lo, hi in ref[name]]
        lines += ["    ]", ""]
    lines[-1] = "}"
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--swift-tables", action="store_true", help="also write GraphemeBreakTables.swift")
    args = parser.parse_args()
    props = properties()
    check(props)
    ref = reference(props)
    OUT_JSON.parent.mkdir(parents=True, exist_ok=True)
    OUT_JSON.write_text(json.dumps(ref, separators=(",", ":"), sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {OUT_JSON.relative_to(ROOT)}: " + ", ".join(f"{k} {len(v)}" for k, v in props.items()))
    if args.swift_tables:
        OUT_SWIFT.write_text(swift_tables(ref), encoding="utf-8")
        print(f"wrote {OUT_SWIFT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
