"""MXFP4 and NVFP4: 4-bit E2M1 values with a shared power-of-two (E8M0) or E4M3 scale.

Bit for bit with ggml's `dequantize_row_mxfp4` / `dequantize_row_nvfp4`: ggml keeps the
E2M1 values doubled as int8 (`kvalues_mxfp4`) and halves the scale instead, so every
output is one float32 product `kvalue * scale`, which is what is computed here.
"""

from __future__ import annotations

from functools import cache

import numpy as np

from registry.gguf.types import GGMLType
from registry.quant import tables
from registry.quant.base import KernelSpec
from registry.quant.chunked import chunked, field, nibble_values, take_rows
from registry.quant.workspace import Workspace


@cache
def e8m0_half_table() -> np.ndarray:
    """ggml_e8m0_to_fp32_half for every byte: 2^(e - 128) built from its bits.

    ggml returns 2^-128 and 2^-127 as the denormals 0x00200000 << e, and does not decode
    255 as NaN: it is 2^127.
    """
    e = np.arange(256, dtype=np.uint32)
    bits = np.where(e < 2, np.uint32(0x00200000) << e, (e - 1) << 23).astype(np.uint32)
    table = bits.view(np.float32)
    table.setflags(write=False)
    return table


@cache
def ue4m3_half_table() -> np.ndarray:
    """ggml_ue4m3_to_fp32 for every byte: unsigned E4M3 (bias 7) times 0.5.

    As in ggml the top bit is ignored (the format is unsigned), 0x7F decodes to 0 instead
    of NaN, and so does 0x00; 0xFF is therefore 480 * 0.5. Every value is exact in float32.
    """
    x = np.arange(256, dtype=np.int32)
    exp = (x >> 3) & 0xF
    man = (x & 7).astype(np.float32)
    sub = np.ldexp(man, np.full(256, -9, dtype=np.int32))
    norm = np.ldexp(np.float32(1) + man / np.float32(8), exp - 7)
    raw = np.where(exp == 0, sub, norm).astype(np.float32) * np.float32(0.5)
    table = np.where((x == 0) | (x == 0x7F), np.float32(0), raw).astype(np.float32)
    table.setflags(write=False)
    return table


def _quads() -> np.ndarray:
    return tables.nibble_quads(tables.KVALUES_FP4.tobytes())


def _mxfp4(blocks: np.ndarray, out: np.ndarray, ws: Workspace) -> None:
    """e: E8M0 | qs: 16 bytes, low nibbles the first 16 values, high nibbles the last."""
    d = take_rows(e8m0_half_table(), field(blocks, 0, 1))  # (k, 1)
    np.multiply(nibble_values(_quads(), field(blocks, 1, 16, ws), 16, ws), d, out=out)


def _nvfp4(blocks: np.ndarray, out: np.ndarray, ws: Workspace) -> None:
    """d: 4 UE4M3 scales, one per 16 values | qs: 4 x 8 bytes, each sub-block's low
    nibbles its first 8 values, high nibbles its last 8."""
    k = blocks.shape[0]
    d = take_rows(ue4m3_half_table(), field(blocks, 0, 4))  # (k, 4)
    values = nibble_values(_quads(), field(blocks, 4, 32, ws), 8, ws).reshape(k, 4, 16)
    np.multiply(values, d[:, :, None], out=out.reshape(k, 4, 16))


# both are all single bytes: nothing to swap for a big-endian file
KERNELS: dict[GGMLType, KernelSpec] = {
    GGMLType.MXFP4: KernelSpec(chunked(_mxfp4, GGMLType.MXFP4)),
    GGMLType.NVFP4: KernelSpec(chunked(_nvfp4, GGMLType.NVFP4)),
}
