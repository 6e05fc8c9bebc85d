"""Small file helpers: atomic writes and hashes. Nothing a stage writes is ever left half-done."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any


def atomic_write_text(path: Path, text: str) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def atomic_write_json(path: Path, data: Any) -> None:
    atomic_write_text(path, json.dumps(data, indent=2, ensure_ascii=False, sort_keys=False) + "\n")


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def fingerprint(*parts: Any) -> str:
    """sha256 of settings and inputs: a file counts by its content, a directory by its path,
    a dataclass by its fields. Stages compare fingerprints to decide skip/resume."""

    def plain(x):
        if isinstance(x, Path):
            return sha256_file(x) if x.is_file() else str(x.resolve())
        if dataclasses.is_dataclass(x) and not isinstance(x, type):
            return dataclasses.asdict(x)
        return x

    return hashlib.sha256(json.dumps([plain(p) for p in parts], sort_keys=True, default=str).encode()).hexdigest()
