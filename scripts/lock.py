#!/usr/bin/env python3
"""Write mlx_edge/locks/linux.txt: the exact versions of every package the tested set installs.

    .venv/bin/python scripts/lock.py [--hold NAME==VERSION ...]

It runs `scripts/setup.sh` into a new, empty virtualenv with the lock switched off (so pip picks the
newest versions pyproject.toml's ranges allow, except the ones held), freezes that environment and
writes the lock atomically, with the command and the platform in its header. Nothing in `.venv` is
touched. `scripts/update_lock.sh` calls this, reinstalls `.venv` from the new lock, re-checks the
Swift parity fixtures and runs the whole suite: a lock is proven only once that suite is green.

`--hold transformers==5.23.0` keeps one package where it is (e.g. to move everything else first).
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
from datetime import date
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent
LOCK = ROOT / "mlx_edge" / "locks" / "linux.txt"
# pip's own tools: pip is locked (setup.sh installs it first), the build backend is not a runtime package.
UNLOCKED = {"setuptools", "wheel", "distribute"}


def lock_lines(freeze: list[str]) -> list[str]:
    """`pip freeze --all` output as sorted `name==version` lines: no editable installs, no local labels.

    A local label (`torch==2.13.0+cpu`) is dropped so the same line holds on a Mac; on Linux pip still
    prefers the `+cpu` build when it can see one (a local version sorts after its public one).
    """
    pins = {}
    for line in freeze:
        line = line.strip()
        if not line or line.startswith(("#", "-e ")) or " @ " in line or "==" not in line:
            continue
        name, version = line.split("==", 1)
        if canonicalize_name(name) in UNLOCKED:
            continue
        pins[canonicalize_name(name)] = Version(version).public
    return [f"{name}=={pins[name]}" for name in sorted(pins)]


def uncovered(lines: list[str], requirements: list[str]) -> list[str]:
    """pyproject requirements (for this platform) that the lock lacks or pins outside their range."""
    pins = {line.split("==")[0]: line.split("==")[1] for line in lines}
    problems = []
    for text in requirements:
        req = Requirement(text)
        if req.marker and not req.marker.evaluate(default_environment() | {"extra": ""}):
            continue
        name = canonicalize_name(req.name)
        if name not in pins:
            problems.append(f"{req.name} is required ({text}) but not in the lock")
        elif Version(pins[name]) not in req.specifier:
            problems.append(f"{req.name}=={pins[name]} is outside pyproject's {req.specifier}")
    return problems


def pyproject_requirements() -> list[str]:
    import tomllib  # lazy: Python 3.11+ only, and only this check needs it

    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    return list(project["dependencies"]) + list(project["optional-dependencies"]["test"])  # setup.sh installs .[test]


def header(holds: list[str]) -> list[str]:
    command = " ".join(["python scripts/lock.py", *(f"--hold {h}" for h in holds)])
    return [
        "# mlx-edge's locked set: the exact version of every package the whole test suite ran green with.",
        f"# proven on: {platform.system()} {platform.machine()}, Python {platform.python_version()}",
        f"# made by: {command} ({date.today().isoformat()})",
        "# scripts/setup.sh installs through it as pip constraints (MLX_EDGE_UNLOCKED=1: pyproject's ranges instead);",
        "# `mlx-edge doctor` names what differs. Move it forward: bash scripts/update_lock.sh",
    ]


def freeze_fresh_install(holds: list[str], python: str) -> list[str]:
    with tempfile.TemporaryDirectory(prefix="mlx-edge-lock-") as tmp:
        constraints = Path(tmp) / "holds.txt"
        constraints.write_text("".join(h + "\n" for h in holds), encoding="utf-8")
        venv = Path(tmp) / "venv"
        env = os.environ | {"VENV": str(venv), "PYTHON": python, "MLX_EDGE_LOCK": str(constraints)}
        print(f"[lock] installing the tested set into {venv} (a few minutes)", file=sys.stderr)
        subprocess.run(["bash", str(ROOT / "scripts" / "setup.sh")], check=True, env=env, cwd=ROOT)
        out = subprocess.run(
            [str(venv / "bin" / "python"), "-m", "pip", "freeze", "--all", "--exclude-editable"],
            check=True,
            capture_output=True,
            text=True,
        )
        return out.stdout.splitlines()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hold", action="append", default=[], metavar="NAME==VERSION", help="keep this exact version")
    ap.add_argument("--python", default="python3", help="the interpreter the venv is made with (default: python3)")
    ap.add_argument(
        "--out", type=Path, default=LOCK, help=f"where to write the lock (default: {LOCK.relative_to(ROOT)})"
    )
    args = ap.parse_args()
    for hold in args.hold:
        if "==" not in hold:
            ap.error(f"--hold takes NAME==VERSION, not {hold!r}")

    lines = lock_lines(freeze_fresh_install(args.hold, args.python))
    if problems := uncovered(lines, pyproject_requirements()):
        print("[lock] the fresh install does not satisfy pyproject.toml:\n  " + "\n  ".join(problems), file=sys.stderr)
        return 1
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_name(args.out.name + ".tmp")
    tmp.write_text("\n".join([*header(args.hold), *lines]) + "\n", encoding="utf-8")
    tmp.replace(args.out)
    print(f"[lock] wrote {len(lines)} pins to {args.out.relative_to(ROOT)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
