"""Kernels of the 256-element super-block types: Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K.

Layouts and arithmetic follow ggml-common.h and `dequantize_row_*` in ggml-quants.c, so
results are equal bit for bit: the per-sub-block scale is one float32 product of the fp16
super-block scale and the small integer scale (`d * sc`), and every value is
`(d * sc) * q` or `(d * sc) * q - (dmin * m)`, each step rounded to float32 as in C.

In every k-quant the quants of sub-block i sit at output positions 16*i.. (or 32*i..), so
the scales broadcast over a (blocks, sub-blocks, sub-block size) view of the output. Quant
bits are unpacked SWAR-style, eight bytes per 64-bit word per numpy op, into int8 words
laid out in output order.
"""

from __future__ import annotations

import numpy as np

from registry.gguf.types import GGMLType
from registry.quant.base import KernelSpec
from registry.quant.floats import LOW_BITS, LOW_CRUMBS, LOW_NIBBLES, U32, U64, Scratch, f16_column, output

CHUNK = 2048  # super-blocks per slice: 512 Ki floats, 2 MiB of output (measured best)
_U = np.uint64


def _slices(n: int) -> range:
    return range(0, n, CHUNK)


def _words(qs: np.ndarray, scratch: Scratch, name: str) -> np.ndarray:
    """A contiguous (n, k) array of the little-endian 64-bit words of a byte field."""
    return scratch.copy(name, qs).view(U64)


def _nibble_words(b: np.ndarray, scratch: Scratch) -> tuple[np.ndarray, np.ndarray]:
    """Low and high nibbles of every byte of whole blocks, as (n, size / 8) 64-bit words."""
    w = np.ascontiguousarray(b).view(U64)
    low = scratch.get("low", w.shape, U64)
    high = scratch.get("high", w.shape, U64)
    np.bitwise_and(w, LOW_NIBBLES, out=low)
    np.right_shift(w, _U(4), out=high)
    np.bitwise_and(high, LOW_NIBBLES, out=high)
    return low, high


def _split_nibbles(b: np.ndarray, qs_at: int, scratch: Scratch) -> np.ndarray:
    """The 128 quant bytes at `qs_at` -> (n, 4, 2, 32) uint8: per 32 bytes, their low
    nibbles then their high nibbles (sub-blocks 2i and 2i+1).

    The nibble split runs over whole blocks as 64-bit words (Q4_K and Q5_K blocks are a
    multiple of 8 bytes): long contiguous numpy loops; only the final copies are per row.
    """
    c = b.shape[0]
    low, high = _nibble_words(b, scratch)
    q = scratch.get("split", (c, 4, 2, 32), np.uint8)
    q[:, :, 0] = low.view(np.uint8)[:, qs_at : qs_at + 128].reshape(c, 4, 32)
    q[:, :, 1] = high.view(np.uint8)[:, qs_at : qs_at + 128].reshape(c, 4, 32)
    return q


def _scale_min_k4(scales: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The eight 6-bit (scale, min) pairs packed in 12 bytes (Q4_K, Q5_K), as uint8 (n, 8).

    j < 4: scale j is the low 6 bits of byte j and min j of byte j + 4; j >= 4: the low
    (scale) or high (min) nibble of byte j + 4, topped by the 2 high bits of byte j - 4
    (scale) or byte j (min). Done four bytes at a time on 32-bit words.
    """
    a = scales.view(U32)  # (n, 3)
    a0, a1, a2 = a[:, 0], a[:, 1], a[:, 2]
    six, nib, two = np.uint32(0x3F3F3F3F), np.uint32(0x0F0F0F0F), np.uint32(0x03030303)
    res = np.empty((scales.shape[0], 4), dtype=U32)  # scales 0-3, 4-7, mins 0-3, 4-7
    np.bitwise_and(a0, six, out=res[:, 0])
    np.bitwise_and(a1, six, out=res[:, 2])
    top = (a0 >> np.uint32(6)) & two
    np.bitwise_or(top << np.uint32(4), a2 & nib, out=res[:, 1])
    top = (a1 >> np.uint32(6)) & two
    np.bitwise_or(top << np.uint32(4), (a2 >> np.uint32(4)) & nib, out=res[:, 3])
    packed = res.view(np.uint8).reshape(-1, 2, 8)
    return packed[:, 0], packed[:, 1]


def _scale_min(blocks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(d * sc, dmin * m) of the 8 sub-blocks of a Q4_K / Q5_K block, float32 (n, 8)."""
    sc, mn = _scale_min_k4(blocks[:, 4:16])
    d = np.multiply(f16_column(blocks, 0)[:, None], sc)
    m = np.multiply(f16_column(blocks, 2)[:, None], mn)
    return d, m


def _affine(q: np.ndarray, d: np.ndarray, m: np.ndarray | None, y: np.ndarray) -> None:
    """y = d * q (- m) with d, m per sub-block; q (n, subs, size) int8 or uint8.

    The quants are widened into `y` first and scaled in place: a plain cast plus a float32
    multiply is cheaper than numpy's buffered mixed-type multiply (and exact: |q| < 2**24).
    """
    np.copyto(y, q, casting="unsafe")
    np.multiply(y, d[:, :, None], out=y)
    if m is not None:
        np.subtract(y, m[:, :, None], out=y)


def _q2_k(blocks: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    # scales[16] | qs[64] | d | dmin. Output 128*h + 32*j + 16*g + l holds bits 2j..2j+1 of
    # qs[32*h + 16*g + l] and uses scales[8*h + 2*j + g] (= output // 16).
    n = blocks.shape[0]
    res = output(out, n * 256)
    y = res.reshape(n, 16, 16)
    scratch = Scratch()
    for s in _slices(n):
        b = blocks[s : s + CHUNK]
        c = b.shape[0]
        src = _words(b[:, 16:80], scratch, "qs").reshape(c, 2, 1, 4)
        words = scratch.get("words", (c, 2, 4, 4), U64)
        for j in range(4):
            np.right_shift(src[:, :, 0], _U(2 * j), out=words[:, :, j])
        np.bitwise_and(words, LOW_CRUMBS, out=words)
        sc = b[:, 0:16]
        d = np.multiply(f16_column(b, 80)[:, None], sc & 0xF, out=scratch.get("d", (c, 16), np.float32))
        m = np.multiply(f16_column(b, 82)[:, None], sc >> 4, out=scratch.get("m", (c, 16), np.float32))
        _affine(words.view(np.uint8).reshape(c, 16, 16), d, m, y[s : s + CHUNK])
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
    n = blocks.shape[0]
    res = output(out, n * 256)
    y = res.reshape(n, 16, 16)
    scratch = Scratch()
    for s in _slices(n):
        b = blocks[s : s + CHUNK]
        c = b.shape[0]
        src = _words(b[:, 32:96], scratch, "qs").reshape(c, 2, 4)
        hm = _words(b[:, 0:32], scratch, "hmask")  # (c, 4)
        words = scratch.get("words", (c, 2, 4, 4), U64)
        high = scratch.get("high", (c, 2, 4, 4), U64)
        for h in range(2):
            for j in range(4):
                np.right_shift(src[:, h], _U(2 * j), out=words[:, h, j])
                np.right_shift(hm, _U(4 * h + j), out=high[:, h, j])
        np.bitwise_and(words, LOW_CRUMBS, out=words)
        np.bitwise_and(high, LOW_BITS, out=high)
        np.left_shift(high, _U(2), out=high)
        np.bitwise_or(words, high, out=words)
        q = words.view(np.int8)
        np.subtract(q, np.int8(4), out=q)
        d = np.multiply(
            f16_column(b, 108)[:, None], _q3_scales(b[:, 96:108]), out=scratch.get("d", (c, 16), np.float32)
        )
        _affine(q.reshape(c, 16, 16), d, None, y[s : s + CHUNK])
    return res


def _q4_k(blocks: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    # d | dmin | scales[12] | qs[128]. Sub-block 2*i takes the low nibbles of
    # qs[32*i .. 32*i+31], sub-block 2*i+1 their high nibbles.
    n = blocks.shape[0]
    res = output(out, n * 256)
    y = res.reshape(n, 8, 32)
    scratch = Scratch()
    for s in _slices(n):
        b = blocks[s : s + CHUNK]
        c = b.shape[0]
        ys = y[s : s + CHUNK]
        # The nibble halves are widened straight into the output (no byte copy in between).
        low, high = _nibble_words(b, scratch)
        halves = ys.reshape(c, 4, 2, 32)
        np.copyto(halves[:, :, 0], low.view(np.uint8)[:, 16:144].reshape(c, 4, 32), casting="unsafe")
        np.copyto(halves[:, :, 1], high.view(np.uint8)[:, 16:144].reshape(c, 4, 32), casting="unsafe")
        d, m = _scale_min(b)
        np.multiply(ys, d[:, :, None], out=ys)
        np.subtract(ys, m[:, :, None], out=ys)
    return res


def _q5_k(blocks: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    # d | dmin | scales[12] | qh[32] | qs[128]. As Q4_K, plus 16 when bit i of qh[l] is set
    # for value l of sub-block i.
    n = blocks.shape[0]
    res = output(out, n * 256)
    y = res.reshape(n, 8, 32)
    scratch = Scratch()
    for s in _slices(n):
        b = blocks[s : s + CHUNK]
        c = b.shape[0]
        words = _split_nibbles(b, 48, scratch).view(U64)  # (c, 4, 2, 4)
        qh = _words(b[:, 16:48], scratch, "qh")  # (c, 4)
        high = scratch.get("high5", (c, 8, 4), U64)
        for i in range(8):
            np.right_shift(qh, _U(i), out=high[:, i])
        np.bitwise_and(high, LOW_BITS, out=high)
        np.left_shift(high, _U(4), out=high)
        np.bitwise_or(words.reshape(c, 8, 4), high, out=words.reshape(c, 8, 4))
        d, m = _scale_min(b)
        _affine(words.view(np.uint8).reshape(c, 8, 32), d, m, y[s : s + CHUNK])
    return res


def _q6_k(blocks: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    # ql[128] | qh[64] | scales[16] (int8) | d. In half h, output 128*h + 32*k + l takes
    # nibble k // 2 of ql[64*h + 32*(k % 2) + l] and bits 2k..2k+1 of qh[32*h + l], minus 32.
    n = blocks.shape[0]
    res = output(out, n * 256)
    y = res.reshape(n, 16, 16)
    scratch = Scratch()
    for s in _slices(n):
        b = blocks[s : s + CHUNK]
        c = b.shape[0]
        ql = _words(b[:, 0:128], scratch, "ql").reshape(c, 2, 2, 4)  # (half, k % 2, word)
        qh = _words(b[:, 128:192], scratch, "qh").reshape(c, 2, 4)  # (half, word)
        words = scratch.get("words", (c, 2, 2, 2, 4), U64)  # (half, k // 2, k % 2, word)
        high = scratch.get("high", (c, 2, 4, 4), U64)  # (half, k, word)
        np.bitwise_and(ql, LOW_NIBBLES, out=words[:, :, 0])
        np.right_shift(ql, _U(4), out=words[:, :, 1])
        np.bitwise_and(words[:, :, 1], LOW_NIBBLES, out=words[:, :, 1])
        for k in range(4):
            np.right_shift(qh, _U(2 * k), out=high[:, :, k])
        np.bitwise_and(high, LOW_CRUMBS, out=high)
        np.left_shift(high, _U(4), out=high)
        flat = words.reshape(c, 2, 4, 4)
        np.bitwise_or(flat, high, out=flat)
        q = words.view(np.int8)
        np.subtract(q, np.int8(32), out=q)
        d = np.multiply(
            f16_column(b, 208)[:, None],
            b[:, 192:208].view(np.int8),
            out=scratch.get("d", (c, 16), np.float32),
        )
        _affine(q.reshape(c, 16, 16), d, None, y[s : s + CHUNK])
    return res


def _q8_k(blocks: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    # d (float32) | qs[256] (int8) | bsums[16] (int16, only for dot products).
    n = blocks.shape[0]
    res = output(out, n * 256)
    y = res.reshape(n, 256)
    for s in _slices(n):
        b = blocks[s : s + CHUNK]
        ys = y[s : s + CHUNK]
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
