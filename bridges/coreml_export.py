"""PyTorch mirror -> `torch.jit.trace` -> coremltools mlprogram (Encoder, Classifier), then compression.

`torch.export` fails in coremltools 9.0 on this module (`Unsupported fx node alias`), so it is traced.
Inputs are int32 `input_ids` / `attention_mask` of shape (1, L), L fixed, a range or an enumerated set.
"""

from __future__ import annotations

import contextlib
import io
import logging
import math
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from bridges.io_names import ATTENTION_MASK, INPUT_IDS
from mlx_edge.errors import EnvironmentProblem, ExportError

PRECISIONS = ("fp16", "fp32")
COMPUTE_UNITS = ("CPU_AND_GPU", "ALL", "CPU_AND_NE", "CPU_ONLY")
MIN_TARGETS = ("iOS16", "iOS17", "iOS18")
QUANTIZE = ("none", "int8", "int8-block", "int4-block", "palettize")
# Block-wise modes (iOS 18's constexpr_blockwise_shift_scale): weight dtype of each.
BLOCK_MODES = {"int8-block": "int8", "int4-block": "int4"}


@dataclass(frozen=True)
class SequenceLengths:
    """The encoder's sequence length: one fixed length, a range, or an enumerated set."""

    kind: str  # "fixed" | "range" | "enumerated"
    lengths: tuple[int, ...]  # fixed: (L,); range: (lo, hi); enumerated: sorted lengths

    @property
    def max(self) -> int:
        return self.lengths[-1]

    @property
    def min(self) -> int:
        return self.lengths[0]

    def padded_length(self, n_tokens: int) -> int:
        """The length a text of `n_tokens` is padded to before it goes to the encoder."""
        if self.kind == "fixed":
            return self.max
        if self.kind == "range":
            return min(max(n_tokens, self.min), self.max)
        return next((length for length in self.lengths if length >= n_tokens), self.max)

    def to_dict(self) -> dict:
        out = {"kind": self.kind, "default": self.max, "max": self.max, "min": self.min}
        if self.kind == "enumerated":
            out["lengths"] = list(self.lengths)
        return out

    def __str__(self) -> str:
        if self.kind == "fixed":
            return str(self.max)
        return f"{self.min}-{self.max}" if self.kind == "range" else ",".join(map(str, self.lengths))


def parse_seq_len(text: str | int, *, max_positions: int | None = None) -> SequenceLengths:
    """`128` (fixed), `16-128` (range) or `32,64,128` (enumerated); bounded by the model's positions."""
    raw = str(text).strip()
    try:
        if "," in raw:
            lengths = tuple(sorted({int(p) for p in raw.split(",") if p.strip()}))
            spec = SequenceLengths("enumerated", lengths) if len(lengths) > 1 else SequenceLengths("fixed", lengths)
        elif "-" in raw.lstrip("-") or ":" in raw:
            lo, hi = (int(p) for p in raw.replace(":", "-").split("-", 1))
            if lo >= hi:
                raise ValueError(f"range {raw} is empty")
            spec = SequenceLengths("range", (lo, hi))
        else:
            spec = SequenceLengths("fixed", (int(raw),))
    except ValueError as exc:
        raise ExportError(
            f"--seq-len {raw!r} is not a length, a range or a list ({exc})", "use e.g. 128, 16-128 or 32,64,128"
        ) from None
    if spec.min < 2:
        raise ExportError(f"--seq-len {raw!r}: a length must be at least 2 ([CLS] and [SEP])", "use e.g. 128")
    if max_positions is not None and spec.max > max_positions:
        raise ExportError(
            f"--seq-len {raw!r} exceeds the student's max_position_embeddings ({max_positions})",
            f"use at most {max_positions}",
        )
    return spec


@contextlib.contextmanager
def quiet_coremltools():
    """coremltools logs, prints and draws its own tqdm bars; keep library output clean (our bar stays)."""
    loggers = [logging.getLogger(n) for n in ("coremltools", "root")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        with (
            warnings.catch_warnings(),
            contextlib.redirect_stdout(io.StringIO()),
            contextlib.redirect_stderr(io.StringIO()),
        ):
            warnings.simplefilter("ignore")
            yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


def import_coremltools():
    try:
        with quiet_coremltools():
            import coremltools as ct  # lazy: import_coremltools() turns a broken install into one line
    except ImportError as exc:
        raise EnvironmentProblem(f"coremltools is not importable ({exc})", "pip install coremltools==9.0") from exc
    return ct


def _input_types(ct, seq: SequenceLengths):
    if seq.kind == "fixed":
        shape = (1, seq.max)
    elif seq.kind == "range":
        shape = (1, ct.RangeDim(lower_bound=seq.min, upper_bound=seq.max, default=seq.max))
    else:
        shape = ct.EnumeratedShapes(shapes=[(1, n) for n in seq.lengths], default=(1, seq.max))
    return [
        ct.TensorType(name=INPUT_IDS, shape=shape, dtype=np.int32),
        ct.TensorType(name=ATTENTION_MASK, shape=shape, dtype=np.int32),
    ]


def convert(module, *, outputs: list[str], seq: SequenceLengths, precision: str, min_target: str, compute_units: str):
    """Trace `module` (ids, mask) -> outputs and convert it to an mlprogram (not saved)."""

    ct = import_coremltools()
    example = (torch.ones((1, seq.max), dtype=torch.int32), torch.ones((1, seq.max), dtype=torch.int32))
    with quiet_coremltools(), torch.no_grad():
        traced = torch.jit.trace(module.eval(), example, check_trace=False)  # the checks compare outputs
        try:
            return ct.convert(
                traced,
                convert_to="mlprogram",
                inputs=_input_types(ct, seq),
                # fp32 outputs even from an fp16 program: what apps and checks expect to read
                outputs=[ct.TensorType(name=n, dtype=np.float32) for n in outputs],
                compute_precision=ct.precision.FLOAT16 if precision == "fp16" else ct.precision.FLOAT32,
                minimum_deployment_target=getattr(ct.target, min_target),
                compute_units=getattr(ct.ComputeUnit, compute_units),
                skip_model_load=True,
            )
        except Exception as exc:  # coremltools raises bare RuntimeError/ValueError/NotImplementedError
            raise ExportError(
                f"coremltools could not convert the traced mirror: {exc}",
                "report it with `mlx-edge doctor --json` output",
            ) from exc


def block_for(width: int, block_size: int) -> int:
    """Weights per scale for a weight `width` inputs wide: the largest divisor of `width` up to
    `block_size` (a 312-wide student takes 26 at 32 and 104 at 128; a 1200-wide FFN 30 and 120)."""
    return max(d for d in range(1, min(width, block_size) + 1) if width % d == 0)


def weight_widths(mlmodel) -> dict[str, int]:
    """Input width of each weight coremltools would compress (over 2048 elements), by const name:
    axis 1 for linear and gather (an embedding table's row width), as coremltools picks it; a weight
    that feeds anything else gets the width common to its last two axes."""
    import coremltools.optimize.coreml as cto  # lazy: import_coremltools() turns a broken install into one line

    widths = {}
    with quiet_coremltools():
        metadata = cto.get_weights_metadata(mlmodel, weight_threshold=2048)
    for name, meta in metadata.items():
        shape = meta.val.shape
        if len(shape) < 2:
            continue
        if all(child.op_type in ("linear", "gather") for child in meta.child_ops):
            widths[name] = shape[1]
        else:
            widths[name] = math.gcd(shape[-1], shape[-2])
    return widths


# The student's weights every compression leaves in float (parameter names). The [CLS] pooler's output
# is the head's input with no later layer to average a rounding out, and a pooler copied from a teacher
# that never used its own (a mean-pooled head: the built-in e5's is the identity) keeps one weight near 1
# per row among values near 0: one scale per block rounds the small ones away. Measured (issue 29, 300
# to-do rows, int8 in blocks of 64): the student's probabilities moved by up to 0.077 with it compressed,
# 0.009 without. It is hidden x hidden: 0.17 MB in fp16 at 288 wide.
KEEP_FLOAT = ("bert.pooler.dense.weight",)
CONST_SUFFIXES = ("_quantized", "_palettized", "_to_fp16")


def const_base(const: str) -> str:
    """A program constant's name as the converter derived it from the PyTorch parameter's, dots as
    underscores: the compression and dtype suffixes and the Classifier's `mirror_` prefix removed."""
    for suffix in CONST_SUFFIXES:
        const = const.removesuffix(suffix)
    return const.removeprefix("mirror_")


_KEPT_BASES = frozenset(name.replace(".", "_") for name in KEEP_FLOAT)


def kept_float(const: str) -> bool:
    """Whether program constant `const` is one of KEEP_FLOAT's."""
    return const_base(const) in _KEPT_BASES


def compress(mlmodel, *, quantize: str, palettize_bits: int = 6, palettize_mode: str = "kmeans", block_size: int = 32):
    """Weight compression through coremltools.optimize: int8 linear (per output channel), int8 or
    int4 linear per block of at most `block_size` input weights (iOS 18; `block_for`), or an n-bit LUT. Symmetric: no
    offsets, w = scale * q. coremltools leaves weights of 2048 elements or fewer as they are, and this
    leaves KEEP_FLOAT's."""
    if quantize == "none":
        return mlmodel
    import coremltools.optimize.coreml as cto  # lazy: import_coremltools() turns a broken install into one line

    widths = weight_widths(mlmodel)
    keep = {name: None for name in widths if kept_float(name)}  # None: coremltools leaves the op as it is
    with quiet_coremltools():
        if quantize == "int8":
            config = cto.OptimizationConfig(
                global_config=cto.OpLinearQuantizerConfig(mode="linear_symmetric"), op_name_configs=keep
            )
            return cto.linear_quantize_weights(mlmodel, config)
        if quantize in BLOCK_MODES:

            def op(size: int):
                return cto.OpLinearQuantizerConfig(
                    mode="linear_symmetric", dtype=BLOCK_MODES[quantize], granularity="per_block", block_size=size
                )

            # Each weight its own block: the largest divisor of its input width up to block_size.
            sizes = {name: block_for(width, block_size) for name, width in widths.items()}
            config = cto.OptimizationConfig(
                global_config=op(block_size), op_name_configs={name: op(size) for name, size in sizes.items()} | keep
            )
            return cto.linear_quantize_weights(mlmodel, config)
        if palettize_mode == "kmeans":
            try:
                import sklearn  # noqa: F401  # lazy: coremltools k-means needs it; probed only for palettize
            except ImportError:
                raise EnvironmentProblem(
                    "--quantize palettize (k-means) needs scikit-learn",
                    "pip install scikit-learn, or use --quantize int8",
                ) from None
        config = cto.OptimizationConfig(
            global_config=cto.OpPalettizerConfig(mode=palettize_mode, nbits=palettize_bits), op_name_configs=keep
        )
        return cto.palettize_weights(mlmodel, config)


def set_metadata(
    mlmodel,
    *,
    description: str,
    author: str,
    license: str,
    version: str,
    features: dict[str, str],
    user: dict[str, str],
) -> None:
    mlmodel.short_description = description
    mlmodel.author = author
    mlmodel.license = license
    mlmodel.version = version
    for name, text in features.items():
        if name in mlmodel.input_description:
            mlmodel.input_description[name] = text
        else:
            mlmodel.output_description[name] = text
    for key, value in user.items():
        mlmodel.user_defined_metadata[key] = value


def save(mlmodel, path: Path) -> None:
    with quiet_coremltools():
        mlmodel.save(str(path))


def load_spec(path: Path):
    """The spec of a saved `.mlpackage` or `.mlmodel`, without loading it for prediction."""
    ct = import_coremltools()
    with quiet_coremltools():
        return ct.models.MLModel(str(path), skip_model_load=True).get_spec()


_DTYPES = {65568: "float32", 65552: "float16", 65600: "float64", 131104: "int32"}


def spec_features(spec, which: str) -> list[dict]:
    """name/shape/dtype (+ flexible lengths) of a spec's inputs or outputs, as the manifest records them."""
    out = []
    for feature in getattr(spec.description, which):
        array = feature.type.multiArrayType
        info = {
            "name": feature.name,
            "shape": [int(s) for s in array.shape],
            "dtype": _DTYPES.get(array.dataType, str(array.dataType)),
        }
        kind = array.WhichOneof("ShapeFlexibility")
        if kind == "shapeRange":
            info["shape_range"] = [[int(r.lowerBound), int(r.upperBound)] for r in array.shapeRange.sizeRanges]
        elif kind == "enumeratedShapes":
            info["enumerated_shapes"] = [[int(s) for s in shape.shape] for shape in array.enumeratedShapes.shapes]
        out.append(info)
    return out
