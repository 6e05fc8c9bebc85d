"""`mlx-edge doctor`: is this install usable, and what will run where?"""

from __future__ import annotations

import platform
import sys
import time
from dataclasses import asdict, dataclass, field

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from mlx_edge import lockfile
from mlx_edge.manifest import installed_version
from mlx_edge.models.builtin import builtin_status
from mlx_edge.models.builtin_llm import builtin_llm_status
from mlx_edge.runtime import kernels
from mlx_edge.runtime.blas import blas_info, pinned_kernels_hint
from mlx_edge.runtime.devices import mlx_gpu_kind, torch_backends_available
from mlx_edge.runtime.memory import freed_memory_kept

IS_LINUX = sys.platform.startswith("linux")
IS_MAC = sys.platform == "darwin"


@dataclass(frozen=True)
class Requirement:
    dist: str  # distribution name on PyPI
    spec: str  # tested range
    required: bool  # False: only some stages need it
    why: str = ""


# The tested set (docs/install.md: "Tested versions"). Linux pins what was measured on Linux; macOS takes its wheels.
TESTED = (
    Requirement("mlx", ">=0.32,<0.33", True, "the student and the MLX teacher"),
    Requirement("mlx-lm", ">=0.32,<0.33", False, "augment: local LLM generation"),
    Requirement("numpy", ">=1.26,<2.3", True, "coremltools 9.0 fails to convert with numpy 2.4"),
    Requirement("torch", "==2.13.0" if IS_LINUX else ">=2.6", False, "teacher training, export tracing"),
    Requirement("transformers", ">=5.7,<6", False, "teacher training; mlx-lm 0.32 needs >= 5.7"),
    Requirement("tokenizers", ">=0.22", True, "tokenization"),
    Requirement("safetensors", ">=0.4", True, "weights on disk"),
    Requirement("coremltools", "==9.0", False, "CoreML export"),
    Requirement("onnx", ">=1.17", False, "ONNX export"),
    Requirement("onnxruntime", ">=1.20", False, "ONNX parity checks and bench"),
    Requirement("click", ">=8.1", True, "the CLI"),
) + (  # Linux only: the C++ CPU kernels (runtime/kernels.py) need the nanobind ABI MLX 0.32 was built with
    (Requirement("nanobind", ">=3.0.1,<3.2", False, "mlx-edge's C++ CPU kernels for MLX"),) if IS_LINUX else ()
)
PYTHON_SPEC = ">=3.11,<3.12"  # pyproject's requires-python (a test keeps them equal)


@dataclass
class Check:
    name: str
    found: str | None
    wanted: str
    ok: bool
    required: bool
    fix: str = ""


@dataclass
class Report:
    python: Check
    packages: list[Check]
    platform: str
    devices: dict[str, object] = field(default_factory=dict)
    blas: dict[str, object] = field(default_factory=dict)
    coreml_predict: dict[str, object] = field(default_factory=dict)
    builtin_teachers: list[dict[str, object]] = field(default_factory=list)  # informational: not part of usable
    builtin_llms: list[dict[str, object]] = field(default_factory=list)  # augment --llm NAME; informational too
    lock: dict[str, object] = field(default_factory=dict)  # installed vs the locked set; informational too

    @property
    def usable(self) -> bool:
        return self.python.ok and all(c.ok for c in self.packages if c.required)

    def to_dict(self) -> dict:
        out = asdict(self)
        out["usable"] = self.usable
        return out


_installed = installed_version  # a module-level name tests can replace


def _in_range(found: str, spec: str) -> bool:
    try:
        # Compare the public part: a local "+cpu" build satisfies "==2.13.0".
        return Version(Version(found).public) in SpecifierSet(spec)
    except InvalidVersion:
        return False


def check_packages() -> list[Check]:
    checks = []
    for req in TESTED:
        found = _installed(req.dist)
        ok = found is not None and _in_range(found, req.spec)
        pin = f"{req.dist}{req.spec}"
        fix = "" if ok else f'pip install "{pin}"' + (f"  ({req.why})" if req.why else "")
        checks.append(Check(req.dist, found, req.spec, ok, req.required, fix))
    return checks


def check_python() -> Check:
    found = platform.python_version()
    ok = _in_range(found, PYTHON_SPEC)
    return Check("python", found, PYTHON_SPEC, ok, True, "" if ok else "use Python 3.11 (tested) in a venv")


def check_lock() -> dict[str, object]:
    """Installed versions against the lock CI proved (mlx_edge/lockfile.py): a difference is a note, not an error."""
    try:
        lock = lockfile.read_lock()
    except (OSError, ValueError) as exc:  # a damaged or missing lock must not crash the doctor
        return {"path": str(lockfile.lock_path()), "error": str(exc), "matches": False}
    diff = lockfile.compare(lock, _installed)
    return {
        "path": str(lock.path),
        "proven_on": lock.proven_on,
        "total": diff.total,
        "matches": diff.matches,
        "differs": [{"name": n, "installed": found, "locked": locked} for n, found, locked in diff.differs],
        "missing": [{"name": n, "locked": locked} for n, locked in diff.missing],
        "summary": lockfile.summary(diff),
    }


def probe_devices() -> dict[str, object]:
    devices: dict[str, object] = {}
    try:
        devices["mlx"] = {"gpu": mlx_gpu_kind(), "cpu": True}
    except Exception as exc:  # a broken mlx install must not crash the doctor
        devices["mlx"] = {"error": str(exc)}
    if _installed("torch"):
        try:
            devices["torch"] = torch_backends_available()
        except Exception as exc:
            devices["torch"] = {"error": str(exc)}
    return devices


def build_kernels() -> dict[str, object]:
    """`doctor --build`: build mlx-edge's C++ CPU kernels for this machine unless they are built (Linux only)."""
    if not IS_LINUX:
        return {}
    try:
        return {"cpu_kernels_library": str(kernels.build())}
    except Exception as exc:  # a failed build is a line in the report: MLX's own kernels still run
        return {"cpu_kernels_build_error": kernels.one_line(exc)}


def probe_blas(seconds: float = 0.3, built: dict[str, object] | None = None) -> dict[str, object]:
    try:
        import mlx.core as mx  # lazy: doctor must run, and say so, when mlx itself is broken

    except Exception as exc:
        return {"name": "unknown", "error": str(exc)}
    info = blas_info()
    out: dict[str, object] = {"name": info.name, "library": info.library, "detail": info.detail}
    out["freed_memory_kept"] = freed_memory_kept()  # runtime/memory.py (False: off, not Linux, or not glibc)
    if IS_LINUX:
        out["cpu_kernels"] = kernels.load() is not None  # runtime/kernels.py: built by `doctor --build` only
        out["cpu_kernels_detail"] = kernels.describe()
        out.update(built or {})
    if info.name == "OpenBLAS" and (hint := pinned_kernels_hint()):
        out["hint"] = hint
    with mx.stream(mx.cpu):
        a, b = mx.random.normal((512, 512)), mx.random.normal((512, 512))
        mx.eval(a @ b)
        runs, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            mx.eval(a @ b)
            runs += 1
        elapsed = time.perf_counter() - start
    out["cpu_matmul_gflops"] = round(2 * 512**3 * runs / elapsed / 1e9, 1)
    return out


def probe_coreml() -> dict[str, object]:
    if IS_MAC:
        return {"possible": True, "detail": "macOS: MLModel.predict runs (CPU, GPU, Neural Engine)"}
    return {"possible": False, "detail": "coremltools predicts only on macOS; export and `mlx-edge check` work here"}


def run_doctor(build: bool = False) -> Report:
    """The report; with `build`, the C++ CPU kernels are built first if they are not (~10 s, once)."""
    built = build_kernels() if build else None
    return Report(
        python=check_python(),
        packages=check_packages(),
        platform=f"{platform.system()} {platform.machine()} ({platform.platform()})",
        devices=probe_devices(),
        blas=probe_blas(built=built),
        coreml_predict=probe_coreml(),
        builtin_teachers=builtin_status(),
        builtin_llms=builtin_llm_status(),
        lock=check_lock(),
    )


def format_report(report: Report) -> str:
    lines = [f"platform   {report.platform}"]
    rows = [report.python, *report.packages]
    for c in rows:
        mark = "ok " if c.ok else ("ERR" if c.required else "warn")
        lines.append(
            f"[{mark:<4}] {c.name:<13} {c.found or 'not installed':<16} tested {c.wanted}"
            + (f"   fix: {c.fix}" if c.fix else "")
        )
    lock = report.lock
    if lock:
        where = f" (proven on {lock['proven_on']})" if lock.get("proven_on") else ""
        lines.append(f"lock       {lock.get('summary') or 'unreadable: ' + str(lock.get('error'))}{where}")
        if not lock.get("matches"):
            lines.append(
                "           fix: bash scripts/setup.sh installs the locked set (tested versions); or keep yours"
            )
    mlx_dev = report.devices.get("mlx", {})
    torch_dev = report.devices.get("torch", {})
    lines.append(
        f"devices    mlx: gpu={mlx_dev.get('gpu') or 'none'} cpu=yes"
        + (f"   torch: {', '.join(k for k, v in torch_dev.items() if v is True)}" if torch_dev else "")
    )
    blas = report.blas
    speed = f", {blas['cpu_matmul_gflops']} GFLOP/s fp32 matmul" if "cpu_matmul_gflops" in blas else ""
    lines.append(f"blas       MLX CPU uses {blas.get('name')}{speed} ({blas.get('detail', blas.get('error', ''))})")
    if IS_LINUX and blas.get("name") == "bundled reference BLAS":
        lines.append("           fix: apt-get install libopenblas0-pthread (MLX CPU is ~40x faster with it)")
    if blas.get("hint"):
        lines.append(f"           note: {blas['hint']}")
    if IS_LINUX and "cpu_kernels" in blas:
        lines.append(f"kernels    softmax/GELU/LayerNorm/dropout/attention on CPU: {blas['cpu_kernels_detail']}")
        if blas.get("cpu_kernels_build_error"):
            lines.append(f"           the build failed: {blas['cpu_kernels_build_error']}")
        if not blas["cpu_kernels"] and "MLX_EDGE_CPU_KERNELS=0" not in blas["cpu_kernels_detail"]:
            lines.append(
                f"           fix: {kernels.BUILD_COMMAND} (needs g++ and the nanobind pinned in pyproject.toml; "
                "distillation runs ~1.3x and batch inference ~1.2x as fast with them)"
            )
    if IS_LINUX and blas.get("freed_memory_kept") is False:
        lines.append(
            "memory     glibc hands freed buffers back to the kernel: MLX's fused CPU kernels fault their "
            "outputs in again (up to ~7x slower); fix: unset MLX_EDGE_KEEP_FREED_MEMORY"
        )
    lines.append(
        f"coreml     predict here: {'yes' if report.coreml_predict['possible'] else 'no'}"
        f" ({report.coreml_predict['detail']})"
    )
    for i, t in enumerate(report.builtin_teachers):  # built-in teacher names (mlx-edge teacher train --model NAME)
        lines.append(f"{'teachers' if i == 0 else '':<11}{t['name']}: {t['state']} ({t['path']})")
        if t["fix"]:
            lines.append(f"           fix: {t['fix']}")
    for i, g in enumerate(report.builtin_llms):  # built-in generator names (mlx-edge augment --llm NAME)
        lines.append(f"{'llms' if i == 0 else '':<11}{g['name']}: {g['state']} ({g['path']})")
        if g["fix"]:
            lines.append(f"           fix: {g['fix']}")
    lines.append("usable: yes" if report.usable else "usable: NO (fix the ERR lines above)")
    return "\n".join(lines)
