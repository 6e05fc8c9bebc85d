"""Quantization-aware distillation: the student trains with its weights quantized as the app will hold them.

`fake_quantize` puts a weight on the grid MLX's affine group quantization stores (w = scale * q + bias
per group of `group_size` input weights, q in [0, 2^bits - 1]) and that CoreML's block-wise op holds
exactly (models/quantized.py): per group, int4 spans the range [min(w, 0), max(w, 0)] in 2^bits - 1
steps (the grid of coremltools' "linear" mode), int8 spans +-max|w| in 127 steps either side of the
midpoint code 128 (its "linear_symmetric" grid: no offset to store); the scale rounded to an fp16
number (an fp16 program stores it as it is), the offset a whole number of steps (bias = -offset *
scale). The forward pass sees
those values; the backward pass is the straight-through estimator (the gradient reaches the float
weight as if unquantized), so the float weights move until their quantized selves fit the teacher.

`fake_quantize_model` swaps every Linear of the encoder (attention, FFN, pooler, the factorized
embedding's projection) and the word embedding for fake-quantized ones, with the same parameter
names (a checkpoint, an optimizer state and a resume work as before); `to_quantized` turns that
student into MLX's quantized layers holding the codes, which `save_model` writes in mlx-lm's layout.
Left as floats: the classifier (the updatable head trains it in fp32 on the device), the position
and token-type tables (small; the export keeps them float too), LayerNorms and biases.
"""

from __future__ import annotations

from dataclasses import replace

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten

from mlx_edge.errors import DistillError
from mlx_edge.models.bert import BertConfig, BertForSequenceClassification
from mlx_edge.models.quantized import GROUP_SIZES, MODE, QuantSpec, pack, quantize_layers

# --quantize: bits, and the grid. int8 is symmetric (its offset would cost 8 bits per block for
# nothing: 255 steps are fine either way); int4 takes each group's own range, 16 steps are few.
FORMATS = {"int8": (8, True), "int4": (4, False)}
SMALLEST_SCALE = 2.0**-24  # the smallest fp16 step: an all-zero group still divides by something


def spec_for(quantize: str, block_size: int) -> QuantSpec:
    if quantize not in FORMATS:
        raise DistillError(f"--quantize {quantize!r} is not one of {', '.join(FORMATS)}")
    if block_size not in GROUP_SIZES:
        raise DistillError(
            f"--block-size {block_size} is not a group size MLX quantizes with",
            f"use {', '.join(map(str, GROUP_SIZES))} (and the same --block-size at export)",
        )
    bits, symmetric = FORMATS[quantize]
    return QuantSpec(bits, block_size, symmetric)


def student_spec(quantize: str | None, block_size: int, config: BertConfig, continuing: bool) -> QuantSpec | None:
    """The quantization a distillation trains with (None: float), checked against the student's widths.
    A quantized student is continued only quantized: dropping its codes would be a silent change."""
    if quantize is None:
        if continuing and getattr(config, "quantization", None) is not None:  # a static config has no such key
            q = QuantSpec.from_dict(config.quantization)
            raise DistillError(
                f"the student to continue is quantized (int{q.bits}, blocks of {q.group_size})",
                f"pass --quantize int{q.bits} --block-size {q.group_size} to keep training it quantized",
            )
        return None
    if not isinstance(config, BertConfig):  # e.g. a static (token table) student: no layers to quantize
        raise DistillError(
            f"--quantize trains a BERT student's layers quantized; this student is {config.model_type!r}",
            "drop --quantize (export --quantize int8-block/int4-block compresses its weights)",
        )
    spec = spec_for(quantize, block_size)
    check_block_size(config, spec)
    return spec


def grid(w: mx.array, spec: QuantSpec) -> tuple[mx.array, mx.array]:
    """Per group of `w` (rows, cols): (scales, offsets), both (rows, cols / group_size), float32.
    Scales are fp16 numbers; offsets whole numbers in [0, 2^bits - 1]."""
    groups = w.reshape(w.shape[0], -1, spec.group_size)
    if spec.symmetric:  # +-(2^(bits-1) - 1) steps around the midpoint code
        scales = mx.abs(groups).max(axis=-1) / (spec.midpoint - 1)
    else:
        lo = mx.minimum(groups.min(axis=-1), 0.0)
        scales = (mx.maximum(groups.max(axis=-1), 0.0) - lo) / spec.levels
    scales = mx.maximum(scales.astype(mx.float16).astype(mx.float32), SMALLEST_SCALE)
    if spec.symmetric:
        return scales, mx.full(scales.shape, spec.midpoint, mx.float32)
    return scales, mx.clip(mx.round(-lo / scales), 0, spec.levels)


def codes(w: mx.array, scales: mx.array, offsets: mx.array, spec: QuantSpec) -> mx.array:
    """(rows, cols) float32 codes in [0, 2^bits - 1] of `w` on the grid."""
    groups = w.reshape(w.shape[0], -1, spec.group_size)
    q = mx.clip(mx.round(groups / scales[..., None]) + offsets[..., None], 0, spec.levels)
    return q.reshape(w.shape)


def dequantized(q: mx.array, scales: mx.array, offsets: mx.array, spec: QuantSpec) -> mx.array:
    groups = q.reshape(q.shape[0], -1, spec.group_size)
    return (scales[..., None] * (groups - offsets[..., None])).reshape(q.shape)


def fake_quantize(w: mx.array, spec: QuantSpec) -> mx.array:
    """`w` on its quantization grid in the forward pass; the identity in the backward pass."""

    @mx.custom_function
    def quantize(x):
        scales, offsets = grid(x, spec)
        return dequantized(codes(x, scales, offsets, spec), scales, offsets, spec)

    @quantize.vjp
    def straight_through(primals, cotangent, output):
        return (cotangent,)

    return quantize(w)


class FakeQuantLinear(nn.Module):
    """nn.Linear whose weight goes through `fake_quantize` (same parameter names)."""

    def __init__(self, linear: nn.Linear, spec: QuantSpec):
        super().__init__()
        self.spec = spec
        self.weight = linear.weight
        if "bias" in linear:
            self.bias = linear.bias

    def __call__(self, x: mx.array) -> mx.array:
        y = x @ fake_quantize(self.weight, self.spec).T
        return y + self.bias if "bias" in self else y


class FakeQuantEmbedding(nn.Module):
    """nn.Embedding whose rows go through `fake_quantize`: groups lie within a row, so quantizing
    the looked-up rows is quantizing the table, at the cost of the batch's rows only."""

    def __init__(self, embedding: nn.Embedding, spec: QuantSpec):
        super().__init__()
        self.spec = spec
        self.weight = embedding.weight

    def __call__(self, ids: mx.array) -> mx.array:
        rows = self.weight[ids.reshape(-1)]
        return fake_quantize(rows, self.spec).reshape(*ids.shape, -1)


def quantizable(model: BertForSequenceClassification) -> list[str]:
    """Paths of the layers that hold codes once quantized (see the module docstring)."""
    keep = ("bert.embeddings.position_embeddings", "bert.embeddings.token_type_embeddings")
    return [
        path
        for path, module in model.named_modules()
        if path.startswith("bert.")
        and path not in keep
        and isinstance(module, (nn.Linear, nn.Embedding, nn.QuantizedLinear, nn.QuantizedEmbedding))
    ]


def check_block_size(c: BertConfig, spec: QuantSpec) -> None:
    """Every quantized weight's input width must be whole groups (MLX and CoreML alike)."""
    widths = {"hidden_size": c.hidden_size, "intermediate_size": c.intermediate_size}
    if c.embedding_size is not None:
        widths["embedding_size"] = c.embedding_size
    bad = {k: v for k, v in widths.items() if v % spec.group_size}
    if bad:
        fits = [g for g in GROUP_SIZES if all(v % g == 0 for v in widths.values())]
        listed = ", ".join(f"{k} {v}" for k, v in bad.items())
        hint = (
            f"use --block-size {fits[0]}"
            if fits
            else "MLX quantizes in groups of 32, 64 or 128: distill a student whose widths are multiples of 32 "
            '(e.g. {"hidden_size": 288, "intermediate_size": 1152} with 12 heads)'
        )
        raise DistillError(f"--block-size {spec.group_size} does not divide the student's {listed}", hint)


def _float_layer(module: nn.Module) -> nn.Module:
    """A quantized MLX layer (a quantized student continued) as the float layer it stands for."""
    if not isinstance(module, (nn.QuantizedLinear, nn.QuantizedEmbedding)):
        return module
    w = mx.dequantize(module.weight, module.scales, module.biases, module.group_size, module.bits, mode=MODE)
    if isinstance(module, nn.QuantizedEmbedding):
        out = nn.Embedding(*w.shape)
    else:
        out = nn.Linear(w.shape[1], w.shape[0], bias="bias" in module)
        if "bias" in module:
            out.bias = module.bias
    out.weight = w
    return out


def fake_quantize_model(model: BertForSequenceClassification, spec: QuantSpec) -> BertForSequenceClassification:
    """Swap `quantizable` layers for fake-quantized ones, in place; returns `model`."""
    check_block_size(model.config, spec)
    for path in quantizable(model):
        parent, name = path.rsplit(".", 1)
        layer = _float_layer(_get(model, path))
        fake = FakeQuantEmbedding(layer, spec) if isinstance(layer, nn.Embedding) else FakeQuantLinear(layer, spec)
        setattr(_get(model, parent), name, fake)
    model.config.quantization = None  # float weights (on the grid) until `to_quantized`
    return model


def to_quantized(model: BertForSequenceClassification) -> BertForSequenceClassification:
    """A new model with MLX's quantized layers holding the codes of `model`'s fake-quantized weights."""
    fakes = {p: m for p, m in model.named_modules() if isinstance(m, (FakeQuantLinear, FakeQuantEmbedding))}
    spec = next(iter(fakes.values())).spec
    weights = dict(tree_flatten(model.parameters()))
    for path, fake in fakes.items():
        w = fake.weight.astype(mx.float32)
        scales, offsets = grid(w, spec)
        q = codes(w, scales, offsets, spec)
        weights[f"{path}.weight"] = mx.array(pack(q.astype(mx.uint32), spec.bits))
        weights[f"{path}.scales"] = scales
        weights[f"{path}.biases"] = -offsets * scales  # exact: offset * scale needs at most 19 bits
    config = replace(model.config, quantization=spec.to_dict(), id2label=dict(model.config.id2label))
    out = BertForSequenceClassification(config, fast_math=model.fast_math)
    quantize_layers(out, spec, fakes)
    out.load_weights(list(weights.items()), strict=True)
    out.eval()
    mx.eval(out.parameters())
    return out


def _get(model: nn.Module, path: str) -> nn.Module:
    node = model
    for part in path.split("."):
        node = node[int(part)] if isinstance(node, list) else node[part]
    return node


__all__ = ["FORMATS", "QuantSpec", "fake_quantize", "fake_quantize_model", "to_quantized", "spec_for"]
