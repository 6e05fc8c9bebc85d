"""OpenBLAS for MLX on Linux CPU.

The Linux `mlx-cpu` wheel links a bundled reference BLAS (about 4 GFLOP/s on a 2-core x86 box);
OpenBLAS runs the same matmul about 40x faster. libmlx resolves `cblas_sgemm` through the global
symbol scope first, so loading OpenBLAS with RTLD_GLOBAL *before* `import mlx` makes MLX use it.
Set MLX_EDGE_BLAS=bundled to opt out, or MLX_EDGE_OPENBLAS=/path/libopenblas.so to pick a library.

OpenBLAS picks its kernels from the CPU when it loads, unless OPENBLAS_CORETYPE names them;
`blas_info()` says which it runs (a machine pinned to "Haswell" kernels on an AVX-512 CPU runs fp32
GEMM at about half the speed: 225 vs 427 GFLOP/s here, benchmarks/blas_matmul.py).
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


def openblas_core() -> str | None:
    """The kernel set the OpenBLAS in this process runs ("SkylakeX", "Haswell", ...), or None."""
    try:
        corename = ctypes.CDLL(None).openblas_get_corename
    except (AttributeError, OSError):
        return None
    corename.restype = ctypes.c_char_p
    name = corename()
    return name.decode() if name else None


# OpenBLAS kernel sets without AVX-512 (as openblas_get_corename names them)
_PRE_AVX512_CORES = frozenset(
    "Haswell Zen Sandybridge Nehalem Penryn Core2 Dunnington Prescott Atom Barcelona Bulldozer Piledriver "
    "Steamroller Excavator".split()
)
_AVX512_FLAGS = frozenset({"avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl"})  # what SkylakeX needs


def cpu_has_avx512(cpuinfo: str = "/proc/cpuinfo") -> bool:
    try:
        with open(cpuinfo) as f:
            for line in f:
                if line.startswith("flags"):
                    return _AVX512_FLAGS <= set(line.partition(":")[2].split())
    except OSError:
        pass
    return False


def pinned_kernels_hint(cpuinfo: str = "/proc/cpuinfo") -> str | None:
    """One line when OPENBLAS_CORETYPE pins OpenBLAS to kernels without AVX-512 on a CPU that has it."""
    pinned = os.environ.get("OPENBLAS_CORETYPE")
    core = openblas_core()
    if pinned and core in _PRE_AVX512_CORES and cpu_has_avx512(cpuinfo):
        return (
            f"OPENBLAS_CORETYPE={pinned} pins OpenBLAS to its {core} kernels on a CPU with AVX-512; "
            "unset it to let OpenBLAS choose (fp32 matmul ran ~1.9x faster on one such CPU)"
        )
    return None


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
        core = openblas_core()
        kernels = f", {core} kernels" if core else ""
        return BlasInfo("OpenBLAS", library, f"preloaded from {_loaded_path or library}{kernels}")
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
