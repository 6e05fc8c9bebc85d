#!/usr/bin/env bash
# Set up (scripts/setup.sh) and run every test: ruff (format + lint), pytest, then the Swift package's build and tests.
# Extra arguments go to pytest. Ends with one summary line: "total: N passed, N failed".
# `scripts/test.sh --fast [pytest args]`: the fast tier only (pytest -m "not slow", under a minute),
# with no setup and no Swift build or tests. CI runs the full script, with no arguments.
set -uo pipefail
cd "$(dirname "$0")/.."

fast=0
[ "${1:-}" = "--fast" ] && { fast=1; shift; set -- -m "not slow" "$@"; }

[ "$fast" -eq 1 ] || bash scripts/setup.sh || { echo "setup failed" >&2; exit 1; }
# The full run (and so CI) tests the locked set and nothing else: doctor --locked exits non-zero on any difference.
if [ "$fast" -eq 0 ] && [ -z "${MLX_EDGE_UNLOCKED:-}" ]; then
  .venv/bin/mlx-edge doctor --locked >/dev/null || {
    .venv/bin/mlx-edge doctor | grep -A1 '^lock' >&2
    echo "the installed packages differ from mlx_edge/locks/linux.txt: the suite runs on the locked set" >&2
    exit 1
  }
fi

# Style first: one formatter and one small lint rule set (pyproject.toml [tool.ruff]) on the whole tree.
.venv/bin/ruff format --check --quiet . || { echo "ruff format: run .venv/bin/ruff format ." >&2; exit 1; }
.venv/bin/ruff check --quiet . || { echo "ruff check: fix the findings above" >&2; exit 1; }

export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
log=$(mktemp)
trap 'rm -f "$log"' EXIT

# The full run lists its 15 slowest tests: the suite's minutes move with the host (one took 2.5x another's),
# and this says where they go.
durations=()
[ "$fast" -eq 1 ] || durations=(--durations=15)
.venv/bin/python -m pytest "${durations[@]}" "$@" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
if [ "$status" -eq 5 ]; then
  echo "pytest collected no tests: that is a failure here" >&2
  exit 1
fi
[ "$status" -eq 0 ] || exit "$status"
py_passed=$(grep -Eo '[0-9]+ passed' "$log" | tail -1 | grep -Eo '[0-9]+' || echo 0)

swift_passed=0
if [ "$fast" -eq 0 ] && [ -f Package.swift ]; then
  if command -v swift >/dev/null 2>&1; then
    # From the root: Package.swift is there (sources in swift/) so apps can add the package by git URL.
    # XCTest only: the package has no Swift Testing tests, whose runner would close on "0 tests".
    (swift build && swift test --disable-swift-testing) 2>&1 | tee "$log"
    [ "${PIPESTATUS[0]}" -eq 0 ] || exit 1
    # The last "Executed" line is the whole run's ("with N test(s) skipped and 0 failures" when some skip).
    swift_passed=$(grep -Eo 'Executed [0-9]+ tests?, with ([0-9]+ tests? skipped and )?0 failures' "$log" | tail -1 \
      | grep -Eo '[0-9]+' | head -1)
    swift_skipped=$(grep -Eo 'Executed [0-9]+ tests?, with [0-9]+ tests? skipped' "$log" | tail -1 \
      | grep -Eo '[0-9]+' | tail -1)
    swift_passed=$(( ${swift_passed:-0} - ${swift_skipped:-0} ))
    [ -n "$swift_passed" ] && [ "$swift_passed" -gt 0 ] || { echo "swift test ran no tests" >&2; exit 1; }
  elif [ -n "${CI:-}" ]; then
    echo "swift toolchain not found: CI must build and test swift/" >&2
    exit 1
  else
    echo "[test] swift toolchain not found: skipping swift/ (install Swift 6 to run it)" >&2
  fi
fi
echo "total: $((py_passed + swift_passed)) passed, 0 failed"
