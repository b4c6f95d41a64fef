"""Kernels of the plain number types (F32, F16, BF16, F64, I8..I64) and helpers shared by
the quantized kernels: fp16 scales, output buffers, SWAR nibble masks.

Every conversion is exact where ggml's is: fp16 and bf16 widen to float32 without rounding;
F64 and the wide integers round to nearest float32, the only sensible float32 value.
"""

from __future__ import annotations

from functools import cache

import numpy as np

from registry.gguf.types import GGMLType
from registry.quant import parallel
from registry.quant.base import KernelSpec
from registry.quant.workspace import Workspace, new_values

# Bytes of one 64-bit word repeated: SWAR masks that pick one bit field of all eight
# bytes of a word at once, so nibbles and 2-bit fields unpack 8 at a time.
LOW_NIBBLES = np.uint64(0x0F0F0F0F0F0F0F0F)
LOW_CRUMBS = np.uint64(0x0303030303030303)
LOW_BITS = np.uint64(0x0101010101010101)
U64 = np.dtype("<u8")
U32 = np.dtype("<u4")
U16 = np.dtype("<u2")


@cache
def _f16_table() -> np.ndarray:
    # All 65536 half floats widened once: a gather is several times faster than numpy's
    # float16 -> float32 cast. ggml's conversion (F16C, or its bit trick) quiets signalling
    # NaNs and numpy's does not, so the quiet bit is set here to match ggml bit for bit.
    table = np.arange(1 << 16, dtype=np.uint16).view(np.float16).astype(np.float32)
    bits = table.view(np.uint32)
    bits[np.isnan(table)] |= np.uint32(0x00400000)
    return table


def f16_column(blocks: np.ndarray, offset: int, ws: Workspace | None = None) -> np.ndarray:
    """The fp16 field at byte `offset` of every block, as float32 of shape (n_blocks,)."""
    return f16_columns(blocks, offset, 1, ws)[:, 0]


def f16_columns(blocks: np.ndarray, offset: int, count: int, ws: Workspace | None = None) -> np.ndarray:
    """`count` consecutive fp16 fields from byte `offset`, as float32 (n_blocks, count)
    (in workspace memory, named after the offset, when a workspace is given)."""
    # The indices go to intp first: np.take's own conversion of uint16 indices costs
    # several times the gather.
    halves = blocks[:, offset : offset + 2 * count].view(U16)
    if ws is None:
        return np.take(_f16_table(), halves.astype(np.intp), mode="wrap")
    bits = ws.get(f"f16@{offset}:bits", halves.shape, np.intp)
    np.copyto(bits, halves, casting="unsafe")
    values = ws.get(f"f16@{offset}", halves.shape, np.float32)
    np.take(_f16_table(), bits, out=values, mode="wrap")
    return values


def scale_products(d: np.ndarray, ints: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """float32 (n, k) of d[i] * ints[i, j]: ggml's per-sub-block `d * sc`, one rounding.

    The ints are widened by one cast straight from their (possibly strided) view into the
    result, then scaled in place with d broadcast over each row: half the time of
    repeating d k times and widening a contiguous copy of the ints (measured on Q6_K's
    16 scales per super-block), and no np.repeat holding the GIL.
    """
    res = np.empty(ints.shape, dtype=np.float32) if out is None else out
    np.copyto(res, ints, casting="unsafe")
    np.multiply(res, d[:, None], out=res)
    return res


def output(out: np.ndarray | None, n: int) -> np.ndarray:
    if out is None:
        return new_values(n)
    return out


def _f32(blocks: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    res = output(out, blocks.shape[0])
    res[...] = blocks.reshape(-1).view(np.float32)
    return res


# Values per step of _f16 and _bf16: long numpy calls (see legacy.py on threads), with
# the step's words still in the L2 cache between passes.
F16_STEP = 1 << 18
# On a thread beside others (parallel.step): BF16 10% faster with two threads into a
# buffer, F16 the same within noise (medians of 24 interleaved runs, 16 Mi values).
F16_SHARED_STEP = 1 << 19
# fp16 bits sign-extended to int32 and shifted left by 13 keep the sign in bit 31, and
# copies of it in bits 30..28 above the exponent and mantissa (bits 27..13): this mask
# keeps the sign and the value bits.
_F16_MAGNITUDE = np.int32(-0x70002000)  # 0x8FFFE000
_F16_SCALE = np.float32(2.0**112)  # from fp16's exponent bias (15) to float32's (127)
_F16_NOT_SIGN = np.uint16(0x7FFF)
_F16_INF = np.uint16(0x7C00)  # the smallest magnitude bits of an Inf or NaN half
_SMALLEST_SUBNORMAL = np.uint32(1).view(np.float32)


def _subnormals_work() -> bool:
    """False when this thread flushes subnormal operands to zero (denormals-are-zero,
    which code built with fast-math can switch on for a whole process)."""
    return bool(_SMALLEST_SUBNORMAL * np.float32(2.0) != 0)


def _f16(blocks: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """fp16 -> float32 by its bits: sign, exponent and mantissa moved into place as an
    int32, then one float32 multiply by 2**112 rebiases the exponent. Normal and
    subnormal halves come out exact (a subnormal half lands on a float32 subnormal that
    the multiply scales exactly); Inf and NaN halves come out as finite values of
    magnitude 65536 or more, which no normal half reaches, and are looked up in the table
    instead. Five flat passes instead of a gather per value: 2-3x faster (measured).
    """
    res = output(out, blocks.shape[0])
    halves = blocks.reshape(-1).view(np.int16)
    if not _subnormals_work():
        np.take(_f16_table(), halves.view(np.uint16).astype(np.intp), out=res, mode="wrap")
        return res
    words = res.view(np.int32)
    step = parallel.step(F16_STEP, F16_SHARED_STEP)
    for start in range(0, halves.size, step):
        part = halves[start : start + step]
        w = words[start : start + step]
        f = res[start : start + step]
        # Inf and NaN halves (exponent 31, rare) first: the magnitude bits, in the first half
        # of this step's output as scratch, reach 0x7C00. One pass and one reduction over
        # 16-bit words, where max and min of the results took two over 32-bit ones: a step
        # of 256 Ki values in cache 71 -> 67 us (measured).
        magnitudes = w.view(np.uint16)[: part.size]
        np.bitwise_and(part.view(np.uint16), _F16_NOT_SIGN, out=magnitudes)
        specials = magnitudes.max() >= _F16_INF
        np.copyto(w, part, casting="unsafe")  # sign-extends
        np.left_shift(w, 13, out=w)
        np.bitwise_and(w, _F16_MAGNITUDE, out=w)
        np.multiply(f, _F16_SCALE, out=f)
        if specials:
            special = np.flatnonzero(np.abs(f) >= 65536)
            f[special] = _f16_table()[part[special].view(np.uint16)]
    return res


def _bf16(blocks: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    # bf16 is the top half of a float32: widening is a shift, exactly as ggml does it.
    # A plain widening copy then an in-place shift, a cache-sized step at a time, beats
    # the mixed-type shift (numpy buffers its uint16 -> uint32 cast), measured 15%.
    res = output(out, blocks.shape[0])
    halves = blocks.reshape(-1).view(np.uint16)
    words = res.view(np.uint32)
    step = parallel.step(F16_STEP, F16_SHARED_STEP)
    for start in range(0, halves.size, step):
        part = words[start : start + step]
        np.copyto(part, halves[start : start + step], casting="unsafe")
        np.left_shift(part, np.uint32(16), out=part)
    return res


def _cast(dtype: str) -> KernelSpec:
    def kernel(blocks: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        res = output(out, blocks.shape[0])
        np.copyto(res, blocks.reshape(-1).view(dtype), casting="unsafe")
        return res

    kernel.__name__ = f"_cast_{dtype}"
    size = np.dtype(dtype).itemsize
    return KernelSpec(kernel, ((0, 1, size),) if size > 1 else ())


KERNELS: dict[GGMLType, KernelSpec] = {
    GGMLType.F32: KernelSpec(_f32, ((0, 1, 4),)),
    GGMLType.F16: KernelSpec(_f16, ((0, 1, 2),)),
    GGMLType.BF16: KernelSpec(_bf16, ((0, 1, 2),)),
    GGMLType.F64: _cast("<f8"),
    GGMLType.I8: _cast("i1"),
    GGMLType.I16: _cast("<i2"),
    GGMLType.I32: _cast("<i4"),
    GGMLType.I64: _cast("<i8"),
}
