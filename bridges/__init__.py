"""Bridges between the MLX model and the formats around it.

Today: MLX ⇄ safetensors (`safetensors_io`). The PyTorch mirror, CoreML and ONNX exporters and
their checks join here with the export stage.
"""
