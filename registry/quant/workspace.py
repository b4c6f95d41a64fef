"""Scratch memory the kernels reuse: from one step or chunk to the next of a call, and
from one call to the next.

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
