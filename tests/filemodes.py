"""File modes that hold even when the tests run as root.

Root reads a folder of mode 000 because it has CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH.
`file_modes_enforced()` takes those two out of the calling thread's effective capabilities
for the length of a `with` block and puts them back after, so a `chmod(0)` gives the real
EACCES a user would get. Other threads keep theirs: run the code under test in this thread.
Capabilities are Linux only; elsewhere (or without capget) the test is skipped.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys
from collections.abc import Iterator
from contextlib import contextmanager

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
    data[0].effective = saved & ~_DAC_BITS  # dropping from the effective set needs no privilege
    _call("capset", data)
    try:
        yield
    finally:
        data[0].effective = saved  # still permitted, so it may be raised again
        _call("capset", data)
