#!/usr/bin/env bash
# Move the locked set (mlx_edge/locks/linux.txt) forward in one command:
#   1. regenerate it from a fresh install of the newest versions pyproject.toml allows (scripts/lock.py);
#   2. reinstall .venv from it (scripts/setup.sh);
#   3. compare the Swift parity fixtures' outputs with the new libraries, and regenerate them only if
#      an output changed (the Swift tests in step 4 then judge the new ids);
#   4. run the whole suite (scripts/test.sh): the new lock is proven only if it is green.
# Arguments go to scripts/lock.py, e.g. `--hold transformers==5.23.0` to keep one package where it is.
# Then review and commit the lock together with any fixture it changed: git diff --stat mlx_edge/locks swift/
set -euo pipefail
cd "$(dirname "$0")/.."
say() { printf '\033[1m[update-lock]\033[0m %s\n' "$*" >&2; }

[ -x .venv/bin/python ] || bash scripts/setup.sh  # scripts/lock.py reads pyproject with packaging from .venv
.venv/bin/python scripts/lock.py "$@"
bash scripts/setup.sh

fixture_tests=(tests/test_tokenizer_fixture.py tests/test_unigram_fixture.py tests/test_unigram_spec.py)
if HF_HUB_OFFLINE=1 .venv/bin/python -m pytest -q -p no:cacheprovider "${fixture_tests[@]}"; then
  say "the tokenizer outputs are unchanged: the fixtures stay as they are"
else
  say "a tokenizer output changed: regenerating the Swift parity fixtures"
  .venv/bin/python scripts/make_tokenizer_fixture.py --swift-tables
  .venv/bin/python scripts/make_unigram_fixture.py
  .venv/bin/python scripts/make_grapheme_tables.py --swift-tables
fi
bash scripts/test.sh
say "green: commit mlx_edge/locks/linux.txt (and the fixtures if git status lists them)"
