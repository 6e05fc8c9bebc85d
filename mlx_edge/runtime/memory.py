"""Keep freed memory inside the process on Linux (glibc), so big buffers are not faulted in again.

glibc serves a large malloc (above its mmap threshold: 128 KB, raised as big blocks are freed, at
most 32 MB) with a fresh mmap and hands freed memory at the top of the heap back to the kernel, so
the next buffer of that size is faulted in again, page by page. MLX's CPU backend allocates the
outputs of its fused (mx.compile) kernels with malloc on every call; on this 2-core VM a page fault
costs ~2.5 µs, and a GELU kernel on 3M floats took 33 ms with 14,617 minor faults per
call, 4.5 ms with none once freed memory stays in the process (at 1,048,575 floats there is no
fault and no difference: the step was at 2^20 floats, 4 MB). PyTorch's CPU tensors come from the
same malloc, so both backends run under the same setting. The cost: the process keeps its peak
memory until it exits, which is what a training or labeling process needs anyway.

Set MLX_EDGE_KEEP_FREED_MEMORY=0 to leave glibc's defaults. Other platforms (macOS, musl) are left
alone.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

# mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_THRESHOLD = 1 << 30  # allocations up to 1 GB come from (and go back to) the heap

_applied: bool | None = None


def keep_freed_memory() -> bool:
    """Raise glibc's mmap and trim thresholds once per process; True when they are set."""
    global _applied
    if _applied is not None:
        return _applied
    _applied = False
    if not sys.platform.startswith("linux") or os.environ.get("MLX_EDGE_KEEP_FREED_MEMORY", "1") == "0":
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    _applied = bool(mallopt(_M_MMAP_THRESHOLD, _THRESHOLD)) and bool(mallopt(_M_TRIM_THRESHOLD, _THRESHOLD))
    return _applied


def freed_memory_kept() -> bool | None:
    """Whether keep_freed_memory() set the thresholds (None: not called in this process)."""
    return _applied
