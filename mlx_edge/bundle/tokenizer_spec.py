"""A Unigram bundle's tokenizer spec (what MLXEdgeKit's UnigramTokenizer reads): written by export,
proven there to tokenize as the student does, and checked by `check`.

The Swift side cannot run the Rust library: it tokenizes from the spec alone. The default bundle
holds the spec and no tokenizer.json (the app reads one tokenizer file, once): export rebuilds a
`tokenizers` tokenizer from the spec (models/unigram_spec.py) and refuses a bundle whose spec does
not give the student's ids on the check texts and on `PROBES`; Python (check, benchmarks) then
tokenizes from the spec as the app does. `check` holds the spec to the tokenizer it rebuilds into
and its special ids to the manifest's; its content to the sha256 the models recorded at export
(bundle/trust.py). A bundle exported with `--extras tokenizer-json` is checked against that file,
field by field, as before. WordPiece bundles have no spec (Swift reads vocab.txt) and get no result.
"""

from __future__ import annotations

import json
from pathlib import Path

from bridges.checks import CheckResult
from mlx_edge.errors import ExportError, ModelError
from mlx_edge.models.tokenizer import load_tokenizer
from mlx_edge.models.unigram_spec import SPEC_FILE, spec_tokenizer_json, unigram_spec, write_unigram_spec

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
    reference = "tokenizer.json" if (bundle / "tokenizer.json").is_file() else None
    try:
        if reference:  # exported with --extras tokenizer-json: the spec must be what it gives
            expected = unigram_spec(json.loads((bundle / reference).read_text(encoding="utf-8")))
        else:  # the spec alone: it must rebuild into the tokenizer it describes
            expected = unigram_spec(spec_tokenizer_json(spec))
            _same_unused_keys(expected, spec)
    except (OSError, ValueError, ModelError) as exc:
        where = "the bundle's tokenizer.json gives no spec" if reference else f"{name} is not a usable spec"
        return [_fail(f"{where} ({getattr(exc, 'message', exc)})")]
    if isinstance(spec, dict):
        problems = spec_differences(spec, expected, reference or "its rebuilt tokenizer")
    else:
        problems = [f"{name} is not a JSON object"]
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
            (f"{name} is tokenizer.json's spec" if reference else f"{name} rebuilds into the tokenizer it describes")
            + f" ({len(spec['pieces'])} pieces, {charsmap} charsmap keys) with the manifest's special ids",
            {"pieces": len(spec["pieces"]), "charsmap_keys": charsmap},
        )
    ]


def _same_unused_keys(rebuilt: dict, spec: dict) -> None:
    """A rebuilt charsmap holds only the keys a lookup reaches: the count of the others is the spec's."""
    steps = spec.get("normalizer") if isinstance(spec.get("normalizer"), list) else []
    for mine, theirs in zip(rebuilt["normalizer"], steps):
        if mine.get("type") == "charsmap" and isinstance(theirs, dict) and "unused_keys" in theirs:
            mine["unused_keys"] = theirs["unused_keys"]


def spec_differences(spec: dict, expected: dict, reference: str = "tokenizer.json") -> list[str]:
    """Where `spec` differs from `expected` (what `reference` gives), field by field; lists name
    their first differing item."""
    out = []
    for key in [*expected, *(k for k in spec if k not in expected)]:
        ours, theirs = spec.get(key), expected.get(key)
        if ours == theirs:
            continue
        if isinstance(ours, list) and isinstance(theirs, list):
            i = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), min(len(ours), len(theirs)))
            if i == min(len(ours), len(theirs)):
                out.append(f"{key} has {len(ours)} items, {reference} gives {len(theirs)}")
            else:
                out.append(f"{key}[{i}] is {_short(ours[i])}, {reference} gives {_short(theirs[i])}")
        else:
            out.append(f"{key} is {_short(ours)}, {reference} gives {_short(theirs)}")
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


# Where a tokenizer rebuilt from the spec could part from the student's: normalization (full-width
# forms, ligatures, circled digits, combining marks, compatibility ideographs), runs of spaces, raw
# special tokens, scripts without spaces, emoji sequences.
PROBES = (
    "ｱｲｳｴｵ ﾊﾟﾝ ＡＢＣ １２３ ！？",
    "ﬁne ﬂow ① ② ⑩ ㈱ ㍿ Ⅻ ½",
    "café cafe\u0301 n\u0303 A\u030a \u1100\u1161\u11a8",
    "  leading and   inner    spaces\t\ttabs\n\nnewlines  ",
    "<s> raw special tokens </s> <pad> <unk> <mask>",
    "買い物リストに牛乳を追加する。明天下午三点开会，记得带电脑。",
    "مرحبا بالعالم שלום עולם नमस्ते दुनिया สวัสดีชาวโลก",
    "👍🏽 👨‍👩‍👧 🇯🇵 ❤️ #1 @home e-mail: a.b@c.de",
    "\u200b\u200d\ufeffzero width \u00a0no-break\u3000ideographic space",
)


def spec_tokenizer(student_tokenizer, bundle: Path, texts: list[str], max_length: int):
    """The tokenizer `bundle`'s spec rebuilds into (what Python uses for the bundle, as the app
    does), after proving that it gives the student's ids on `texts` and `PROBES`."""
    try:
        rebuilt = load_tokenizer(bundle)
    except ModelError as exc:
        raise ExportError(
            f"the exported Unigram spec does not rebuild into a tokenizer: {exc.message}", exc.hint
        ) from exc
    probes = [*texts, *PROBES]
    ours = rebuilt.encode_batch(probes, max_length=max_length)
    theirs = student_tokenizer.encode_batch(probes, max_length=max_length)
    for text, a, b in zip(probes, ours, theirs):
        if list(a) != list(b):
            raise ExportError(
                f"internal: the exported Unigram spec tokenizes {_short(text)} as {_short(list(a))}, "
                f"the student's tokenizer as {_short(list(b))}",
                "export with --extras tokenizer-json to keep the student's file, and report it",
            )
    return rebuilt
