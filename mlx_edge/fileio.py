"""Small file helpers: atomic writes and hashes. Nothing a stage writes is ever left half-done."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import secrets
import shutil
import tempfile
from pathlib import Path
from typing import Any

from mlx_edge.errors import OutputError

STAGING_SUFFIX = ".partial"


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


def refuse_overwriting_inputs(out: Path, *inputs: Path | str | None) -> None:
    """Refuse an `out` that is an input, holds one, or lies inside an input directory: replacing it
    (--force) would delete the input, and writing into an input directory mixes an output into it.
    Inputs that are None or not existing paths (a hub id, a preset name) are skipped."""
    where = Path(out).expanduser().resolve()
    for item in inputs:
        if item is None or not Path(item).expanduser().exists():
            continue
        path = Path(item).expanduser().resolve()
        if where == path or where in path.parents:
            what = "is" if where == path else "holds"
            raise OutputError(
                f"--out {out} {what} the input {item}: replacing it would delete that input",
                "choose an --out that holds none of the inputs",
            )
        if path.is_dir() and path in where.parents:
            raise OutputError(f"--out {out} is inside the input directory {item}", "write it elsewhere")


def staging_dir(out: Path) -> Path:
    """A new hidden folder beside `out` to build it in (renamed into place when done). Its name
    carries this process's id, so that `remove_stale_staging` can tell a killed run's from a live one's."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    while True:  # not tempfile.mkdtemp: its 0700 mode would stay on the finished directory
        path = out.with_name(f".{out.name}.{os.getpid()}.{secrets.token_hex(4)}{STAGING_SUFFIX}")
        try:
            path.mkdir()
            return path
        except FileExistsError:
            continue


def remove_stale_staging(out: Path) -> list[Path]:
    """Delete what killed runs left beside `out`: `staging_dir`s (`.OUT.PID.XXXXXXXX.partial`; older
    versions wrote `.OUT.XXXXXXXX.partial` and `.OUT.partial`) and folders set aside while replacing
    it (`.OUT.old-PID`). One whose process still runs is kept. Returns what was deleted."""
    out = Path(out)
    if not out.parent.is_dir():
        return []
    name, suffix = re.escape(out.name), re.escape(STAGING_SUFFIX)
    pattern = re.compile(rf"\.{name}(?:(?:\.(?:(?P<pid>\d+)\.)?[a-z0-9_]{{8}})?{suffix}|\.old-(?P<old>\d+))")
    removed = []
    for path in out.parent.iterdir():
        match = pattern.fullmatch(path.name)
        if match is None:
            continue
        owner = match.group("pid") or match.group("old")
        if owner is not None and _alive(int(owner)):
            continue
        shutil.rmtree(path, ignore_errors=True) if path.is_dir() and not path.is_symlink() else path.unlink()
        removed.append(path)
    return removed


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    except OSError:
        return False
    return True


def disk_bytes(path: Path) -> int:
    """Bytes of a file, or of every file under a directory (a bundle, an .mlpackage)."""
    path = Path(path)
    if path.is_dir():
        return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    return path.stat().st_size


def cache_root() -> Path:
    """mlx-edge's cache: $MLX_EDGE_CACHE, else $XDG_CACHE_HOME/mlx-edge, else ~/.cache/mlx-edge."""
    if os.environ.get("MLX_EDGE_CACHE"):
        return Path(os.environ["MLX_EDGE_CACHE"]).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME") or "~/.cache").expanduser() / "mlx-edge"
