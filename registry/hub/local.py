"""Reading GGUF headers from local files: the same fetch-the-least loop as over HTTP.

A first window of `first_window` bytes usually holds the whole header; when it does not,
the parser says how much it needs (`NeedMoreData`) and the reader reads up to that, so
even a 6 MiB vocabulary header costs two reads, and tensor data is never read.

Errors: the parser's `GGUFError` subclasses pass through unchanged. A file that cannot be
read at all (missing, a directory, no permission, I/O error) raises `LocalReadError`, a
`GGUFError` subclass with code "read_error", so callers catch one type and report one
shape (`to_dict()`), whatever went wrong with the file.
"""

from __future__ import annotations

import asyncio
import errno
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from registry.config import HubSettings
from registry.gguf.errors import GGUFError, LimitExceeded, NeedMoreData, TruncatedFile
from registry.gguf.filename import parse_shard
from registry.gguf.limits import DEFAULT_LIMITS, Limits
from registry.gguf.model import GGUFHeader
from registry.gguf.reader import next_window, parse_header

DEFAULT_FIRST_WINDOW = HubSettings.first_window  # declared once, in the settings
# Read a little past the parser's estimate: its estimate of the tensor-info section is a
# guess, and 64 KiB more is far cheaper locally than another read and parse.
READ_MARGIN = 64 * 1024

PathLike = str | os.PathLike[str]


class LocalReadError(GGUFError):
    """A local file that cannot be read (as opposed to one that is read and is bad)."""

    code = "read_error"

    def __init__(self, message: str, *, path: str) -> None:
        super().__init__(message)
        self.path = path


@dataclass(frozen=True, slots=True)
class LocalHeader:
    path: str
    header: GGUFHeader
    file_size: int
    bytes_read: int
    reads: int


def _describe_os_error(exc: OSError) -> str:
    if isinstance(exc, FileNotFoundError):
        return "no such file"
    if isinstance(exc, IsADirectoryError):
        return "is a directory, not a file"
    if isinstance(exc, PermissionError):
        return "permission denied"
    return exc.strerror or type(exc).__name__


def read_header(
    path: PathLike,
    *,
    limits: Limits | None = None,
    first_window: int = DEFAULT_FIRST_WINDOW,
) -> LocalHeader:
    """Parse the header of the GGUF file at `path`, reading no tensor data.

    The header may be at most `limits.max_header_bytes` long; a file that needs more
    raises `LimitExceeded` before those bytes are read.
    """
    limits = limits or DEFAULT_LIMITS
    name = os.fspath(path)
    if first_window < 1:
        raise ValueError("first_window must be positive")
    try:
        st = os.stat(name)
        if stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError(errno.EISDIR, "is a directory")
        if not stat.S_ISREG(st.st_mode):
            # Opening a FIFO blocks until a writer comes; a device may never end. Neither
            # is a model file, so neither is opened.
            raise LocalReadError("not a regular file", path=name)
        # Non-blocking, and checked again once open: a FIFO put in the file's place since the
        # stat above would otherwise block this open for ever.
        fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK)
        with open(fd, "rb") as f:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise LocalReadError("not a regular file", path=name)
            size = st.st_size
            buf = bytearray(f.read(min(first_window, size, limits.max_header_bytes)))
            reads = 1
            while True:
                try:
                    header = parse_header(buf, file_size=size, limits=limits)
                    return LocalHeader(name, header, size, len(buf), reads)
                except NeedMoreData as exc:
                    want = _next_size(exc, have=len(buf), size=size, limits=limits)
                    more = f.read(want - len(buf))
                    if not more:  # the file shrank since it was measured: never spin on it
                        raise TruncatedFile(f"the file ended at byte {len(buf)} while being read") from None
                    buf += more
                    reads += 1
    except OSError as exc:
        raise LocalReadError(_describe_os_error(exc), path=name) from None


def _next_size(exc: NeedMoreData, *, have: int, size: int, limits: Limits) -> int:
    """Bytes from the start of the file to hold before the next parse attempt."""
    if have >= size:
        # The parser should have said TruncatedFile itself, knowing the size; never loop.
        raise TruncatedFile(f"the file ends after {size} bytes, inside its header", field=exc.field)
    if exc.needed > limits.max_header_bytes or have >= limits.max_header_bytes:
        raise LimitExceeded(
            f"header needs about {exc.needed} bytes, more than the {limits.max_header_bytes} allowed",
            field=exc.field,
        )
    # Doubling as a floor keeps the number of reads logarithmic even if the parser's
    # estimates were to creep up a little at a time.
    want = max(next_window(exc, margin=READ_MARGIN), 2 * have)
    return min(want, size, limits.max_header_bytes)


async def read_header_async(
    path: PathLike,
    *,
    limits: Limits | None = None,
    first_window: int = DEFAULT_FIRST_WINDOW,
) -> LocalHeader:
    """`read_header` in a worker thread, so an event loop never waits on the disk."""
    return await asyncio.to_thread(read_header, path, limits=limits, first_window=first_window)


def shard_paths(path: PathLike) -> list[Path]:
    """All shard paths of the split model `path` belongs to, or `[path]` for a single file.

    The names follow gguf-split's `<stem>-NNNNN-of-NNNNN.gguf`; shards are looked for next
    to the given one. A missing shard raises `LocalReadError` naming it.
    """
    p = Path(path)
    parsed = parse_shard(p.name)
    if parsed is None:
        return [p]
    stem, _, count = parsed
    suffix = p.name[-len(".gguf") :]  # as written: ".gguf" or ".GGUF"
    paths = [p.with_name(f"{stem}-{i:05d}-of-{count:05d}{suffix}") for i in range(1, count + 1)]
    missing = [q.name for q in paths if not q.is_file()]
    if missing:
        shown = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
        raise LocalReadError(f"{len(missing)} of {count} shards missing: {shown}", path=str(p))
    return paths


def read_artifact_headers(
    path: PathLike,
    *,
    limits: Limits | None = None,
    first_window: int = DEFAULT_FIRST_WINDOW,
) -> list[LocalHeader]:
    """Headers of every file of the artifact at `path` (all shards of a split model)."""
    return [read_header(p, limits=limits, first_window=first_window) for p in shard_paths(path)]
