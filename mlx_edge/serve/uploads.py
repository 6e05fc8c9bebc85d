"""Uploaded data files: size-limited, typed by their content (not their name or the browser's word),
read with the same reader as the CLI (so a bad file gets the CLI's message), and kept as
WORKDIR/uploads/<uuid>.<format> only once every file of the job has been read and the user's quota
allows them. The user's file name is only ever shown, never used as a path.

A file is first written to a hidden staging name, read there, and renamed into place with its
database row when the job is created; a file no job refers to (a crash between the two, or a
workdir from before this rule) is removed when the server starts (`sweep`).
"""

from __future__ import annotations

import os
import re
import uuid
import warnings
from dataclasses import dataclass
from pathlib import Path

from mlx_edge.data import TEXT_NAMES, read_labeled
from mlx_edge.errors import DataError
from mlx_edge.serve.db import Database
from mlx_edge.transfer import read_unlabeled

UPLOADS = "uploads"
STAGING_PREFIX = ".staged-"


@dataclass
class Upload:
    """One file read and found good; `staged` until `keep` renames it to `path`."""

    id: str
    name: str  # as the user called it (shown only)
    staged: Path
    path: Path
    format: str
    rows: int
    labels: dict[str, int]
    bytes: int
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


def sniff_unlabeled(content: bytes) -> str:
    """jsonl, a tsv or csv whose header names a text column, else txt (one text per line: a sentence
    with commas in it is no CSV row)."""
    fmt = sniff_format(content)
    if fmt == "jsonl":
        return fmt
    first = next(line for line in content.splitlines() if line.strip()).decode("utf-8", "replace")
    cells = [c.strip().strip('"').lower() for c in first.lstrip("\ufeff").split("\t" if fmt == "tsv" else ",")]
    return fmt if any(c in TEXT_NAMES for c in cells) else "txt"


def check_upload(workdir: Path, *, name: str, content: bytes, limit_mb: float, unlabeled: bool = False) -> Upload:
    """Read one upload at a staging name; a file the CLI would refuse is refused with its message and removed.
    `unlabeled`: text with no label, read as `distill --unlabeled` reads it (rows: its texts, no labels)."""
    shown = check_name(name)
    if len(content) > limit_mb * 1e6:
        raise DataError(
            f"{shown} is {len(content) / 1e6:.1f} MB, over the upload limit of {limit_mb:g} MB",
            "upload a smaller file, or start the server with a larger --max-upload-mb",
        )
    if not content.strip():
        raise DataError(
            f"{shown} is empty", "it needs one text per line" if unlabeled else "it needs one labeled example per line"
        )
    fmt = sniff_unlabeled(content) if unlabeled else sniff_format(content)
    directory = Path(workdir) / UPLOADS
    directory.mkdir(parents=True, exist_ok=True)
    upload_id = uuid.uuid4().hex
    # the reader picks the format by suffix: the staging name keeps it
    staged = directory / f"{STAGING_PREFIX}{upload_id}.{fmt}"
    staged.write_bytes(content)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            if unlabeled:
                rows, labels = len(read_unlabeled(staged)), {}
            else:
                data = read_labeled(staged)
                rows, labels = len(data), dict(sorted(data.counts().items()))
    except BaseException as exc:  # a refused file, or anything else: nothing stays staged
        staged.unlink(missing_ok=True)
        if isinstance(exc, DataError):
            raise DataError(exc.message.replace(str(staged), shown), exc.hint) from None
        raise
    notes = [str(w.message).replace(str(staged), shown) for w in caught if issubclass(w.category, Warning)]
    path = directory / f"{upload_id}.{fmt}"
    return Upload(upload_id, shown, staged, path, fmt, rows, labels, len(content), notes)


def check_quota(db: Database, user_id: int, uploads: list[Upload], quota_mb: float) -> None:
    """Refuse uploads that would take the user's kept files over `quota_mb`."""
    used, new = db.upload_bytes(user_id), sum(u.bytes for u in uploads)
    if used + new > quota_mb * 1e6:
        raise DataError(
            f"these files ({new / 1e6:.1f} MB) would take your uploads to {(used + new) / 1e6:.1f} MB, "
            f"over your quota of {quota_mb:g} MB",
            "upload smaller files, or ask the server's admin to raise --quota-mb",
        )


def keep(db: Database, uploads: list[Upload], *, user_id: int) -> None:
    """Rename the staged files into place and record them (a crash in between leaves files `sweep` removes)."""
    for u in uploads:
        os.replace(u.staged, u.path)
        db.add_upload(
            id=u.id,
            user_id=user_id,
            name=u.name,
            path=str(u.path),
            format=u.format,
            rows=u.rows,
            labels=u.labels,
            bytes=u.bytes,
        )


def discard(uploads: list[Upload]) -> None:
    for u in uploads:
        u.staged.unlink(missing_ok=True)


def sweep(db: Database, workdir: Path) -> int:
    """Remove uploads no job refers to (files and rows) and staging leftovers; the number of files removed.
    Run before the job runner starts, so no job is being created meanwhile."""
    directory = Path(workdir) / UPLOADS
    # by file name (<uuid>.<format>): the same workdir may be given relative one day and absolute the next
    used = {Path(p).name for job in db.jobs() for p in (job["params"].get("uploads") or {}).values()}
    db.drop_uploads_except(used)
    removed = 0
    for path in directory.iterdir() if directory.is_dir() else ():
        if path.is_file() and path.name not in used:
            path.unlink(missing_ok=True)
            removed += 1
    return removed
