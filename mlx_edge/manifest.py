"""The small JSON manifest every stage directory carries: what made it, from what, with which versions.

The next stage reads it and refuses a mismatch (another tokenizer, other labels, ...) with a clear
message. (The export bundle's `manifest.json` is a separate, richer contract with the Swift side.)
"""

from __future__ import annotations

import datetime as _dt
import json
import platform
from importlib import metadata
from pathlib import Path
from typing import Any

from mlx_edge import __version__
from mlx_edge.errors import ManifestError
from mlx_edge.fileio import atomic_write_json, sha256_file

MANIFEST_NAME = "mlx_edge_manifest.json"
TRACKED_PACKAGES = ("mlx", "torch", "transformers", "tokenizers", "safetensors", "numpy", "coremltools")


def installed_version(dist: str) -> str | None:
    """The installed version of distribution `dist`, or None."""
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def versions() -> dict[str, str | None]:
    return {"python": platform.python_version(), "mlx-edge": __version__} | {
        dist: installed_version(dist) for dist in TRACKED_PACKAGES
    }


def file_fingerprint(path: Path) -> dict[str, Any]:
    path = Path(path)
    return {"path": str(path), "sha256": sha256_file(path), "bytes": path.stat().st_size}


def write_manifest(directory: Path, kind: str, **fields: Any) -> dict[str, Any]:
    manifest = {
        "kind": kind,
        "created": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "versions": versions(),
        **fields,
    }
    atomic_write_json(Path(directory) / MANIFEST_NAME, manifest)
    return manifest


def read_manifest(directory: Path, kind: str | None = None) -> dict[str, Any] | None:
    """The manifest, or None when the directory has none (e.g. a model from the hub)."""
    path = Path(directory) / MANIFEST_NAME
    if not path.is_file():
        return None
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise ManifestError(f"{path} is not valid JSON ({exc})", "delete it and re-run the stage") from exc
    if kind is not None and manifest.get("kind") != kind:
        raise ManifestError(
            f"{directory} holds a {manifest.get('kind')!r} output, not {kind!r}", "check which directory you passed"
        )
    return manifest


def held_out_accuracy(teacher: Path) -> tuple[float, int] | None:
    """(dev accuracy, dev rows) of a refit teacher's first fit (teacher/train.py), or None for a teacher
    that was not refit: the refit one learned its dev rows."""
    record = ((read_manifest(Path(teacher)) or {}).get("refit") or {}).get("held_out")
    return None if record is None else (float(record["dev_accuracy"]), int(record["dev_rows"]))
