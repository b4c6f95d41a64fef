"""The memory the kernels get: new results (`new_values`), and scratch they reuse from one
step or chunk to the next of a call, and from one call to the next (`lend_workspace`).

Allocating megabyte-sized temporaries afresh makes glibc map fresh memory, or hand freed
memory back to the OS, and the kernel then faults every page in again: that costs more
than the arithmetic on those pages. Measured in a new process, 16 Mi values on one
thread: Q4_K made 1,088 page faults per call in its scale decoding alone and ran at
5.1-5.2 GB/s, 6.0-6.2 with its scratch in a workspace; and with two threads every call of the
chunked IQ4_NL faulted in 14 MiB anew (3,700 faults), which made two threads slower than
one. A kernel call borrows a `Workspace` from a pool instead, and its buffers stay mapped
and warm for the next call.
"""

from __future__ import annotations

import contextlib
import functools
import math
import mmap
import platform
import threading
from collections.abc import Iterator

import numpy as np

from registry.quant.parallel import MAX_THREADS, available_cpus


class Workspace:
    """Named scratch arrays: `get` hands back the same memory under the same name, grown
    when a bigger array is asked for. A workspace is used by one kernel call at a time."""

    def __init__(self) -> None:
        self._buffers: dict[str, np.ndarray] = {}

    def get(self, name: str, shape: tuple[int, ...], dtype: type | np.dtype) -> np.ndarray:
        """An uninitialised array; the same memory as the last `get` under this name."""
        dt = np.dtype(dtype)
        nbytes = math.prod(shape) * dt.itemsize  # math.prod: np.prod of a tuple costs microseconds
        buf = self._buffers.get(name)
        if buf is None or buf.nbytes < nbytes:
            buf = np.empty(nbytes, dtype=np.uint8)
            self._buffers[name] = buf
        return buf[:nbytes].view(dt).reshape(shape)

    @property
    def nbytes(self) -> int:
        return sum(buf.nbytes for buf in self._buffers.values())


class _WorkspacePool:
    """Workspaces kept between kernel calls, at most `keep` of them; each is lent to one
    call at a time. A workspace that grew past `max_bytes` is not kept."""

    def __init__(self, keep: int, max_bytes: int) -> None:
        self._keep = keep
        self._max_bytes = max_bytes
        self._free: list[Workspace] = []
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def lend(self) -> Iterator[Workspace]:
        with self._lock:
            ws = self._free.pop() if self._free else Workspace()
        try:
            yield ws
        finally:
            if ws.nbytes <= self._max_bytes:
                with self._lock:
                    if len(self._free) < self._keep:
                        self._free.append(ws)


# Kept: as many workspaces as kernels run at once by default (one per thread of a run),
# and only those that stayed small. Measured after 16 Mi values of each type: 10 MiB at
# most for one type (IQ4_NL, IQ4_XS, MXFP4, NVFP4), 1.7-3.4 MiB for the k-quants, and
# 19.7 MiB for a workspace that served every type (they share buffers by name).
MAX_KEPT_BYTES = 32 << 20
_POOL = _WorkspacePool(keep=min(available_cpus(), MAX_THREADS), max_bytes=MAX_KEPT_BYTES)


def lend_workspace() -> contextlib.AbstractContextManager[Workspace]:
    """A workspace for one kernel call: `with lend_workspace() as ws: ...`."""
    return _POOL.lend()


# glibc maps an allocation of at least its mmap threshold (128 KiB at first) on its own:
# fresh pages on every first write, unmapped again on free. When such a mapping of at most
# 32 MiB is freed, glibc raises the threshold to its size, and keeps up to twice that of
# freed memory for reuse (mallopt(3), "dynamic mmap threshold").
SETTLED_THRESHOLD = 4 << 20


@functools.cache
def settle_allocator() -> None:
    """Once per process, before the first kernel runs: under glibc, map and free 4 MiB
    (never touched), so that the kernels' temporaries below that size come from memory
    the allocator keeps and reuses rather than from fresh mappings.

    Without it, a new process paid page faults on every call for the temporaries that
    kernels do not keep in a workspace (the i-quants' index arrays, up to 2 MiB a chunk):
    16 Mi values on two threads, IQ3_S 1,793 faults per call at 5.5 GB/s and 7.6 after
    this, IQ1_M 1,281 at 6.4 and 10.1 after. A process that has freed a big array is in
    this state, or a later one, anyway. Settling at 31 MiB instead gained the same but
    made glibc keep up to 62 MiB of freed memory: the verifier's peak RSS on gemma3 grew
    from 1,647 to 1,701 MB; at 4 MiB it stayed at 1,648.
    """
    if platform.libc_ver()[0] != "glibc":
        return
    probe = np.empty(SETTLED_THRESHOLD, dtype=np.uint8)
    del probe


# Results of at least this many bytes may be moved to memory aligned to transparent huge
# pages (new_values): numpy asks for huge pages from this size on.
ALIGNED_BYTES = 4 << 20
HUGE_PAGE = 2 << 20
# glibc serves a big allocation with a mapping of its own, and the array's data then
# starts this far past a page boundary (the chunk header): fresh memory, not reused.
_MAPPED_DATA_AT = 16
_MADV_HUGEPAGE: int | None = getattr(mmap, "MADV_HUGEPAGE", None)
_ANONYMOUS: int | None = getattr(mmap, "MAP_ANONYMOUS", None)


def _freshly_mapped(values: np.ndarray) -> bool:
    """Whether glibc gave `values` a mapping of its own (always fresh memory)."""
    return values.ctypes.data % mmap.PAGESIZE == _MAPPED_DATA_AT


def new_values(n: int) -> np.ndarray:
    """A new, uninitialised float32 array of `n` values, for a result.

    A big result is written page by page. Memory that the allocator reuses from freed
    arrays is already in place, but in fresh memory every first write of a page is a
    fault in which the kernel hands out a zeroed page: with 4 KiB pages that costs more
    than the dequantization of the page (1.3-1.5 us a page on this VM, 3 GB/s). numpy asks
    for transparent huge pages for arrays of 4 MiB and more, but glibc's mapping of such
    an array does not start on a 2 MiB boundary, so the part before the first boundary
    (up to 2 MiB, 512 faults) still takes small pages.

    So when np.empty hands out a fresh mapping of its own, it is swapped for one with 2 MiB
    to spare, used from its first 2 MiB boundary, whose whole 2 MiB spans are marked for
    huge pages: no more memory is resident than with np.empty's. Reused memory is kept.
    Measured on fresh 16 Mi-value results, in two interleaved runs: Q4_0 +13-15% on one
    thread and +20-25% on two; Q6_K, TQ1_0, TQ2_0 and F16 +1-16%. When np.empty's memory
    is reused, nothing changes (the sample models' tensors, dequantized over and over).

    The array is then a view of an anonymous mapping that is unmapped with its last view.
    Where there are no huge pages to ask for, or the mapping fails, it is np.empty's.
    """
    values = np.empty(n, dtype=np.float32)
    nbytes = 4 * n
    if nbytes < ALIGNED_BYTES or _MADV_HUGEPAGE is None or _ANONYMOUS is None:
        return values
    if not _freshly_mapped(values):
        return values  # heap memory, which may well be reused and in place already
    try:
        region = mmap.mmap(-1, nbytes + HUGE_PAGE, flags=mmap.MAP_PRIVATE | _ANONYMOUS)
    except (OSError, ValueError, OverflowError):
        return values
    whole = np.frombuffer(region, dtype=np.uint8)
    start = -whole.ctypes.data % HUGE_PAGE
    with contextlib.suppress(OSError):  # huge pages switched off: small pages, as np.empty's
        region.madvise(_MADV_HUGEPAGE, start, nbytes - nbytes % HUGE_PAGE)
    return whole[start : start + nbytes].view(np.float32)
