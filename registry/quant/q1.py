"""Q1_0: one sign bit per value and an fp16 scale per 128 values (ggml type 41).

ggml's `dequantize_row_q1_0` writes `bit ? d : -d`. Negation is a flip of the float's
sign bit, so it is done as exactly that (an XOR on the bits), which keeps the result
identical even for a NaN scale, where a multiply by -1 would keep the NaN's sign.
"""

from __future__ import annotations

from functools import cache

import numpy as np

from registry.gguf.types import GGMLType
from registry.quant.base import KernelSpec
from registry.quant.chunked import chunked, f16_field, field, take_rows
from registry.quant.workspace import Workspace


@cache
def _negate_masks() -> np.ndarray:
    """(256, 8) uint32: the float sign bit where bit j of the byte is clear (value -d)."""
    bits = (np.arange(256, dtype=np.uint8)[:, None] >> np.arange(8, dtype=np.uint8)) & 1
    masks = (1 - bits).astype(np.uint32) << 31
    masks.setflags(write=False)
    return masks


def _q1_0(blocks: np.ndarray, out: np.ndarray, ws: Workspace) -> None:
    """d: f16 | qs: 16 bytes, bit j % 8 of byte j // 8 the sign of value j (LSB first)."""
    k = blocks.shape[0]
    d_bits = f16_field(blocks, 0).view(np.uint32)  # (k, 1)
    masks = take_rows(_negate_masks(), field(blocks, 2, 16, ws), ws).reshape(k, 128)
    np.bitwise_xor(masks, d_bits, out=out.view(np.uint32))


KERNELS: dict[GGMLType, KernelSpec] = {
    GGMLType.Q1_0: KernelSpec(chunked(_q1_0, GGMLType.Q1_0), ((0, 1, 2),)),
}
