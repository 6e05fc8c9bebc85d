"""mlx-edge: teacher → MLX student → updatable CoreML text classifier, on a Mac, with no cloud."""

from mlx_edge.runtime.blas import preload_openblas as _preload_openblas

__version__ = "0.1.0"

# Must run before anything imports mlx (see runtime/blas.py); it only dlopens a library, so it is cheap.
_preload_openblas()
