"""The export bundle's format: file names, the manifest and its JSON schema, reading it back.

`manifest.json` is the contract with the Swift side (schemas/bundle_manifest.schema.json); export
writes it, check and the app read it. Every path it names is relative and stays inside the bundle
(`refuse_escapes`): check never reads a file outside the directory it was given.
"""

from __future__ import annotations

import json
import os
import sys
from importlib import metadata
from pathlib import Path

import jsonschema

from bridges.coreml_export import SequenceLengths
from mlx_edge import __version__
from mlx_edge.errors import BundleError
from mlx_edge.fileio import sha256_file
from mlx_edge.settings import ExportSettings

ENCODER_FILE, CLASSIFIER_FILE, HEAD_FILE, ONNX_FILE = (
    "Encoder.mlpackage",
    "Classifier.mlpackage",
    "Head.mlmodel",
    "model.onnx",
)
# What MLXEdgeKit loads is in every bundle; the extras only when asked for (`--extras`): the
# combined classifier carries the encoder's weights a second time, the ONNX model is fp32.
REQUIRED_MODELS = ("encoder", "head")
EXTRAS = ExportSettings.EXTRAS  # ("classifier", "onnx", "tokenizer-json")
MODEL_FILES = {"encoder": ENCODER_FILE, "head": HEAD_FILE, "classifier": CLASSIFIER_FILE, "onnx": ONNX_FILE}
MANIFEST = "manifest.json"
# User-defined metadata export writes into the CoreML models, so that check can compare what the
# manifest claims with what the models were built with (a manifest can be edited and re-hashed).
LABELS_KEY = "mlx_edge.labels"  # JSON list: the labels in the order of the models' outputs
TOKENIZER_KEY = "mlx_edge.tokenizer_sha256"  # JSON object: tokenizer file -> sha256 at export
FIX = "use the bundle as mlx-edge export wrote it, or export it again"
FORMAT, FORMAT_VERSION = "mlx-edge-bundle", 1
TOOLS = ("mlx", "torch", "coremltools", "onnx", "onnxruntime", "numpy", "tokenizers", "safetensors")


def tool_versions() -> dict[str, str]:
    out = {"python": sys.version.split()[0], "mlx-edge": __version__}
    for name in TOOLS:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def weights_sha256(student_dir: Path) -> str:
    single = student_dir / "model.safetensors"
    if single.is_file():
        return sha256_file(single)
    return sha256_file(student_dir / "model.safetensors.index.json")


def schema() -> dict:
    path = Path(__file__).parents[1] / "schemas" / "bundle_manifest.schema.json"
    return json.loads(path.read_text(encoding="utf-8"))


def manifest_problems(manifest: dict) -> list[str]:
    """Violations of the bundle manifest's JSON schema (empty when valid)."""
    validator = jsonschema.Draft202012Validator(schema())
    return [
        f"{'/'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}"
        for e in sorted(validator.iter_errors(manifest), key=lambda e: list(map(str, e.absolute_path)))
    ]


def read_manifest(bundle: Path) -> dict:
    bundle = Path(bundle)
    if not bundle.is_dir():
        raise BundleError(f"{bundle} is not a directory", "pass the directory mlx-edge export wrote")
    path = bundle / "manifest.json"
    if not path.is_file():
        raise BundleError(f"{bundle} has no manifest.json", "pass the directory mlx-edge export wrote")
    _refuse_outside(bundle.resolve(), path, "manifest.json")  # a link out of the bundle is not read
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise BundleError(f"{path} is not valid JSON ({exc})", "re-export the bundle") from exc
    if not isinstance(manifest, dict) or not isinstance(manifest.get("models"), dict):
        raise BundleError(f"{path} is not an mlx-edge bundle manifest", "re-export the bundle")
    return manifest


def sequence_lengths(manifest: dict):
    s = manifest["sequence_length"]
    if s["kind"] == "enumerated":
        return SequenceLengths("enumerated", tuple(s["lengths"]))
    if s["kind"] == "range":
        return SequenceLengths("range", (s["min"], s["max"]))
    return SequenceLengths("fixed", (s["max"],))


def tokenizer_digests(bundle: Path, names: list[str]) -> dict[str, str]:
    """sha256 of each tokenizer file, as export records it in the models (`TOKENIZER_KEY`)."""
    return {name: sha256_file(Path(bundle) / name) for name in names}


def manifest_paths(manifest: dict) -> list[tuple[str, str]]:
    """(where in the manifest, path) of every bundle path manifest.json names."""
    tokenizer = manifest.get("tokenizer", {})
    out = [("files key", path) for path in manifest.get("files", {})]
    out += [(f"models.{key}.file", entry.get("file")) for key, entry in manifest.get("models", {}).items()]
    out += [(f"tokenizer.files[{i}]", path) for i, path in enumerate(tokenizer.get("files", []))]
    out += [(f"tokenizer.{key}", tokenizer[key]) for key in ("vocab_file", "spec_file") if tokenizer.get(key)]
    return out


def unsafe_path(path) -> str | None:
    """Why `path` is not a plain relative path inside a bundle (None when it is): the rule of
    MLXEdgeKit's `BundleManifest.isSafeRelativePath` (no absolute path, backslash, empty, . or .. part)."""
    if not isinstance(path, str) or not path:
        return "not a file name"
    if path.startswith("/"):
        return "an absolute path"
    if "\\" in path:
        return "written with backslashes"
    part = next((p for p in path.split("/") if p in ("", ".", "..")), None)
    if part is None:
        return None
    return f"a path with a {part!r} part" if part else "a path with an empty part"


def refuse_escapes(bundle: Path, manifest: dict) -> None:
    """BundleError unless every path the manifest names, and every symlink in the bundle, stays
    inside `bundle`: checked before any of them is read."""
    root = Path(bundle).resolve()
    for where, path in manifest_paths(manifest):
        problem = unsafe_path(path)
        if problem:
            raise BundleError(f"manifest.json {where} {path!r} is {problem}: a bundle names only its own files", FIX)
        _refuse_outside(root, root / path, f"manifest.json {where} {path!r}")
    for directory, dirs, files in os.walk(root):  # os.walk never enters a symlinked directory
        for name in dirs + files:
            link = Path(directory) / name
            if link.is_symlink():
                _refuse_outside(root, link, f"{link.relative_to(root).as_posix()} (a symlink)")


def _refuse_outside(root: Path, path: Path, what: str) -> None:
    target = path.resolve()
    if target != root and root not in target.parents:
        raise BundleError(f"{what} resolves to {target}, outside the bundle {root}", FIX)


def tokenizer_entry(tokenizer, files: list[str], seq, spec_file: str | None) -> dict:
    """The manifest's `tokenizer` entry: kind, files, settings and special ids, as MLXEdgeKit reads them."""
    s = tokenizer.settings
    return {
        "type": s.kind,
        "files": files,
        "vocab_file": "vocab.txt" if "vocab.txt" in files else None,
        "spec_file": spec_file,
        "vocab_size": tokenizer.vocab_size,
        "do_lower_case": s.do_lower_case,
        "strip_accents": s.strip_accents,
        "tokenize_chinese_chars": s.tokenize_chinese_chars,
        "clean_text": s.clean_text,
        "cls_token": s.cls_token,
        "sep_token": s.sep_token,
        "pad_token": s.pad_token,
        "unk_token": s.unk_token,
        "cls_id": tokenizer.cls_id,
        "sep_id": tokenizer.sep_id,
        "pad_id": tokenizer.pad_id,
        "unk_id": tokenizer.unk_id,
        "max_length": seq.max,
        "truncation": True,
        "padding": "max_length" if seq.kind == "fixed" else "to the next accepted length",
    }
