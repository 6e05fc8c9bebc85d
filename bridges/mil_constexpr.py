"""Compressed constants of coremltools.optimize (constexpr_* ops), decompressed in NumPy.

iOS16 ops pack LUT indices and sparsity masks LSB first; iOS18 ops take unpacked sub-byte data.
"""

from __future__ import annotations

import numpy as np

from mlx_edge.errors import UnsupportedOpError


def _unpack_bits(packed: np.ndarray, nbits: int, count: int) -> np.ndarray:
    """Indices packed LSB first (the constexpr ops' layout) -> uint values."""
    bits = np.unpackbits(np.asarray(packed, np.uint8), bitorder="little")[: nbits * count]
    return (bits.reshape(count, nbits).astype(np.uint32) << np.arange(nbits, dtype=np.uint32)).sum(axis=1)


def _per_axis(param, data_ndim, axis):
    param = np.asarray(param)
    if param.ndim == 0:
        return param
    shape = [1] * data_ndim
    shape[int(axis)] = param.shape[0]
    return param.reshape(shape)


def affine_dequantize(quantized_data, zero_point, scale, axis):
    q = np.asarray(quantized_data)
    zp = _per_axis(zero_point, q.ndim, axis).astype(np.float32)
    return (_per_axis(scale, q.ndim, axis).astype(np.float32) * (q.astype(np.float32) - zp)).astype(
        np.asarray(scale).dtype
    )


def lut_to_dense(indices, lut, shape=None, vector_axis=None):
    lut = np.asarray(lut)
    if shape is not None:  # iOS16: packed indices, a flat LUT
        nbits = int(np.log2(lut.size))
        count = int(np.prod(shape))
        return lut[_unpack_bits(indices, nbits, count)].reshape([int(s) for s in shape])
    # iOS18: unpacked indices of the weight's shape; LUT (*blocks, palette, vector_size)
    indices = np.asarray(indices).astype(np.int64)
    if lut.shape[-1] != 1:
        raise _unsupported("vector palettization (constexpr_lut_to_dense vector_size > 1) is not covered")
    blocks = lut.shape[:-2]
    out = np.empty(indices.shape, lut.dtype)
    block = [d // b for d, b in zip(indices.shape, blocks)]
    for pos in np.ndindex(*blocks):
        sl = tuple(slice(p * s, (p + 1) * s) for p, s in zip(pos, block))
        out[sl] = lut[pos][:, 0][indices[sl]]
    return out


def blockwise_shift_scale(data, scale, offset=None):
    data = np.asarray(data).astype(np.float32)
    scale = np.asarray(scale)

    def expand(p):  # each dim of p repeated to cover its block of data
        p = np.asarray(p).astype(np.float32)
        for axis, (d, s) in enumerate(zip(data.shape, p.shape)):
            p = np.repeat(p, d // s, axis=axis)
        return p

    if offset is not None:
        data = data - expand(offset)
    return (data * expand(scale)).astype(scale.dtype)


def sparse_to_dense(nonzero_data, mask, shape):
    out = np.zeros(int(np.prod(shape)), dtype=np.asarray(nonzero_data).dtype)
    out[np.unpackbits(np.asarray(mask, np.uint8), bitorder="little")[: out.size] != 0] = nonzero_data
    return out.reshape([int(s) for s in shape])


def _unsupported(message: str):

    return UnsupportedOpError(message)
