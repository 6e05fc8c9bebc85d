#!/usr/bin/env bash
# Set up (scripts/setup.sh) and run every test: pytest, then the Swift package's build and tests.
set -uo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh || { echo "setup failed" >&2; exit 1; }

export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
.venv/bin/python -m pytest "$@"
status=$?
if [ "$status" -eq 5 ]; then
  echo "pytest collected no tests: that is a failure here" >&2
  exit 1
fi
[ "$status" -eq 0 ] || exit "$status"

if [ -f swift/Package.swift ]; then
  if command -v swift >/dev/null 2>&1; then
    (cd swift && swift build && swift test) || exit 1
  elif [ -n "${CI:-}" ]; then
    echo "swift toolchain not found: CI must build and test swift/" >&2
    exit 1
  else
    echo "[test] swift toolchain not found: skipping swift/ (install Swift 6 to run it)" >&2
  fi
fi
