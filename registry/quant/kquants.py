"""Kernels of the 256-element super-block types: Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K.

Layouts and arithmetic follow ggml-common.h and `dequantize_row_*` in ggml-quants.c, so
results are equal bit for bit: the per-sub-block scale is one float32 product of the fp16
super-block scale and the small integer scale (`d * sc`), and every value is
`(d * sc) * q` or `(d * sc) * q - (dmin * m)`, each step rounded to float32 as in C.

Quant bits are unpacked SWAR-style, eight bytes per 64-bit word per numpy op. In every
k-quant, a run of 32 quant bytes (or 32 high-bit bytes) feeds 32 consecutive outputs once
per bit field it holds, so `_fields` first gathers each 32-byte run to every place its
fields go (32-byte items, in output order), and then a single shift by a per-word pattern
and a single mask pull every field down at once. The codes come out as bytes in output
order, are widened into the output in one cast, and scaled in place by `_affine` with
each sub-block's scale broadcast over its values.

Super-blocks go `STEP` at a time (`SHARED_STEP` on a thread beside others: parallel.step)
so that each numpy call is long, and nothing holds the GIL while it copies (np.take, not
np.repeat): see legacy.py for why that is what lets two threads run at once. The scales
are decoded once per kernel call (a call covers at most a task of parallel.STEP_BYTES):
per step, their dozen short numpy calls each cost a hand-over of the GIL for a few
microseconds of work.
"""

from __future__ import annotations

import numpy as np

from registry.gguf.types import GGMLType
from registry.quant import parallel
from registry.quant.base import KernelSpec
from registry.quant.chunked import field
from registry.quant.floats import (
    LOW_BITS,
    LOW_CRUMBS,
    LOW_NIBBLES,
    U32,
    U64,
    f16_column,
    f16_columns,
    output,
    scale_products,
)

STEP = 1024  # super-blocks per step: 256 Ki values, 1 MiB of output (measured best of 256..4096)
# Super-blocks per step on a thread beside others (parallel.step). Measured as in legacy.py
# (STEP, 2x, 4x): Q6_K 3.7 / 4.0 / 4.2 GB/s, Q3_K 3.8 / 4.0 / 4.1, Q5_K 3.5 / 3.7 / 3.8;
# Q4_K the same within noise, Q2_K 4.2 / 4.0 / 3.8. In bench.dequant the gains were
# smaller, and 4x lost 5% on Q4_K; three alternating runs each of STEP and 2x, new arrays
# on two threads: Q6_K 3.27-3.34 -> 3.45-3.53 GB/s, Q3_K 3.33-3.64 -> 3.56-3.68, Q5_K
# 3.23-3.32 -> 3.28-3.50, Q4_K 3.87-3.96 -> 3.72-4.01, Q2_K 3.57-3.65 -> 3.44-3.55.
SHARED_STEP = 2 * STEP
_U = np.uint64


class _Runs:
    """Where the 32-byte runs of a field go: `picks[i]` is the run copied to output item i
    (32 bytes), shifted right by `shifts[i]` bits before masking."""

    def __init__(self, picks: list[int], shifts: list[int]) -> None:
        self.picks = np.array(picks, dtype=np.intp)
        # The shift of each 64-bit word of a whole step, as one flat array: a
        # (len(picks) * 4,) pattern broadcast over super-blocks would make numpy run one
        # inner loop per super-block, which costs more than the shift.
        per_block = np.repeat(np.array(shifts, dtype=np.uint64), 4)
        rows = max(STEP, SHARED_STEP)  # the longest step
        self.shift_words = np.tile(per_block, rows).reshape(rows, -1)


# Bits 2j..2j+1 of two 32-byte runs (Q2_K, Q3_K low bits; Q6_K high bits): run h, field j.
_CRUMBS = _Runs([0, 0, 0, 0, 1, 1, 1, 1], [0, 2, 4, 6] * 2)
# Bit i of one 32-byte run (Q3_K, Q5_K high bits), i = 0..7.
_BITS = _Runs([0] * 8, list(range(8)))
# Low then high nibbles of four 32-byte runs (Q4_K, Q5_K).
_NIBBLES = _Runs([0, 0, 1, 1, 2, 2, 3, 3], [0, 4] * 4)
# Q6_K ql: runs (half, k % 2) in output order (half, k // 2, k % 2), nibble k // 2.
_Q6_LOW = _Runs([0, 1, 0, 1, 2, 3, 2, 3], [0, 0, 4, 4] * 2)


def _fields(b: np.ndarray, start: int, stop: int, runs: _Runs, mask: np.uint64) -> np.ndarray:
    """(k, 4 * len(runs.picks)) uint64: the 32-byte runs of bytes [start, stop) of each
    block, in `runs.picks` order, each word shifted right by its shift and masked."""
    items = b[:, start:stop].view("V32")  # (k, runs); void items are copied whole
    words = np.take(items, runs.picks, axis=1).view(U64)
    np.right_shift(words, runs.shift_words[: b.shape[0]], out=words)
    np.bitwise_and(words, mask, out=words)
    return words


def _add_high(words: np.ndarray, high: np.ndarray, shift: int) -> None:
    """words |= high << shift: the high bits of each quant joined to its low bits."""
    np.left_shift(high, _U(shift), out=high)
    np.bitwise_or(words, high, out=words)


def _scale_min_k4(scales: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The eight 6-bit (scale, min) pairs packed in 12 bytes (Q4_K, Q5_K), as uint8 (n, 8).

    j < 4: scale j is the low 6 bits of byte j and min j of byte j + 4; j >= 4: the low
    (scale) or high (min) nibble of byte j + 4, topped by the 2 high bits of byte j - 4
    (scale) or byte j (min). Done four bytes at a time on 32-bit words.
    """
    a = scales.view(U32)  # (n, 3)
    a0, a1, a2 = a[:, 0], a[:, 1], a[:, 2]
    six, nib, two = np.uint32(0x3F3F3F3F), np.uint32(0x0F0F0F0F), np.uint32(0x03030303)
    # scales then mins, each (n, 2) words = (n, 8) contiguous bytes
    res = np.empty((2, scales.shape[0], 2), dtype=U32)
    np.bitwise_and(a0, six, out=res[0, :, 0])
    np.bitwise_and(a1, six, out=res[1, :, 0])
    top = (a0 >> np.uint32(6)) & two
    np.bitwise_or(top << np.uint32(4), a2 & nib, out=res[0, :, 1])
    top = (a1 >> np.uint32(6)) & two
    np.bitwise_or(top << np.uint32(4), (a2 >> np.uint32(4)) & nib, out=res[1, :, 1])
    packed = res.view(np.uint8).reshape(2, -1, 8)
    return packed[0], packed[1]


def _scale_min(blocks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(d * sc, dmin * m) of the 8 sub-blocks of a Q4_K / Q5_K block, float32 (n, 8)."""
    head = field(blocks, 0, 16)  # one contiguous copy: the ops below then read it in cache
    sc, mn = _scale_min_k4(head[:, 4:16])
    dm = f16_columns(head, 0, 2)
    return scale_products(dm[:, 0], sc), scale_products(dm[:, 1], mn)


def _affine(q: np.ndarray, d: np.ndarray, m: np.ndarray | None, y: np.ndarray) -> None:
    """y = d * q (- m) with d, m (k, subs) per sub-block; q (k, subs * size) bytes as int8
    or uint8 in output order, y (k, subs, size).

    The quants are widened into `y` in one cast and scaled in place, each sub-block's scale
    broadcast over its values: a plain cast plus a float32 multiply is cheaper than numpy's
    buffered mixed-type multiply, and exact (|q| < 2**24).
    """
    np.copyto(y, q.reshape(y.shape), casting="unsafe")
    np.multiply(y, d[:, :, None], out=y)
    if m is not None:
        np.subtract(y, m[:, :, None], out=y)


def _q2_k(blocks: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    # scales[16] | qs[64] | d | dmin. Output 128*h + 32*j + 16*g + l holds bits 2j..2j+1 of
    # qs[32*h + 16*g + l] and uses scales[8*h + 2*j + g] (= output // 16).
    blocks = np.ascontiguousarray(blocks)
    n = blocks.shape[0]
    res = output(out, n * 256)
    y = res.reshape(n, 16, 16)
    sc = field(blocks, 0, 16)
    dm = f16_columns(blocks, 80, 2)
    d = scale_products(dm[:, 0], sc & 0xF)
    m = scale_products(dm[:, 1], sc >> 4)
    step = parallel.step(STEP, SHARED_STEP)
    for s in range(0, n, step):
        q = _fields(blocks[s : s + step], 16, 80, _CRUMBS, LOW_CRUMBS)
        _affine(q.view(np.uint8), d[s : s + step], m[s : s + step], y[s : s + step])
    return res


def _q3_scales(raw: np.ndarray) -> np.ndarray:
    """The sixteen 6-bit scales packed in 12 bytes, minus 32, as int8 (n, 16)."""
    a = np.ascontiguousarray(raw).view(U32)  # (n, 3)
    a0, a1, tmp = a[:, 0], a[:, 1], a[:, 2]
    k1, k2 = np.uint32(0x03030303), np.uint32(0x0F0F0F0F)
    res = np.empty((raw.shape[0], 4), dtype=U32)
    # Low 4 bits from bytes 0..7 (low nibbles, then high nibbles), high 2 bits from 8..11.
    res[:, 0] = (a0 & k2) | ((tmp & k1) << 4)
    res[:, 1] = (a1 & k2) | (((tmp >> 2) & k1) << 4)
    res[:, 2] = ((a0 >> 4) & k2) | (((tmp >> 4) & k1) << 4)
    res[:, 3] = ((a1 >> 4) & k2) | (((tmp >> 6) & k1) << 4)
    sc = res.view(np.int8)
    np.subtract(sc, np.int8(32), out=sc)
    return sc


def _q3_k(blocks: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    # hmask[32] | qs[64] | scales[12] | d. Same 2-bit order as Q2_K; the third bit of
    # output 128*h + 32*j + 16*g + l is bit 4*h + j of hmask[16*g + l], and a clear bit
    # subtracts 4.
    blocks = np.ascontiguousarray(blocks)
    n = blocks.shape[0]
    res = output(out, n * 256)
    y = res.reshape(n, 16, 16)
    d = scale_products(f16_column(blocks, 108), _q3_scales(blocks[:, 96:108]))
    step = parallel.step(STEP, SHARED_STEP)
    for s in range(0, n, step):
        b = blocks[s : s + step]
        q = _fields(b, 32, 96, _CRUMBS, LOW_CRUMBS)
        _add_high(q, _fields(b, 0, 32, _BITS, LOW_BITS), 2)
        codes = q.view(np.int8)
        np.subtract(codes, np.int8(4), out=codes)
        _affine(codes, d[s : s + step], None, y[s : s + step])
    return res


def _q4_k(blocks: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    # d | dmin | scales[12] | qs[128]. Sub-block 2*i takes the low nibbles of
    # qs[32*i .. 32*i+31], sub-block 2*i+1 their high nibbles.
    blocks = np.ascontiguousarray(blocks)
    n = blocks.shape[0]
    res = output(out, n * 256)
    y = res.reshape(n, 8, 32)
    d, m = _scale_min(blocks)
    step = parallel.step(STEP, SHARED_STEP)
    for s in range(0, n, step):
        q = _fields(blocks[s : s + step], 16, 144, _NIBBLES, LOW_NIBBLES)
        _affine(q.view(np.uint8), d[s : s + step], m[s : s + step], y[s : s + step])
    return res


def _q5_k(blocks: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    # d | dmin | scales[12] | qh[32] | qs[128]. As Q4_K, plus 16 when bit i of qh[l] is set
    # for value l of sub-block i.
    blocks = np.ascontiguousarray(blocks)
    n = blocks.shape[0]
    res = output(out, n * 256)
    y = res.reshape(n, 8, 32)
    d, m = _scale_min(blocks)
    step = parallel.step(STEP, SHARED_STEP)
    for s in range(0, n, step):
        b = blocks[s : s + step]
        q = _fields(b, 48, 176, _NIBBLES, LOW_NIBBLES)
        _add_high(q, _fields(b, 16, 48, _BITS, LOW_BITS), 4)
        _affine(q.view(np.uint8), d[s : s + step], m[s : s + step], y[s : s + step])
    return res


def _q6_k(blocks: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    # ql[128] | qh[64] | scales[16] (int8) | d. In half h, output 128*h + 32*k + l takes
    # nibble k // 2 of ql[64*h + 32*(k % 2) + l] and bits 2k..2k+1 of qh[32*h + l], minus 32.
    blocks = np.ascontiguousarray(blocks)
    n = blocks.shape[0]
    res = output(out, n * 256)
    y = res.reshape(n, 16, 16)
    d = scale_products(f16_column(blocks, 208), blocks[:, 192:208].view(np.int8))
    step = parallel.step(STEP, SHARED_STEP)
    for s in range(0, n, step):
        b = blocks[s : s + step]
        q = _fields(b, 0, 128, _Q6_LOW, LOW_NIBBLES)
        _add_high(q, _fields(b, 128, 192, _CRUMBS, LOW_CRUMBS), 4)
        codes = q.view(np.int8)
        np.subtract(codes, np.int8(32), out=codes)
        _affine(codes, d[s : s + step], None, y[s : s + step])
    return res


def _q8_k(blocks: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    # d (float32) | qs[256] (int8) | bsums[16] (int16, only for dot products).
    blocks = np.ascontiguousarray(blocks)
    n = blocks.shape[0]
    res = output(out, n * 256)
    y = res.reshape(n, 256)
    step = parallel.step(STEP, SHARED_STEP)
    for s in range(0, n, step):
        b = blocks[s : s + step]
        ys = y[s : s + step]
        np.copyto(ys, b[:, 4:260].view(np.int8), casting="unsafe")
        np.multiply(ys, b[:, 0:4].view("<f4"), out=ys)
    return res


KERNELS: dict[GGMLType, KernelSpec] = {
    GGMLType.Q2_K: KernelSpec(_q2_k, ((80, 2, 2),)),
    GGMLType.Q3_K: KernelSpec(_q3_k, ((108, 1, 2),)),
    GGMLType.Q4_K: KernelSpec(_q4_k, ((0, 2, 2),)),
    GGMLType.Q5_K: KernelSpec(_q5_k, ((0, 2, 2),)),
    GGMLType.Q6_K: KernelSpec(_q6_k, ((208, 1, 2),)),
    GGMLType.Q8_K: KernelSpec(_q8_k, ((0, 1, 4), (260, 16, 2))),
}
