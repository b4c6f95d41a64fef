"""Kernels of the 32-element block types: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1.

Block layouts are those of ggml-common.h. Each result equals ggml's `dequantize_row_*`
bit for bit: the quant becomes an exact float32, then one float32 multiply by the fp16
scale (and for the _1 types one float32 add of the fp16 min), in ggml's order.

Unpacking is SWAR on 64-bit words: the 32 quants of a block come out as four words
viewed as 32 int8 (or uint8) in output order, widened to float32 in one flat cast and
scaled by flat multiplies with the scales repeated per value. Every numpy op runs one
long contiguous loop per chunk: broadcasting a per-block scale or writing per-block
slices makes numpy run an inner loop per block, which costs more than the extra repeat.
Work goes in slices of `CHUNK` blocks so that the temporaries stay in cache, and the
full-size float passes in steps of `AFFINE_BLOCKS` blocks that fit the L2 cache.
"""

from __future__ import annotations

from functools import cache

import numpy as np

from registry.gguf.types import GGMLType
from registry.quant.base import KernelSpec
from registry.quant.chunked import field
from registry.quant.floats import LOW_NIBBLES, U64, f16_column, f16_columns, output

CHUNK = 8192  # blocks per slice: 256 Ki floats, 1 MiB of output (measured best)
# Blocks per step of the float passes: 64 Ki floats, 256 KiB per array, so that the
# output and the repeated scales of a step stay in a 1 MiB L2 cache (measured 5-15%
# faster than whole slices).
AFFINE_BLOCKS = 2048


def _slices(n: int) -> range:
    return range(0, n, CHUNK)


def _repeat(values: np.ndarray) -> np.ndarray:
    """Each block's scale repeated over its 32 values: the multiply is then one flat loop
    (numpy runs an inner loop per block for a broadcast (n, 1) operand, which costs more)."""
    return np.repeat(values, 32)


@cache
def _shift_pattern(n_blocks: int) -> np.ndarray:
    # Per 64-bit word of a block's 16 quant bytes viewed twice in a row: the low nibbles
    # of words 0-1, then the high nibbles of the same words (output order). Tiled over a
    # chunk so that the shift is one flat loop (a (4,) pattern would broadcast per block).
    return np.tile(np.array([0, 0, 4, 4], dtype=np.uint64), n_blocks)


def _affine(q: np.ndarray, d: np.ndarray, m: np.ndarray | None, y: np.ndarray) -> None:
    """y = d * q (+ m) per block: q (n * 32,) int8 or uint8 in output order, d and m (n,)
    float32, y (n * 32,) float32. Widened in one flat cast, then scaled in place by the
    scales repeated per value, AFFINE_BLOCKS blocks at a time."""
    step = AFFINE_BLOCKS * 32
    for s in range(0, y.size, step):
        ys = y[s : s + step]
        np.copyto(ys, q[s : s + step], casting="unsafe")
        blocks = slice(s // 32, (s + step) // 32)
        np.multiply(ys, _repeat(d[blocks]), out=ys)
        if m is not None:
            np.add(ys, _repeat(m[blocks]), out=ys)


def _nibbles(blocks: np.ndarray, qs_at: int) -> np.ndarray:
    """The 16 quant bytes at `qs_at` -> 32 nibbles per block in output order (low nibbles
    first), as the bytes of four uint64 words per block, shape (n * 4,).

    The 16 bytes are copied twice in a row as one 16-byte item, so that one shift by a
    per-word pattern and one mask split the whole chunk.
    """
    words = np.repeat(blocks[:, qs_at : qs_at + 16].view("V16").reshape(-1), 2).view(U64)
    np.right_shift(words, _shift_pattern(max(CHUNK, blocks.shape[0]))[: words.size], out=words)
    np.bitwise_and(words, LOW_NIBBLES, out=words)
    return words


@cache
def _spread_bits() -> np.ndarray:
    # byte -> word whose byte i is 0x10 when bit i of the byte is set: the 5th bit of 8
    # quants of a Q5 block at once.
    bits = (np.arange(256)[:, None] >> np.arange(8)[None, :]) & 1
    return (bits.astype(np.uint8) << 4).view(U64)[:, 0].copy()


def _fifth_bits(blocks: np.ndarray, qh_at: int, words: np.ndarray) -> None:
    """OR the 32 high bits of qh (the 4 bytes at `qh_at`, bit i -> quant i) into `words`."""
    idx = field(blocks, qh_at, 4).reshape(-1).astype(np.intp)
    np.bitwise_or(words, np.take(_spread_bits(), idx, mode="wrap"), out=words)


def _q4_0(blocks: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    blocks = np.ascontiguousarray(blocks)
    n = blocks.shape[0]
    res = output(out, n * 32)
    for s in _slices(n):
        b = blocks[s : s + CHUNK]
        y = res[s * 32 : (s + b.shape[0]) * 32]
        q = _nibbles(b, 2).view(np.int8)
        np.subtract(q, np.int8(8), out=q)  # nibble - 8 fits int8, and widens exactly
        _affine(q, f16_column(b, 0), None, y)
    return res


def _q4_1(blocks: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    blocks = np.ascontiguousarray(blocks)
    n = blocks.shape[0]
    res = output(out, n * 32)
    for s in _slices(n):
        b = blocks[s : s + CHUNK]
        y = res[s * 32 : (s + b.shape[0]) * 32]
        dm = f16_columns(b, 0, 2)
        _affine(_nibbles(b, 4).view(np.uint8), dm[:, 0], dm[:, 1], y)
    return res


def _q5(blocks: np.ndarray, out: np.ndarray | None, *, with_min: bool) -> np.ndarray:
    blocks = np.ascontiguousarray(blocks)
    n = blocks.shape[0]
    res = output(out, n * 32)
    qh_at = 4 if with_min else 2
    for s in _slices(n):
        b = blocks[s : s + CHUNK]
        y = res[s * 32 : (s + b.shape[0]) * 32]
        words = _nibbles(b, qh_at + 4)
        _fifth_bits(b, qh_at, words)
        if with_min:
            dm = f16_columns(b, 0, 2)
            _affine(words.view(np.uint8), dm[:, 0], dm[:, 1], y)
        else:
            q = words.view(np.int8)
            np.subtract(q, np.int8(16), out=q)
            _affine(q, f16_column(b, 0), None, y)
    return res


def _q5_0(blocks: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    return _q5(blocks, out, with_min=False)


def _q5_1(blocks: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    return _q5(blocks, out, with_min=True)


def _q8(blocks: np.ndarray, out: np.ndarray | None, qs_at: int) -> np.ndarray:
    blocks = np.ascontiguousarray(blocks)
    n = blocks.shape[0]
    res = output(out, n * 32)
    y = res.reshape(n, 32)
    d = f16_column(blocks, 0)  # one float per block: all at once, then L2-sized steps
    for s in range(0, n, AFFINE_BLOCKS):
        ys = y[s : s + AFFINE_BLOCKS]
        # widened straight from the blocks, then scaled in place: a plain cast plus a
        # float32 multiply is cheaper than numpy's buffered mixed-type multiply (exact:
        # |q| < 2**24)
        np.copyto(ys, blocks[s : s + AFFINE_BLOCKS, qs_at : qs_at + 32].view(np.int8), casting="unsafe")
        flat = ys.reshape(-1)
        np.multiply(flat, _repeat(d[s : s + AFFINE_BLOCKS]), out=flat)
    return res


def _q8_0(blocks: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    return _q8(blocks, out, 2)


def _q8_1(blocks: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    # d, then s = d * sum(qs) (a dot-product helper the values do not need), then qs.
    return _q8(blocks, out, 4)


KERNELS: dict[GGMLType, KernelSpec] = {
    GGMLType.Q4_0: KernelSpec(_q4_0, ((0, 1, 2),)),
    GGMLType.Q4_1: KernelSpec(_q4_1, ((0, 2, 2),)),
    # qh is declared uint8_t[4] in ggml-common.h: bytes, never swapped.
    GGMLType.Q5_0: KernelSpec(_q5_0, ((0, 1, 2),)),
    GGMLType.Q5_1: KernelSpec(_q5_1, ((0, 2, 2),)),
    GGMLType.Q8_0: KernelSpec(_q8_0, ((0, 1, 2),)),
    GGMLType.Q8_1: KernelSpec(_q8_1, ((0, 2, 2),)),
}
