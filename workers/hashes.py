"""The sha256 of local files, remembered between runs: `registry identify` and `registry
download` hash a multi-GB model once, not on every run.

A hash is kept under the file's real path with the stamps of the file it was taken from:
device, inode, size, modification time and change time, all in nanoseconds. Any write to a
file moves its change time (`st_ctime_ns`), which no tool can set back the way `touch -r`
or `cp -p` set a modification time, and a file replaced by another is a new inode; a
remembered hash whose stamps differ from the file's now is taken again. A hash is kept
only when the file's stamps did not move while it was read (a file still being written
is hashed again next time).

The hashes live in a small SQLite file (`hashes.sqlite` in the data folder), so that runs
at the same time each keep theirs; it holds at most MAX_HASHES files, the least recently
used dropped first. A file that cannot be read or written (a damaged one, a read-only
folder) costs the memory, never the answer: the file is hashed as if nothing were kept.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from workers.cache import sha256_file

# How many files' hashes are kept (about 200 bytes each).
MAX_HASHES = 100_000
_BUSY_TIMEOUT_S = 5.0  # another run writing its hashes holds the file this long at most

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS hashes (path TEXT PRIMARY KEY, dev INTEGER, ino INTEGER, size INTEGER, "
    "mtime_ns INTEGER, ctime_ns INTEGER, sha256 TEXT, used INTEGER)",
    "CREATE INDEX IF NOT EXISTS hashes_used ON hashes (used)",
)

Stamps = tuple[int, int, int, int, int]  # dev, ino, size, mtime_ns, ctime_ns


def stamps(st: os.stat_result) -> Stamps:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


class FileHashes:
    """sha256 of local files, remembered in the SQLite file at `path` (None: nothing is
    remembered). `hasher` takes a hash (`workers.cache.sha256_file`)."""

    def __init__(
        self,
        path: Path | None,
        *,
        max_hashes: int = MAX_HASHES,
        hasher: Callable[[Path], Awaitable[str]] = sha256_file,
    ) -> None:
        self._path, self._max, self._hasher = path, max_hashes, hasher
        self._db: sqlite3.Connection | None = None
        self._broken = path is None

    def _conn(self) -> sqlite3.Connection | None:
        if self._db is None and not self._broken:
            assert self._path is not None
            try:
                self._path.parent.mkdir(parents=True, exist_ok=True)
                db = sqlite3.connect(self._path, timeout=_BUSY_TIMEOUT_S, isolation_level=None)
                for statement in _SCHEMA:
                    db.execute(statement)
                self._db = db
            except (sqlite3.Error, OSError):
                self._broken = True
        return self._db

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

    def remembered(self, file: Path) -> str | None:
        """The hash kept for `file` when the file is still the one it was taken from."""
        real, st = os.path.realpath(file), os.stat(file)
        return self._lookup(real, stamps(st))

    async def sha256(self, file: Path, *, fresh: bool = False) -> str:
        """The hex sha256 of `file`: the one kept for it, or (none, stale, or `fresh`) taken
        now and kept. OSError when the file cannot be read."""
        real = os.path.realpath(file)
        before = stamps(os.stat(file))
        if not fresh and (kept := self._lookup(real, before)) is not None:
            return kept
        digest = await self._hasher(Path(file))
        if stamps(os.stat(file)) == before:
            self._keep(real, before, digest)
        return digest

    def remember(self, file: Path, digest: str, hashed: os.stat_result) -> None:
        """Keep `digest`, taken from a file whose stamps were `hashed`, for `file`: the same
        file after a rename (a rename moves only its change time)."""
        st = os.stat(file)
        if stamps(st)[:4] == stamps(hashed)[:4]:
            self._keep(os.path.realpath(file), stamps(st), digest)

    def _lookup(self, real: str, now: Stamps) -> str | None:
        db = self._conn()
        if db is None:
            return None
        try:
            row = db.execute("SELECT dev, ino, size, mtime_ns, ctime_ns, sha256 FROM hashes WHERE path = ?",
                             (real,)).fetchone()  # fmt: skip
            if row is None or tuple(row[:5]) != now or not isinstance(row[5], str):
                return None
            db.execute("UPDATE hashes SET used = ? WHERE path = ?", (time.time_ns(), real))
        except sqlite3.Error:
            return None
        return row[5]

    def _keep(self, real: str, st: Stamps, digest: str) -> None:
        db = self._conn()
        if db is None:
            return
        try:
            db.execute("INSERT OR REPLACE INTO hashes VALUES (?, ?, ?, ?, ?, ?, ?, ?)", (real, *st, digest, time.time_ns()))
            db.execute("DELETE FROM hashes WHERE path IN (SELECT path FROM hashes ORDER BY used DESC LIMIT -1 "
                       "OFFSET ?)", (self._max,))  # fmt: skip
        except (sqlite3.Error, OverflowError):  # OverflowError: a stamp beyond SQLite's 64 bits
            pass
