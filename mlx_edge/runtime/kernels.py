"""mlx-edge's vectorized CPU kernels for MLX (cpu_kernels.cpp): built once, loaded when fast math is on.

MLX's Linux CPU wheel evaluates element-wise work one float at a time, and the kernels `mx.compile`
generates do not vectorize either (every input is a possibly aliased pointer). cpu_kernels.cpp adds
the attention softmax, GELU (with its derivative), LayerNorm and the hashed dropout as MLX primitives
with vectorized loops and their own backward passes. It is compiled on first use with g++ against
the installed MLX's headers and nanobind (MLX's extension route; nanobind is a Linux dependency),
into the cache (`cache_root()/kernels/`, a temporary name renamed into place), and checked against
a NumPy softmax before use. Anything that stops it (no g++, a nanobind whose ABI is not MLX's, a
build error, MLX_EDGE_CPU_KERNELS=0) leaves fastmath's MLX expressions in place; `problem()` says
why, and `mlx-edge doctor` shows it.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import os
import platform
import re
import shutil
import subprocess
import sys
import sysconfig
import threading
from pathlib import Path

from mlx_edge.fileio import cache_root

_SOURCE = Path(__file__).with_name("cpu_kernels.cpp")
_MODULE = "_mlx_edge_kernels"  # NB_MODULE's name in cpu_kernels.cpp
_lock = threading.Lock()
_module = None
_problem: str | None = None
_tried = False


def wanted() -> bool:
    """On Linux unless MLX_EDGE_CPU_KERNELS=0; elsewhere MLX's own kernels are vectorized (Accelerate, Metal)."""
    return sys.platform.startswith("linux") and os.environ.get("MLX_EDGE_CPU_KERNELS", "1").lower() not in (
        "0",
        "off",
        "false",
    )


def _mlx_nanobind_abi() -> tuple[str, str] | None:
    """(internals version, domain) of the nanobind that MLX's Python module registered, e.g. ("22", "mlx")."""
    import ctypes  # lazy: only to read the interpreter's state dict

    import mlx.core  # noqa: F401  # lazy: MLX registers its nanobind internals on import

    api = ctypes.PyDLL(None)  # this process's own Python C API, each call with its own prototype
    api.PyInterpreterState_Get.restype = ctypes.c_void_p
    api.PyInterpreterState_GetDict.restype = ctypes.py_object
    api.PyInterpreterState_GetDict.argtypes = [ctypes.c_void_p]
    api.Py_IncRef.argtypes = [ctypes.py_object]
    state = api.PyInterpreterState_GetDict(api.PyInterpreterState_Get())
    # the call returns a borrowed reference that ctypes takes as its own: without this one more
    # reference, dropping `state` would free the interpreter's dict (and nanobind's registry in it)
    api.Py_IncRef(state)
    found = [re.fullmatch(r"__nb_internals_.*_v(\d+)(?:_dev\d+)?_?(\w*?)__", str(key)) for key in list(state)]
    registries = [(m.group(1), m.group(2)) for m in found if m]
    # other nanobind extensions may have registries of their own: MLX's is the one in its domain
    return next((r for r in registries if r[1] == "mlx"), registries[0] if registries else None)


def _nanobind_abi(nanobind_dir: Path) -> str | None:
    header = nanobind_dir / "src" / "nb_internals.h"
    found = re.search(r"#\s*define NB_INTERNALS_VERSION (\d+)", header.read_text()) if header.exists() else None
    return found.group(1) if found else None


def _cpu_flags(cpuinfo: str = "/proc/cpuinfo") -> str:
    """The CPU's feature flags (x86 "flags", ARM "Features"): a cache shared by machines with
    different CPUs (an NFS home) then holds one build per CPU, not a -march=native library that
    another CPU cannot run."""
    try:
        text = Path(cpuinfo).read_text(errors="replace")
    except OSError:
        return platform.processor()
    found = re.search(r"^(?:flags|Features)\s*:(.*)$", text, re.MULTILINE)
    return found.group(1).strip() if found else platform.processor()


def build() -> Path:
    """Compile cpu_kernels.cpp for this MLX, nanobind, compiler and Python; the cached library if it exists."""
    import mlx.core as mx  # lazy: the build needs MLX's headers and version
    import nanobind  # lazy: a build-time dependency of this one library

    compiler = next((c for c in (os.environ.get("CXX"), "g++") if c and shutil.which(c)), None)
    if compiler is None:
        raise OSError("no C++ compiler (g++ or $CXX) to build mlx-edge's CPU kernels")
    nanobind_dir = Path(nanobind.source_dir()).parent
    mlx_dir = Path(mx.__file__).parent
    if not (mlx_dir / "include" / "mlx" / "mlx.h").exists():
        raise OSError(f"MLX's headers are not in {mlx_dir / 'include'}; reinstall mlx from its wheel")
    mlx_abi = _mlx_nanobind_abi()
    ours = _nanobind_abi(nanobind_dir)
    if mlx_abi is None or ours is None or mlx_abi[0] != ours:
        raise OSError(
            f"nanobind {nanobind.__version__} (internals v{ours}) does not match the one mlx {mx.__version__} "
            f"was built with (v{mlx_abi[0] if mlx_abi else '?'}): pip install the nanobind pinned in pyproject.toml"
        )
    flags = [
        "-O3",
        "-march=native",  # built where it runs; the cache key below includes the CPU's flags
        "-std=c++20",
        "-fopenmp-simd",  # the loops' `#pragma omp simd` reductions, no OpenMP runtime
        "-fno-math-errno",
        "-fno-trapping-math",  # lets g++ turn the branch-free selects into vector blends
        "-shared",
        "-fPIC",
        "-fvisibility=hidden",
        "-DNDEBUG",
        *([f"-DNB_DOMAIN={mlx_abi[1]}"] if mlx_abi[1] else []),  # MLX's nanobind domain ("mlx")
        f"-I{nanobind.include_dir()}",
        f"-I{nanobind_dir / 'ext' / 'robin_map' / 'include'}",
        f"-I{sysconfig.get_paths()['include']}",
        f"-I{mlx_dir / 'include'}",
        str(_SOURCE),
        str(Path(nanobind.source_dir()) / "nb_combined.cpp"),
        f"-L{mlx_dir / 'lib'}",
        "-lmlx",
        f"-Wl,-rpath,{mlx_dir / 'lib'}",
    ]
    version = subprocess.run([compiler, "--version"], capture_output=True, text=True).stdout.split("\n")[0]
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    identity = [_SOURCE.read_bytes()] + [
        s.encode() for s in (*flags, mx.__version__, nanobind.__version__, version, _cpu_flags())
    ]
    key = hashlib.sha256(b"\0".join(identity)).hexdigest()[:16]
    target = cache_root() / "kernels" / f"mlx-edge-kernels-{key}-{platform.machine()}{suffix}"
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    command = [compiler, *flags, "-o", str(tmp)]
    try:
        print("mlx-edge: building its CPU kernels for MLX (once, ~10 s)", file=sys.stderr, flush=True)
        done = subprocess.run(command, capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            errors = [line for line in done.stderr.splitlines() if "error" in line] or done.stderr.splitlines()
            raise OSError(f"{compiler} could not build mlx-edge's CPU kernels: {' | '.join(errors[:3])[-400:]}")
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return target


def _import(path: Path):
    loader = importlib.machinery.ExtensionFileLoader(_MODULE, str(path))
    spec = importlib.util.spec_from_file_location(_MODULE, str(path), loader=loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def _self_test(module) -> None:
    """A softmax against NumPy: catches a library that loads but cannot read MLX's arrays (nanobind ABI)."""
    import mlx.core as mx  # lazy: MLX is imported by whoever asks for the kernels
    import numpy as np  # lazy: see above

    x = np.linspace(-3, 3, 24, dtype=np.float32).reshape(2, 12)
    want = np.exp(x - x.max(-1, keepdims=True))
    want /= want.sum(-1, keepdims=True)
    with mx.stream(mx.cpu):
        got = np.array(module.softmax(mx.array(x)))
    if not np.allclose(got, want, atol=1e-6):
        raise OSError("mlx-edge's CPU kernels gave a wrong softmax in their self-test")


def load():
    """The kernels module, or None (then `problem()` says why). Built and checked once per process."""
    global _module, _problem, _tried
    if _tried:
        return _module
    with _lock:
        if _tried:
            return _module
        if not wanted():
            _problem = "off (MLX_EDGE_CPU_KERNELS=0)" if sys.platform.startswith("linux") else "not needed off Linux"
        else:
            try:
                module = _import(build())
                _self_test(module)
                _module = module
            except (OSError, ImportError, TypeError, subprocess.SubprocessError) as exc:
                _problem = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        _tried = True
    return _module


def problem() -> str | None:
    """Why the kernels are not in use (after `load()`), or None when they are."""
    return _problem


def describe() -> str:
    """One line for doctor and the bench rows."""
    module = load()
    return "vectorized (mlx-edge C++)" if module is not None else f"MLX's own ({_problem})"
