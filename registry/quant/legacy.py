"""Kernels of the 32-element block types: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1.

Block layouts are those of ggml-common.h. Each result equals ggml's `dequantize_row_*`
bit for bit: the quant becomes an exact float32, then one float32 multiply by the fp16
scale (and for the _1 types one float32 add of the fp16 min), in ggml's order.

Unpacking is SWAR on 64-bit words: the 16 quant bytes of a block are gathered twice in a
row, and one shift by a per-word pattern and one mask give the 32 nibbles as bytes in
output order. The codes are widened into the output in one cast and scaled in place with
the block's scale broadcast over its 32 values.

Blocks go `STEP` at a time, so that each numpy call is long. That matters for threads:
numpy releases the GIL inside a call, but every call ends by taking it back, and on two
CPUs each hand-over costs a wake-up of the other thread; with steps of 256 Ki values two
threads ran Q8_0 and Q4_0 1.6-1.7x faster than one, with steps of 64 Ki no faster at all
(measured); on a thread beside others they are four times longer (SHARED_STEP,
parallel.step). For the same reason nothing here uses np.repeat, which holds the GIL while
it copies, and the per-block scale is broadcast instead of repeated per value.
"""

from __future__ import annotations

from functools import cache

import numpy as np

from registry.gguf.types import GGMLType
from registry.quant import parallel
from registry.quant.base import KernelSpec
from registry.quant.chunked import field
from registry.quant.floats import LOW_NIBBLES, U64, f16_column, f16_columns, output

STEP = 8192  # blocks per step: 256 Ki values, 1 MiB of output (measured best of 2 Ki..32 Ki)
# Blocks per step on a thread beside others (parallel.step). Measured with two threads
# into a buffer, steps of STEP, 2x and 4x interleaved in one process (medians of 15-18
# runs of 16 Mi values each, 2 CPUs): Q4_0 5.1 / 5.6 / 5.7 GB/s, Q5_0 3.5 / 4.0 / 4.5,
# Q5_1 3.2 / 3.4 / 3.6; Q4_1 and Q8_0 the same within noise. In bench.dequant, three
# alternating runs each of STEP and 4x: new arrays on two threads, Q4_0 4.1-4.5 -> 4.6-4.7
# GB/s, Q5_0 3.3-3.4 -> 3.8-3.9.
SHARED_STEP = 4 * STEP
_TWICE = np.zeros(2, dtype=np.intp)  # each block's 16 quant bytes, gathered twice in a row


@cache
def _shift_pattern() -> np.ndarray:
    # Per 64-bit word of a block's quant bytes gathered twice: the low nibbles of words
    # 0-1, then the high nibbles of the same words (output order). Tiled over a whole step
    # so that the shift is one flat loop (a (4,) pattern would broadcast per block).
    rows = max(STEP, SHARED_STEP)  # the longest step
    return np.tile(np.array([0, 0, 4, 4], dtype=np.uint64), rows).reshape(rows, 4)


def _nibbles(blocks: np.ndarray, qs_at: int) -> np.ndarray:
    """The 16 quant bytes at `qs_at` -> 32 nibbles per block in output order (low nibbles
    first), as the bytes of four uint64 words per block, shape (k, 4)."""
    words = np.take(blocks[:, qs_at : qs_at + 16].view("V16"), _TWICE, axis=1).view(U64)
    np.right_shift(words, _shift_pattern()[: words.shape[0]], out=words)
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
    flat = words.reshape(-1)
    np.bitwise_or(flat, np.take(_spread_bits(), idx, mode="wrap"), out=flat)


def _scale(y: np.ndarray, codes: np.ndarray, d: np.ndarray, m: np.ndarray | None = None) -> None:
    """y = d * code (+ m) per block: codes (k, 32) as int8 or uint8 bytes, d and m (k,)
    float32, y (k, 32). The cast is exact (|code| < 2**24), so the values are ggml's."""
    np.copyto(y, codes, casting="unsafe")
    np.multiply(y, d[:, None], out=y)
    if m is not None:
        np.add(y, m[:, None], out=y)


def _q4_0(blocks: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    blocks = np.ascontiguousarray(blocks)
    n = blocks.shape[0]
    res = output(out, n * 32)
    y = res.reshape(n, 32)
    step = parallel.step(STEP, SHARED_STEP)
    for s in range(0, n, step):
        b = blocks[s : s + step]
        q = _nibbles(b, 2).view(np.int8)
        np.subtract(q, np.int8(8), out=q)  # nibble - 8 fits int8, and widens exactly
        _scale(y[s : s + step], q.reshape(-1, 32), f16_column(b, 0))
    return res


def _q4_1(blocks: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    blocks = np.ascontiguousarray(blocks)
    n = blocks.shape[0]
    res = output(out, n * 32)
    y = res.reshape(n, 32)
    step = parallel.step(STEP, SHARED_STEP)
    for s in range(0, n, step):
        b = blocks[s : s + step]
        dm = f16_columns(b, 0, 2)
        _scale(y[s : s + step], _nibbles(b, 4).view(np.uint8).reshape(-1, 32), dm[:, 0], dm[:, 1])
    return res


def _q5(blocks: np.ndarray, out: np.ndarray | None, *, with_min: bool) -> np.ndarray:
    blocks = np.ascontiguousarray(blocks)
    n = blocks.shape[0]
    res = output(out, n * 32)
    y = res.reshape(n, 32)
    qh_at = 4 if with_min else 2
    step = parallel.step(STEP, SHARED_STEP)
    for s in range(0, n, step):
        b = blocks[s : s + step]
        words = _nibbles(b, qh_at + 4)
        _fifth_bits(b, qh_at, words)
        if with_min:
            dm = f16_columns(b, 0, 2)
            _scale(y[s : s + step], words.view(np.uint8).reshape(-1, 32), dm[:, 0], dm[:, 1])
        else:
            q = words.view(np.int8)
            np.subtract(q, np.int8(16), out=q)
            _scale(y[s : s + step], q.reshape(-1, 32), f16_column(b, 0))
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
    step = parallel.step(STEP, SHARED_STEP)
    for s in range(0, n, step):
        b = blocks[s : s + step]
        # widened straight from the blocks (a cast of each block's 32 bytes), then scaled
        # in place: cheaper than numpy's buffered mixed-type multiply, and exact
        _scale(y[s : s + step], b[:, qs_at : qs_at + 32].view(np.int8), f16_column(b, 0))
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
