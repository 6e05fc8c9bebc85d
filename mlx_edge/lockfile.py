"""The locked set: the exact version of every Python package the whole test suite ran green with.

`mlx_edge/locks/linux.txt` is a pip constraints file written by `scripts/lock.py`. `scripts/setup.sh`
installs through it, so a fresh machine gets what CI proved rather than whatever the registry serves
that day; `pyproject.toml` keeps the compatible ranges for installs into other environments, and
`mlx-edge doctor` names every installed version that differs from the lock. Moving it forward is one
command: `bash scripts/update_lock.sh` (regenerate, reinstall, re-check the fixtures, run the suite).
"""

from __future__ import annotations

import platform
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from mlx_edge.manifest import installed_version

LOCKS = Path(__file__).resolve().parent / "locks"
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;#]+)$")


@dataclass(frozen=True)
class Lock:
    path: Path
    pins: dict[str, str]  # canonical distribution name -> exact version
    proven_on: str  # the header's "proven on:" line: the platform and Python the suite ran on


@dataclass
class LockDiff:
    total: int
    differs: list[tuple[str, str, str]] = field(default_factory=list)  # (name, installed, locked)
    missing: list[tuple[str, str]] = field(default_factory=list)  # (name, locked): not installed here

    @property
    def matches(self) -> bool:
        return not self.differs and not self.missing


def lock_path(platform: str = sys.platform) -> Path:
    """The lock for this platform: a macOS lock once one is proven on a Mac, else the Linux one."""
    own = LOCKS / ("macos.txt" if platform == "darwin" else "linux.txt")
    return own if own.is_file() else LOCKS / "linux.txt"


def parse_lock(text: str) -> tuple[dict[str, str], str]:
    """`name==version` lines (comments and blanks skipped) and the `# proven on:` header."""
    pins: dict[str, str] = {}
    proven_on = ""
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if line.startswith("# proven on:"):
            proven_on = line.split(":", 1)[1].strip()
        if not line or line.startswith("#"):
            continue
        match = _PIN.match(line)
        if not match:
            raise ValueError(f"line {number} is not `name==version`: {raw!r}")
        pins[canonicalize_name(match.group(1))] = match.group(2)
    return pins, proven_on


def read_lock(path: Path | None = None) -> Lock:
    path = Path(path) if path is not None else lock_path()
    pins, proven_on = parse_lock(path.read_text(encoding="utf-8"))
    return Lock(path, pins, proven_on)


def same_version(installed: str, locked: str) -> bool:
    """Equal public versions: a local `+cpu` build of torch is the locked torch."""
    try:
        return Version(installed).public == Version(locked).public
    except InvalidVersion:
        return installed == locked


def proven_here(lock: Lock, system: str | None = None) -> bool:
    """Was the lock proven on this operating system? (`proven on: Linux x86_64, Python 3.11.7`)"""
    return lock.proven_on.split(" ", 1)[0] == (system or platform.system())


def compare(lock: Lock, installed: Callable[[str], str | None] = installed_version) -> LockDiff:
    """Installed versions against the lock. A package absent here counts as missing only on the OS
    the lock was proven on: a Mac, say, has no `mlx-cpu` or `nanobind` by design."""
    diff = LockDiff(total=len(lock.pins))
    here = proven_here(lock)
    for name, locked in sorted(lock.pins.items()):
        found = installed(name)
        if found is None:
            if here:
                diff.missing.append((name, locked))
            else:
                diff.total -= 1
        elif not same_version(found, locked):
            diff.differs.append((name, found, locked))
    return diff


def summary(diff: LockDiff, limit: int = 6) -> str:
    """One line for doctor: how many locked packages are as locked, and the first few that are not."""
    if diff.matches:
        return f"all {diff.total} locked packages as locked"
    parts = []
    if diff.differs:
        shown = ", ".join(f"{n} {found} (locked {locked})" for n, found, locked in diff.differs[:limit])
        more = f" and {len(diff.differs) - limit} more" if len(diff.differs) > limit else ""
        parts.append(f"{len(diff.differs)} differ: {shown}{more}")
    if diff.missing:
        shown = ", ".join(n for n, _ in diff.missing[:limit])
        more = f" and {len(diff.missing) - limit} more" if len(diff.missing) > limit else ""
        parts.append(f"{len(diff.missing)} not installed: {shown}{more}")
    return f"{diff.total - len(diff.differs) - len(diff.missing)} of {diff.total} as locked; " + "; ".join(parts)
