"""Timing, memory and agreement: the measurement rules in one place.

Timing: warm-up steps first (compilation, allocator growth), then timed steps, each of which
returns only once the work is done (mx.eval / torch.cuda.synchronize / torch.mps.synchronize /
a host copy); repeats stop early when a time budget is spent. Median and spread are reported.
"""

from __future__ import annotations

import ctypes
import os
import platform
import resource
import statistics
import subprocess
import sys
import time

import numpy as np

THREAD_VARIABLES = ("OMP_NUM_THREADS", "OMP_WAIT_POLICY", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "MLX_EDGE_BLAS")
# Agreement across backends, all fp32: |a - b| <= ATOL + RTOL * |b| elementwise.
RTOL, ATOL = 2e-3, 2e-4


def time_steps(step, *, warmup: int, repeats: int, budget_s: float, min_s: float = 0.0) -> list[float]:
    """Seconds per step: `repeats` timed steps, more while less than `min_s` seconds are timed (a 20 ms
    latency's median from 5 samples moved by 20% between runs), stopping once `budget_s` is spent
    (at least one step)."""
    started = time.perf_counter()
    for _ in range(warmup):
        step()
        if time.perf_counter() - started > budget_s / 2:  # a slow step: one warm-up is enough
            break
    times = []
    started = time.perf_counter()
    floor = min(min_s, budget_s)
    while True:
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
        spent = time.perf_counter() - started
        if spent > budget_s or (len(times) >= max(1, repeats) and spent >= floor):
            return times


def summarize(times: list[float]) -> dict:
    """Median, min, max and the relative spread (max - min) / median of step times."""
    median = statistics.median(times)
    return {
        "median_s": median,
        "min_s": min(times),
        "max_s": max(times),
        "repeats": len(times),
        "spread": (max(times) - min(times)) / median if median > 0 else 0.0,
        "times_s": times,
    }


def peak_matmul_flops(step, n: int, *, repeats: int = 5, budget_s: float = 3.0) -> float:
    """Best-of FLOP/s of an n x n x n fp32 matmul (2 n³ FLOPs)."""
    times = time_steps(step, warmup=2, repeats=repeats, budget_s=budget_s)
    return 2.0 * n**3 / min(times)


# ------------------------------------------------------------------------------------------ memory


class ResidentPeak:
    """Peak resident memory of this process during a block, minus the resident size before it.

    Linux: the kernel's high-water mark (VmHWM) is reset by writing 5 to /proc/self/clear_refs, so
    the number is this block's own peak. Elsewhere ru_maxrss never resets: the number is then a
    lower bound (0 when an earlier block peaked higher). Freed memory is handed back first
    (malloc_trim) so a block does not run on memory an earlier one left cached.
    """

    def __enter__(self):
        _trim()
        self.exact = _reset_hwm()
        self.before = _rss_now()
        self.before_max = _ru_maxrss()
        return self

    def __exit__(self, *exc):
        peak = _status_kb("VmHWM") * 1024 if self.exact else _ru_maxrss()
        self.delta = max(0, peak - self.before) if self.exact else max(0, peak - self.before_max)
        return False


def _status_kb(field: str) -> int:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _rss_now() -> int:
    return _status_kb("VmRSS") * 1024 if sys.platform.startswith("linux") else _ru_maxrss()


def _ru_maxrss() -> int:
    value = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return value if sys.platform == "darwin" else value * 1024  # bytes on macOS, KiB on Linux


def _reset_hwm() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _trim() -> None:
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL("libc.so.6").malloc_trim(0)
        except (OSError, AttributeError):
            pass


# --------------------------------------------------------------------------------------- agreement


def compare(results: dict[str, dict[str, np.ndarray]]) -> dict[str, dict]:
    """Which backends agree: each backend's verdict and the largest difference behind it.

    The reference is the backend that agrees with the most others (ties: the first listed). A
    backend that differs from it is flagged. When no two backends agree, all are flagged.
    """
    names = list(results)
    if len(names) == 1:
        return {names[0]: {"agrees": True, "reference": None, "max_abs_diff": 0.0}}
    agree = {a: {b: _close(results[a], results[b]) for b in names if b != a} for a in names}
    counts = {a: sum(ok for ok, _ in agree[a].values()) for a in names}
    reference = max(names, key=lambda a: (counts[a], -names.index(a)))
    verdicts = {}
    for name in names:
        if counts[reference] == 0:
            verdicts[name] = {
                "agrees": False,
                "reference": None,
                "max_abs_diff": max(d for _, d in agree[name].values()),
            }
        elif name == reference:
            verdicts[name] = {"agrees": True, "reference": None, "max_abs_diff": 0.0}
        else:
            ok, diff = agree[name][reference]
            verdicts[name] = {"agrees": ok, "reference": reference, "max_abs_diff": diff}
    return verdicts


def _close(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> tuple[bool, float]:
    ok, worst = True, 0.0
    for key in a:
        x, y = np.asarray(a[key], np.float64), np.asarray(b[key], np.float64)
        if x.shape != y.shape or not (np.all(np.isfinite(x)) and np.all(np.isfinite(y))):
            return False, float("inf")
        worst = max(worst, float(np.max(np.abs(x - y))) if x.size else 0.0)
        ok = ok and bool(np.allclose(x, y, rtol=RTOL, atol=ATOL))
    return ok, worst


# ----------------------------------------------------------------------------------------- machine


def machine_info() -> dict:
    """The machine, its load (others' work makes timings noisy), and the Python side."""
    info = {
        "platform": platform.platform(),
        "machine": platform.machine(),
        "processor": _cpu_model(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "numpy": np.__version__,
    }
    if hasattr(os, "getloadavg"):
        info["load_average"] = [round(x, 2) for x in os.getloadavg()]
    # settings that change CPU timings (OpenMP's spin-waiting hurts PyTorch most on a busy machine)
    info["environment"] = {k: os.environ[k] for k in THREAD_VARIABLES if k in os.environ}
    try:
        pages, size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
        info["memory_bytes"] = pages * size
    except (ValueError, OSError, AttributeError):
        pass
    return info


def _cpu_model() -> str:
    if sys.platform.startswith("linux"):
        try:
            with open("/proc/cpuinfo") as f:
                for line in f:
                    if line.startswith("model name"):
                        return line.split(":", 1)[1].strip()
        except OSError:
            pass
    if sys.platform == "darwin":
        try:
            return subprocess.run(
                ["sysctl", "-n", "machdep.cpu.brand_string"], capture_output=True, text=True, timeout=5
            ).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            pass
    return platform.processor()
