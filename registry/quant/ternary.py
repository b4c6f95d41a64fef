"""TQ1_0 and TQ2_0: ternary weights {-1, 0, 1} (TQ2_0 codes also allow 2) times an fp16 d.

Bit for bit with ggml's `dequantize_row_tq1_0` / `dequantize_row_tq2_0`: each output is
the single float32 product `(float)(q - 1) * d`. The codes q are extracted as bytes with
ggml's integer arithmetic, and q - 1 converts to float32 exactly.

TQ1_0 stores 5 (or 4) base-3 digits per byte as a fixed-point fraction of 256; ggml reads
digit n of byte b as `((uint16)(uint8)(b * 3^n) * 3) >> 8`, wrap-around included. Each
byte is gathered once per digit into output order (np.take, which releases the GIL; the
structured-field copies this replaced did not let two threads run: 1.25x, now 1.6x).
"""

from __future__ import annotations

import numpy as np

from registry.gguf.types import GGMLType
from registry.quant.base import KernelSpec
from registry.quant.chunked import chunked, f16_field
from registry.quant.workspace import Workspace

# TQ1_0 as 13 items of 4 bytes: items 0-7 are qs[0:32], 8-11 qs[32:48], 12 is qh. Digit n
# of qs[m] (m < 32) is output 32 n + m, of qs[32 + m] output 160 + 16 n + m, of qh[m] output
# 240 + 4 n + m: each item gathered once per digit it holds, in output order, and each
# byte multiplied by the power of 3 of the digit its place stands for.
_TQ1_PICKS = np.array([*range(8)] * 5 + [*range(8, 12)] * 5 + [12] * 4, dtype=np.intp)
_TQ1_POWERS = np.array(
    [3**n for n in range(5) for _ in range(32)]
    + [3**n for n in range(5) for _ in range(16)]
    + [3**n for n in range(4) for _ in range(4)],
    dtype=np.uint8,
)


def _tq1_0(blocks: np.ndarray, out: np.ndarray, ws: Workspace) -> None:
    """qs: 32 + 16 bytes of 5 digits | qh: 4 bytes of 4 digits | d: f16 at offset 52."""
    k = blocks.shape[0]
    q = ws.get("codes", (k, 64), np.dtype("V4"))
    np.take(blocks[:, 0:52].view("V4"), _TQ1_PICKS, axis=1, out=q, mode="wrap")
    codes = q.view(np.uint8)  # (k, 256)
    np.multiply(codes, _TQ1_POWERS, out=codes)  # wraps mod 256 like ggml's uint8_t product
    # ((uint16) q * 3) >> 8 is 0 below 86, 1 below 171, else 2; minus 1 that is
    # (q >= 86) - (q < 171)
    up = np.greater_equal(codes, 86, out=ws.get("up", (k, 256), np.bool_))
    down = np.less(codes, 171, out=ws.get("down", (k, 256), np.bool_))
    np.subtract(up.view(np.int8), down.view(np.int8), out=codes.view(np.int8))
    np.copyto(out, codes.view(np.int8), casting="unsafe")
    np.multiply(out, f16_field(blocks, 52), out=out)


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
