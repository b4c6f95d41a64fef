"""Lookup tables of the i-quant, ternary and FP4 kernels.

Where a table has a defining rule it is generated here (`ksigns_iq2xs`, the FP4 scale
decoders). The lattice grids of the i-quants have no closed form: ggml chose them by a
search, so they are data. `data/iq_grids.npz` holds them, extracted verbatim from the
`GGML_TABLE_BEGIN(... iq*_grid ...)` literals of ggml-common.h (ggml-org/ggml commit
d99724f2b141fed9e1a9f402213506c081433465, identical in llama.cpp), one uint8 array per
grid of shape (entries, 8) or (entries, 4): the bytes of each uint64/uint32 entry in
little-endian memory order, which is how ggml's kernels read them (`(const uint8_t
*)(grid + i)`). `iq1s_grid` bytes are int8 values -1/0/1. tests/quant/test_iquants.py
pins the content by sha256 and compares it with gguf-py's own copy.

The kernels do not use the grids directly: they gather whole rows of float32 tables
built once from grid x sign combinations (a gather per 4 or 8 outputs instead of one per
output is what makes them fast). The largest are iq2xs_table (2 MiB), iq2xxs_table and
the two nibble_quads tables (1 MiB each). All tables are built lazily on first use and
cached; nothing is read at import time.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import numpy as np

_GRIDS_FILE = Path(__file__).parent / "data" / "iq_grids.npz"
GRID_NAMES = ("iq2xxs_grid", "iq2xs_grid", "iq2s_grid", "iq3xxs_grid", "iq3s_grid", "iq1s_grid")

# ggml-common.h kvalues_iq4nl and kvalues_fp4 (E2M1 values doubled, shared by MXFP4/NVFP4)
KVALUES_IQ4NL = np.array(
    [-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113], dtype=np.int8
)
KVALUES_FP4 = np.array([0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12], dtype=np.int8)
IQ1S_DELTA = np.float32(0.125)  # IQ1S_DELTA == IQ1M_DELTA in ggml-common.h


@cache
def grids() -> dict[str, np.ndarray]:
    with np.load(_GRIDS_FILE) as npz:
        out = {name: np.ascontiguousarray(npz[name], dtype=np.uint8) for name in GRID_NAMES}
    for arr in out.values():
        arr.setflags(write=False)
    return out


@cache
def ksigns_iq2xs() -> np.ndarray:
    """The 7 stored sign bits plus an 8th that makes the count of minus signs even."""
    i = np.arange(128, dtype=np.uint8)
    parity = np.unpackbits(i[:, None], axis=1).sum(axis=1, dtype=np.uint8) & 1
    return _readonly(i | (parity << 7).astype(np.uint8))


def _sign_bits(signs: np.ndarray, width: int) -> np.ndarray:
    """(n,) sign bytes -> (n, width) bool, bit j set = element j is negative (kmask_iq2xs)."""
    return ((signs[:, None] >> np.arange(width, dtype=np.uint8)) & 1).astype(bool)


def _signed_rows(grid: np.ndarray, n_signs: int) -> np.ndarray:
    """Table[sign * len(grid) + g] = grid[g] with the sign pattern `sign` applied, float32.

    Applying the sign to the grid value before the multiply by the scale gives the same
    bits as ggml's `(scale * grid) * (+-1)`: round-to-nearest is symmetric in sign.
    """
    width = grid.shape[1]
    neg = _sign_bits(np.arange(n_signs, dtype=np.uint8), width)  # (n_signs, width)
    vals = grid.astype(np.float32)
    table = np.where(neg[:, None, :], -vals[None, :, :], vals[None, :, :])
    return np.ascontiguousarray(table.reshape(n_signs * grid.shape[0], width))


@cache
def iq2xxs_table() -> np.ndarray:
    """Row index: grid index (8 bits) | 7 stored sign bits << 8; 8 floats per row."""
    t = _signed_rows(grids()["iq2xxs_grid"], 256)
    return _readonly(t.reshape(256, 256, 8)[ksigns_iq2xs()].reshape(128 * 256, 8))


@cache
def iq2xs_table() -> np.ndarray:
    """Row index: the stored uint16 as is (grid index 9 bits | sign index 7 bits << 9)."""
    t = _signed_rows(grids()["iq2xs_grid"], 256)
    return _readonly(t.reshape(256, 512, 8)[ksigns_iq2xs()].reshape(128 * 512, 8))


@cache
def iq2s_grid_f32() -> np.ndarray:
    """iq2s_grid as float32 (1024, 8). IQ2_S stores all 8 sign bits, so a grid x sign
    table would take 8 MiB; its sign is applied afterwards by flipping float sign bits."""
    return _readonly(grids()["iq2s_grid"].astype(np.float32))


@cache
def iq3xxs_table() -> np.ndarray:
    """Row index: grid index (8 bits) | 4 sign bits << 8; 4 floats per row."""
    return _readonly(_signed_rows(grids()["iq3xxs_grid"], 16))


@cache
def iq3s_table() -> np.ndarray:
    """Row index: grid index (9 bits) | 4 sign bits << 9; 4 floats per row."""
    return _readonly(_signed_rows(grids()["iq3s_grid"], 16))


@cache
def iq1s_table() -> np.ndarray:
    """Row index: grid index (11 bits) | delta sign bit << 11; row = grid + delta.

    `grid[j] + delta` is exact in float32, so tabulating it keeps ggml's bits.
    """
    g = grids()["iq1s_grid"].view(np.int8).astype(np.float32)
    return _readonly(np.concatenate([g + IQ1S_DELTA, g - IQ1S_DELTA]))


@cache
def sign_masks8() -> np.ndarray:
    """(256, 8) uint32: 0x80000000 where bit j of the byte is set (a float sign flip)."""
    return _readonly(_sign_bits(np.arange(256, dtype=np.uint8), 8).astype(np.uint32) << 31)


@cache
def nibble_quads(values: bytes) -> np.ndarray:
    """(65536, 4) float32: row n0 | n1 << 4 | n2 << 8 | n3 << 12 holds the int8 values
    values[n0], ..., values[n3], so one gather decodes four 4-bit codes."""
    kv = np.frombuffer(values, dtype=np.int8).astype(np.float32)
    i = np.arange(1 << 16)
    return _readonly(np.stack([kv[(i >> s) & 15] for s in (0, 4, 8, 12)], axis=1))


def _readonly(a: np.ndarray) -> np.ndarray:
    a.setflags(write=False)
    return a
