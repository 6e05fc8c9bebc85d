"""mlx-edge: teacher → MLX student → updatable CoreML text classifier, on a Mac, with no cloud."""

from mlx_edge.runtime.blas import preload_openblas as _preload_openblas
from mlx_edge.runtime.memory import keep_freed_memory as _keep_freed_memory

__version__ = "0.1.0"

# Must run before anything imports mlx (see runtime/blas.py); it only dlopens a library, so it is cheap.
_preload_openblas()
# glibc keeps freed buffers instead of re-faulting them on each allocation (see runtime/memory.py):
# MLX's fused CPU kernels on arrays of 4 MB or more ran ~7x slower without it.
_keep_freed_memory()
