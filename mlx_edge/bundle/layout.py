"""The export bundle's format: file names, the manifest and its JSON schema, reading it back.

`manifest.json` is the contract with the Swift side (schemas/bundle_manifest.schema.json); export
writes it, check and the app read it.
"""

from __future__ import annotations

import json
import sys
from importlib import metadata
from pathlib import Path

import jsonschema

from bridges.coreml_export import SequenceLengths
from mlx_edge import __version__
from mlx_edge.errors import BundleError
from mlx_edge.fileio import sha256_file

ENCODER_FILE, CLASSIFIER_FILE, HEAD_FILE, ONNX_FILE = (
    "Encoder.mlpackage",
    "Classifier.mlpackage",
    "Head.mlmodel",
    "model.onnx",
)
MANIFEST = "manifest.json"
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
