"""Where mlx-edge computes: devices (MLX and PyTorch), the BLAS MLX uses on Linux, per-core CPU streams."""
