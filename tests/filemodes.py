"""File modes that hold even when the tests run as root.

Root reads a folder of mode 000 because it has CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH.
`file_modes_enforced()` takes those two out of the calling thread's effective capabilities
for the length of a `with` block and puts them back after, so a `chmod(0)` gives the real
EACCES a user would get. Capabilities belong to a thread, so the code under test may also
hand work to other threads (`asyncio.to_thread`): every thread started inside the block
drops them too, as its first step, and a running event loop gets a new default executor
for the block, whose threads are all started inside it (and end with it). Threads started
before the block keep theirs. Capabilities are Linux only; elsewhere (or without capget)
the test is skipped.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from types import FrameType
from typing import Any

import pytest

_VERSION_3 = 0x20080522  # _LINUX_CAPABILITY_VERSION_3: two 32-bit words per set
_DAC_BITS = (1 << 1) | (1 << 2)  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH (both in word 0)


class _Header(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]  # pid 0: this thread


class _Data(ctypes.Structure):
    _fields_ = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    ]


def _call(name: str, data: ctypes.Array[_Data]) -> None:
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    if getattr(libc, name)(ctypes.byref(_Header(_VERSION_3, 0)), data) != 0:
        raise OSError(ctypes.get_errno(), f"{name} failed")


@contextmanager
def file_modes_enforced() -> Iterator[None]:
    if not sys.platform.startswith("linux"):
        pytest.skip("capabilities are Linux only")
    data = (_Data * 2)()
    try:
        _call("capget", data)
    except (OSError, AttributeError) as exc:
        pytest.skip(f"cannot read capabilities: {exc}")
    saved = data[0].effective
    _drop_dac()
    threading.setprofile(_drop_in_new_thread)
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        loop = None
    executor = ThreadPoolExecutor(thread_name_prefix="file-modes")
    before = getattr(loop, "_default_executor", None)  # asyncio keeps no public getter
    if loop is not None:
        loop.set_default_executor(executor)
    try:
        yield
    finally:
        threading.setprofile(None)  # type: ignore[arg-type]  # None clears the hook
        if loop is not None:
            loop.set_default_executor(before or ThreadPoolExecutor())
        executor.shutdown(wait=False)
        data[0].effective = saved  # still permitted, so it may be raised again
        _call("capset", data)


def _drop_dac() -> None:
    data = (_Data * 2)()
    _call("capget", data)
    data[0].effective &= ~_DAC_BITS  # dropping from the effective set needs no privilege
    _call("capset", data)


def _drop_in_new_thread(frame: FrameType, event: str, arg: Any) -> None:
    """The profile hook a thread started in the block runs at its first call: drop, unhook."""
    sys.setprofile(None)
    _drop_dac()
