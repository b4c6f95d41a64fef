"""Q2_0: four 2-bit codes per byte and an fp16 scale per 64 values (ggml type 42).

Layout (ggml-common.h `block_q2_0`): d: fp16 | qs: 16 bytes. Value j of a block is code
`(qs[j / 4] >> 2 * (j % 4)) & 3`, lowest bits first, and ggml's `dequantize_row_q2_0`
writes `((int)q - 1) * d`: the integer q - 1 in {-1, 0, 1, 2} becomes an exact float32,
then one float32 multiply by d. The same single rounding happens here.
"""

from __future__ import annotations

from functools import cache

import numpy as np

from registry.gguf.types import GGMLType
from registry.quant.base import KernelSpec
from registry.quant.chunked import chunked, f16_field, field
from registry.quant.workspace import Workspace


@cache
def _byte_values() -> np.ndarray:
    """(256, 4) float32: the four values q - 1 a byte encodes, in output order.

    One gather of a 16-byte row per byte splits the codes and widens them to float32 at
    once (numpy's take has a fast path for 16-byte items): the bit unpacking, the - 1 and
    the int -> float cast would otherwise be three passes.
    """
    codes = (np.arange(256)[:, None] >> np.arange(0, 8, 2)[None, :]) & 3
    table = (codes - 1).astype(np.float32)
    table.setflags(write=False)
    return table


def _q2_0(blocks: np.ndarray, out: np.ndarray, ws: Workspace) -> None:
    k = blocks.shape[0]
    d = f16_field(blocks, 0)  # (k, 1)
    idx = ws.get("idx", (k * 16,), np.intp)
    np.copyto(idx, field(blocks, 2, 16, ws).reshape(-1), casting="unsafe")
    # straight into the output: mode="wrap" lets take write into `out` unbuffered; every
    # index is a byte, in range by construction
    np.take(_byte_values(), idx, axis=0, out=out.reshape(k * 16, 4), mode="wrap")
    np.multiply(out, d, out=out)


KERNELS: dict[GGMLType, KernelSpec] = {
    GGMLType.Q2_0: KernelSpec(chunked(_q2_0, GGMLType.Q2_0), ((0, 1, 2),)),
}
