"""OpenBLAS for MLX on Linux CPU.

The Linux `mlx-cpu` wheel links a bundled reference BLAS (about 4 GFLOP/s on a 2-core x86 box);
OpenBLAS runs the same matmul about 40x faster. libmlx resolves `cblas_sgemm` through the global
symbol scope first, so loading OpenBLAS with RTLD_GLOBAL *before* `import mlx` makes MLX use it.
Set MLX_EDGE_BLAS=bundled to opt out, or MLX_EDGE_OPENBLAS=/path/libopenblas.so to pick a library.

What goes into the global scope is not OpenBLAS itself but blas_shim.c (built with the system C
compiler on first use, cached under mlx-edge's cache): it exports only the cblas_?gemm functions
libmlx imports and forwards them to an OpenBLAS opened privately. OpenBLAS loaded globally also
answered libtorch_cpu's exported sgemm_, and PyTorch's CPU training loop ran 9% slower through it.
Without a C compiler (or with MLX_EDGE_BLAS=global) OpenBLAS is loaded globally, as before.

OpenBLAS picks its kernels from the CPU when it loads, unless OPENBLAS_CORETYPE names them;
`blas_info()` says which it runs (a machine pinned to "Haswell" kernels on an AVX-512 CPU runs fp32
GEMM at about half the speed: 222 vs 421 GFLOP/s here, benchmarks/blas_matmul.py). An OpenBLAS older
than the CPU does worse: Debian 12's 0.3.21 does not know Sapphire Rapids and runs its generic
"Prescott" (SSE3) kernels there, 4-6x slower than its AVX-512 ones. So when OPENBLAS_CORETYPE is unset,
the CPU has AVX-512 and the library would choose kernels without it (asked once in a child process,
the answer cached per library and CPU), the library is loaded with OPENBLAS_CORETYPE=SkylakeX.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import hashlib
import os
import platform
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from mlx_edge.fileio import cache_root

_CANDIDATES = (
    "/usr/lib/{arch}-linux-gnu/openblas-pthread/libblas.so.3",
    "/usr/lib/{arch}-linux-gnu/openblas-pthread/libopenblas.so.0",
    "/usr/lib/{arch}-linux-gnu/libopenblas.so.0",
    "/usr/lib64/libopenblas.so.0",
)

_loaded_path: str | None = None
_skip_reason: str | None = None
_shim_path: str | None = None  # the CBLAS shim in use, when OpenBLAS is answered through it
_shim_problem: str | None = None  # why it is not (no compiler, a build error), when it is not

_SHIM_SOURCE = Path(__file__).with_name("blas_shim.c")
_chosen: dict[str, str] = {}  # library -> the kernels OpenBLAS would have picked, where mlx-edge chose others
AVX512_CORE = "SkylakeX"  # the AVX-512 kernels every OpenBLAS with AVX-512 support has (fp32 GEMM as its successors')


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
            "unset it to let OpenBLAS choose (fp32 matmul ran 1.7-1.9x faster on one such CPU)"
        )
    return None


def _cpu_key(cpuinfo: str = "/proc/cpuinfo") -> str:
    """The CPU's model and flags, as one string (the kernels OpenBLAS picks follow from them)."""
    try:
        with open(cpuinfo) as f:
            lines = [line for line in f if line.startswith(("vendor_id", "cpu family", "model", "flags"))]
    except OSError:
        return ""
    return "".join(sorted(set(lines)))


def default_core(path: str) -> str | None:
    """The kernels the OpenBLAS at `path` picks on this CPU by itself (OPENBLAS_CORETYPE unset): asked in a
    child process (loading it here would fix its choice for this process), cached per library and CPU."""
    try:
        stat = os.stat(path)
    except OSError:
        return None
    key = f"{os.path.realpath(path)}:{stat.st_size}:{stat.st_mtime_ns}:{_cpu_key()}"
    cached = cache_root() / "blas" / f"core-{hashlib.sha256(key.encode()).hexdigest()[:16]}.txt"
    try:
        return cached.read_text().strip() or None
    except OSError:  # not asked yet (or unreadable): ask
        pass
    code = (
        "import ctypes, sys\nf = ctypes.CDLL(sys.argv[1]).openblas_get_corename\n"
        "f.restype = ctypes.c_char_p\nprint(f().decode())"
    )
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_CORETYPE"}
    try:
        run = subprocess.run(
            [sys.executable, "-c", code, path], capture_output=True, text=True, env=env, timeout=60, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    core = run.stdout.strip() if run.returncode == 0 else ""
    if core:  # (not a library without openblas_get_corename: nothing to cache for it)
        tmp = cached.with_name(f".{cached.name}.{os.getpid()}.tmp")
        try:
            cached.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_text(core + "\n")
            os.replace(tmp, cached)
        except OSError:  # a read-only cache: ask again next time
            tmp.unlink(missing_ok=True)
    return core or None


def _kernel_choice(path: str, cpuinfo: str) -> tuple[str | None, str | None]:
    """(the kernels to load the OpenBLAS at `path` with, or None for its own choice; what it would pick)."""
    if "OPENBLAS_CORETYPE" in os.environ or not cpu_has_avx512(cpuinfo):
        return None, None
    picked = default_core(path)
    return (AVX512_CORE if picked in _PRE_AVX512_CORES else None), picked


def better_core(path: str, cpuinfo: str = "/proc/cpuinfo") -> str | None:
    """AVX512_CORE when the OpenBLAS at `path` would run kernels without AVX-512 on a CPU that has it and
    OPENBLAS_CORETYPE does not choose; else None (OpenBLAS's own choice stands)."""
    return _kernel_choice(path, cpuinfo)[0]


def _load(path: str, open_it: Callable[[str], object]):
    """`open_it(path)` with OPENBLAS_CORETYPE set for the load when `better_core` says so (OpenBLAS reads
    it once, as it loads); the environment is as it was afterwards, for other libraries and children."""
    core, picked = _kernel_choice(path, "/proc/cpuinfo")
    if core is None:
        return open_it(path)
    os.environ["OPENBLAS_CORETYPE"] = core
    try:
        result = open_it(path)
    finally:
        del os.environ["OPENBLAS_CORETYPE"]
    _chosen[path] = picked
    return result


def build_shim() -> str:
    """The CBLAS shim as a shared library: built once per source version with the system C
    compiler ($CC, else cc or gcc), written to a temporary name and renamed into the cache."""
    source = _SHIM_SOURCE.read_bytes()
    target = cache_root() / "blas" / f"cblas-shim-{hashlib.sha256(source).hexdigest()[:16]}-{platform.machine()}.so"
    if target.exists():
        return str(target)
    compiler = next((c for c in (os.environ.get("CC"), "cc", "gcc") if c and shutil.which(c)), None)
    if compiler is None:
        raise OSError("no C compiler (cc, gcc or $CC) to build the CBLAS shim")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        build = subprocess.run(
            [compiler, "-O2", "-shared", "-fPIC", "-o", str(tmp), str(_SHIM_SOURCE), "-ldl"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        if build.returncode != 0:
            raise OSError(f"{compiler} could not build the CBLAS shim: {build.stderr.strip()[-300:]}")
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return str(target)


def _open_through_shim(path: str) -> bool:
    """Answer libmlx's cblas_?gemm from OpenBLAS at `path` through the shim; False if that is not possible."""
    global _shim_path, _shim_problem
    try:
        shim = build_shim()
        private = ctypes.CDLL(shim, mode=ctypes.RTLD_LOCAL)  # not global until OpenBLAS is behind it
        private.mlx_edge_blas_shim_open.argtypes = [ctypes.c_char_p]
        if private.mlx_edge_blas_shim_open(path.encode()) != 0:
            return False
        ctypes.CDLL(shim, mode=ctypes.RTLD_GLOBAL)  # the same handle, now in the global scope
    except (OSError, subprocess.SubprocessError) as exc:
        _shim_problem = str(exc)
        return False
    _shim_path = shim
    return True


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
    through_shim = os.environ.get("MLX_EDGE_BLAS", "").lower() != "global"
    for path in _candidate_paths():
        if os.path.isabs(path) and not os.path.exists(path):
            continue
        if through_shim and _shim_problem is None:  # (a shim that failed to build is not tried again)
            if _load(path, _open_through_shim):
                _loaded_path = path
                return path
            if _shim_problem is None:
                continue  # the shim is built, but this library lacks cblas_?gemm: try the next one
        try:
            _load(path, lambda p: ctypes.CDLL(p, mode=ctypes.RTLD_GLOBAL))
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
    core = openblas_core()
    kernels = f", {core} kernels" if core else ""
    if core and _loaded_path in _chosen:
        kernels += f" (chosen by mlx-edge: this OpenBLAS picks its {_chosen[_loaded_path]} kernels on this CPU)"
    if library and _shim_path and os.path.realpath(library) == os.path.realpath(_shim_path):
        detail = f"preloaded from {_loaded_path} behind mlx-edge's CBLAS shim{kernels}"
        return BlasInfo("OpenBLAS", _loaded_path, detail)
    if library and "openblas" in library.lower():
        shared = f" (loaded globally: it answers PyTorch's sgemm_ too; shim: {_shim_problem})" if _shim_problem else ""
        return BlasInfo("OpenBLAS", library, f"preloaded from {_loaded_path or library}{kernels}{shared}")
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
