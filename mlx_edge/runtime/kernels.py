"""mlx-edge's vectorized CPU kernels for MLX (cpu_kernels.cpp): built once by `mlx-edge doctor --build`, loaded
when fast math is on.

MLX's Linux CPU wheel evaluates element-wise work one float at a time, and the kernels `mx.compile`
generates do not vectorize either (every input is a possibly aliased pointer). cpu_kernels.cpp adds
the attention softmax, GELU (with its derivative), LayerNorm and the hashed dropout as MLX primitives
with vectorized loops and their own backward passes (first order only: a second derivative raises),
and the whole attention of inference (fastmath.attention takes its gradient from the explicit form).

On by default on Linux: on a 2-core x86 box the distill loop runs 1.31x, batch inference (b32 L128) 1.20x
and labeling 1.35x as fast with them as with fastmath's MLX expressions (docs/performance.md: "C++
CPU kernels").

`build()` (run by `mlx-edge doctor --build`, which scripts/setup.sh runs) compiles the library with g++
against the installed MLX's headers and nanobind (MLX's extension route; nanobind is a Linux
dependency), once per MLX, nanobind, Python and CPU: in a child process, which imports it and checks
it against NumPy (softmax, GELU, LayerNorm). Only a library whose child exited 0 is renamed into the
cache (`cache_root()/kernels/`) beside a sidecar with its sha256; a file lock makes concurrent first
builds compile once. `load()` never compiles: it loads a library whose sidecar matches and checks it
again, and anything else (not built, damaged, a nanobind whose ABI is not MLX's, an error in the
check, MLX_EDGE_CPU_KERNELS=0) leaves fastmath's MLX expressions in place; `problem()` says why (once
on stderr too), and `mlx-edge doctor` shows it.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
import threading
from contextlib import contextmanager
from pathlib import Path

from mlx_edge.fileio import cache_root

_SOURCE = Path(__file__).with_name("cpu_kernels.cpp")
_MODULE = "_mlx_edge_kernels"  # NB_MODULE's name in cpu_kernels.cpp
BUILD_COMMAND = "mlx-edge doctor --build"
NOT_BUILT = f"not built for this machine yet: `{BUILD_COMMAND}` builds them (~10 s, once)"
# where /proc/cpuinfo names no CPU: a baseline every CPU of the architecture runs, never -march=native
_PORTABLE_MARCH = {"x86_64": "x86-64-v2", "amd64": "x86-64-v2", "aarch64": "armv8-a", "arm64": "armv8-a"}
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


def _cpu_flags(cpuinfo: str = "/proc/cpuinfo") -> str | None:
    """What this CPU runs, for the cache key: its feature flags (x86 "flags", ARM "Features"), else the
    machine, model name and a hash of what cpuinfo says; None when nothing CPU-specific can be read
    (the build is then portable). A cache shared by different CPUs (an NFS home) so holds one build
    per CPU, never a -march=native library that another CPU cannot run."""
    try:
        text = Path(cpuinfo).read_text(errors="replace")
    except OSError:
        text = ""
    found = re.search(r"^(?:flags|Features)\s*:(.*)$", text, re.MULTILINE)
    if found and found.group(1).strip():
        return found.group(1).strip()
    # the processor index and clock lines say nothing about the CPU (and the clock changes per read)
    lines = [
        line.strip()
        for line in text.splitlines()
        if line.strip() and "mhz" not in line.lower() and not re.fullmatch(r"processor\s*:\s*\d+", line.strip())
    ]
    if not lines:
        return None
    models = (
        re.search(rf"^{key}\s*:(.*)$", text, re.MULTILINE) for key in ("model name", "cpu model", "Processor", "cpu")
    )
    model = next((m.group(1).strip() for m in models if m), "")
    digest = hashlib.sha256("\n".join(lines).encode()).hexdigest()[:16]
    return f"{platform.machine()} {model} {digest}"


def _march(cpu: str | None) -> list[str]:
    """-march=native where the key names the CPU; else the architecture's baseline (the compiler's default off x86/ARM)."""
    if cpu is not None:
        return ["-march=native"]
    portable = _PORTABLE_MARCH.get(platform.machine().lower())
    return [f"-march={portable}"] if portable else []


def _plan() -> tuple[list[str], Path]:
    """(the compiler flags, the library's path in the cache), keyed on what the library depends on:
    the source, the flags, MLX, nanobind, Python's extension ABI and the CPU; not on a compiler, so
    a built library is found on a machine without one."""
    import mlx.core as mx  # lazy: the build needs MLX's headers and version
    import nanobind  # lazy: a build-time dependency of this one library

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
    cpu = _cpu_flags()
    flags = [
        "-O3",
        *_march(cpu),  # built where it runs; the key below includes the CPU
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
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    identity = [_SOURCE.read_bytes()] + [
        s.encode() for s in (*flags, mx.__version__, nanobind.__version__, suffix, cpu or "portable")
    ]
    key = hashlib.sha256(b"\0".join(identity)).hexdigest()[:16]
    return flags, cache_root() / "kernels" / f"mlx-edge-kernels-{key}-{platform.machine()}{suffix}"


def library_path() -> Path:
    """Where this machine's library is (or would be) in the cache."""
    return _plan()[1]


def _sidecar(library: Path) -> Path:
    return library.with_name(library.name + ".ok")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _checked(library: Path) -> bool:
    """A library whose child build passed its self-test: the sidecar holds this very file's sha256."""
    try:
        return _sidecar(library).read_text().strip() == _sha256(library)
    except OSError:
        return False


def _compiler() -> str:
    found = next((c for c in (os.environ.get("CXX"), "g++") if c and shutil.which(c)), None)
    if found is None:
        raise OSError("no C++ compiler (g++ or $CXX) to build mlx-edge's CPU kernels: apt-get install g++")
    return found


@contextmanager
def _build_lock(directory: Path):
    """One build at a time per cache: a second process waits here, then finds the first one's library."""
    import fcntl  # lazy: Unix only, and the kernels are built on Linux only

    with open(directory / ".build.lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def one_line(exc: BaseException) -> str:
    """An exception as the one line a user is shown: its message's first line, else its type's name."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def build() -> Path:
    """Build and check cpu_kernels.cpp for this machine unless a checked library is in the cache; its path.

    Raises OSError with a one-line reason (no compiler, a compile error, a failed or crashed self-test);
    nothing is cached then. A later `load()` in this process finds what was built."""
    global _tried
    flags, target = _plan()
    if _checked(target):
        return target
    compiler = _compiler()
    target.parent.mkdir(parents=True, exist_ok=True)
    with _build_lock(target.parent):
        if _checked(target):  # another process built it while this one waited
            return target
        print("mlx-edge: building its CPU kernels for MLX (once, ~10 s)", file=sys.stderr, flush=True)
        tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        sidecar_tmp = tmp.with_name(tmp.name + ".ok")
        try:
            _build_in_child([compiler, *flags, "-o", str(tmp)])
            sidecar_tmp.write_text(_sha256(tmp) + "\n")
            os.replace(sidecar_tmp, _sidecar(target))  # the sidecar first: a reader never trusts a half-placed pair
            os.replace(tmp, target)
        finally:
            tmp.unlink(missing_ok=True)
            sidecar_tmp.unlink(missing_ok=True)
    with _lock:
        if _module is None:
            _tried = False  # load() looks again
    return target


def _build_in_child(command: list[str]) -> None:
    """Compile and self-test in a child process: a library that crashes on import or in its self-test
    (a mismatched build: SIGILL, SIGSEGV) takes down the child, not this process."""
    code = "import sys; from mlx_edge.runtime.kernels import _child; _child(sys.argv[1])"
    done = subprocess.run(
        [sys.executable, "-c", code, json.dumps(command)], capture_output=True, text=True, timeout=900
    )
    if done.returncode < 0:
        try:
            name = signal.Signals(-done.returncode).name
        except ValueError:
            name = f"signal {-done.returncode}"
        raise OSError(f"the kernel self-test crashed ({name}); nothing was cached")
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines()
        raise OSError(lines[-1] if lines else f"the kernel build exited with status {done.returncode}")


def _child(command_json: str) -> None:
    """The child's side of `build()`: compile to the temporary name, import it, self-test; exit 1 with
    the reason as stderr's last line."""
    command = json.loads(command_json)
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            errors = [line for line in done.stderr.splitlines() if "error" in line] or done.stderr.splitlines()
            raise OSError(f"{command[0]} could not build mlx-edge's CPU kernels: {' | '.join(errors[:3])[-400:]}")
        _self_test(_import(Path(command[command.index("-o") + 1])))
    except Exception as exc:  # any failure is the reason the parent reports
        print(f"\n{one_line(exc)}", file=sys.stderr, flush=True)
        sys.exit(1)


def _import(path: Path):
    loader = importlib.machinery.ExtensionFileLoader(_MODULE, str(path))
    spec = importlib.util.spec_from_file_location(_MODULE, str(path), loader=loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def _self_test(module) -> None:
    """Softmax, GELU, LayerNorm and the attention against NumPy: catches a library that loads but
    cannot read MLX's arrays (nanobind ABI) or computes wrong numbers."""
    import math  # lazy: only the self-test needs erf

    import mlx.core as mx  # lazy: MLX is imported by whoever asks for the kernels
    import numpy as np  # lazy: see above

    x = np.linspace(-3, 3, 24, dtype=np.float32).reshape(2, 12)
    softmax = np.exp(x - x.max(-1, keepdims=True))
    softmax /= softmax.sum(-1, keepdims=True)
    x64 = x.astype(np.float64)
    gelu = 0.5 * x64 * (1 + np.vectorize(math.erf)(x64 / math.sqrt(2)))
    norm = (x64 - x64.mean(-1, keepdims=True)) / np.sqrt(x64.var(-1, keepdims=True) + 1e-5)
    w, b = np.full(12, 2.0, np.float32), np.full(12, 0.5, np.float32)
    # attention: batch 2, length 3 (the second row's last key masked), 2 heads of 2
    q, k, v = (np.cos(np.arange(24, dtype=np.float32) * f).reshape(2, 3, 4) for f in (0.3, 0.7, 1.1))
    key_mask = np.zeros((2, 1, 1, 3), np.float32)
    key_mask[1, ..., 2] = np.finfo(np.float32).min
    heads = [slice(0, 2), slice(2, 4)]
    scores = [q[..., h] @ k[..., h].transpose(0, 2, 1) * 0.5 + key_mask[:, 0] for h in heads]
    probs = [np.exp(s - s.max(-1, keepdims=True)) for s in scores]
    attention = np.concatenate([(p / p.sum(-1, keepdims=True)) @ v[..., h] for p, h in zip(probs, heads)], -1)
    with mx.stream(mx.cpu):
        a = mx.array(x)
        got = {
            "softmax": (np.array(module.softmax(a)), softmax, 1e-6),
            "GELU": (np.array(module.gelu(a)), gelu, 2e-6),
            "LayerNorm": (np.array(module.layer_norm(a, mx.array(w), mx.array(b), 1e-5)), norm * 2 + 0.5, 2e-5),
            "attention": (
                np.array(module.attention(*(mx.array(t) for t in (q, k, v, key_mask)), 2, 0.5)),
                attention,
                1e-5,
            ),
        }
    for name, (ours, want, tolerance) in got.items():
        if not np.allclose(ours, want, atol=tolerance):
            raise OSError(f"mlx-edge's CPU kernels gave a wrong {name} in their self-test")


def _load_checked():
    path = library_path()
    if not path.exists():
        raise OSError(NOT_BUILT)
    if not _checked(path):  # never dlopen a file the build did not vouch for
        raise OSError(f"the library in {path.parent} is damaged, rebuild with {BUILD_COMMAND}")
    module = _import(path)
    _self_test(module)
    return module


def load():
    """The kernels module, or None (then `problem()` says why, and stderr once). Never compiles."""
    global _module, _problem, _tried
    if _tried:
        return _module
    with _lock:
        if _tried:
            return _module
        try:
            if not wanted():
                linux = sys.platform.startswith("linux")
                _problem = "off (MLX_EDGE_CPU_KERNELS=0)" if linux else "not needed off Linux"
            else:
                _module = _load_checked()
                _problem = None
        except Exception as exc:  # whatever stops them, the MLX expressions run instead
            _problem = one_line(exc)
        finally:
            _tried = True
        if _module is None and wanted():
            print(f"mlx-edge: CPU kernels off: {_problem}", file=sys.stderr, flush=True)
    return _module


def problem() -> str | None:
    """Why the kernels are not in use (after `load()`), or None when they are."""
    return _problem


def describe() -> str:
    """One line for doctor and the bench rows."""
    module = load()
    return "vectorized (mlx-edge C++)" if module is not None else f"MLX's own ({_problem})"
