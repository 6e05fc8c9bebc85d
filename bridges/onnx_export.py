"""PyTorch mirror -> ONNX (TorchScript exporter), checked with onnx's checker, run with ONNX Runtime.

The TorchScript exporter (`dynamo=False`) needs nothing beyond torch and onnx; the dynamo exporter
would add onnxscript. Batch and sequence axes are dynamic.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np

from bridges.io_names import ATTENTION_MASK, EMBEDDING, INPUT_IDS, LOGITS
from mlx_edge.errors import BundleError

OPSET = 17


def export_onnx(mirror, path: Path, *, example_length: int) -> dict:
    """Write `path` from the mirror; returns the manifest's description of it."""
    import torch  # lazy: running a program (ort_session, OnnxRunner) needs no PyTorch (~2 s import)

    example = (torch.ones((1, example_length), dtype=torch.int32), torch.ones((1, example_length), dtype=torch.int32))
    axes = {
        INPUT_IDS: {0: "batch", 1: "sequence"},
        ATTENTION_MASK: {0: "batch", 1: "sequence"},
        EMBEDDING: {0: "batch"},
        LOGITS: {0: "batch"},
    }
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation notice
        torch.onnx.export(
            mirror.eval(),
            example,
            str(path),
            dynamo=False,
            opset_version=OPSET,
            input_names=[INPUT_IDS, ATTENTION_MASK],
            output_names=[EMBEDDING, LOGITS],
            dynamic_axes=axes,
        )
    check_onnx(path)
    return describe_onnx(path)


def check_onnx(path: Path) -> None:
    import onnx  # lazy: onnx/onnxruntime load only for the ONNX artifact

    try:
        onnx.checker.check_model(str(path), full_check=True)
    except Exception as exc:  # onnx.checker.ValidationError, or a protobuf DecodeError on a damaged file
        raise BundleError(f"{path.name} fails onnx's checker: {str(exc).splitlines()[0]}") from exc


_ONNX_DTYPES = {1: "float32", 6: "int32", 7: "int64", 10: "float16"}


def _features(values) -> list[dict]:
    out = []
    for value in values:
        tensor = value.type.tensor_type
        shape = [d.dim_value if d.HasField("dim_value") else d.dim_param for d in tensor.shape.dim]
        out.append(
            {"name": value.name, "shape": shape, "dtype": _ONNX_DTYPES.get(tensor.elem_type, str(tensor.elem_type))}
        )
    return out


def describe_onnx(path: Path) -> dict:
    import onnx  # lazy: onnx/onnxruntime load only for the ONNX artifact

    model = onnx.load(str(path), load_external_data=False)
    return {
        "opset": max(o.version for o in model.opset_import if o.domain in ("", "ai.onnx")),
        "inputs": _features(model.graph.input),
        "outputs": _features(model.graph.output),
    }


def ort_session(path: Path, *, threads: int | None = None):
    """An ONNX Runtime CPU session on `path` with `threads` intra-op threads (None: one per core).
    Idle pool threads do not spin: they would take the cores from whatever runs next in the process."""
    import onnxruntime as ort  # lazy: onnx/onnxruntime load only for the ONNX artifact

    options = ort.SessionOptions()
    options.log_severity_level = 3
    if threads is not None:
        options.intra_op_num_threads = threads
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    try:
        return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime raises its own Fail/InvalidGraph classes
        raise BundleError(f"ONNX Runtime cannot load {path.name}: {exc}") from exc


class OnnxRunner:
    """ONNX Runtime on CPU, one thread (the check's reference run); `__call__(ids, mask)` -> (embedding, logits)."""

    def __init__(self, path: Path):
        self.session = ort_session(path, threads=1)

    def __call__(self, input_ids: np.ndarray, attention_mask: np.ndarray):
        return tuple(
            self.session.run(
                None,
                {INPUT_IDS: np.asarray(input_ids, np.int32), ATTENTION_MASK: np.asarray(attention_mask, np.int32)},
            )
        )
