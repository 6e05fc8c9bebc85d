#!/usr/bin/env python3
"""Generate the bundle-manifest fixture for the Swift package (MLXEdgeKit's BundleManifest tests).

Regenerate (one command, from the repository root):

    .venv/bin/python scripts/make_bundle_manifest_fixture.py

It builds a tiny random student (the one tests/helpers/exports.py uses: tests/helpers/tiny.py's
build_tiny_bert, seed 3), exports it with the real exporter (`mlx_edge.export.export_bundle`,
fixed sequence length 32, fp32, 4 parity texts: a few seconds), and writes, under
swift/Tests/MLXEdgeKitTests/Fixtures/bundle/:

  manifest.json            the exported manifest, unchanged except `student.path`, which is replaced
                           by "tiny-student" (the export's temporary directory means nothing here)
  vocab.txt, tokenizer.json, tokenizer_config.json
                           the tokenizer files the manifest lists (`tokenizer.files`), byte for byte,
                           so their sha256 entries in `files` verify

The models (Encoder.mlpackage, Head.mlmodel, ...) are not copied: the Swift tests only read the
manifest and the tokenizer. tests/test_swift_manifest_fixture.py fails when the exporter's manifest
no longer has the fixture's keys; rerun this script then, and run the Swift tests.
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
FIXTURE_DIR = ROOT / "swift" / "Tests" / "MLXEdgeKitTests" / "Fixtures" / "bundle"
STUDENT_PATH = "tiny-student"
SEQ_LEN = 32
N_TEXTS = 4

if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def export_tiny_bundle(workdir: Path) -> Path:
    """Export the tiny random student into `workdir`/bundle with the current exporter; returns the bundle."""
    from mlx_edge.export import export_bundle
    from tests.helpers.tiny import build_tiny_bert

    workdir = Path(workdir)
    student = build_tiny_bert(workdir / "student", seed=3, initializer_range=0.2)
    result = export_bundle(
        student_dir=student,
        out_dir=workdir / "bundle",
        seq_len=SEQ_LEN,
        precision="fp32",
        n_texts=N_TEXTS,
        progress=False,
    )
    return result.bundle


def fixture_manifest(bundle: Path) -> dict:
    """The bundle's manifest as the fixture stores it (the machine-specific student path replaced)."""
    manifest = json.loads((bundle / "manifest.json").read_text(encoding="utf-8"))
    manifest["student"]["path"] = STUDENT_PATH
    return manifest


def write_fixture(bundle: Path, dest: Path = FIXTURE_DIR) -> list[str]:
    """Replace `dest` with the fixture made from `bundle`; returns the names written."""
    manifest = fixture_manifest(bundle)
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    names = list(manifest["tokenizer"]["files"])
    for name in names:
        shutil.copyfile(bundle / name, dest / name)
    text = json.dumps(manifest, indent=2, ensure_ascii=False, allow_nan=False) + "\n"
    (dest / "manifest.json").write_text(text, encoding="utf-8")
    return ["manifest.json", *names]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=FIXTURE_DIR, help=f"fixture directory (default: {FIXTURE_DIR})")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="mlx-edge-manifest-fixture-") as tmp:
        bundle = export_tiny_bundle(Path(tmp))
        names = write_fixture(bundle, args.out)
    for name in names:
        print(f"wrote {args.out / name}")


if __name__ == "__main__":
    main()
