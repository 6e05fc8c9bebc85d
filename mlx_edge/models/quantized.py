"""Group-quantized BERT weights on disk and in MLX, in a form CoreML's block-wise op holds exactly.

MLX's affine quantization stores a layer as `weight` (uint32, codes packed LSB first), `scales` and
`biases` (one per group of `group_size` consecutive input weights): w = scale * q + bias, q in
[0, 2^bits - 1] (mlx-lm's layout; config.json says {"quantization": {"bits", "group_size", "mode"}}).
iOS 18's constexpr_blockwise_shift_scale computes w = scale * (data - offset). The two agree exactly
when every bias is an integer multiple of its scale, bias = -offset * scale with offset an integer
in the codes' range: then data = q and offset are uint4/uint8 (the op takes an offset of the data's
own integer type) and the scale is the same number. `distill --quantize` trains weights on that grid
with fp16-exact scales, so an fp16 program's scales are those numbers too (distill/quant.py).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import mlx.core as mx
import mlx.nn as nn
import numpy as np
from mlx.utils import tree_flatten

from mlx_edge.errors import ModelError

BITS = (4, 8)
GROUP_SIZES = (32, 64, 128)  # what MLX's affine kernels take
MODE = "affine"


@dataclass(frozen=True)
class QuantSpec:
    bits: int
    group_size: int
    # The grid training picks: symmetric (offset 2^(bits-1) in every group, stored with no offset
    # at all) or each group's own range. Not stored: the codes and offsets say which it was.
    symmetric: bool = False

    @property
    def levels(self) -> int:
        return 2**self.bits - 1  # the largest code

    @property
    def midpoint(self) -> int:
        return 2 ** (self.bits - 1)

    def to_dict(self) -> dict:
        return {"bits": self.bits, "group_size": self.group_size, "mode": MODE}

    @classmethod
    def from_dict(cls, params: dict, source: str = "config.json") -> QuantSpec:
        bits, group = params.get("bits"), params.get("group_size")
        if bits not in BITS or group not in GROUP_SIZES or params.get("mode", MODE) != MODE:
            raise ModelError(
                f"{source}: quantization {params} is not one mlx-edge reads",
                f"bits in {BITS}, group_size in {GROUP_SIZES}, mode {MODE!r}",
            )
        return cls(bits, group)


@dataclass(frozen=True)
class BlockCodes:
    """One weight as constexpr_blockwise_shift_scale takes it: codes (rows, cols) and, per block of
    `group_size` codes along a row, a scale and an integer offset: w = scale * (codes - offset)."""

    codes: np.ndarray  # uint8 in [0, 2^bits - 1]
    scales: np.ndarray  # float32 (rows, cols / group_size)
    offsets: np.ndarray  # uint8, same shape as scales
    bits: int

    @property
    def symmetric(self) -> bool:
        """Every offset the midpoint: the op can take signed codes (codes - midpoint) and no offset."""
        return bool((self.offsets == 2 ** (self.bits - 1)).all())

    def dequantize(self) -> np.ndarray:
        group = self.codes.shape[1] // self.scales.shape[1]
        scale = np.repeat(self.scales, group, axis=1)
        return (scale * (self.codes.astype(np.float32) - np.repeat(self.offsets, group, axis=1))).astype(np.float32)


def pack(codes: np.ndarray, bits: int) -> np.ndarray:
    """(rows, cols) codes -> MLX's packed uint32 (rows, cols * bits / 32): code j of a word at bit bits*j."""
    per = 32 // bits
    codes = np.asarray(codes, np.uint32)
    packed = np.zeros((codes.shape[0], codes.shape[1] // per), np.uint32)
    for j in range(per):
        packed |= codes[:, j::per] << np.uint32(bits * j)
    return packed


def unpack(packed: np.ndarray, bits: int) -> np.ndarray:
    per, mask = 32 // bits, np.uint32(2**bits - 1)
    packed = np.asarray(packed, np.uint32)
    out = np.empty((packed.shape[0], packed.shape[1] * per), np.uint8)
    for j in range(per):
        out[:, j::per] = (packed >> np.uint32(bits * j)) & mask
    return out


def quantized_names(weights: dict) -> list[str]:
    """The layers a checkpoint holds as codes (those with `scales`), e.g. 'bert.pooler.dense'."""
    return sorted(k.removesuffix(".scales") for k in weights if k.endswith(".scales"))


def quantized_weight_names(model: nn.Module) -> list[str]:
    """The `weight` names of a loaded model's quantized layers (their HF names)."""
    kinds = (nn.QuantizedLinear, nn.QuantizedEmbedding)
    return sorted(f"{path}.weight" for path, module in model.named_modules() if isinstance(module, kinds))


def float_weight(module: nn.Module) -> mx.array:
    """A quantized layer's weight in float32. Scales and biases are widened first, so w = scale * q + bias
    is exact (float16 rounds it); mxfp4-style layers have no biases."""
    return mx.dequantize(
        module.weight,
        module.scales.astype(mx.float32),
        module["biases"].astype(mx.float32) if "biases" in module else None,
        module.group_size,
        module.bits,
        getattr(module, "mode", MODE),
    )


def cpu_float(model: nn.Module) -> nn.Module:
    """For predictions on MLX's CPU device: a quantized model as a float copy holding the same weights
    (each code dequantized, w = scale * q + bias, in float32: exact); elsewhere the model itself.

    MLX's CPU quantized matmul is many times slower than float BLAS on x86 (the demo's int4 student:
    23 s for 600 sentences against 1 s for its float twin); the labels and logits are the same numbers.
    Timings stay with the quantized model itself: this copy is for what a model says, not how fast."""
    kinds = (nn.QuantizedLinear, nn.QuantizedEmbedding)
    layers = [(path, m) for path, m in model.named_modules() if isinstance(m, kinds)]
    if not layers or mx.default_device() != mx.cpu:
        return model
    weights = dict(tree_flatten(model.parameters()))
    for path, m in layers:
        weights[f"{path}.weight"] = float_weight(m)
        del weights[f"{path}.scales"]
        weights.pop(f"{path}.biases", None)
    twin = type(model)(replace(model.config, quantization=None), fast_math=model.fast_math)
    twin.load_weights(list(weights.items()), strict=True)
    twin.train(model.training)
    mx.eval(twin.parameters())
    return twin


def parameter_count(model: nn.Module) -> int:
    """Parameters of the float model `model` stands for: a quantized layer's codes count once each,
    its scales and biases not at all (they are how the codes are stored, not parameters of their own)."""
    total = 0
    for _, module in model.named_modules():
        quantized = isinstance(module, (nn.QuantizedLinear, nn.QuantizedEmbedding))
        for name, value in module.parameters().items():
            if not isinstance(value, mx.array):
                continue  # a child module's parameters: counted with the child
            if quantized and name in ("scales", "biases"):
                continue
            total += value.size * (32 // module.bits if quantized and name == "weight" else 1)
    return total


def quantize_layers(model: nn.Module, spec: QuantSpec, layers) -> None:
    """Swap the named Linear/Embedding layers of `model` for MLX's quantized ones (weights to be loaded)."""
    wanted = set(layers)
    nn.quantize(model, spec.group_size, spec.bits, mode=MODE, class_predicate=lambda path, _: path in wanted)


def dequantize_weights(weights: dict, spec: QuantSpec) -> dict:
    """The float weights a quantized checkpoint stands for (exactly scale * q + bias), HF names only."""
    out = {k: v for k, v in weights.items() if not k.endswith((".scales", ".biases"))}
    for layer in quantized_names(weights):
        w, s, b = (weights[f"{layer}.{p}"] for p in ("weight", "scales", "biases"))
        out[f"{layer}.weight"] = mx.dequantize(w, s, b, group_size=spec.group_size, bits=spec.bits, mode=MODE)
    return out


def block_codes(weights: dict, spec: QuantSpec) -> dict[str, BlockCodes]:
    """Each quantized layer's `weight` name -> its BlockCodes; refuses biases CoreML cannot hold exactly."""
    out = {}
    for layer in quantized_names(weights):
        s = np.array(weights[f"{layer}.scales"].astype(mx.float32))
        b = np.array(weights[f"{layer}.biases"].astype(mx.float32))
        with np.errstate(divide="ignore", invalid="ignore"):
            offsets = -b / s
        exact = np.isfinite(offsets) & (offsets == np.round(offsets)) & (offsets >= 0) & (offsets <= spec.levels)
        if not exact.all():
            raise ModelError(
                f"{layer}: {int((~exact).sum())} of its quantization biases are not whole multiples of their "
                "scales, so CoreML's block-wise op (scale * (data - offset), integer offset) cannot hold them exactly",
                "quantize the student with `mlx-edge distill --quantize` (it keeps every offset whole)",
            )
        codes = unpack(np.array(weights[f"{layer}.weight"]), spec.bits)
        out[f"{layer}.weight"] = BlockCodes(codes, s, offsets.astype(np.uint8), spec.bits)
    return out
