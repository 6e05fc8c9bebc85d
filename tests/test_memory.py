"""runtime/memory.py: importing mlx_edge makes glibc keep freed buffers, so a big buffer allocated
again is not faulted in page by page; MLX_EDGE_KEEP_FREED_MEMORY=0 leaves glibc's defaults.

Each case runs in a fresh interpreter (the setting is process-wide and made at import) and counts
the minor page faults of the GELU kernel (models/fastmath.py's MLX expression, not the C++ kernel,
whose outputs MLX's allocator happens to recycle) producing a 12 MB output, per call.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PROBE = """
import json, resource
import mlx_edge
import mlx.core as mx
from mlx_edge.models import fastmath
from mlx_edge.runtime.memory import freed_memory_kept
x = mx.random.normal((3 * 1024 * 1024,))  # 12 MB: an FFN activation of a training step's shard
mx.eval(x, fastmath.gelu(x))
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(5):
    mx.eval(fastmath.gelu(x))  # each call's output is a fresh 12 MB buffer from malloc
faults = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 5
print(json.dumps({"kept": freed_memory_kept(), "faults": faults}))
"""


def _probe(keep: str) -> dict:
    env = {**os.environ, "MLX_EDGE_KEEP_FREED_MEMORY": keep, "MLX_EDGE_CPU_KERNELS": "0"}
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc thresholds exist only on Linux")
def test_a_freed_buffer_is_reused_without_faulting_it_in_again():
    kept, default = _probe("1"), _probe("0")
    assert kept["kept"] is True and default["kept"] is False
    pages = 12 * 1024 * 1024 // 4096
    assert default["faults"] > pages // 2  # glibc's default: each output faulted in anew
    assert kept["faults"] < pages // 20  # kept: the freed outputs' pages are reused
