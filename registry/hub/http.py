"""Read the header of a remote GGUF file with as few HTTP range requests as possible.

The parser drives the reads: it raises `NeedMoreData(needed)` with its estimate of the
whole header size, and the reader fetches exactly the missing bytes plus a margin. A
first window of 2 MiB holds headers up to a ~50k-token vocabulary outright; larger ones
(128k-262k tokens, 5-9 MB) take exactly one more request. Files without a vocabulary
(shards 2..N of a split model, projectors, LoRA adapters) get a small first window, and a
listed file size below the window caps it (`first_window_for`).

Rules this module keeps, each proved by a test against the fake hub:
- The token goes only to the configured hub origin. Redirects are followed by hand
  (`allow_redirects=False`) so the Authorization header never reaches a CDN.
- A server that ignores Range (200 with the whole file) is read as a stream and closed
  as soon as the header is parsed: never more than the header plus one window.
- The file must not change between reads: later ranges carry `If-Range: <etag>` and any
  change of ETag, size or an If-Range refusal raises `FileChanged`.
- Retries (429, 5xx, resets, timeouts, short bodies) use jittered exponential backoff,
  honour Retry-After and the hub's `RateLimit: "api";r=0;t=55`, and stop at a cap on
  attempts and on total wait. Every failure is a typed `HubError`.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import email.utils
import functools
import random
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Self
from urllib.parse import quote, unquote, urljoin, urlsplit, urlunsplit

import aiohttp

from registry.config import HubSettings
from registry.gguf.errors import NeedMoreData, TruncatedFile
from registry.gguf.filename import parse_shard
from registry.gguf.reader import ParseProgress, parse_header
from registry.hub.errors import (
    EncodedBody,
    FileChanged,
    HeaderTooLarge,
    HubConnectionError,
    HubError,
    HubTimeout,
    InvalidResponse,
    TruncatedBody,
    error_for_status,
)

if TYPE_CHECKING:
    from registry.gguf.limits import Limits
    from registry.gguf.model import GGUFHeader

# The settings' defaults, declared once in HubSettings.
_HUB = HubSettings()
FIRST_WINDOW = _HUB.first_window
SHARD_WINDOW = _HUB.shard_window
# Files whose header has no vocabulary: projectors (llama.cpp names them mmproj-*.gguf) and
# LoRA adapters (convert_lora_to_gguf.py adds "-LoRA"). Their headers are tens of KiB.
_NO_VOCAB_NAME = re.compile(r"(?:^|[-_.])(?:mmproj|lora|adapter)(?:[-_.]|$)", re.IGNORECASE)
MAX_HEADER_BYTES = _HUB.max_header_bytes
_CHUNK = 256 * 1024
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_CONTENT_RANGE = re.compile(r"^bytes (\d+)-(\d+)/(\d+|\*)$")
_RATELIMIT_T = re.compile(r";\s*r=(\d+)\s*;\s*t=(\d+)")

Parser = Callable[..., "GGUFHeader"]
Sleep = Callable[[float], Awaitable[Any]]


@dataclass(frozen=True)
class RetryPolicy:
    max_attempts: int = _HUB.max_attempts  # per request, the first one included
    base_delay: float = _HUB.backoff_base  # seconds before the first retry; doubles each time
    max_delay: float = _HUB.backoff_max  # cap on one backoff wait (a server's Retry-After may exceed it)
    max_total_wait: float = _HUB.max_retry_wait  # cap on all waits for one file; beyond it the error is raised


@dataclass(frozen=True)
class HttpOptions:
    endpoint: str = _HUB.endpoint
    token: str | None = None
    first_window: int = FIRST_WINDOW
    max_header_bytes: int = MAX_HEADER_BYTES
    per_host_concurrency: int = _HUB.per_host_concurrency
    connect_timeout: float = _HUB.connect_timeout
    read_timeout: float = _HUB.read_timeout
    max_redirects: int = 5
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    user_agent: str = "gguf-registry/0.1"

    @classmethod
    def from_settings(cls, hub: HubSettings) -> HttpOptions:
        return cls(
            endpoint=hub.endpoint,
            token=hub.token or None,
            first_window=hub.first_window,
            max_header_bytes=hub.max_header_bytes,
            per_host_concurrency=hub.per_host_concurrency,
            connect_timeout=hub.connect_timeout,
            read_timeout=hub.read_timeout,
            retry=RetryPolicy(
                max_attempts=hub.max_attempts,
                base_delay=hub.backoff_base,
                max_delay=hub.backoff_max,
                max_total_wait=hub.max_retry_wait,
            ),
        )


@dataclass(frozen=True)
class RemoteHeader:
    header: GGUFHeader
    file_size: int
    bytes_fetched: int  # body bytes received, wasted ones (retries, skips) included
    requests: int  # data requests (ranges or streams), retries included, redirects not
    etag: str | None
    final_url: str  # where the bytes came from (the CDN after a redirect)
    http_requests: int = 0  # every HTTP request, redirect hops included
    retries: int = 0
    waited: float = 0.0  # seconds slept in backoff
    url: str = ""  # the URL asked for


@dataclass
class FileRead:
    """The state of one file's read (a header read, or ranges.py's range read): its bytes so
    far, the URL they come from and what the read cost."""

    url: str
    final: str
    # The bytes read so far, as received: joined only when the parser needs them
    # (`data`), so each byte is copied once between the socket and the parser.
    parts: list[bytes] = field(default_factory=list)
    have: int = 0  # their total length
    file_size: int | None = None
    expected_size: int | None = None  # from the hub's file listing, when known
    etag: str | None = None
    stream: aiohttp.ClientResponse | None = None  # open 200 body when Range was ignored
    release: Callable[[], None] | None = None
    bytes: int = 0
    requests: int = 0
    http_requests: int = 0
    retries: int = 0
    waited: float = 0.0

    def add(self, chunks: list[builtins.bytes], n: int) -> None:
        self.parts += chunks
        self.have += n

    def data(self) -> builtins.bytes:
        """Everything read so far, as one bytes object (kept joined for the next call)."""
        if len(self.parts) != 1:
            self.parts = [b"".join(self.parts)]
        return self.parts[0]

    def close_stream(self) -> None:
        if self.stream is not None:
            self.stream.close()  # drops the connection: the rest of the file is never read
            self.stream = None
        if self.release is not None:
            self.release()
            self.release = None


def origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    port = parts.port or {"http": 80, "https": 443}.get(parts.scheme)
    return parts.scheme, (parts.hostname or "").lower(), port


def retry_hint(headers: Any) -> float | None:
    """Seconds the server asks us to wait: Retry-After (seconds or a date) or RateLimit t=."""
    hints: list[float] = []
    value = headers.get("Retry-After")
    if value:
        try:
            hints.append(max(0.0, float(value)))
        except ValueError:
            # A malformed value is the server's bug, not a reason to fail: back off as usual.
            with contextlib.suppress(ValueError, TypeError, OverflowError):
                when = email.utils.parsedate_to_datetime(value)
                hints.append(max(0.0, when.timestamp() - time.time()))
    m = _RATELIMIT_T.search(headers.get("RateLimit", "") or "")
    if m and int(m.group(1)) == 0:  # r=0: nothing left in this window, reset in t seconds
        hints.append(float(m.group(2)))
    return max(hints) if hints else None


def client_timeout(options: HttpOptions) -> aiohttp.ClientTimeout:
    # No total: a long header or download may take its time as long as bytes keep coming.
    return aiohttp.ClientTimeout(
        total=None,
        connect=options.connect_timeout,
        sock_connect=options.connect_timeout,
        sock_read=options.read_timeout,
    )


def new_session(options: HttpOptions) -> aiohttp.ClientSession:
    """The client session every hub reader and downloader uses (one pool per owner)."""
    return aiohttp.ClientSession(
        timeout=client_timeout(options),
        # auto_decompress off: byte counts are wire bytes and a gzip'd range is refused.
        auto_decompress=False,
        headers={"User-Agent": options.user_agent},
        # No cookies: a hub cookie must not ride along to a CDN on the same host.
        cookie_jar=aiohttp.DummyCookieJar(),
    )


class SessionOwner:
    """An aiohttp session made on first use from `options` (closed by `close()`, or on
    leaving `async with`), or one the caller lends (left open: it is the caller's)."""

    def __init__(self, options: HttpOptions, session: aiohttp.ClientSession | None) -> None:
        self.options = options
        self._session = session
        self._own_session = session is None

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = new_session(self.options)
        return self._session

    async def close(self) -> None:
        if self._own_session and self._session is not None:
            await self._session.close()
        self._session = None

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class HubHttp(SessionOwner):
    """One connection pool, per-host limits and the retry policy for all header reads."""

    def __init__(
        self,
        options: HttpOptions | None = None,
        *,
        session: aiohttp.ClientSession | None = None,
        sleep: Sleep = asyncio.sleep,
        jitter: Callable[[], float] = random.random,
        parser: Parser | None = None,
    ) -> None:
        super().__init__(options or HttpOptions(), session)
        self._sleep = sleep
        self._jitter = jitter
        self._parser = parser
        self._endpoint = origin(self.options.endpoint)
        self._slots: dict[tuple[str, str, int | None], asyncio.Semaphore] = {}
        self._timeout = client_timeout(self.options)

    @classmethod
    def from_settings(cls, hub: HubSettings, **kw: Any) -> HubHttp:
        return cls(HttpOptions.from_settings(hub), **kw)

    # -- the header loop --------------------------------------------------------------
    async def fetch_header(
        self,
        url: str,
        *,
        first_window: int | None = None,
        max_header_bytes: int | None = None,
        limits: Limits | None = None,
        margin: int = 64 * 1024,
        expected_size: int | None = None,
    ) -> RemoteHeader:
        # The default parser carries its string walks from one attempt to the next.
        parse = self._parser or functools.partial(parse_header, progress=ParseProgress())
        budget = max_header_bytes if max_header_bytes is not None else self.options.max_header_bytes
        f = FileRead(url=url, final=url, expected_size=expected_size)
        window = first_window or self.options.first_window
        target = min(window, budget)
        try:
            while True:
                await self._fill(f, target, window)
                try:
                    header = parse(f.data(), file_size=f.file_size, limits=limits)
                except NeedMoreData as need:
                    target = self._next_target(f, need, budget, margin)
                    if f.stream is not None:
                        # A stream costs no round trips: step a window at a time, so an
                        # estimate that runs high never makes us read far past the header.
                        target = min(target, f.have + window)
                    continue
                return RemoteHeader(
                    header=header,
                    file_size=f.file_size if f.file_size is not None else f.have,
                    bytes_fetched=f.bytes,
                    requests=f.requests,
                    etag=f.etag,
                    final_url=f.final,
                    http_requests=f.http_requests,
                    retries=f.retries,
                    waited=f.waited,
                    url=url,
                )
        finally:
            f.close_stream()

    def _next_target(self, f: FileRead, need: NeedMoreData, budget: int, margin: int) -> int:
        have = f.have
        if f.file_size is not None and have >= f.file_size:
            # The parser asks for bytes beyond the end of the file.
            raise TruncatedFile(
                f"file ends at {f.file_size} bytes, header needs {need.needed}", field=need.field
            )
        if need.needed > budget:
            raise HeaderTooLarge(
                f"header needs {need.needed} bytes, budget is {budget}",
                needed=need.needed,
                budget=budget,
                url=f.url,
            )
        if have >= budget:
            raise HeaderTooLarge(
                f"header exceeds the budget of {budget} bytes", needed=need.needed, budget=budget, url=f.url
            )
        # The estimate can be short (names not yet seen): one margin saves a round trip.
        target = max(need.needed + margin + (need.needed - have) // 16, have + 1)
        target = min(target, budget)
        if f.file_size is not None:
            target = min(target, f.file_size)
        return target

    async def _fill(self, f: FileRead, target: int, window: int) -> None:
        while f.have < target and (f.file_size is None or f.have < f.file_size):
            if f.stream is not None:
                try:
                    chunk = await self._read_stream(f, min(_CHUNK, target - f.have))
                except HubError as exc:
                    # The stream broke: go on with range requests (and their retries)
                    # from where it stopped, unless retries are spent.
                    if not exc.retryable or f.retries + 1 >= self.options.retry.max_attempts:
                        raise
                    f.retries += 1
                    continue
                if not chunk:
                    f.file_size = f.have  # the whole file arrived: it ends here
                    return
                f.add([chunk], len(chunk))
                continue
            end = target if f.file_size is None else min(target, f.file_size)
            await self.with_retries(f, functools.partial(self._range_once, f, f.have, end))
            if f.stream is not None:
                # The server just ignored Range: from here on read a window at a time.
                target = min(target, f.have + window)

    async def _read_stream(self, f: FileRead, n: int) -> bytes:
        assert f.stream is not None
        try:
            chunk = await f.stream.content.read(n)
        except (TimeoutError, aiohttp.ClientError) as exc:
            f.close_stream()
            raise transport_error(exc, f.final) from exc
        f.bytes += len(chunk)
        return chunk

    # -- one request and its retries --------------------------------------------------
    async def with_retries(self, f: FileRead, op: Callable[[], Awaitable[None]]) -> None:
        """Run `op` (one request of the read `f`) again on a retryable error, within the retry
        policy, counting retries and waits in `f`. Range reads (ranges.py) use it too."""
        policy = self.options.retry
        attempt = 0
        while True:
            attempt += 1
            try:
                await op()
                return
            except HubError as exc:
                if not exc.retryable or attempt >= policy.max_attempts:
                    raise
                backoff = min(policy.max_delay, policy.base_delay * 2 ** (attempt - 1))
                delay = backoff * (0.5 + self._jitter() / 2)  # jitter spreads a thundering herd
                hint = getattr(exc, "retry_after", None)
                if hint is not None:
                    delay = max(delay, hint)
                if f.waited + delay > policy.max_total_wait:
                    raise
                f.waited += delay
                f.retries += 1
                await self._sleep(delay)

    async def _range_once(self, f: FileRead, start: int, end: int) -> None:
        headers = {"Range": f"bytes={start}-{end - 1}", "Accept-Encoding": "identity"}
        if f.etag is not None and not f.etag.startswith("W/"):
            headers["If-Range"] = f.etag  # a changed file answers 200 instead of a stale range
        resp, release = await self.open_response(f, headers)
        keep = False
        try:
            f.requests += 1
            etag = resp.headers.get("ETag")
            encoding = resp.headers.get("Content-Encoding", "").strip().lower()
            if resp.status in (200, 206) and encoding not in ("", "identity"):
                # Parsed as it comes, a compressed body would pass for a file that is not GGUF.
                raise EncodedBody(
                    f"body sent with Content-Encoding {encoding!r}",
                    url=f.final,
                    status=resp.status,
                    request_id=resp.headers.get("X-Request-Id"),
                )
            if resp.status == 206:
                # A server may send less than asked (some CDNs cap a range): take what the
                # Content-Range announces; the caller's loop asks for the rest.
                last = self._check_range(f, resp, start, etag)
                want = min(end, last + 1) - start
                chunks, got = await self._read_body(resp, want, f)
                if got < want:
                    raise TruncatedBody(
                        f"got {got} of {want} bytes at offset {start}",
                        url=f.final,
                        status=206,
                        request_id=resp.headers.get("X-Request-Id"),
                    )
                f.add(chunks, got)
            elif resp.status == 200:
                self._check_version(f, etag, resp)
                length = resp.headers.get("Content-Length")
                if length is not None and length.isdigit():
                    f.file_size = self._check_size(f, int(length), resp)
                f.stream, f.release, keep = resp, release, True
                if start:
                    await self._skip(f, start)
            else:
                raise self.status_error(resp, f.final)
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise transport_error(exc, f.final) from exc
        finally:
            if not keep:
                resp.release()
                release()

    async def _skip(self, f: FileRead, n: int) -> None:
        # A server that stopped honouring Range mid-read restarts at byte 0.
        while n > 0:
            chunk = await self._read_stream(f, min(_CHUNK, n))
            if not chunk:
                f.close_stream()
                raise FileChanged("the file is now shorter than what was already read", url=f.url)
            n -= len(chunk)

    async def _read_body(self, resp: aiohttp.ClientResponse, want: int, f: FileRead) -> tuple[list[bytes], int]:
        """At most `want` bytes of the body, as the chunks received, and their total."""
        # Never trust Content-Length: read at most what was asked for.
        parts: list[bytes] = []
        got = 0
        while got < want:
            chunk = await resp.content.read(min(_CHUNK, want - got))
            if not chunk:
                break
            parts.append(chunk)
            got += len(chunk)
        f.bytes += got
        return parts, got

    def _check_range(self, f: FileRead, resp: aiohttp.ClientResponse, start: int, etag: str | None) -> int:
        """Validate a 206; returns the last byte offset it carries."""
        m = _CONTENT_RANGE.match(resp.headers.get("Content-Range", "").strip())
        if m is None or m.group(3) == "*" or int(m.group(1)) != start or int(m.group(2)) < start:
            raise InvalidResponse(
                f"bad Content-Range {resp.headers.get('Content-Range')!r} for a range at {start}",
                url=f.final,
                status=resp.status,
                request_id=resp.headers.get("X-Request-Id"),
            )
        self._check_version(f, etag, resp)
        f.file_size = self._check_size(f, int(m.group(3)), resp)
        return min(int(m.group(2)), f.file_size - 1)

    def _check_version(self, f: FileRead, etag: str | None, resp: aiohttp.ClientResponse) -> None:
        # A 200 to a request with If-Range means "changed" only if the ETag moved too; the
        # same ETag means a server that ignores Range, which the stream path handles.
        if f.etag is None:
            f.etag = etag
        elif etag != f.etag:
            raise FileChanged(
                f"ETag changed from {f.etag} to {etag} between reads",
                url=f.url,
                status=resp.status,
                request_id=resp.headers.get("X-Request-Id"),
            )

    def _check_size(self, f: FileRead, size: int, resp: aiohttp.ClientResponse) -> int:
        if f.file_size is not None and size != f.file_size:
            raise FileChanged(
                f"file size changed from {f.file_size} to {size} between reads",
                url=f.url,
                status=resp.status,
                request_id=resp.headers.get("X-Request-Id"),
            )
        if f.expected_size is not None and size != f.expected_size:
            # The URL pins a commit, so the hub's listed size must hold. A short 200 with
            # an honest Content-Length would otherwise pass for a tiny, truncated file and
            # be recorded as a bad file instead of being read again.
            raise FileChanged(
                f"the server reports {size} bytes, the hub lists {f.expected_size}",
                url=f.url,
                status=resp.status,
                request_id=resp.headers.get("X-Request-Id"),
            )
        return size

    # -- HTTP: redirects by hand, token only to the hub ------------------------------
    def _slot(self, url: str) -> asyncio.Semaphore:
        key = origin(url)
        sem = self._slots.get(key)
        if sem is None:
            sem = self._slots[key] = asyncio.Semaphore(self.options.per_host_concurrency)
        return sem

    def _auth(self, url: str) -> dict[str, str]:
        if self.options.token and origin(url) == self._endpoint:
            return {"Authorization": f"Bearer {self.options.token}"}
        return {}

    async def open_response(
        self, f: FileRead, headers: dict[str, str]
    ) -> tuple[aiohttp.ClientResponse, Callable[[], None]]:
        """GET with redirects followed by hand; returns the response holding its host slot."""
        url = f.final
        restarted = False
        hops = 0
        while True:
            sem = self._slot(url)
            await sem.acquire()
            try:
                f.http_requests += 1
                resp = await self.session.get(
                    url, headers={**headers, **self._auth(url)}, allow_redirects=False, timeout=self._timeout
                )
            except (TimeoutError, aiohttp.ClientError) as exc:
                sem.release()
                raise transport_error(exc, url) from exc
            except BaseException:
                sem.release()
                raise
            if resp.status in _REDIRECTS:
                location = resp.headers.get("Location")
                resp.release()
                sem.release()
                hops += 1
                if not location or hops > self.options.max_redirects:
                    raise InvalidResponse(
                        "redirect without Location or too many redirects", url=url, status=resp.status
                    )
                url = urljoin(url, location)
                if urlsplit(url).scheme not in ("http", "https"):
                    raise InvalidResponse(
                        f"redirect to a non-HTTP location {url!r}", url=f.url, status=resp.status
                    )
                continue
            if resp.status in (401, 403, 404) and url != f.url and not restarted and f.final != f.url:
                # A cached CDN URL whose signature expired: resolve again through the hub.
                resp.release()
                sem.release()
                url, restarted = f.url, True
                continue
            f.final = url  # later ranges go straight to the CDN, saving the hub a request
            return resp, sem.release

    def status_error(self, resp: aiohttp.ClientResponse, url: str) -> HubError:
        h = resp.headers
        return error_for_status(
            resp.status,
            url=url,
            message=h.get("X-Error-Message") or resp.reason or f"HTTP {resp.status}",
            request_id=h.get("X-Request-Id"),
            error_code=h.get("X-Error-Code"),
            retry_after=retry_hint(h),
        )


def transport_error(exc: BaseException, url: str) -> HubError:
    if isinstance(exc, asyncio.TimeoutError):
        return HubTimeout(f"timed out: {exc}", url=url)
    return HubConnectionError(f"{type(exc).__name__}: {exc}", url=url)


async def fetch_header(
    session_or_client: HubHttp | aiohttp.ClientSession,
    url: str,
    *,
    first_window: int | None = None,
    max_header_bytes: int | None = None,
    limits: Limits | None = None,
    token: str | None = None,
    endpoint: str | None = None,
) -> RemoteHeader:
    """Read and parse the header at `url` with a HubHttp, or a bare session.

    With a bare session, the token (if any) goes only to `endpoint`, by default the
    origin of `url` itself.
    """
    if isinstance(session_or_client, HubHttp):
        return await session_or_client.fetch_header(
            url, first_window=first_window, max_header_bytes=max_header_bytes, limits=limits
        )
    parts = urlsplit(url)
    options = HttpOptions(endpoint=endpoint or f"{parts.scheme}://{parts.netloc}", token=token)
    client = HubHttp(options, session=session_or_client)
    return await client.fetch_header(
        url, first_window=first_window, max_header_bytes=max_header_bytes, limits=limits
    )


def first_window_for(
    path: str,
    *,
    split_no: int = 0,
    size: int | None = None,
    first_window: int = FIRST_WINDOW,
    small_window: int = SHARD_WINDOW,
) -> int:
    """The first range to ask for a file, from what its name and listed size tell.

    Shards 2..N (`split_no` > 0) carry only tensor infos and projectors and adapters have
    no vocabulary, so they get `small_window`: a 2 MiB first read would be ~90% waste.
    A listed size below the window caps it, so a small file is one exact request.
    """
    name = unquote(path.rsplit("/", 1)[-1])
    shard = parse_shard(name)
    small = split_no > 0 or (shard is not None and shard[1] > 1) or bool(_NO_VOCAB_NAME.search(name))
    window = small_window if small else first_window
    if size is not None and size > 0:
        window = min(window, size)
    return window


def resolve_url(endpoint: str, repo_id: str, revision: str, path: str) -> str:
    """The download URL of a file of a hub repo at `revision` (a commit sha pins it)."""
    return f"{endpoint.rstrip('/')}/{quote(repo_id)}/resolve/{quote(revision, safe='')}/{quote(path)}"


def normalize_url(url: str) -> str:
    """A hub page URL (`.../blob/<rev>/<path>`) becomes its download URL (`/resolve/`)."""
    parts = urlsplit(url)
    segments = parts.path.split("/")
    if len(segments) > 4 and segments[3] == "blob":
        segments[3] = "resolve"
    return urlunsplit(parts._replace(path="/".join(segments)))


def shard_urls(url: str) -> list[str]:
    """Every shard URL of the split model `url` belongs to (by gguf-split's naming), or [url]."""
    parts = urlsplit(url)
    head, _, name = parts.path.rpartition("/")
    parsed = parse_shard(unquote(name))
    if parsed is None:
        return [url]
    stem, _, count = parsed
    suffix = name[-len(".gguf") :]
    return [
        urlunsplit(parts._replace(path=f"{head}/{stem}-{i:05d}-of-{count:05d}{suffix}"))
        for i in range(1, count + 1)
    ]


async def fetch_artifact_headers(
    client: HubHttp,
    url: str,
    *,
    limits: Limits | None = None,
    shard_window: int = SHARD_WINDOW,
) -> list[RemoteHeader]:
    """Headers of every file of the artifact at `url`: all shards of a split model.

    Shard 1 carries the metadata and gets the full first window; shards 2..N hold only
    tensor infos and get `shard_window`. Shards are read concurrently, within the
    per-host limit.
    """
    urls = shard_urls(normalize_url(url))
    first = client.options.first_window
    tasks = [
        asyncio.ensure_future(
            client.fetch_header(
                u,
                limits=limits,
                first_window=first_window_for(
                    urlsplit(u).path, split_no=i, first_window=first, small_window=shard_window
                ),
            )
        )
        for i, u in enumerate(urls)
    ]
    try:
        return list(await asyncio.gather(*tasks))
    finally:
        for t in tasks:  # one bad shard fails the artifact: stop reading the others
            t.cancel()


async def read_remote_artifact_headers(
    url: str, hub: HubSettings, *, limits: Limits | None = None
) -> list[RemoteHeader]:
    """One-shot form for the CLI: open a client from settings, read, close."""
    async with HubHttp.from_settings(hub) as client:
        return await fetch_artifact_headers(client, url, limits=limits, shard_window=hub.shard_window)
