"""Dequantize a ggml tensor's raw bytes to float32: whole, or streamed in row chunks.

Every input is checked before anything is allocated: the type must have a kernel, the
element count must be a positive whole number of blocks, and the byte count must be
exactly what that many blocks take. Data may be bytes, a memoryview or a uint8 array
(a numpy memmap slice works and is read only as far as each chunk needs).

Big tensors are split between threads (`registry.quant.parallel`), each filling its own
ranges of blocks of the one result; the values do not depend on the thread count.

Both entry points can write into a caller's float32 array (`out=`) instead of a new one.
A new array of many megabytes costs the kernel's page faults on its first write, which
on a VM can take longer than the dequantization itself; a caller that goes through many
tensors (the verifier) reuses one buffer and pays them once. A new result that would be
fresh memory anyway starts on a huge-page boundary (workspace.new_values), which makes
those faults fewer.

Memory kept between calls: the kernels borrow their scratch arrays from a pool
(workspace.py) and leave them there for the next call, so that a call does not fault in
fresh scratch memory every time: one workspace per CPU at most (8 at most), each up to
10 MiB for one type and 20 MiB if it served every type. The first call also settles
glibc's allocator so that smaller temporaries are reused too (settle_allocator).
"""

from __future__ import annotations

import inspect
import math
import operator
from collections.abc import Iterator, Sequence
from functools import cache
from types import MappingProxyType

import numpy as np

from registry.gguf.types import TENSOR_TYPES, GGMLType, TensorTypeInfo
from registry.quant import floats, fp4, iquants, kquants, legacy, parallel, q1, q2, ternary, workspace
from registry.quant.base import BadTensorData, Kernel, KernelSpec, UnsupportedType

DEFAULT_MAX_BYTES = 256 * 1024 * 1024

Data = bytes | bytearray | memoryview | np.ndarray


def _merge(*tables: dict[GGMLType, KernelSpec]) -> MappingProxyType[GGMLType, KernelSpec]:
    merged: dict[GGMLType, KernelSpec] = {}
    for table in tables:
        for t, spec in table.items():
            if t in merged:
                raise RuntimeError(f"two kernels for {t.name}")
            merged[t] = spec
    return MappingProxyType(merged)


@cache
def kernels() -> MappingProxyType[GGMLType, KernelSpec]:
    """Every kernel, by type: the union of the kernel modules' KERNELS tables."""
    return _merge(
        floats.KERNELS,
        legacy.KERNELS,
        kquants.KERNELS,
        iquants.KERNELS,
        fp4.KERNELS,
        ternary.KERNELS,
        q1.KERNELS,
        q2.KERNELS,
    )


def supported_types() -> tuple[GGMLType, ...]:
    """The types `dequantize` accepts, in id order."""
    return tuple(sorted(kernels()))


def _resolve(ggml_type: int | GGMLType) -> tuple[TensorTypeInfo, KernelSpec]:
    try:
        if isinstance(ggml_type, bool):
            raise TypeError("a bool is not a type id")
        t = GGMLType(operator.index(ggml_type))
    except (TypeError, ValueError):
        raise UnsupportedType(f"unknown ggml type {ggml_type!r}", ggml_type=_int_or_none(ggml_type)) from None
    info = TENSOR_TYPES[t]
    if info.removed:
        raise UnsupportedType(
            f"{t.name} was removed from ggml; files using it cannot be read", ggml_type=int(t)
        )
    spec = kernels().get(t)
    if spec is None:
        raise UnsupportedType(f"no dequantization kernel for {t.name}", ggml_type=int(t))
    return info, spec


def _int_or_none(value: object) -> int | None:
    try:
        return operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        return None


def _as_bytes(data: Data, ggml_type: int) -> np.ndarray:
    """A 1-D uint8 view of `data`, copying only when its memory is not contiguous."""
    if isinstance(data, np.ndarray):
        if data.dtype.hasobject:
            raise BadTensorData("tensor data must be raw bytes, not an object array", ggml_type=ggml_type)
        arr = data if data.dtype == np.uint8 else np.ascontiguousarray(data).view(np.uint8)
        return arr.reshape(-1)
    if isinstance(data, bytes | bytearray | memoryview):
        try:
            return np.frombuffer(data, dtype=np.uint8)
        except (ValueError, TypeError, BufferError):
            return np.ascontiguousarray(np.asarray(memoryview(data))).view(np.uint8).reshape(-1)
    raise BadTensorData(
        f"tensor data must be bytes, a memoryview or a uint8 array, not {type(data).__name__}",
        ggml_type=ggml_type,
    )


def _count(n: object, what: str, ggml_type: int) -> int:
    if isinstance(n, bool):
        raise BadTensorData(f"{what} must be an integer, not bool", ggml_type=ggml_type)
    try:
        value = operator.index(n)  # type: ignore[arg-type]
    except TypeError:
        raise BadTensorData(
            f"{what} must be an integer, not {type(n).__name__}", ggml_type=ggml_type
        ) from None
    if value <= 0:
        raise BadTensorData(f"{what} must be positive, got {value}", ggml_type=ggml_type)
    return value


def _check(info: TensorTypeInfo, n_elements: int, n_bytes: int) -> int:
    """The block count of `n_elements` values stored in `n_bytes`, or BadTensorData."""
    t = int(info.type)
    if n_elements % info.block_size:
        raise BadTensorData(
            f"{n_elements} elements is not a whole number of {info.name} blocks of {info.block_size}",
            ggml_type=t,
        )
    n_blocks = n_elements // info.block_size
    want = n_blocks * info.type_size
    if n_bytes != want:
        raise BadTensorData(
            f"{info.name} tensor of {n_elements} elements takes {want} bytes, got {n_bytes}", ggml_type=t
        )
    return n_blocks


@cache
def _writes_into(fn: Kernel) -> bool:
    try:
        return "out" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def _to_little_endian(blocks: np.ndarray, fields: tuple[tuple[int, int, int], ...]) -> np.ndarray:
    swapped = blocks.copy()
    for offset, count, size in fields:
        if size == 1:
            continue
        word = np.dtype(f"u{size}")
        swapped[:, offset : offset + count * size].view(word).byteswap(inplace=True)
    return swapped


def _run(
    spec: KernelSpec, blocks: np.ndarray, out: np.ndarray, big_endian: bool, threads: int, step_bytes: int
) -> None:
    """Dequantize `blocks` (n, type_size) into `out`, in ranges of bounded size (each a
    separate kernel call: kernels slice further to stay in cache) on `threads` threads."""
    per_block = out.size // blocks.shape[0]
    into = _writes_into(spec.fn)
    workspace.settle_allocator()

    def work(start: int, stop: int) -> None:
        part = blocks[start:stop]
        if big_endian and spec.swap_fields:
            part = _to_little_endian(part, spec.swap_fields)
        dest = out[start * per_block : stop * per_block]
        if into:
            spec.fn(part, out=dest)  # type: ignore[call-arg]
        else:
            values = spec.fn(part)
            if values.shape != dest.shape:
                raise RuntimeError(f"kernel returned {values.shape}, expected {dest.shape}")
            dest[...] = values

    parallel.run_blocks(work, blocks.shape[0], blocks.shape[1], threads, step_bytes)


def _check_out(out: object, at_least: int, raw: np.ndarray, *, exact: bool) -> np.ndarray:
    """`out` as a flat float32 view, or ValueError: it must be a writeable, C-contiguous
    float32 ndarray of `at_least` values (exactly that many if `exact`), and must not
    share memory with the tensor's bytes (the kernels read blocks after writing values)."""
    if not isinstance(out, np.ndarray):
        raise ValueError(f"out must be a numpy array, not {type(out).__name__}")
    if out.dtype != np.float32 or not out.flags.c_contiguous or not out.flags.writeable:
        raise ValueError("out must be a writeable, C-contiguous float32 array")
    if out.size < at_least or (exact and out.size != at_least):
        want = f"{at_least}" if exact else f"at least {at_least}"
        raise ValueError(f"out holds {out.size} values, {want} needed")
    if np.may_share_memory(out, raw):
        raise ValueError("out must not overlap the tensor data")
    return out.reshape(-1)


def dequantize(
    data: Data,
    ggml_type: int | GGMLType,
    n_elements: int,
    *,
    big_endian: bool = False,
    threads: int | None = None,
    out: np.ndarray | None = None,
    step_bytes: int = parallel.STEP_BYTES,
) -> np.ndarray:
    """The `n_elements` values of a tensor of type `ggml_type`, as a 1-D float32 array.

    `big_endian` says the data comes from a big-endian GGUF file, whose multi-byte fields
    are stored byte-swapped. `threads` splits the blocks between that many threads
    writing into the one result (the values are the same for any count); None picks
    `parallel.default_threads(n_elements)`: one per CPU, one for small tensors.
    `out`, a writeable C-contiguous float32 array of `n_elements` values (any shape),
    receives the values and is returned instead of a new array. `step_bytes` bounds the
    input of one task (the threads take tasks in turn; each holds its temporaries).
    Raises UnsupportedType or BadTensorData, never returns garbage; ValueError for a bad
    `threads`, `out` or `step_bytes`.
    """
    info, spec = _resolve(ggml_type)
    t = int(info.type)
    n = _count(n_elements, "element count", t)
    raw = _as_bytes(data, t)
    n_blocks = _check(info, n, raw.size)
    workers = parallel.thread_count(threads, n)
    step_bytes = parallel.step_bytes_checked(step_bytes)
    if out is None:
        result = dest = workspace.new_values(n)
    else:
        result, dest = out, _check_out(out, n, raw, exact=True)
    _run(spec, raw.reshape(n_blocks, info.type_size), dest, big_endian, workers, step_bytes)
    return result


class TensorRows:
    """A tensor's bytes, checked and seen as rows of `row_len` values (GGUF's ne0): what
    `dequantize_chunks` streams, and what a caller that hands pieces of rows to threads of
    its own (the verifier) dequantizes a piece at a time. Made by `tensor_rows`."""

    __slots__ = ("info", "n_rows", "raw", "row_bytes", "row_len", "spec")

    def __init__(self, raw: np.ndarray, info: TensorTypeInfo, spec: KernelSpec, row_len: int, n_rows: int) -> None:
        self.raw, self.info, self.spec = raw, info, spec
        self.row_len, self.n_rows = row_len, n_rows
        self.row_bytes = row_len // info.block_size * info.type_size

    def pieces(self, max_bytes: int) -> range:
        """First rows of pieces of whole rows, each at most `max_bytes` of float32 but never
        less than one row: piece i is rows [r[i], min(r[i] + r.step, n_rows))."""
        if max_bytes <= 0:
            raise ValueError(f"max_bytes must be positive, got {max_bytes}")
        return range(0, self.n_rows, max(1, max_bytes // (self.row_len * 4)))

    def dequantize(
        self,
        first: int,
        count: int,
        *,
        big_endian: bool = False,
        threads: int | None = None,
        out: np.ndarray | None = None,
        step_bytes: int = parallel.STEP_BYTES,
    ) -> np.ndarray:
        """Rows [first, first + count) as float32 of shape (count, row_len), in `out` (a
        writeable C-contiguous float32 array of exactly count * row_len values) if given.
        `threads` and `step_bytes` as in `dequantize` (None: the default for the piece's size)."""
        if not 0 <= first <= first + count <= self.n_rows or count <= 0:
            raise ValueError(f"rows [{first}, {first + count}) are not inside the tensor's {self.n_rows}")
        part = self.raw[first * self.row_bytes : (first + count) * self.row_bytes]
        n = count * self.row_len
        piece = workspace.new_values(n) if out is None else _check_out(out, n, self.raw, exact=True)
        workers = parallel.thread_count(threads, n)
        step_bytes = parallel.step_bytes_checked(step_bytes)
        _run(self.spec, part.reshape(-1, self.info.type_size), piece, big_endian, workers, step_bytes)
        return piece.reshape(count, self.row_len)


def tensor_rows(data: Data, ggml_type: int | GGMLType, shape: Sequence[int]) -> TensorRows:
    """`data` checked as a tensor of `ggml_type` and `shape` (GGUF order, ne0 first: the row
    length), as rows. Raises UnsupportedType or BadTensorData, as `dequantize` does, and
    also for a row length that is not a whole number of blocks."""
    info, spec = _resolve(ggml_type)
    t = int(info.type)
    if not isinstance(shape, Sequence) or isinstance(shape, str | bytes):
        raise BadTensorData(
            f"shape must be a sequence of dimensions, not {type(shape).__name__}", ggml_type=t
        )
    dims = [_count(d, "dimension", t) for d in shape]
    if not dims:
        raise BadTensorData("a tensor needs at least one dimension", ggml_type=t)
    row_len = dims[0]
    n = math.prod(dims)
    raw = _as_bytes(data, t)
    _check(info, n, raw.size)
    if row_len % info.block_size:
        raise BadTensorData(
            f"row length {row_len} is not a whole number of {info.name} blocks of {info.block_size}",
            ggml_type=t,
        )
    return TensorRows(raw, info, spec, row_len, n // row_len)


def dequantize_chunks(
    data: Data,
    ggml_type: int | GGMLType,
    shape: Sequence[int],
    *,
    big_endian: bool = False,
    max_bytes: int = DEFAULT_MAX_BYTES,
    threads: int | None = None,
    out: np.ndarray | None = None,
    step_bytes: int = parallel.STEP_BYTES,
) -> Iterator[tuple[int, np.ndarray]]:
    """Stream a tensor as (first_row, float32 array of shape (rows, shape[0])) pieces.

    `shape` is in GGUF order (ne0 first: ne0 is the row length). Each piece holds whole
    rows, at most `max_bytes` of float32 but never less than one row. Each piece is
    dequantized by `threads` threads as in `dequantize` (None: the default for a piece's
    size), in tasks of at most `step_bytes` of input. All checks run here, before the first
    piece is asked for.

    With `out` (a writeable C-contiguous float32 array holding at least one row), every
    piece is written into it and yielded as a view of its first values: a piece is then
    valid only until the next one is asked for, pieces are also bounded by its size, and
    no memory is allocated per piece.
    """
    rows = tensor_rows(data, ggml_type, shape)
    starts = rows.pieces(max_bytes)
    buffer = None
    if out is not None:
        buffer = _check_out(out, rows.row_len, rows.raw, exact=False)
        starts = range(0, rows.n_rows, min(starts.step, buffer.size // rows.row_len))
    if threads is not None:
        threads = parallel.thread_count(threads, rows.n_rows * rows.row_len)  # checked now, not at the first piece
    step_bytes = parallel.step_bytes_checked(step_bytes)
    return _pieces(rows, starts, big_endian, threads, buffer, step_bytes)


def _pieces(
    rows: TensorRows, starts: range, big_endian: bool, threads: int | None, buffer: np.ndarray | None,
    step_bytes: int,
) -> Iterator[tuple[int, np.ndarray]]:  # fmt: skip
    for first in starts:
        count = min(starts.step, rows.n_rows - first)
        out = None if buffer is None else buffer[: count * rows.row_len]
        yield first, rows.dequantize(first, count, big_endian=big_endian, threads=threads, out=out,
                                     step_bytes=step_bytes)  # fmt: skip


__all__ = [
    "DEFAULT_MAX_BYTES",
    "TensorRows",
    "dequantize",
    "dequantize_chunks",
    "kernels",
    "supported_types",
    "tensor_rows",
]
