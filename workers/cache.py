"""The download cache of the verify worker: whole files, resumable, with an LRU size cap.

Files live under `<cache>/blobs/<key>` where the key is the hub's LFS sha256 when there
is one (content-addressed: the same bytes in two repos are downloaded once), else a hash
of repo, revision and path. A download writes `<cache>/partial/<key>` and renames it
into place only once it has every byte, so a killed worker leaves a partial file that
the next attempt continues with a Range request instead of starting over.

Recency is the file's mtime, refreshed on every use; before a download, the least
recently used complete files are deleted until the new file fits under the cap, and only
if that is not enough the partial files no one is downloading, oldest first: a partial is
worth keeping while there is room (the next attempt continues it), but one abandoned for
good (its artifact never verified again) must not hold its share of the cap for ever.
Tracking recency in the file system rather than in memory keeps it right across restarts.

Two verifications may share the folder (jobs of one process, or worker processes of one
machine), each with its own `DownloadCache`, so coordination is by `flock` on files under
`<cache>/locks/`: `<key>.fetch` is held exclusively while a file is downloaded (one
download per key, the others wait and then find it complete), and `<key>.use` is held
shared by every verification still reading a file (`using`); eviction deletes only the
files whose `.use` lock (and, for a partial, `.fetch` lock) it can take exclusively. The
lock files of keys with no file left are deleted too, while locked, so that they do not
pile up one pair per file ever cached; whoever then locks a deleted lock file sees that
the path no longer leads to it and opens the new one.

The HTTP side follows `registry.hub.http`'s rules: redirects by hand so the token goes
only to the hub's origin, jittered exponential backoff on retryable failures, and a
check that the file does not change under a resumed download (If-Range on the ETag).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import os
import random
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urljoin, urlsplit

import aiofiles
import aiohttp

from registry.hub.errors import HubConnectionError, HubError, HubTimeout, InvalidResponse, error_for_status
from registry.hub.http import HttpOptions, SessionOwner, origin, retry_hint

_CHUNK = 1 << 20
_READ_AHEAD = 16  # chunks read and not yet written: at most this many times _CHUNK in memory
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_CONTENT_RANGE = re.compile(r"^bytes (\d+)-(\d+)/(\d+|\*)$")
_UNSATISFIED = re.compile(r"^bytes \*/(\d+)$")
_KEY = re.compile(r"^[0-9a-f]{64}$")
_LOCK_POLL_S = 0.05  # a lock held by another job or process is tried again this often

Sleep = Callable[[float], Awaitable[Any]]
# (bytes the file holds, the whole file's size or None): see `Downloader.download`.
OnBytes = Callable[[int, int | None], None]


class SizeMismatch(HubError):
    """The server's file is not the size the hub listed: cut short, or a different file."""

    code = "size_mismatch"

    def __init__(self, message: str, *, expected: int, actual: int, url: str) -> None:
        self.expected = expected
        self.actual = actual
        super().__init__(message, url=url)


def cache_key(sha256: str | None, *, repo_id: str, revision: str | None, path: str) -> str:
    if sha256 and _KEY.match(sha256.lower()):
        return sha256.lower()
    return hashlib.sha256(f"{repo_id}@{revision or 'main'}/{path}".encode()).hexdigest()


async def sha256_file(path: Path) -> str:
    """Hex sha256 of a file, in a thread (hashlib releases the GIL on large buffers)."""

    def run() -> str:
        h = hashlib.sha256()
        with path.open("rb") as f:
            while chunk := f.read(1 << 22):
                h.update(chunk)
        return h.hexdigest()

    return await asyncio.to_thread(run)


class Downloader(SessionOwner):
    """Whole-file GETs that resume by Range after a failure."""

    def __init__(
        self,
        options: HttpOptions,
        *,
        session: aiohttp.ClientSession | None = None,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        super().__init__(options, session)
        self._sleep = sleep
        self._hub = origin(options.endpoint)

    async def download(
        self, url: str, dest: Path, expected_size: int | None, *, on_bytes: OnBytes | None = None
    ) -> int:
        """Complete `dest` (possibly partial) from `url`; returns the body bytes received.

        Retryable failures resume where the file stops; attempts are counted only while no
        progress is made, so a CDN that cuts every connection still gets the file through.
        `on_bytes(held, total)` is called as bytes are written: how many the file holds now
        and how many the server says it has (None when it does not say).
        """
        policy = self.options.retry
        progress = _Progress(on_bytes=on_bytes)
        attempt, waited = 0, 0.0
        etag: str | None = None
        while True:
            attempt += 1
            before = progress.bytes
            try:
                await self._once(url, dest, expected_size, etag, progress)
                return progress.bytes
            except HubError as exc:
                etag = progress.etag
                if progress.bytes > before:
                    attempt = 1  # progress: this is a new run of failures, not the same one
                if not exc.retryable or attempt >= policy.max_attempts:
                    raise
                delay = min(policy.max_delay, policy.base_delay * 2 ** (attempt - 1))
                delay = max(delay * (0.5 + random.random() / 2), getattr(exc, "retry_after", None) or 0.0)
                if waited + delay > policy.max_total_wait:
                    raise
                waited += delay
                await self._sleep(delay)

    async def _once(
        self, url: str, dest: Path, expected: int | None, etag: str | None, progress: _Progress
    ) -> None:
        """One request that completes the file, or raises (retryable when resuming may help)."""
        have = dest.stat().st_size if dest.exists() else 0
        if expected is not None and have > expected:
            dest.unlink()  # more than the whole file: not a prefix of it
            have = 0
        headers = {"Accept-Encoding": "identity"}
        if have:
            headers["Range"] = f"bytes={have}-"
            if etag and not etag.startswith("W/"):
                headers["If-Range"] = etag
        resp = await self._open(url, headers)
        try:
            if resp.status == 416 and have:
                m = _UNSATISFIED.match(resp.headers.get("Content-Range", ""))
                total = int(m.group(1)) if m else None
                if total == have:
                    self._check_size(url, expected, total)
                    return
                dest.unlink()  # a partial file the server no longer agrees with
                raise _ShortBody("range not satisfiable: starting over", url=url, status=416)
            if resp.status == 206:
                m = _CONTENT_RANGE.match(resp.headers.get("Content-Range", "").strip())
                if m is None or int(m.group(1)) != have or m.group(3) == "*":
                    raise InvalidResponse(f"bad Content-Range for a range at {have}", url=url, status=206)
                total, mode = int(m.group(3)), "ab"
            elif resp.status == 200:
                length = resp.headers.get("Content-Length", "")
                total, mode = (int(length) if length.isdigit() else None), "wb"
            else:
                raise error_for_status(
                    resp.status,
                    url=url,
                    message=resp.headers.get("X-Error-Message") or resp.reason or f"HTTP {resp.status}",
                    request_id=resp.headers.get("X-Request-Id"),
                    error_code=resp.headers.get("X-Error-Code"),
                    retry_after=retry_hint(resp.headers),
                )
            self._check_size(url, expected, total)
            progress.etag = resp.headers.get("ETag") or etag
            progress.total = total
            await self._write(resp, dest, mode, have if mode == "ab" else 0, progress)
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise (HubTimeout if isinstance(exc, TimeoutError) else HubConnectionError)(
                f"{type(exc).__name__}: {exc}", url=url
            ) from exc
        finally:
            resp.release()
        size = dest.stat().st_size
        if total is not None and size < total:
            raise _ShortBody(f"body ended at {size} of {total} bytes", url=url)
        if total is None:
            self._check_size(url, expected, size)

    def _check_size(self, url: str, expected: int | None, total: int | None) -> None:
        if expected is not None and total is not None and total != expected:
            raise SizeMismatch(
                f"the server's file has {total} bytes, the hub lists {expected}",
                expected=expected,
                actual=total,
                url=url,
            )

    async def _write(
        self, resp: aiohttp.ClientResponse, dest: Path, mode: str, held: int, progress: _Progress
    ) -> None:
        """Append the body to `dest` as it arrives, until it ends or the connection fails.

        One task reads and this one writes: aiohttp refuses every read once the connection
        is lost, even of body bytes it has already received, so reading must not wait on the
        disk, or a link that drops each connection after a burst never keeps a byte of it.
        """
        received: asyncio.Queue[bytes | Exception] = asyncio.Queue(_READ_AHEAD)
        reader = asyncio.create_task(_read_ahead(resp.content, received))
        try:
            async with aiofiles.open(dest, mode) as f:
                end: bytes | Exception | None = None
                while end is None:
                    batch, item = [], await received.get()
                    while isinstance(item, bytes) and item:
                        batch.append(item)
                        if received.empty():
                            break
                        item = received.get_nowait()
                    else:
                        end = item  # b"" at the body's end, or the error that ended it
                    if batch:  # all that arrived meanwhile, in one write
                        await f.writelines(batch)
                        size = sum(map(len, batch))
                        progress.bytes += size
                        held += size
                        if progress.on_bytes is not None:
                            progress.on_bytes(held, progress.total)
                if isinstance(end, Exception):
                    raise end
        finally:
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)

    async def _open(self, url: str, headers: dict[str, str]) -> aiohttp.ClientResponse:
        for _ in range(self.options.max_redirects + 1):
            auth = (
                {"Authorization": f"Bearer {self.options.token}"}
                if self.options.token and origin(url) == self._hub
                else {}
            )
            try:
                resp = await self.session.get(url, headers={**headers, **auth}, allow_redirects=False)
            except (TimeoutError, aiohttp.ClientError) as exc:
                raise (HubTimeout if isinstance(exc, TimeoutError) else HubConnectionError)(
                    f"{type(exc).__name__}: {exc}", url=url
                ) from exc
            if resp.status not in _REDIRECTS:
                return resp
            location = resp.headers.get("Location")
            resp.release()
            if not location:
                raise InvalidResponse("redirect without Location", url=url, status=resp.status)
            url = urljoin(url, location)
            if urlsplit(url).scheme not in ("http", "https"):
                raise InvalidResponse(f"redirect to a non-HTTP location {url!r}", url=url)
        raise InvalidResponse("too many redirects", url=url)


async def _read_ahead(stream: aiohttp.StreamReader, out: asyncio.Queue[bytes | Exception]) -> None:
    """Put the body's chunks on `out` as they arrive, then b"" at its end or the error that
    ended it."""
    try:
        while chunk := await stream.read(_CHUNK):
            await out.put(chunk)
    except Exception as exc:
        await out.put(exc)
        return
    await out.put(b"")


@dataclass
class _Progress:
    bytes: int = 0  # body bytes written, over all attempts
    etag: str | None = None
    total: int | None = None  # the whole file's size as the last response gave it
    on_bytes: OnBytes | None = None


class _ShortBody(HubError):
    code = "truncated_body"
    retryable = True


@dataclass(frozen=True)
class CachedFile:
    path: Path
    bytes_downloaded: int  # 0 on a cache hit
    hit: bool


class DownloadCache:
    def __init__(self, root: Path, max_bytes: int) -> None:
        self.root = root
        self.max_bytes = max_bytes
        self.blobs = root / "blobs"
        self.partial = root / "partial"
        self.locks = root / "locks"

    def path_for(self, key: str) -> Path:
        return self.blobs / key

    def discard(self, key: str) -> None:
        """Drop a cached file (one whose hash turned out wrong must not be served again)."""
        for p in (self.path_for(key), self.partial / key):
            with contextlib.suppress(FileNotFoundError):
                p.unlink()

    def usage(self) -> int:
        return sum(_size(p) for d in (self.blobs, self.partial) if d.is_dir() for p in d.iterdir())

    @contextlib.asynccontextmanager
    async def using(self, keys: Iterable[str]) -> AsyncIterator[None]:
        """Hold the files of `keys` in use: no eviction, in this process or another, deletes
        them until the block ends."""
        async with contextlib.AsyncExitStack() as stack:
            for key in sorted(set(keys)):
                await stack.enter_async_context(_flocked(self.locks / f"{key}.use", fcntl.LOCK_SH))
            yield

    def evict(self, need: int, *, keep: frozenset[str] = frozenset()) -> list[str]:
        """Delete least recently used complete files until `need` more bytes fit the cap, then
        the oldest partial files; files in use (`using`) and downloads under way are never
        deleted. Returns the keys deleted."""
        candidates: list[tuple[Path, tuple[str, ...]]] = [
            (p, ("use",)) for p in _oldest_first(self.blobs, keep)
        ]
        candidates += [(p, ("use", "fetch")) for p in _oldest_first(self.partial, keep)]
        used, evicted = self.usage(), []
        for p, locks in candidates:
            if used + need <= self.max_bytes:
                break
            with contextlib.ExitStack() as held:
                if not all(held.enter_context(_flocked_now(self.locks / f"{p.name}.{k}")) for k in locks):
                    continue
                with contextlib.suppress(FileNotFoundError):
                    size = p.stat().st_size
                    p.unlink()
                    used -= size
                    evicted.append(p.name)
        self._drop_locks(keep)
        return evicted

    def _drop_locks(self, keep: frozenset[str]) -> None:
        """Delete the lock files no one holds of keys with neither a complete nor a partial file."""
        if not self.locks.is_dir():
            return
        for lock in self.locks.iterdir():
            key = lock.name.rpartition(".")[0]
            if key in keep or self.path_for(key).exists() or (self.partial / key).exists():
                continue
            with _flocked_now(lock) as free:
                if free:
                    with contextlib.suppress(FileNotFoundError):
                        lock.unlink()

    async def fetch(
        self,
        downloader: Downloader,
        url: str,
        key: str,
        size: int | None,
        *,
        keep: frozenset[str] = frozenset(),
        on_bytes: OnBytes | None = None,
    ) -> CachedFile:
        """The cached file for `key`, downloading (or finishing) it from `url` if needed;
        `on_bytes` as for `Downloader.download`."""
        async with _flocked(self.locks / f"{key}.fetch", fcntl.LOCK_EX):
            final = self.path_for(key)
            if final.exists() and (size is None or final.stat().st_size == size):
                os.utime(final)  # most recently used
                return CachedFile(final, 0, True)
            self.blobs.mkdir(parents=True, exist_ok=True)
            self.partial.mkdir(parents=True, exist_ok=True)
            part = self.partial / key
            have = part.stat().st_size if part.exists() else 0
            self.evict(max((size or 0) - have, 0), keep=keep | {key})
            received = await downloader.download(url, part, size, on_bytes=on_bytes)
            part.replace(final)
            os.utime(final, (time.time(), time.time()))
            return CachedFile(final, received, False)


def _size(path: Path) -> int:
    """The file's size; 0 once it is gone: another cache's eviction deletes files, and its
    downloads rename partials into place, between our listing of a folder and our stat."""
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _oldest_first(folder: Path, keep: frozenset[str]) -> list[Path]:
    if not folder.is_dir():
        return []
    files = []
    for p in folder.iterdir():
        with contextlib.suppress(FileNotFoundError):  # deleted meanwhile by another cache
            if p.name not in keep:
                files.append((p.stat().st_mtime, p))
    return [p for _, p in sorted(files)]


def _lock_fd(path: Path) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    return os.open(path, os.O_RDWR | os.O_CREAT, 0o644)


def _still_at(fd: int, path: Path) -> bool:
    """Whether the file locked through `fd` is still the one at `path`: a lock file deleted
    (by `_drop_locks`, under its lock) between our open and our lock locks nothing."""
    try:
        return os.stat(path).st_ino == os.fstat(fd).st_ino
    except FileNotFoundError:
        return False


@contextlib.asynccontextmanager
async def _flocked(path: Path, mode: int) -> AsyncIterator[None]:
    """Hold an flock on `path`, waiting for it without blocking the event loop.

    Each call opens the file anew, so two holders in one process exclude each other just
    as two processes do; the lock ends when the descriptor is closed, also on a crash.
    """
    fd = _lock_fd(path)
    try:
        while True:
            try:
                fcntl.flock(fd, mode | fcntl.LOCK_NB)
            except BlockingIOError:
                await asyncio.sleep(_LOCK_POLL_S)
                continue
            if _still_at(fd, path):
                break
            fd, stale = _lock_fd(path), fd
            os.close(stale)
        yield
    finally:
        os.close(fd)


@contextlib.contextmanager
def _flocked_now(path: Path) -> Iterator[bool]:
    """An exclusive flock on `path` if no one holds any lock on it now: yields whether taken."""
    fd = _lock_fd(path)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
        else:
            yield _still_at(fd, path)  # a lock file deleted meanwhile: busy, as far as we know
    finally:
        os.close(fd)
