"""Keep-alive connections spread evenly over the processes of `registry serve --workers N`.

The kernel hands each new connection to one of the processes listening on the port
(SO_REUSEPORT) by a hash of its addresses. Clients that keep a few connections open for
long (a UI's backend, a crawler, a load balancer's pool) are then often split unevenly:
32 connections came out as 10 and 22, 11 and 21, 13 and 19 in `bench.api`, and the
busier process's requests queued about twice as long as the other's.

Each process writes how many connections it holds into its own slot of a small file that
all of them map. A process holding more than its share (the total over the processes,
rounded up) plus `SLACK` answers the request at hand with `Connection: close`; the client
opens a new connection, which the kernel hashes afresh, so the surplus drains within a few
requests. The counts are advisory: a stale slot (a replica that died) only makes the
others close fewer connections.
"""

from __future__ import annotations

import mmap
import os
import struct
import tempfile
from collections.abc import Callable
from pathlib import Path

SLACK = 2  # connections above the even share that a process keeps
_SLOT = struct.Struct("<q")


class ConnectionShares:
    """One process's view of the shared counts: its own slot and everyone's."""

    def __init__(self, path: Path, slot: int, workers: int, *, owner: bool = False) -> None:
        if not 0 <= slot < workers:
            raise ValueError(f"slot {slot} is not one of {workers} workers")
        self.path, self.slot, self.workers = path, slot, workers
        self._owner = owner
        with open(path, "r+b") as f:
            if os.fstat(f.fileno()).st_size < workers * _SLOT.size:
                raise ValueError(f"{path} holds fewer than {workers} slots")
            self._map = mmap.mmap(f.fileno(), workers * _SLOT.size)
        self._count: Callable[[], int] = lambda: 0
        self._slots = struct.Struct(f"<{workers}q")

    @classmethod
    def create(cls, workers: int) -> ConnectionShares:
        """The primary's: a new file of `workers` zeroed slots, slot 0 its own."""
        fd, name = tempfile.mkstemp(prefix="registry-serve-", suffix=".connections")
        with os.fdopen(fd, "wb") as f:
            f.write(bytes(workers * _SLOT.size))
        return cls(Path(name), 0, workers, owner=True)

    @classmethod
    def attach(cls, path: Path, slot: int) -> ConnectionShares:
        """A replica's: the primary's file, as many workers as it has slots."""
        return cls(path, slot, path.stat().st_size // _SLOT.size)

    def watch(self, count: Callable[[], int]) -> None:
        """Where this process's open connections are counted (the server, once it is set up)."""
        self._count = count

    def over_share(self) -> bool:
        """Record this process's count; whether it holds more than its share plus SLACK."""
        mine = self._count()
        _SLOT.pack_into(self._map, self.slot * _SLOT.size, mine)
        total = sum(max(0, n) for n in self._slots.unpack_from(self._map))
        share = -(-total // self.workers)
        return mine > share + SLACK

    def close(self) -> None:
        self._map.close()
        if self._owner:
            self.path.unlink(missing_ok=True)
