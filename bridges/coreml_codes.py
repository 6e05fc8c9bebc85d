"""A quantized student's own codes in its CoreML program: constexpr_blockwise_shift_scale, exactly.

coremltools' `linear_quantize_weights` quantizes the float weights again with its own rounding. A
student distilled with `--quantize` already holds codes, scales and whole-number offsets
(models/quantized.py), so the export writes those as they are: after conversion, each const whose
name is a quantized weight's (`bert_encoder_layer_0_attention_self_query_weight`, `_to_fp16` in an
fp16 program) becomes constexpr_blockwise_shift_scale(data = codes as uint4/uint8, scale = the
student's scales in the const's dtype, offset = the offsets as uint4/uint8; a weight whose offsets
are all the midpoint, as int8 training makes them, as signed codes - midpoint with no offset). Its output,
scale * (data - offset), is the student's dequantized weight: bit for bit in an fp32 program, and
that weight rounded once to fp16 in an fp16 program (the scales are fp16 numbers, so nothing else
rounds). Every other const stays as converted.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from bridges.coreml_export import quiet_coremltools
from mlx_edge.errors import ExportError
from mlx_edge.models.bert import sanitize
from mlx_edge.models.checkpoint import read_config
from mlx_edge.models.quantized import BlockCodes, QuantSpec, block_codes
from mlx_edge.models.safetensors_io import read_weights

_SUFFIX = "_to_fp16"


def _program_name(const_name: str) -> str:
    """The parameter part of a const's name: the Classifier wraps the mirror as `.mirror`."""
    return const_name.removesuffix(_SUFFIX).removeprefix("mirror_")


def write_codes(mlmodel, codes: dict[str, BlockCodes]):
    """`mlmodel` with the consts of `codes` (student parameter name -> BlockCodes) replaced; raises
    ExportError if a code has no const or its scales are not representable in the program's dtype."""
    from coremltools.models.utils import _apply_graph_pass  # lazy: coremltools' import takes seconds

    with quiet_coremltools():
        graph_pass = _graph_pass(codes)
        out = _apply_graph_pass(mlmodel, graph_pass, skip_model_load=True)
    missing = sorted(set(codes) - graph_pass.written)
    if missing:
        raise ExportError(f"internal: no program constant holds the quantized weight(s) {', '.join(missing[:3])}")
    return out


def _graph_pass(codes: dict[str, BlockCodes]):
    # lazy: coremltools' import takes seconds (these four lines)
    from coremltools.converters.mil.mil import Builder as mb  # lazy: as above
    from coremltools.converters.mil.mil import types  # lazy: as above
    from coremltools.converters.mil.mil.passes.graph_pass import AbstractGraphPass  # lazy: as above
    from coremltools.converters.mil.mil.passes.helper import block_context_manager  # lazy: as above

    by_flat = {name.replace(".", "_"): name for name in codes}

    class StudentCodes(AbstractGraphPass):
        written: set[str] = set()

        def apply(self, prog):
            for function in prog.functions.values():
                self._block(function)

        @block_context_manager
        def _block(self, block):
            for op in list(block.operations):
                name = by_flat.get(_program_name(op.name)) if op.op_type == "const" else None
                if name is not None:
                    self._replace(op, name, codes[name])

        def _replace(self, op, name: str, code: BlockCodes):
            value = op.outputs[0].val
            if value is None or value.shape != code.codes.shape:
                raise ExportError(
                    f"internal: {op.name} has shape {getattr(value, 'shape', None)}, codes {code.codes.shape}"
                )
            dtype = np.float16 if value.dtype == np.float16 else np.float32
            scales = code.scales.astype(dtype)
            if not np.array_equal(scales.astype(np.float32), code.scales):
                raise ExportError(
                    f"{name}: its quantization scales are not {np.dtype(dtype).name} numbers, so an "
                    f"{np.dtype(dtype).name} program would round them",
                    "export with --precision fp32, or quantize the student with `mlx-edge distill --quantize`",
                )
            if code.symmetric:  # signed codes, no offset: the form coremltools' symmetric mode writes
                kind = types.nptype_from_builtin(types.int4 if code.bits == 4 else types.int8)
                data, offset = (code.codes.astype(np.int16) - 2 ** (code.bits - 1)).astype(kind), None
            else:
                kind = types.nptype_from_builtin(types.uint4 if code.bits == 4 else types.uint8)
                data, offset = code.codes.astype(kind), code.offsets.astype(kind)
            new = mb.constexpr_blockwise_shift_scale(
                data=data, scale=scales, offset=offset, before_op=op, name=op.name + "_quantized"
            )
            op.enclosing_block.replace_uses_of_var_after_op(
                anchor_op=op, old_var=op.outputs[0], new_var=new, no_check_var_types=True
            )
            op.enclosing_block.remove_ops([op])
            self.written.add(name)

    graph_pass = StudentCodes()
    graph_pass.written = set()
    return graph_pass


def student_codes(student_dir: Path) -> dict[str, BlockCodes]:
    """A quantized student's BlockCodes by weight name; {} for a float student."""
    quantization = read_config(student_dir).get("quantization")
    if quantization is None:
        return {}
    return block_codes(sanitize(read_weights(student_dir)), QuantSpec.from_dict(quantization))


def check_student_codes(quantize: str, block_size: int, config) -> None:
    """A quantized student exports only in its own block mode and block size: its codes go in as they
    are, and quantizing them again (another mode, another grid) would undo what training fitted."""
    quantization = getattr(config, "quantization", None)  # a static student's config has no such key
    if quantization is None:
        return
    spec = QuantSpec.from_dict(quantization)
    wanted = f"int{spec.bits}-block"
    if (quantize, block_size) != (wanted, spec.group_size):
        raise ExportError(
            f"the student holds int{spec.bits} codes in blocks of {spec.group_size} (distill --quantize), "
            f"not --quantize {quantize}" + (f" --block-size {block_size}" if quantize == wanted else ""),
            f"export it with --quantize {wanted} --block-size {spec.group_size} --min-target iOS18: "
            "its codes are written as they are",
        )
