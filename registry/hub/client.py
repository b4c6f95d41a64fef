"""Typed access to a hub's API: list GGUF repos, read repo info.

The requests are made here, on huggingface_hub's blocking HTTP session in a worker thread
(`asyncio.to_thread`), not through HfApi: its `model_info` reads a body of any size
whole, and its pager has no timeout, follows a `next` link back to a page it read forever
and sends the token wherever that link points. Every request has the read timeout, a
size cap on its decoded bytes and the retry policy. Listing pages (`Link: rel="next"`)
are fetched one at a time as the caller iterates, and a loop is an error. Results are
frozen dataclasses that tolerate missing and unknown server fields; every failure is one
of our `HubError` types, typed from the hub's X-Error-Code and status.

The token is always passed explicitly (`token=False` when there is none) so that
huggingface_hub never falls back to a token from the environment or ~/.cache.
"""

from __future__ import annotations

import asyncio
import functools
import json
import zlib
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal, TypeVar
from urllib.parse import quote, urlencode, urljoin

import httpx2
from huggingface_hub import hf_hub_url
from huggingface_hub.utils import build_hf_headers, get_session, parse_datetime, validate_repo_id

from registry.hub import errors as e
from registry.hub.http import RetryPolicy, Sleep, origin, retry_hint

if TYPE_CHECKING:
    from registry.config import HubSettings

T = TypeVar("T")
Sort = Literal["created_at", "downloads", "last_modified", "likes", "trending_score"]
# Only what a crawl needs to tell changed repos from unchanged ones: `full` would also
# send every repo's file list, many times the bytes.
_LIST_FIELDS = ("sha", "lastModified", "downloads", "likes", "tags", "gated", "private")
_SORT_PARAM = {"created_at": "createdAt", "last_modified": "lastModified", "trending_score": "trendingScore"}
# A page of the hub's maximum 1000 repos with the fields above is a few hundred KiB.
MAX_PAGE_BYTES = 32 * 1024 * 1024
# Pages in a row that may name only repos already given before the listing is refused: an
# overlapping page repeats a few, a real page of nothing new does not come twice in a row.
MAX_STALE_PAGES = 3
# Repo info lists every file with its size and LFS sha256, about 250 bytes each: a repo of
# 100,000 files (more than the hub advises) is about 25 MiB.
MAX_INFO_BYTES = 32 * 1024 * 1024
_INFO_PARAMS = {"blobs": "true"}  # sizes and LFS oids of the files, as model_info(files_metadata=True)
_ERROR_BYTES = 64 * 1024  # of an error's body, read for its message only
# The content codings we ask for and decode ourselves (`decoded`), in steps of at most
# DECODE_STEP bytes, so that a size cap holds on decoded bytes: httpx2's own decoders
# (2.0, which huggingface_hub 2.x allows) inflate each received chunk whole, and 64 KiB of
# gzip can hold 64 MiB. Only these are asked for, whatever decoders httpx2 has installed.
_WBITS = {"gzip": zlib.MAX_WBITS | 16, "deflate": zlib.MAX_WBITS}
ACCEPT_ENCODING = ", ".join(_WBITS)
DECODE_STEP = 1024 * 1024
# What the hub says in X-Error-Message of a 401 about the token itself, and of a repo
# taken down (it exists: its status says more than a RepoNotFound code).
_BAD_TOKEN = "Invalid credentials in Authorization header"
_DISABLED = "Access to this resource is disabled."


@dataclass(frozen=True)
class RepoFile:
    path: str
    size: int | None = None
    sha256: str | None = None  # the LFS oid; None for files kept in git

    @property
    def is_gguf(self) -> bool:
        return self.path.lower().endswith(".gguf")


@dataclass(frozen=True)
class RepoSummary:
    """One entry of a listing: enough to decide whether a repo changed since the last crawl."""

    repo_id: str
    sha: str | None = None
    last_modified: datetime | None = None
    downloads: int | None = None
    likes: int | None = None
    tags: tuple[str, ...] = ()
    gated: bool = False
    private: bool = False


@dataclass(frozen=True)
class RepoInfo:
    repo_id: str
    sha: str | None
    last_modified: datetime | None = None
    downloads: int | None = None
    likes: int | None = None
    tags: tuple[str, ...] = ()
    gated: bool = False
    gated_mode: str | None = None  # "auto" or "manual" when gated
    private: bool = False
    license: str | None = None  # from the model card
    base_model: tuple[str, ...] = ()  # from the model card, always a list
    base_model_relation: str | None = None
    files: tuple[RepoFile, ...] = ()

    @property
    def gguf_files(self) -> tuple[RepoFile, ...]:
        return tuple(f for f in self.files if f.is_gguf)


def _str_list(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,)
    if isinstance(value, list | tuple):
        return tuple(v for v in value if isinstance(v, str))
    return ()


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _gated(value: Any) -> tuple[bool, str | None]:
    if isinstance(value, str) and value:
        return True, value
    return bool(value), None


def _datetime(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return parse_datetime(value)
    except ValueError:
        return None


def summary_from(item: Any, url: str | None = None) -> RepoSummary:
    """One entry of a listing page as the hub sends it (JSON)."""
    repo_id = item.get("id") if isinstance(item, Mapping) else None
    if not isinstance(repo_id, str) or not repo_id:
        raise e.InvalidResponse(f"a listing entry without a repo id: {str(item)[:200]!r}", url=url)
    gated, _ = _gated(item.get("gated"))
    sha = item.get("sha")
    return RepoSummary(
        repo_id=repo_id,
        sha=sha if isinstance(sha, str) else None,
        last_modified=_datetime(item.get("lastModified")),
        downloads=_int(item.get("downloads")),
        likes=_int(item.get("likes")),
        tags=_str_list(item.get("tags")),
        gated=gated,
        private=item.get("private") is True,
    )


def info_from(body: Any, url: str | None = None) -> RepoInfo:
    """A repo info as the hub sends it (JSON). Odd types of the fields it reads are
    tolerated; a body that is not an object, no repo id, a bad `lastModified`, a file
    without a name or an `lfs` without its sha256, size and pointer size is an
    InvalidResponse (huggingface_hub's reader refused those too)."""
    if not isinstance(body, Mapping):
        raise e.InvalidResponse(f"repo info is a JSON {type(body).__name__}, not an object", url=url)
    repo_id = body.get("id")
    if not isinstance(repo_id, str) or not repo_id:
        raise e.InvalidResponse(f"repo info without a repo id: {repr(repo_id)[:200]}", url=url)
    modified = body.get("lastModified")
    if modified and _datetime(modified) is None:
        raise e.InvalidResponse(
            f"repo info of {repo_id} with a bad lastModified: {str(modified)[:200]!r}", url=url
        )
    card = body.get("cardData")
    card = card if isinstance(card, Mapping) else {}
    gated, mode = _gated(body.get("gated"))
    lic = card.get("license")
    relation = card.get("base_model_relation")
    sha = body.get("sha")
    return RepoInfo(
        repo_id=repo_id,
        sha=sha if isinstance(sha, str) else None,
        last_modified=_datetime(modified),
        downloads=_int(body.get("downloads")),
        likes=_int(body.get("likes")),
        tags=_str_list(body.get("tags")),
        gated=gated,
        gated_mode=mode,
        private=bool(body.get("private")),
        license=lic if isinstance(lic, str) else (_str_list(lic) or (None,))[0],
        base_model=_str_list(card.get("base_model")),
        base_model_relation=relation if isinstance(relation, str) else None,
        files=_files(body.get("siblings"), repo_id, url),
    )


def _files(siblings: Any, repo_id: str, url: str | None) -> tuple[RepoFile, ...]:
    if siblings is None:
        return ()
    if not isinstance(siblings, list):
        raise e.InvalidResponse(f"the files of {repo_id} are a JSON {type(siblings).__name__}", url=url)
    files = []
    for s in siblings:
        path = s.get("rfilename") if isinstance(s, Mapping) else None
        if not isinstance(path, str) or not path:
            raise e.InvalidResponse(f"a file of {repo_id} without a name: {str(s)[:200]!r}", url=url)
        lfs = s.get("lfs")
        if lfs and not (
            isinstance(lfs, Mapping) and all(k in lfs for k in ("sha256", "size", "pointerSize"))
        ):
            raise e.InvalidResponse(f"{path} of {repo_id} with a malformed lfs: {str(lfs)[:200]!r}", url=url)
        sha = lfs["sha256"] if lfs else None
        files.append(RepoFile(path, size=_int(s.get("size")), sha256=sha if isinstance(sha, str) else None))
    return tuple(files)


def map_error(exc: BaseException, url: str | None = None) -> e.HubError:
    """httpx2 and socket exceptions -> our typed errors."""
    if isinstance(exc, e.HubError):
        return exc
    if isinstance(exc, httpx2.TooManyRedirects | httpx2.DecodingError):
        return e.InvalidResponse(f"{type(exc).__name__}: {exc}", url=url)
    if isinstance(exc, httpx2.TimeoutException):
        return e.HubTimeout(f"timed out: {exc}", url=url)
    if isinstance(exc, httpx2.TransportError | ConnectionError | OSError):
        return e.HubConnectionError(f"{type(exc).__name__}: {exc}", url=url)
    raise exc


def decoded(raw: Iterable[bytes], encoding: str, step: int = DECODE_STEP) -> Iterator[bytes]:
    """The body sent as `raw` chunks with Content-Encoding `encoding`, decoded only as the
    caller takes it, at most `step` bytes at a time. ValueError or zlib.error when it cannot
    be decoded: a coding we did not ask for, more than one, corrupt or cut short."""
    codings = [c for c in (c.strip().lower() for c in encoding.split(",")) if c and c != "identity"]
    if not codings:
        yield from raw
        return
    if len(codings) > 1 or codings[0] not in _WBITS:
        raise ValueError(f"a body with Content-Encoding {encoding!r}, not one of {ACCEPT_ENCODING}")
    inflate = zlib.decompressobj(_WBITS[codings[0]])
    for chunk in raw:
        while chunk and not inflate.eof:  # what follows the end is ignored, as by httpx2
            piece = inflate.decompress(chunk, step)
            chunk = inflate.unconsumed_tail
            if piece:
                yield piece
    if not inflate.eof:
        raise ValueError(f"the {codings[0]} body ends before its end")


def _read(resp: httpx2.Response, cap: int, what: str, url: str) -> bytes:
    """The whole body, decoded, refused as soon as it passes `cap` bytes."""

    def refused(message: str) -> e.InvalidResponse:
        return e.InvalidResponse(
            message, url=url, status=resp.status_code, request_id=resp.headers.get("X-Request-Id")
        )

    body = bytearray()
    try:
        for piece in decoded(resp.iter_raw(), resp.headers.get("Content-Encoding", "")):
            body += piece
            if len(body) > cap:
                raise refused(f"{what} over {cap} bytes (refused after decoding {len(body)})")
    except (ValueError, zlib.error) as exc:
        raise refused(f"{what} that cannot be decoded: {exc}") from exc
    return bytes(body)


def _info_error(resp: httpx2.Response) -> e.HubError:
    """An error answer to repo info, typed as huggingface_hub's `hf_raise_for_status` typed it
    when HfApi read repo info for us."""
    h = resp.headers
    said, code = h.get("X-Error-Message"), h.get("X-Error-Code")
    if said == _DISABLED:
        code = None if code == "RepoNotFound" else code
    elif (
        resp.status_code == 401
        and code not in ("RevisionNotFound", "EntryNotFound", "GatedRepo")
        and said != _BAD_TOKEN
        and resp.url.scheme == "https"
    ):
        code = "RepoNotFound"  # the hub's 401 for a private repo and a missing one alike
    body = bytearray()
    try:
        for piece in decoded(resp.iter_raw(), h.get("Content-Encoding", ""), _ERROR_BYTES):
            body += piece
            if len(body) >= _ERROR_BYTES:
                break
    except (ValueError, zlib.error):
        pass  # the message is what could be read of it, or the status
    return e.error_for_status(
        resp.status_code,
        url=str(resp.url),
        message=_server_message(said, bytes(body[:_ERROR_BYTES]))
        or f"{resp.status_code} {resp.reason_phrase}".strip(),
        request_id=h.get("X-Request-Id") or h.get("X-Amzn-Trace-Id") or h.get("X-Amz-Cf-Id"),
        error_code=code,
        retry_after=retry_hint(h),
    )


def _server_message(header: str | None, body: bytes) -> str:
    """X-Error-Message and the JSON body's `error`, each said once."""
    said = [header]
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        data = None
    if isinstance(data, Mapping):
        error = data.get("error")
        said += error if isinstance(error, list) else [error]
    lines = (str(x).strip() for x in said if x is not None)
    return "\n".join(dict.fromkeys(x for x in lines if x))


def _status_error(resp: httpx2.Response) -> e.HubError:
    h = resp.headers
    return e.error_for_status(
        resp.status_code,
        url=str(resp.url),
        message=h.get("X-Error-Message") or resp.reason_phrase or f"HTTP {resp.status_code}",
        request_id=h.get("X-Request-Id"),
        error_code=h.get("X-Error-Code"),
        retry_after=retry_hint(h),
    )


def _get_json(
    url: str,
    token: str | None,
    timeout: float | None,
    *,
    what: str,
    cap: int,
    error: Callable[[httpx2.Response], e.HubError],
    error_from: int,
    params: Mapping[str, str] | None = None,
) -> tuple[Any, httpx2.Response]:
    """A GET of JSON (blocking): the body decoded up to `cap` bytes and parsed, and the
    response for its headers. A status of `error_from` or above becomes `error(resp)`."""
    headers = {**build_hf_headers(token=token or False), "Accept-Encoding": ACCEPT_ENCODING}
    with get_session().stream("GET", url, params=params, headers=headers, timeout=timeout) as resp:
        if not 200 <= resp.status_code < error_from:
            raise error(resp)
        body = _read(resp, cap, f"a {what}", url)
    try:
        return json.loads(body), resp
    except (ValueError, RecursionError) as exc:  # not JSON, not UTF-8, or nested too deep
        raise e.InvalidResponse(f"the {what} is not JSON: {type(exc).__name__}: {exc}", url=url) from exc


class HubClient:
    """Typed async access to a hub's API (any server speaking the Hugging Face Hub API)."""

    def __init__(
        self,
        endpoint: str = "https://huggingface.co",
        token: str | None = None,
        *,
        retry: RetryPolicy | None = None,
        sleep: Sleep = asyncio.sleep,
        timeout: float | None = 30.0,
    ) -> None:
        self.endpoint = endpoint.rstrip("/")
        self._token = token or None
        self.retry = retry or RetryPolicy()
        self._sleep = sleep
        self._timeout = timeout

    @classmethod
    def from_settings(cls, hub: HubSettings, **kw: Any) -> HubClient:
        retry = RetryPolicy(hub.max_attempts, hub.backoff_base, hub.backoff_max, hub.max_retry_wait)
        return cls(hub.endpoint, hub.token or None, retry=retry, timeout=hub.read_timeout, **kw)

    def resolve_url(self, repo_id: str, revision: str | None, path: str) -> str:
        """The /resolve/ URL of a file; pin `revision` to a commit sha for a stable read."""
        return hf_hub_url(repo_id, path, revision=revision or "main", endpoint=self.endpoint)

    async def list_gguf_repos(
        self,
        *,
        search: str | None = None,
        author: str | None = None,
        sort: Sort | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[RepoSummary]:
        """Repos tagged gguf, each once; pages are fetched only as the caller iterates.

        `sort` is descending (`downloads`, `likes`, `last_modified`, `created_at`,
        `trending_score`). `limit` is sent as the page size, so a limited listing is one
        request up to the hub's page maximum, and kept as a cap on the distinct repos given:
        a listing paged while its repos change (sorted by lastModified) names a repo on two
        pages, and the repeat must not take the place of a repo further on.
        """
        params: list[tuple[str, str]] = [("filter", "gguf")]
        if author:
            params.append(("author", author))
        if search:
            params.append(("search", search))
        if sort is not None:
            params.append(("sort", _SORT_PARAM.get(sort, sort)))
        if limit is not None:
            params.append(("limit", str(limit)))
        params += [("expand", f) for f in _LIST_FIELDS]
        url: str | None = f"{self.endpoint}/api/models?{urlencode(params)}"
        seen: set[str] = set()
        given: set[str] = set()
        left = limit
        stale = 0  # pages in a row that named no repo not given before
        while url is not None and (left is None or left > 0):
            if url in seen:
                raise e.InvalidResponse("the listing's next page is a page it already gave", url=url)
            seen.add(url)
            items, nxt = await self._retrying(functools.partial(self._page, url))
            stale += 1
            for item in items:
                summary = summary_from(item, url)
                if summary.repo_id in given:
                    continue
                stale = 0
                given.add(summary.repo_id)
                yield summary
                if left is not None:
                    left -= 1
                    if left == 0:
                        break
            if stale >= MAX_STALE_PAGES and nxt is not None:
                # Each next page a new URL, yet nothing new on it: paged for ever otherwise.
                raise e.InvalidResponse(
                    f"the listing gave {stale} pages in a row without a repo it had not given", url=url
                )
            url = nxt

    def _page(self, url: str) -> tuple[list[Any], str | None]:
        """One listing page (blocking): its items and the next page's URL, if any."""
        # The token goes to the configured hub only, wherever a next link points.
        token = self._token if origin(url) == origin(self.endpoint) else None
        items, resp = _get_json(url, token, self._timeout, what="listing page", cap=MAX_PAGE_BYTES,
                                error=_status_error, error_from=300)  # fmt: skip
        where = str(resp.url)
        if not isinstance(items, list):
            raise e.InvalidResponse(
                f"the listing page is a JSON {type(items).__name__}, not a list", url=where
            )
        nxt = resp.links.get("next", {}).get("url")
        return items, urljoin(where, nxt) if nxt else None

    async def repo_info(self, repo_id: str, revision: str | None = None) -> RepoInfo:
        """Repo metadata and every file with its size and LFS sha256, retried when transient."""
        validate_repo_id(repo_id)  # HFValidationError: an id that would reshape the URL
        url = f"{self.endpoint}/api/models/{repo_id}"
        if revision is not None:
            url += f"/revision/{quote(revision, safe='')}"
        return info_from(await self._retrying(functools.partial(self._info, url)), url)

    def _info(self, url: str) -> Any:
        """The repo info at `url` (blocking), as JSON."""
        # `url` is on the configured hub. Redirects are followed; a 3xx left (no Location)
        # is read as a body, as by HfApi.
        info, _ = _get_json(url, self._token, self._timeout, what="repo info", cap=MAX_INFO_BYTES,
                            error=_info_error, error_from=400, params=_INFO_PARAMS)  # fmt: skip
        return info

    async def _retrying(self, fn: Callable[[], T]) -> T:
        """`fn` in a worker thread, again while it fails transiently, within the retry policy."""
        policy, waited, attempt = self.retry, 0.0, 0
        while True:
            attempt += 1
            try:
                return await self._call(fn)
            except e.HubError as exc:
                if not exc.retryable or attempt >= policy.max_attempts:
                    raise
                delay = min(policy.max_delay, policy.base_delay * 2 ** (attempt - 1))
                delay = max(delay, getattr(exc, "retry_after", None) or 0.0)
                if waited + delay > policy.max_total_wait:
                    raise
                waited += delay
                await self._sleep(delay)

    async def _call(self, fn: Callable[[], T]) -> T:
        try:
            return await asyncio.to_thread(fn)
        except (httpx2.HTTPError, OSError) as exc:
            raise map_error(exc, self.endpoint) from exc
