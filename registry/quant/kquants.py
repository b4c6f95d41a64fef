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
are decoded `GROUP` super-blocks at a time: per step, their dozen short numpy calls would
each cost a hand-over of the GIL for a few microseconds of work. Every temporary lives in
a workspace lent to the kernel call (workspace.py): fresh arrays for the scales of a
whole call faulted in 1,088 pages per call of 16 Mi Q4_K values in a new process, which
then ran at 5.1-5.2 GB/s on one thread against 6.0-6.2 with a workspace.
"""

from __future__ import annotations

from collections.abc import Callable

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
from registry.quant.workspace import Workspace, lend_workspace

STEP = 1024  # super-blocks per step: 256 Ki values, 1 MiB of output (measured best of 256..4096)
# Super-blocks per step on a thread beside others (parallel.step). Measured as in legacy.py
# (STEP, 2x, 4x): Q6_K 3.7 / 4.0 / 4.2 GB/s, Q3_K 3.8 / 4.0 / 4.1, Q5_K 3.5 / 3.7 / 3.8;
# Q4_K the same within noise, Q2_K 4.2 / 4.0 / 3.8. In bench.dequant the gains were
# smaller, and 4x lost 5% on Q4_K; three alternating runs each of STEP and 2x, new arrays
# on two threads: Q6_K 3.27-3.34 -> 3.45-3.53 GB/s, Q3_K 3.33-3.64 -> 3.56-3.68, Q5_K
# 3.23-3.32 -> 3.28-3.50, Q4_K 3.87-3.96 -> 3.72-4.01, Q2_K 3.57-3.65 -> 3.44-3.55.
SHARED_STEP = 2 * STEP
# Super-blocks whose scales are decoded at once: a whole number of steps of either size,
# and a few MiB of scales at most (Q2_K: 2 MiB for d and dmin * m together).
GROUP = 16 * STEP
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


def _fields(b: np.ndarray, start: int, stop: int, runs: _Runs, mask: np.uint64, ws: Workspace, name: str) -> np.ndarray:
    """(k, 4 * len(runs.picks)) uint64 (workspace memory under `name`): the 32-byte runs of
    bytes [start, stop) of each block, in `runs.picks` order, each word shifted right by
    its shift and masked."""
    items = b[:, start:stop].view("V32")  # (k, runs); void items are copied whole
    gathered = ws.get(name, (b.shape[0], len(runs.picks)), np.dtype("V32"))
    # mode="wrap" lets take write straight into `gathered`; the picks are in range
    np.take(items, runs.picks, axis=1, out=gathered, mode="wrap")
    words = gathered.view(U64)
    np.right_shift(words, runs.shift_words[: b.shape[0]], out=words)
    np.bitwise_and(words, mask, out=words)
    return words


def _add_high(words: np.ndarray, high: np.ndarray, shift: int) -> None:
    """words |= high << shift: the high bits of each quant joined to its low bits."""
    np.left_shift(high, _U(shift), out=high)
    np.bitwise_or(words, high, out=words)


def _scale_min_k4(scales: np.ndarray, ws: Workspace) -> tuple[np.ndarray, np.ndarray]:
    """The eight 6-bit (scale, min) pairs packed in 12 bytes (Q4_K, Q5_K), as uint8 (n, 8).

    j < 4: scale j is the low 6 bits of byte j and min j of byte j + 4; j >= 4: the low
    (scale) or high (min) nibble of byte j + 4, topped by the 2 high bits of byte j - 4
    (scale) or byte j (min). Done four bytes at a time on 32-bit words.
    """
    n = scales.shape[0]
    a = scales.view(U32)  # (n, 3)
    a0, a1, a2 = a[:, 0], a[:, 1], a[:, 2]
    six, nib, two = np.uint32(0x3F3F3F3F), np.uint32(0x0F0F0F0F), np.uint32(0x03030303)
    # scales then mins, each (n, 2) words = (n, 8) contiguous bytes
    res = ws.get("k4", (2, n, 2), U32)
    top, low = ws.get("k4:top", (n,), U32), ws.get("k4:low", (n,), U32)
    np.bitwise_and(a0, six, out=res[0, :, 0])
    np.bitwise_and(a1, six, out=res[1, :, 0])
    for which, word, nibbles in ((0, a0, a2), (1, a1, None)):
        np.right_shift(word, np.uint32(6), out=top)  # the 2 high bits of byte j - 4 or j
        np.bitwise_and(top, two, out=top)
        np.left_shift(top, np.uint32(4), out=top)
        if nibbles is None:  # the mins take the high nibbles of bytes 8..11
            nibbles = np.right_shift(a2, np.uint32(4), out=low)
        np.bitwise_and(nibbles, nib, out=low)
        np.bitwise_or(top, low, out=res[which, :, 1])
    packed = res.view(np.uint8).reshape(2, -1, 8)
    return packed[0], packed[1]


def _scale_min(blocks: np.ndarray, ws: Workspace) -> tuple[np.ndarray, np.ndarray]:
    """(d * sc, dmin * m) of the 8 sub-blocks of a Q4_K / Q5_K block, float32 (n, 8)."""
    head = field(blocks, 0, 16, ws)  # one contiguous copy: the ops below then read it in cache
    sc, mn = _scale_min_k4(head[:, 4:16], ws)
    dm = f16_columns(head, 0, 2, ws)
    n = blocks.shape[0]
    d = scale_products(dm[:, 0], sc, ws.get("d", (n, 8), np.float32))
    return d, scale_products(dm[:, 1], mn, ws.get("m", (n, 8), np.float32))


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


# scales(group, ws) -> (d, m or None), each (k, sub-blocks) float32
Scales = Callable[[np.ndarray, Workspace], tuple[np.ndarray, np.ndarray | None]]
# codes(blocks, ws) -> (k, 256) bytes (int8 or uint8) in output order
Codes = Callable[[np.ndarray, Workspace], np.ndarray]


def _kernel(blocks: np.ndarray, out: np.ndarray | None, sub_size: int, scales: Scales, codes: Codes) -> np.ndarray:
    """The loop every k-quant with sub-block scales runs: scales decoded GROUP super-blocks
    at a time, codes and values a step at a time, all temporaries in one workspace."""
    blocks = np.ascontiguousarray(blocks)
    n = blocks.shape[0]
    res = output(out, n * 256)
    y = res.reshape(n, 256 // sub_size, sub_size)
    step = parallel.step(STEP, SHARED_STEP)
    with lend_workspace() as ws:
        for g in range(0, n, GROUP):
            group = blocks[g : g + GROUP]
            d, m = scales(group, ws)
            for s in range(0, group.shape[0], step):
                q = codes(group[s : s + step], ws)
                k = q.shape[0]
                _affine(q, d[s : s + k], None if m is None else m[s : s + k], y[g + s : g + s + k])
    return res


def _q2_scales(group: np.ndarray, ws: Workspace) -> tuple[np.ndarray, np.ndarray | None]:
    # scales[16]: low nibble the scale, high nibble the min, of sub-block i; d, dmin at 80.
    n = group.shape[0]
    sc = field(group, 0, 16, ws)
    low, high = ws.get("q2:sc", (n, 16), np.uint8), ws.get("q2:mn", (n, 16), np.uint8)
    np.bitwise_and(sc, np.uint8(0xF), out=low)
    np.right_shift(sc, np.uint8(4), out=high)
    dm = f16_columns(group, 80, 2, ws)
    d = scale_products(dm[:, 0], low, ws.get("d", (n, 16), np.float32))
    return d, scale_products(dm[:, 1], high, ws.get("m", (n, 16), np.float32))


def _q2_codes(b: np.ndarray, ws: Workspace) -> np.ndarray:
    # qs[64] at 16. Output 128*h + 32*j + 16*g + l holds bits 2j..2j+1 of qs[32*h + 16*g + l]
    # and uses scales[8*h + 2*j + g] (= output // 16).
    return _fields(b, 16, 80, _CRUMBS, LOW_CRUMBS, ws, "codes").view(np.uint8)


def _q2_k(blocks: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    # scales[16] | qs[64] | d | dmin
    return _kernel(blocks, out, 16, _q2_scales, _q2_codes)


def _q3_scales(group: np.ndarray, ws: Workspace) -> tuple[np.ndarray, np.ndarray | None]:
    """d * (the sixteen 6-bit scales packed in bytes 96..107, minus 32), float32 (n, 16).

    Low 4 bits from bytes 0..7 of the field (low nibbles, then high nibbles), high 2 bits
    from bytes 8..11, four scales at a time on 32-bit words."""
    n = group.shape[0]
    a = field(group, 96, 12, ws).view(U32)  # (n, 3)
    a0, a1, tmp = a[:, 0], a[:, 1], a[:, 2]
    k1, k2 = np.uint32(0x03030303), np.uint32(0x0F0F0F0F)
    res = ws.get("q3:sc", (n, 4), U32)
    low, high = ws.get("q3:low", (n,), U32), ws.get("q3:high", (n,), U32)
    for col, word, low_at, high_at in ((0, a0, 0, 0), (1, a1, 0, 2), (2, a0, 4, 4), (3, a1, 4, 6)):
        np.right_shift(word, np.uint32(low_at), out=low)
        np.bitwise_and(low, k2, out=low)
        np.right_shift(tmp, np.uint32(high_at), out=high)
        np.bitwise_and(high, k1, out=high)
        np.left_shift(high, np.uint32(4), out=high)
        np.bitwise_or(low, high, out=res[:, col])
    sc = res.view(np.int8)
    np.subtract(sc, np.int8(32), out=sc)
    return scale_products(f16_column(group, 108, ws), sc, ws.get("d", (n, 16), np.float32)), None


# (start, stop, runs, mask) of a bit field: the arguments of _fields
Field = tuple[int, int, _Runs, np.uint64]


def _joined(b: np.ndarray, ws: Workspace, low: Field, high: Field, shift: int) -> np.ndarray:
    """(k, 256) uint8 codes: the `low` bits of each quant, or'ed with its `high` bits
    shifted left by `shift`."""
    q = _fields(b, *low, ws, "codes")
    _add_high(q, _fields(b, *high, ws, "high"), shift)
    return q.view(np.uint8)


def _minus(codes: np.ndarray, offset: int) -> np.ndarray:
    """uint8 codes minus `offset`, in place, as int8."""
    signed = codes.view(np.int8)
    np.subtract(signed, np.int8(offset), out=signed)
    return signed


def _q3_codes(b: np.ndarray, ws: Workspace) -> np.ndarray:
    # Same 2-bit order as Q2_K (qs[64] at 32); the third bit of output 128*h + 32*j + 16*g
    # + l is bit 4*h + j of hmask[16*g + l], and a clear bit subtracts 4.
    return _minus(_joined(b, ws, (32, 96, _CRUMBS, LOW_CRUMBS), (0, 32, _BITS, LOW_BITS), 2), 4)


def _q3_k(blocks: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    # hmask[32] | qs[64] | scales[12] | d
    return _kernel(blocks, out, 16, _q3_scales, _q3_codes)


def _q4_codes(b: np.ndarray, ws: Workspace) -> np.ndarray:
    # qs[128] at 16. Sub-block 2*i takes the low nibbles of qs[32*i .. 32*i+31], sub-block
    # 2*i+1 their high nibbles.
    return _fields(b, 16, 144, _NIBBLES, LOW_NIBBLES, ws, "codes").view(np.uint8)


def _q4_k(blocks: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    # d | dmin | scales[12] | qs[128]
    return _kernel(blocks, out, 32, _scale_min, _q4_codes)


def _q5_codes(b: np.ndarray, ws: Workspace) -> np.ndarray:
    # As Q4_K (qs[128] at 48), plus 16 when bit i of qh[l] is set for value l of sub-block i.
    return _joined(b, ws, (48, 176, _NIBBLES, LOW_NIBBLES), (16, 48, _BITS, LOW_BITS), 4)


def _q5_k(blocks: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    # d | dmin | scales[12] | qh[32] | qs[128]
    return _kernel(blocks, out, 32, _scale_min, _q5_codes)


def _q6_scales(group: np.ndarray, ws: Workspace) -> tuple[np.ndarray, np.ndarray | None]:
    # scales[16] (int8) at 192, d at 208
    n = group.shape[0]
    sc = group[:, 192:208].view(np.int8)
    return scale_products(f16_column(group, 208, ws), sc, ws.get("d", (n, 16), np.float32)), None


def _q6_codes(b: np.ndarray, ws: Workspace) -> np.ndarray:
    # In half h, output 128*h + 32*k + l takes nibble k // 2 of ql[64*h + 32*(k % 2) + l]
    # and bits 2k..2k+1 of qh[32*h + l], minus 32.
    return _minus(_joined(b, ws, (0, 128, _Q6_LOW, LOW_NIBBLES), (128, 192, _CRUMBS, LOW_CRUMBS), 4), 32)


def _q6_k(blocks: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    # ql[128] | qh[64] | scales[16] (int8) | d
    return _kernel(blocks, out, 16, _q6_scales, _q6_codes)


def _q8_k(blocks: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    # d (float32) | qs[256] (int8) | bsums[16] (int16, only for dot products). No
    # temporaries: the codes are widened straight from the blocks.
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
