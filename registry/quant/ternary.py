"""TQ1_0 and TQ2_0: ternary weights {-1, 0, 1} (TQ2_0 codes also allow 2) times an fp16 d.

Bit for bit with ggml's `dequantize_row_tq1_0` / `dequantize_row_tq2_0`: each output is
the single float32 product `(float)(q - 1) * d`. The codes q are extracted as bytes with
ggml's integer arithmetic, and q - 1 converts to float32 exactly.

TQ1_0 stores 5 (or 4) base-3 digits per byte as a fixed-point fraction of 256; ggml reads
digit n of byte b as `((uint16)(uint8)(b * 3^n) * 3) >> 8`, wrap-around included.
"""

from __future__ import annotations

import numpy as np

from registry.gguf.types import GGMLType
from registry.quant.base import KernelSpec
from registry.quant.chunked import Workspace, chunked, column, f16_field, field


def _tq1_0(blocks: np.ndarray, out: np.ndarray, ws: Workspace) -> None:
    """qs: 32 + 16 bytes of 5 digits | qh: 4 bytes of 4 digits | d: f16 at offset 52.

    Digit n of byte m of a group lands at n * group_len + m. The digits are worked out
    for all bytes at once on contiguous uint8 arrays, then moved into output order.
    """
    k = blocks.shape[0]
    d = f16_field(blocks, 52)
    b = field(blocks, 0, 52, ws)
    codes = ws.get("codes", (k, 256), np.uint8)
    q = ws.get("q", b.shape, np.uint8)
    ge1 = ws.get("ge1", b.shape, np.bool_)
    ge2 = ws.get("ge2", b.shape, np.bool_)
    for n, p3 in enumerate((1, 3, 9, 27, 81)):
        np.multiply(b, np.uint8(p3), out=q)  # wraps mod 256 like ggml's uint8_t product
        # ((uint16) q * 3) >> 8 is 0, 1 or 2: q >= 86 adds one, q >= 171 another
        np.greater_equal(q, 86, out=ge1)
        np.greater_equal(q, 171, out=ge2)
        np.add(ge1.view(np.uint8), ge2.view(np.uint8), out=q)
        column(codes, 32 * n, 32)[...] = column(q, 0, 32)
        column(codes, 160 + 16 * n, 16)[...] = column(q, 32, 16)
        if n < 4:
            column(codes, 240 + 4 * n, 4)[...] = column(q, 48, 4)
    _scale_codes(codes, d, out)


# TQ2_0 codes, per 32-byte half h of qs: bits 2l..2l+1 of byte m -> value 128h + 32l + m.
# Each half is gathered four times in a row (one copy per l), and one shift by a per-word
# pattern then one mask pull all codes down in output order, in flat numpy loops.
_TQ2_PICKS = np.array([0, 0, 0, 0, 1, 1, 1, 1], dtype=np.intp)
_TQ2_SHIFTS = np.repeat(np.array([0, 2, 4, 6] * 2, dtype=np.uint64), 4)


def _tq2_0(blocks: np.ndarray, out: np.ndarray, ws: Workspace) -> None:
    """qs: 2 x 32 bytes of four 2-bit codes (bits 2l of byte m -> value 32 l + m) | d: f16."""
    d = f16_field(blocks, 64)
    words = np.take(blocks[:, :64].view("V32"), _TQ2_PICKS, axis=1).view("<u8")  # (k, 32)
    np.right_shift(words, _TQ2_SHIFTS, out=words)
    np.bitwise_and(words, np.uint64(0x0303030303030303), out=words)
    _scale_codes(words.view(np.uint8), d, out)


def _scale_codes(codes: np.ndarray, d: np.ndarray, out: np.ndarray) -> None:
    """out = (float)(code - 1) * d, ggml's expression, for codes 0..3 in output order."""
    np.subtract(codes, np.uint8(1), out=codes)  # wraps 0 to 255, which is -1 as int8
    np.copyto(out, codes.view(np.int8), casting="unsafe")
    np.multiply(out, d, out=out)


KERNELS: dict[GGMLType, KernelSpec] = {
    GGMLType.TQ1_0: KernelSpec(chunked(_tq1_0, GGMLType.TQ1_0), ((52, 1, 2),)),
    GGMLType.TQ2_0: KernelSpec(chunked(_tq2_0, GGMLType.TQ2_0), ((64, 1, 2),)),
}
