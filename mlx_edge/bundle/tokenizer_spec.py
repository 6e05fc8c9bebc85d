"""A Unigram bundle's tokenizer spec (what MLXEdgeKit's UnigramTokenizer reads): written by export,
checked against the bundle's own tokenizer.json.

The Swift side cannot run the Rust library: it tokenizes from the spec alone, so the spec must be
exactly what the exporter makes of the bundle's tokenizer.json (pieces, scores, special and added
tokens, normalizer, Metaspace), and its special ids those the manifest gives the encoder. WordPiece
bundles have no spec (Swift reads vocab.txt) and get no result here.
"""

from __future__ import annotations

import json
from pathlib import Path

from bridges.checks import CheckResult
from mlx_edge.errors import ExportError, ModelError
from mlx_edge.models.unigram_spec import SPEC_FILE, unigram_spec, write_unigram_spec

NAME = "tokenizer.spec"
# manifest tokenizer entry -> spec key: the encoder's ids must be the ones Swift adds
ROLES = {"cls_id": "bos_id", "sep_id": "eos_id", "pad_id": "pad_id", "unk_id": "unk_id"}


def check_tokenizer_spec(bundle: Path, manifest: dict) -> list[CheckResult]:
    """One result for a Unigram bundle (spec named, listed, present, equal to what tokenizer.json
    gives, agreeing with the manifest's ids); none for a WordPiece one."""
    entry = manifest["tokenizer"]
    if entry.get("type", "wordpiece") != "unigram":
        return []
    name = entry.get("spec_file")
    if not name:
        return [
            _fail("tokenizer.spec_file is missing: MLXEdgeKit cannot tokenize this Unigram bundle (export it again)")
        ]
    if name not in entry["files"]:
        return [_fail(f"{name} (tokenizer.spec_file) is not listed in tokenizer.files")]
    bundle = Path(bundle)
    try:
        spec = json.loads((bundle / name).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return [_fail(f"{name} (tokenizer.spec_file) is missing")]
    except (OSError, ValueError) as exc:  # ValueError covers JSON and UTF-8 errors
        return [_fail(f"{name} cannot be read as JSON ({exc})")]
    try:
        expected = unigram_spec(json.loads((bundle / "tokenizer.json").read_text(encoding="utf-8")))
    except (OSError, ValueError, ModelError) as exc:
        return [_fail(f"no reference: the bundle's tokenizer.json gives no spec ({exc})")]
    problems = spec_differences(spec, expected) if isinstance(spec, dict) else [f"{name} is not a JSON object"]
    if not problems:
        problems = [
            f"tokenizer.{role} is {entry[role]}, the spec's {key} is {spec[key]}"
            for role, key in ROLES.items()
            if entry[role] != spec[key]
        ]
        if entry["vocab_size"] != len(spec["pieces"]):
            problems.append(f"tokenizer.vocab_size is {entry['vocab_size']}, the spec has {len(spec['pieces'])} pieces")
    if problems:
        return [_fail(f"{name}: {'; '.join(problems[:3])}")]
    charsmap = sum(len(step.get("map", ())) for step in spec["normalizer"])
    return [
        CheckResult(
            NAME,
            True,
            f"{name} is tokenizer.json's spec ({len(spec['pieces'])} pieces, {charsmap} charsmap keys) "
            "with the manifest's special ids",
            {"pieces": len(spec["pieces"]), "charsmap_keys": charsmap},
        )
    ]


def spec_differences(spec: dict, expected: dict) -> list[str]:
    """Where `spec` differs from `expected`, field by field; lists name their first differing item."""
    out = []
    for key in [*expected, *(k for k in spec if k not in expected)]:
        ours, theirs = spec.get(key), expected.get(key)
        if ours == theirs:
            continue
        if isinstance(ours, list) and isinstance(theirs, list):
            i = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), min(len(ours), len(theirs)))
            if i == min(len(ours), len(theirs)):
                out.append(f"{key} has {len(ours)} items, tokenizer.json gives {len(theirs)}")
            else:
                out.append(f"{key}[{i}] is {_short(ours[i])}, tokenizer.json gives {_short(theirs[i])}")
        else:
            out.append(f"{key} is {_short(ours)}, tokenizer.json gives {_short(theirs)}")
    return out


def _short(value) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 60 else text[:57] + "..."


def _fail(detail: str) -> CheckResult:
    return CheckResult(NAME, False, detail)


def write_tokenizer_spec(tokenizer, student_dir: Path, bundle: Path) -> str | None:
    """Write a Unigram student's tokenizer into `bundle` as the spec MLXEdgeKit's UnigramTokenizer
    reads; returns its name, or None for
    WordPiece (Swift reads vocab.txt). Written first, so that a tokenizer Swift cannot reproduce
    stops the export before the slow conversions."""
    if tokenizer.settings.kind != "unigram":
        return None
    try:
        write_unigram_spec(student_dir, Path(bundle) / SPEC_FILE)
    except ModelError as exc:
        raise ExportError(
            f"the student's Unigram tokenizer cannot be exported for MLXEdgeKit: {exc.message}", exc.hint
        ) from exc
    return SPEC_FILE
