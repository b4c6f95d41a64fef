"""Plumbing shared by the kernels of iquants, ternary, fp4 and q1: chunking, field reads,
gathers.

Kernels run over at most about `CHUNK_ELEMENTS` outputs at a time, so that their
temporaries (index arrays, gathered rows) stay a bounded multiple of the chunk whatever the
tensor size, and small enough to be reused from the CPU caches between numpy passes.

numpy runs one inner loop per row of a 2-D operand: on a (k, 16) slice of 18-byte blocks
that loop overhead costs more than the work. So fields are read through `column`, a 1-D
view whose items are the field's bytes (one loop for all blocks), and everything after
that works on contiguous arrays. The big temporaries come from a `Workspace` lent to the
kernel call (workspace.py), so that the chunks, and the next call, reuse the same memory.

Bit tricks that treat uint32/uint64 words as lanes of bytes (nibble_values, TQ2_0) read
and write those words through little-endian views and assume a little-endian host, like
the rest of this package's numpy views.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache

import numpy as np

from registry.gguf.types import TENSOR_TYPES, GGMLType
from registry.quant.base import Kernel
from registry.quant.workspace import Workspace, lend_workspace

CHUNK_ELEMENTS = 1 << 20  # 4 MiB of output; measured best between 2^17 and 2^22


# impl(blocks, out, ws): dequantize (k, type_size) C-contiguous uint8 blocks into out, a
# (k, block_size) float32 view of the result, with scratch arrays from ws.
BlockImpl = Callable[[np.ndarray, np.ndarray, Workspace], None]


def chunked(impl: BlockImpl, ggml_type: GGMLType) -> Kernel:
    """A kernel running `impl` chunk by chunk of about `chunk_elements` values; it can write
    into a caller's `out` (a contiguous float32 array of n_blocks * block_size values),
    saving a copy."""
    info = TENSOR_TYPES[ggml_type]
    block_size, type_size = info.block_size, info.type_size

    def kernel(
        blocks: np.ndarray, out: np.ndarray | None = None, *, chunk_elements: int = CHUNK_ELEMENTS
    ) -> np.ndarray:
        if blocks.ndim != 2 or blocks.shape[1] != type_size or blocks.dtype != np.uint8:
            raise ValueError(f"{info.name} blocks must be uint8 of shape (n, {type_size})")
        blocks = np.ascontiguousarray(blocks)
        n_blocks = blocks.shape[0]
        n = n_blocks * block_size
        if out is None:
            out = np.empty(n, dtype=np.float32)
        elif out.shape != (n,) or out.dtype != np.float32 or not out.flags.c_contiguous:
            raise ValueError(f"out must be a contiguous float32 array of shape ({n},)")
        values = out.reshape(n_blocks, block_size)
        step = max(1, chunk_elements // block_size)
        # Inf and NaN scales are data, not errors: ggml computes through them silently
        with lend_workspace() as ws, np.errstate(all="ignore"):
            for start in range(0, n_blocks, step):
                stop = min(start + step, n_blocks)
                impl(blocks[start:stop], values[start:stop], ws)
        return out

    kernel.__name__ = getattr(impl, "__name__", "kernel").lstrip("_")
    kernel.__doc__ = impl.__doc__
    return kernel


@cache
def _field_dtype(offset: int, nbytes: int, itemsize: int) -> np.dtype:
    # made once: building a structured dtype costs about a microsecond, per call otherwise
    return np.dtype({"names": ["v"], "formats": [f"V{nbytes}"], "offsets": [offset], "itemsize": itemsize})


def column(rows: np.ndarray, offset: int, nbytes: int) -> np.ndarray:
    """Bytes [offset, offset + nbytes) of every row of a C-contiguous (k, n) uint8 array,
    as a 1-D view of k void items: it can be read or assigned in a single numpy loop."""
    return rows.reshape(-1).view(_field_dtype(offset, nbytes, rows.shape[1]))["v"]


def field(rows: np.ndarray, offset: int, nbytes: int, ws: Workspace | None = None) -> np.ndarray:
    """A contiguous (k, nbytes) uint8 copy of bytes [offset, offset + nbytes) of every row
    (workspace memory when a workspace is given: use it for the big fields)."""
    src = column(rows, offset, nbytes)
    if ws is None:
        return np.ascontiguousarray(src).view(np.uint8).reshape(-1, nbytes)
    dst = ws.get(f"field@{offset}", (rows.shape[0], nbytes), np.uint8)
    np.copyto(dst.view(f"V{nbytes}")[:, 0], src)  # void items copied whole, one loop
    return dst


def f16_to_f32(half: np.ndarray) -> np.ndarray:
    """fp16 -> float32 as ggml's GGML_FP16_TO_FP32 does it, NaN payloads included.

    numpy keeps a signalling NaN signalling; ggml's conversion ends in a float multiply,
    which quiets it. Every other value converts the same way in both.
    """
    f = half.astype(np.float32)
    nan = np.isnan(f)
    if nan.any():
        bits = f.view(np.uint32)
        bits[nan] |= np.uint32(0x00400000)
    return f


def f16_field(blocks: np.ndarray, offset: int) -> np.ndarray:
    """The little-endian fp16 at `offset` of every block, as float32 of shape (k, 1)."""
    return f16_to_f32(field(blocks, offset, 2).view("<f2"))


def u16_field(blocks: np.ndarray, offset: int, count: int) -> np.ndarray:
    """`count` little-endian uint16 from `offset` of every block, shape (k, count)."""
    return field(blocks, offset, 2 * count).view("<u2")


def u32_field(blocks: np.ndarray, offset: int, count: int) -> np.ndarray:
    """`count` little-endian uint32 from `offset` of every block, shape (k, count)."""
    return field(blocks, offset, 4 * count).view("<u4")


def bit_fields(
    x: np.ndarray, shifts: tuple[int, ...], mask: int, extra: np.ndarray | None = None
) -> np.ndarray:
    """(x[..., None] >> shifts) & mask (| extra[..., None]), shape x.shape + (len(shifts),).

    Built one shift at a time into a strided slice, which numpy walks in one loop; the
    broadcasting expression would run one tiny inner loop per element of x.
    """
    out = np.empty((*x.shape, len(shifts)), dtype=x.dtype)
    for j, shift in enumerate(shifts):
        field_j = out[..., j]
        np.bitwise_and(x >> shift, mask, out=field_j)
        if extra is not None:
            np.bitwise_or(field_j, extra, out=field_j)
    return out


def take_rows(table: np.ndarray, idx: np.ndarray, ws: Workspace | None = None) -> np.ndarray:
    """table[idx] along axis 0, shape idx.shape + table.shape[1:].

    Indices are converted to intp first: np.take's internal conversion of small integer
    index types is several times slower than the gather itself. With a workspace, the
    indices and the result live in its "idx" and "rows" arrays.
    """
    shape = idx.shape + table.shape[1:]
    if ws is None:
        rows = np.take(table, idx.reshape(-1).astype(np.intp, copy=False), axis=0)
        return rows.reshape(shape)
    flat = ws.get("idx", (idx.size,), np.intp)
    np.copyto(flat, idx.reshape(-1), casting="unsafe")
    rows = ws.get("rows", (idx.size, *table.shape[1:]), table.dtype)
    # mode="wrap" lets take write straight into `rows` (with "raise" it buffers the
    # result); every index is in range by construction
    np.take(table, flat, axis=0, out=rows, mode="wrap")
    return rows.reshape(shape)


def gather_scaled(
    table: np.ndarray,
    idx: np.ndarray,
    scale: np.ndarray,
    out: np.ndarray,
    ws: Workspace,
    *,
    signed_table: bool = False,
) -> None:
    """out = table[idx] rows times a per-group scale, with ggml's one float32 rounding.

    idx: (k, rows) row indices into table (n, width); scale: (k, groups), each scale
    covering rows * width / groups consecutive outputs; out: (k, rows * width).

    signed_table: the table holds grid values with their sign folded in, where ggml
    multiplies `scale * grid` by -1.f or 1.f afterwards. The bits agree except when the
    scale is NaN: the product then keeps the NaN's sign while ggml's flips it, so those
    (rare) groups are redone as ggml's NaN with the value's sign applied.
    """
    k = idx.shape[0]
    groups = scale.shape[1]
    grouped = take_rows(table, idx, ws).reshape(k, groups, -1)
    out_groups = out.reshape(k, groups, -1)
    np.multiply(grouped, scale[:, :, None], out=out_groups)
    if signed_table:
        nan = np.isnan(scale)
        if nan.any():
            sign = grouped[nan].view(np.uint32) & np.uint32(0x80000000)
            bits = scale[nan].view(np.uint32)[:, None] ^ sign
            out_groups[nan] = bits.view(np.float32)


_LOW_NIBBLES = np.uint32(0x0F0F0F0F)


def nibble_values(table: np.ndarray, qs: np.ndarray, group_bytes: int, ws: Workspace) -> np.ndarray:
    """Look up the 4-bit codes of qs in ggml's order, 4 values per gathered row.

    qs: (k, m) contiguous bytes, made of groups of `group_bytes` (a multiple of 4) whose
    values ggml writes as all low nibbles, then all high nibbles. table: a
    tables.nibble_quads table. Returns (k, 2 * m) float32 (workspace memory).
    """
    k, m = qs.shape
    words = qs.reshape(-1).view("<u4")
    void = f"V{group_bytes}"
    # each group's low-nibble words, then its high-nibble words, as one contiguous array
    ordered = ws.get("ordered", (k * m // group_bytes, 2 * group_bytes), np.uint8)
    tmp = ws.get("tmp", words.shape, np.uint32)
    np.bitwise_and(words, _LOW_NIBBLES, out=tmp)
    column(ordered, 0, group_bytes)[...] = tmp.view(void)
    np.right_shift(words, 4, out=tmp)
    np.bitwise_and(tmp, _LOW_NIBBLES, out=tmp)
    column(ordered, group_bytes, group_bytes)[...] = tmp.view(void)
    # pack the four nibbles of a word (one per byte) into a 16-bit row index
    w = ordered.reshape(-1).view("<u4")
    a = ws.get("pack_a", w.shape, np.uint32)
    b = ws.get("pack_b", w.shape, np.uint32)
    np.right_shift(w, 4, out=a)
    np.bitwise_or(a, w, out=a)
    np.right_shift(a, 8, out=b)
    np.bitwise_and(b, 0xFF00, out=b)
    np.bitwise_and(a, 0xFF, out=a)
    np.bitwise_or(a, b, out=a)
    return take_rows(table, a, ws).reshape(k, 2 * m)
