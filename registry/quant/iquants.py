"""The i-quants: IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ4_NL, IQ4_XS.

Each kernel reproduces ggml's `dequantize_row_iq*` (ggml-quants.c) bit for bit: the same
float32 operations in the same order. The block scale is built exactly as ggml builds it
(e.g. IQ2_XXS `(d * (0.5f + s)) * 0.25f`); the grid values, with their signs (and IQ1's
delta) already applied, come from float32 tables gathered a row of 4 or 8 at a time (see
tables.py); the one remaining rounding is the final `scale * value`. Applying a sign
before instead of after that multiply cannot change the bits, because rounding to
nearest is symmetric; NaN scales, whose sign ggml does flip, are patched up afterwards
(chunked.gather_scaled). ggml's C code is the reference of the tests, NaN bits included.

Layouts are those of ggml-common.h. Multi-byte fields are listed for byte swapping in the
unit ggml's code reads them in, which is the unit a big-endian ggml writes them in: uint32
for IQ2_XXS qs and IQ3_XXS scales_and_signs (memcpy'd into uint32 aux words), uint16 for
IQ1_M scales (read through a uint16 pointer), even where the struct declares them as
bytes or uint16.
"""

from __future__ import annotations

import numpy as np

from registry.gguf.types import GGMLType
from registry.quant import tables
from registry.quant.base import KernelSpec
from registry.quant.chunked import (
    bit_fields,
    chunked,
    f16_field,
    f16_to_f32,
    field,
    gather_scaled,
    nibble_values,
    take_rows,
    u16_field,
    u32_field,
)
from registry.quant.workspace import Workspace

_F32 = np.float32
_HALF = np.float32(0.5)
_QUARTER = np.float32(0.25)
# the shifts that pick the 7-bit sign index of each of the 4 groups of 8 in an aux32 word
_SIGN_SHIFTS = (0, 7, 14, 21)


def _nibbles(x: np.ndarray) -> np.ndarray:
    """(..., n) bytes -> (..., 2 n): each byte's low nibble, then its high nibble."""
    return np.stack([x & 15, x >> 4], axis=-1).reshape(*x.shape[:-1], 2 * x.shape[-1])


def _iq2_xxs(blocks: np.ndarray, out: np.ndarray, ws: Workspace) -> None:
    """d: f16 | qs: 8 x (uint32 of 4 grid index bytes, uint32 of 4x7 sign bits + 4-bit
    scale)."""
    k = blocks.shape[0]
    d = f16_field(blocks, 0)
    words = u32_field(blocks, 2, 16).reshape(k, 8, 2)
    aux = words[:, :, 1]
    db = d * (_HALF + (aux >> 28).astype(_F32)) * _QUARTER
    # row index: grid index (a byte of the first word) | 7-bit sign index << 8
    idx = bit_fields(aux, _SIGN_SHIFTS, 127) << 8
    idx |= bit_fields(words[:, :, 0], (0, 8, 16, 24), 0xFF)
    gather_scaled(tables.iq2xxs_table(), idx.reshape(k, 32), db, out, ws, signed_table=True)


def _iq2_xs(blocks: np.ndarray, out: np.ndarray, ws: Workspace) -> None:
    """d: f16 | qs: uint16[32] (9-bit grid index | 7-bit sign index) | scales: 8 x 2 nibbles."""
    d = f16_field(blocks, 0)
    db = d * (_HALF + _nibbles(field(blocks, 66, 8)).astype(_F32)) * _QUARTER
    gather_scaled(tables.iq2xs_table(), u16_field(blocks, 2, 32), db, out, ws, signed_table=True)


def _iq2_s(blocks: np.ndarray, out: np.ndarray, ws: Workspace) -> None:
    """d: f16 | qs: 32 grid low bytes | signs: 32 bytes | qh: 8 x 4 x 2 grid high bits |
    scales: 8 x 2 nibbles."""
    k = blocks.shape[0]
    d = f16_field(blocks, 0)
    # row index: 2 qh bits << 8 | qs byte
    idx = bit_fields(field(blocks, 66, 8).astype(np.uint16), (0, 2, 4, 6), 3) << 8
    idx |= field(blocks, 2, 32).reshape(k, 8, 4)
    db = d * (_HALF + _nibbles(field(blocks, 74, 8)).astype(_F32)) * _QUARTER
    gather_scaled(tables.iq2s_grid_f32(), idx.reshape(k, 32), db, out, ws)
    # all 8 sign bits are stored (no parity), so flip float sign bits after the multiply
    flips = take_rows(tables.sign_masks8(), field(blocks, 34, 32, ws), ws)
    bits = out.view(np.uint32)
    np.bitwise_xor(bits, flips.reshape(k, -1), out=bits)


def _iq3_xxs(blocks: np.ndarray, out: np.ndarray, ws: Workspace) -> None:
    """d: f16 | qs: 64 grid index bytes | 8 x uint32 (4x7 sign bits + 4-bit scale)."""
    k = blocks.shape[0]
    d = f16_field(blocks, 0)
    aux = u32_field(blocks, 66, 8)
    db = d * (_HALF + (aux >> 28).astype(_F32)) * _HALF
    signs = take_rows(tables.ksigns_iq2xs(), bit_fields(aux, _SIGN_SHIFTS, 127))
    # each sign byte covers two grid entries of 4: low nibble the first, high the second
    idx = _nibbles(signs.reshape(k, 32)).astype(np.uint16) << 8
    idx |= field(blocks, 2, 64)
    gather_scaled(tables.iq3xxs_table(), idx, db, out, ws, signed_table=True)


def _iq3_s(blocks: np.ndarray, out: np.ndarray, ws: Workspace) -> None:
    """d: f16 | qs: 64 grid low bytes | qh: 8 x 8 grid high bits | signs: 32 bytes |
    scales: 4 x 2 nibbles."""
    k = blocks.shape[0]
    d = f16_field(blocks, 0)
    # row index: 4 sign bits << 9 | qh bit << 8 | qs byte
    idx = _nibbles(field(blocks, 74, 32)).astype(np.uint16) << 1
    idx |= bit_fields(field(blocks, 66, 8), tuple(range(8)), 1).reshape(k, 64)
    idx <<= 8
    idx |= field(blocks, 2, 64)
    db = d * (1 + 2 * _nibbles(field(blocks, 106, 4)).astype(np.int32)).astype(_F32)
    gather_scaled(tables.iq3s_table(), idx, db, out, ws, signed_table=True)


def _iq1_s(blocks: np.ndarray, out: np.ndarray, ws: Workspace) -> None:
    """d: f16 | qs: 32 grid low bytes | qh: uint16[8] (4 x 3 grid high bits, 3-bit scale,
    delta sign)."""
    k = blocks.shape[0]
    d = f16_field(blocks, 0)
    qh = u16_field(blocks, 34, 8).astype(np.uint32)
    dl = d * (2 * ((qh >> 12) & 7) + 1).astype(_F32)
    # row index: 8 low bits from qs, 3 high bits from qh, the delta sign as bit 11
    idx = bit_fields(qh, (0, 3, 6, 9), 7, extra=(qh >> 12) & 8)
    idx <<= 8
    idx |= field(blocks, 2, 32).reshape(k, 8, 4)
    gather_scaled(tables.iq1s_table(), idx.reshape(k, 32), dl, out, ws)


def _iq1_m(blocks: np.ndarray, out: np.ndarray, ws: Workspace) -> None:
    """qs: 32 grid low bytes | qh: 16 bytes, a nibble per 8 values (3 grid high bits,
    delta sign) | scales: uint16[4] (12 bits of 3-bit scales, 4 bits of the fp16 d)."""
    k = blocks.shape[0]
    sc = u16_field(blocks, 48, 4)
    d_bits = (sc[:, 0] >> 12) | ((sc[:, 1] >> 8) & 0x00F0) | ((sc[:, 2] >> 4) & 0x0F00) | (sc[:, 3] & 0xF000)
    d = f16_to_f32(d_bits.astype(np.uint16).view(np.float16))[:, None]
    # 16 scales, one per 16 values: scale t sits at bit 3 * (t % 4) of sc[t // 4]
    s3 = bit_fields(sc, (0, 3, 6, 9), 7).reshape(k, 16)
    dl = d * (2 * s3.astype(np.int32) + 1).astype(_F32)
    # a qh nibble's bit 3 (the delta sign) becomes bit 11 of the row index
    idx = _nibbles(field(blocks, 32, 16)).astype(np.uint16) << 8
    idx |= field(blocks, 0, 32)
    gather_scaled(tables.iq1s_table(), idx, dl, out, ws)


def _iq4nl_quads() -> np.ndarray:
    return tables.nibble_quads(tables.KVALUES_IQ4NL.tobytes())


def _iq4_nl(blocks: np.ndarray, out: np.ndarray, ws: Workspace) -> None:
    """d: f16 | qs: 16 bytes, low nibbles the first 16 values, high nibbles the last."""
    d = f16_field(blocks, 0)
    values = nibble_values(_iq4nl_quads(), field(blocks, 2, 16, ws), 16, ws)
    np.multiply(values, d, out=out)


def _iq4_xs(blocks: np.ndarray, out: np.ndarray, ws: Workspace) -> None:
    """d: f16 | scales_h: uint16 (8 x 2 high bits) | scales_l: 8 low nibbles |
    qs: 8 x 16 bytes, each like an IQ4_NL block."""
    k = blocks.shape[0]
    d = f16_field(blocks, 0)
    sh = u16_field(blocks, 2, 1)[:, 0]
    ls = _nibbles(field(blocks, 4, 4)).astype(np.int32)
    ls |= bit_fields(sh, tuple(range(0, 16, 2)), 3).astype(np.int32) << 4
    dl = d * (ls - 32).astype(_F32)
    values = nibble_values(_iq4nl_quads(), field(blocks, 8, 128, ws), 16, ws).reshape(k, 8, 32)
    np.multiply(values, dl[:, :, None], out=out.reshape(k, 8, 32))


_D = (0, 1, 2)  # the fp16 d at offset 0

KERNELS: dict[GGMLType, KernelSpec] = {
    GGMLType.IQ2_XXS: KernelSpec(chunked(_iq2_xxs, GGMLType.IQ2_XXS), (_D, (2, 16, 4))),
    GGMLType.IQ2_XS: KernelSpec(chunked(_iq2_xs, GGMLType.IQ2_XS), (_D, (2, 32, 2))),
    GGMLType.IQ2_S: KernelSpec(chunked(_iq2_s, GGMLType.IQ2_S), (_D,)),
    GGMLType.IQ3_XXS: KernelSpec(chunked(_iq3_xxs, GGMLType.IQ3_XXS), (_D, (66, 8, 4))),
    GGMLType.IQ3_S: KernelSpec(chunked(_iq3_s, GGMLType.IQ3_S), (_D,)),
    GGMLType.IQ1_S: KernelSpec(chunked(_iq1_s, GGMLType.IQ1_S), (_D, (34, 8, 2))),
    GGMLType.IQ1_M: KernelSpec(chunked(_iq1_m, GGMLType.IQ1_M), ((48, 4, 2),)),
    GGMLType.IQ4_NL: KernelSpec(chunked(_iq4_nl, GGMLType.IQ4_NL), (_D,)),
    GGMLType.IQ4_XS: KernelSpec(chunked(_iq4_xs, GGMLType.IQ4_XS), (_D, (2, 1, 2))),
}
