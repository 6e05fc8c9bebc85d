"""OpenBLAS for MLX on Linux CPU.

The Linux `mlx-cpu` wheel links a bundled reference BLAS (about 4 GFLOP/s on a 2-core x86 box);
OpenBLAS runs the same matmul about 40x faster. libmlx resolves `cblas_sgemm` through the global
symbol scope first, so loading OpenBLAS with RTLD_GLOBAL *before* `import mlx` makes MLX use it.
Set MLX_EDGE_BLAS=bundled to opt out, or MLX_EDGE_OPENBLAS=/path/libopenblas.so to pick a library.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import platform
import sys
from dataclasses import dataclass

_CANDIDATES = (
    "/usr/lib/{arch}-linux-gnu/openblas-pthread/libblas.so.3",
    "/usr/lib/{arch}-linux-gnu/openblas-pthread/libopenblas.so.0",
    "/usr/lib/{arch}-linux-gnu/libopenblas.so.0",
    "/usr/lib64/libopenblas.so.0",
)

_loaded_path: str | None = None
_skip_reason: str | None = None


def _candidate_paths() -> list[str]:
    override = os.environ.get("MLX_EDGE_OPENBLAS")
    if override:
        return [override]
    arch = platform.machine()
    paths = [p.format(arch=arch) for p in _CANDIDATES]
    found = ctypes.util.find_library("openblas")
    if found:
        paths.append(found)
    return paths


def preload_openblas() -> str | None:
    """Load OpenBLAS globally if this is Linux, MLX is not imported yet, and a library is found."""
    global _loaded_path, _skip_reason
    if _loaded_path or not sys.platform.startswith("linux"):
        return _loaded_path
    if os.environ.get("MLX_EDGE_BLAS", "").lower() == "bundled":
        _skip_reason = "MLX_EDGE_BLAS=bundled"
        return None
    if "mlx.core" in sys.modules:
        _skip_reason = "mlx was imported before mlx_edge"
        return None
    for path in _candidate_paths():
        if os.path.isabs(path) and not os.path.exists(path):
            continue
        try:
            ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
        except OSError:
            continue
        _loaded_path = path
        return path
    _skip_reason = "no OpenBLAS found (Debian/Ubuntu: apt-get install libopenblas0-pthread)"
    return None


@dataclass
class BlasInfo:
    name: str  # "OpenBLAS", "Accelerate", "bundled reference BLAS", ...
    library: str | None
    detail: str

    @property
    def fast(self) -> bool:
        return self.name != "bundled reference BLAS"


def _library_of_address(address: int) -> str | None:
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                parts = line.split()
                lo, hi = (int(x, 16) for x in parts[0].split("-"))
                if lo <= address < hi and len(parts) >= 6:
                    return parts[5]
    except OSError:
        return None
    return None


def blas_info() -> BlasInfo:
    """Which BLAS MLX's CPU matmul resolves to in this process."""
    if sys.platform == "darwin":
        return BlasInfo("Accelerate", None, "MLX on macOS uses Accelerate for CPU BLAS")
    if not sys.platform.startswith("linux"):
        return BlasInfo("unknown", None, f"platform {sys.platform}")
    try:
        address = ctypes.cast(ctypes.CDLL(None).cblas_sgemm, ctypes.c_void_p).value
    except AttributeError:
        address = None
    library = _library_of_address(address) if address else None
    if library and "openblas" in library.lower():
        return BlasInfo("OpenBLAS", library, f"preloaded from {_loaded_path or library}")
    if library:
        return BlasInfo("other", library, f"cblas_sgemm resolves to {library}")
    reason = _skip_reason or "OpenBLAS not loaded"
    return BlasInfo("bundled reference BLAS", None, f"{reason}; MLX CPU matmul is ~40x slower")


@functools.cache
def _openblas_thread_functions():
    """(get, set) for the OpenBLAS in this process's global scope, or None (macOS, reference BLAS)."""
    try:
        process = ctypes.CDLL(None)
        get, set_ = process.openblas_get_num_threads, process.openblas_set_num_threads
    except (AttributeError, OSError):
        return None
    get.restype, set_.restype, set_.argtypes = ctypes.c_int, None, [ctypes.c_int]
    return get, set_


class blas_threads:
    """`with blas_threads(n):` OpenBLAS uses at most n threads inside, then what it had (no-op without OpenBLAS).

    The sharded distill step runs one shard per CPU stream, each stream a thread of its own;
    without this each stream's matmuls would also start a thread per core and oversubscribe.
    """

    def __init__(self, threads: int):
        self.threads = threads
        self.previous: int | None = None

    def __enter__(self):
        functions = _openblas_thread_functions()
        if functions is not None:
            get, set_ = functions
            self.previous = get()
            if self.previous != self.threads:
                set_(self.threads)
        return self

    def __exit__(self, *exc):
        if self.previous is not None and self.previous != self.threads:
            _openblas_thread_functions()[1](self.previous)
        return False
