"""The Swift parity fixtures: where they are, what made them, and how a change in them is reported.

A fixture records what the installed tokenizers/transformers produce (ids, offsets, pieces), so the
tests compare that content, never the library version strings: a newer release with the same
outputs passes (pytest's header notes the version difference), and one that changes an output
fails on the first text it changes, with the command that regenerates the fixture.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from mlx_edge.manifest import installed_version as _installed

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "swift" / "Tests" / "MLXEdgeKitTests" / "Fixtures"
# fixture file -> the command that regenerates it
SOURCES = {
    FIXTURES / "tokenizer_fixture.json": ".venv/bin/python scripts/make_tokenizer_fixture.py",
    FIXTURES / "unigram" / "unigram_fixture.json": ".venv/bin/python scripts/make_unigram_fixture.py",
}
LIBRARIES = ("transformers", "tokenizers")


def load_script(name: str):
    """A generator script from scripts/, imported as a module (its functions are the reference)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def fixture_meta(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))["meta"]


def version_notes() -> list[str]:
    """One line per fixture made with other library versions than the installed ones (a note, not a failure)."""
    notes = []
    for path in SOURCES:
        meta = fixture_meta(path)
        moved = []
        for lib in LIBRARIES:
            made, installed = meta.get(f"{lib}_version"), _installed(lib)
            if made and made != installed:
                moved.append(f"{lib} {made} -> {installed or 'not installed'}")
        if moved:
            notes.append(
                f"{path.relative_to(ROOT)} was made with other versions ({', '.join(moved)}): outputs are compared"
            )
    return notes


def first_difference(expected: list[dict], actual: list[dict], fields: tuple[str, ...]) -> str | None:
    """The first case whose fields differ, as one readable paragraph; None when all agree."""
    for want, got in zip(expected, actual):
        for key in fields:
            if want[key] != got[key]:
                return (
                    f"{want['text']!r}: {key} was {want[key]} in the fixture, the installed libraries give {got[key]}"
                )
    if len(expected) != len(actual):
        return f"the fixture has {len(expected)} cases, the generator {len(actual)}"
    return None


def changed(fixture: Path, what: str) -> str:
    """The failure message: which output moved, under which versions, and how to regenerate."""
    installed = ", ".join(f"{lib} {_installed(lib)}" for lib in LIBRARIES)
    made = ", ".join(f"{lib} {fixture_meta(fixture).get(f'{lib}_version')}" for lib in LIBRARIES)
    return (
        f"{fixture.relative_to(ROOT)} no longer matches the installed tokenizer ({installed}; fixture made with {made}). "
        f"First difference: {what}. Regenerate with `{SOURCES[fixture]}`, then run the Swift tests "
        "(`swift test` at the repository root), which judge the new outputs; `bash scripts/update_lock.sh` does both."
    )
