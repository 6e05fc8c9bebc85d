"""Uploaded data files: size-limited, typed by their content (not their name or the browser's word),
read with the same reader as the CLI (so a bad file gets the CLI's message), and stored as
WORKDIR/uploads/<uuid>.<format>. The user's file name is only ever shown, never used as a path.
"""

from __future__ import annotations

import os
import re
import uuid
import warnings
from dataclasses import dataclass
from pathlib import Path

from mlx_edge.data import read_labeled
from mlx_edge.errors import DataError
from mlx_edge.serve.db import Database

UPLOADS = "uploads"
DEFAULT_LIMIT_MB = 50


@dataclass
class Upload:
    id: str
    name: str  # as the user called it (shown only)
    path: Path
    format: str
    rows: int
    labels: dict[str, int]
    warnings: list[str]


def check_name(name: str) -> str:
    """The user's file name, refused if it holds a path (a browser sends the bare name)."""
    if not name or name in (".", "..") or re.search(r"[/\\\x00-\x1f]", name) or name.startswith(".."):
        raise DataError(f"upload name {name!r} is not a plain file name", "upload the file itself, not a path")
    return name[:200]


def sniff_format(content: bytes) -> str:
    """jsonl, tsv or csv, from the first non-blank line; a binary file is refused."""
    if b"\x00" in content[:65536]:
        raise DataError("the file holds NUL bytes: it is not a text file", "upload a .csv, .tsv or .jsonl file")
    first = next((line for line in content.splitlines() if line.strip()), b"")
    if first.lstrip().lstrip(b"\xef\xbb\xbf").startswith(b"{"):
        return "jsonl"
    return "tsv" if b"\t" in first else "csv"


def save_upload(db: Database, workdir: Path, *, user_id: int, name: str, content: bytes, limit_mb: float) -> Upload:
    """Store and read one upload; a file the CLI would refuse is refused with its message and not kept."""
    shown = check_name(name)
    if len(content) > limit_mb * 1e6:
        raise DataError(
            f"{shown} is {len(content) / 1e6:.1f} MB, over the upload limit of {limit_mb:g} MB",
            "upload a smaller file, or start the server with a larger --max-upload-mb",
        )
    if not content.strip():
        raise DataError(f"{shown} is empty", "it needs one labeled example per line")
    fmt = sniff_format(content)
    directory = Path(workdir) / UPLOADS
    directory.mkdir(parents=True, exist_ok=True)
    upload_id = uuid.uuid4().hex
    path = directory / f"{upload_id}.{fmt}"
    tmp = directory / f".{upload_id}.tmp"
    tmp.write_bytes(content)
    os.replace(tmp, path)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            data = read_labeled(path)
    except DataError as exc:
        path.unlink()
        raise DataError(exc.message.replace(str(path), shown), exc.hint) from None
    notes = [str(w.message).replace(str(path), shown) for w in caught if issubclass(w.category, Warning)]
    labels = dict(sorted(data.counts().items()))
    db.add_upload(
        id=upload_id,
        user_id=user_id,
        name=shown,
        path=str(path),
        format=fmt,
        rows=len(data),
        labels=labels,
        bytes=len(content),
    )
    return Upload(upload_id, shown, path, fmt, len(data), labels, notes)
