"""A thin typed wrapper over huggingface_hub's HfApi: list GGUF repos, read repo info.

HfApi is blocking, so every call runs in a worker thread (`asyncio.to_thread`). The
listing is paged here rather than by HfApi, whose pager has no timeout, follows a `next`
link back to a page it read forever and sends the token wherever that link points: pages
(`Link: rel="next"`) are fetched one at a time as the caller iterates, each with the read
timeout, a size cap and the retry policy, and a loop is an error. Results are frozen
dataclasses that tolerate missing and unknown server fields, and huggingface_hub's
exceptions become our `HubError` types.

The token is always passed explicitly (`token=False` when there is none) so that
huggingface_hub never falls back to a token from the environment or ~/.cache.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal, TypeVar
from urllib.parse import urlencode, urljoin

import httpx2
from huggingface_hub import HfApi, hf_hub_url
from huggingface_hub.errors import (
    GatedRepoError,
    HfHubHTTPError,
    HFValidationError,
    RemoteEntryNotFoundError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from huggingface_hub.utils import build_hf_headers, get_session, parse_datetime

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


def _card(info: Any) -> Mapping[str, Any]:
    card = getattr(info, "card_data", None)
    if card is None:
        return {}
    if isinstance(card, Mapping):
        return card
    to_dict = getattr(card, "to_dict", None)
    return to_dict() if callable(to_dict) else {}


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


def info_from(info: Any, url: str | None = None) -> RepoInfo:
    repo_id = getattr(info, "id", None)
    if not isinstance(repo_id, str) or not repo_id:
        raise e.InvalidResponse(f"repo info without a repo id: {repo_id!r}", url=url)
    card = _card(info)
    gated, mode = _gated(getattr(info, "gated", None))
    files = []
    for s in getattr(info, "siblings", None) or ():
        path = getattr(s, "rfilename", None)
        if not isinstance(path, str) or not path:
            raise e.InvalidResponse(f"a file of {repo_id} without a name: {path!r}", url=url)
        lfs = getattr(s, "lfs", None)
        sha = lfs.get("sha256") if isinstance(lfs, Mapping) else getattr(lfs, "sha256", None)
        files.append(
            RepoFile(
                path=path, size=_int(getattr(s, "size", None)), sha256=sha if isinstance(sha, str) else None
            )
        )
    lic = card.get("license")
    relation = card.get("base_model_relation")
    sha = getattr(info, "sha", None)
    modified = getattr(info, "last_modified", None)
    return RepoInfo(
        repo_id=repo_id,
        sha=sha if isinstance(sha, str) else None,
        last_modified=modified if isinstance(modified, datetime) else None,
        downloads=_int(getattr(info, "downloads", None)),
        likes=_int(getattr(info, "likes", None)),
        tags=_str_list(getattr(info, "tags", None)),
        gated=gated,
        gated_mode=mode,
        private=bool(getattr(info, "private", False)),
        license=lic if isinstance(lic, str) else (_str_list(lic) or (None,))[0],
        base_model=_str_list(card.get("base_model")),
        base_model_relation=relation if isinstance(relation, str) else None,
        files=tuple(files),
    )


def map_error(exc: BaseException, url: str | None = None) -> e.HubError:
    """huggingface_hub and httpx2 exceptions -> our typed errors."""
    if isinstance(exc, e.HubError):
        return exc
    if isinstance(exc, HfHubHTTPError):
        resp = exc.response
        status = resp.status_code if resp is not None else None
        where = url
        with contextlib.suppress(AttributeError, RuntimeError):  # a response without its request
            where = str(resp.request.url)
        message = exc.server_message or str(exc).strip().splitlines()[0]
        kw: dict[str, Any] = {"url": where, "status": status, "request_id": exc.request_id}
        if isinstance(exc, GatedRepoError):
            return e.GatedRepo(message, **kw)
        if isinstance(exc, RepositoryNotFoundError):
            return e.RepoNotFound(message, **kw)
        if isinstance(exc, RevisionNotFoundError):
            return e.RevisionNotFound(message, **kw)
        if isinstance(exc, RemoteEntryNotFoundError):
            return e.EntryNotFound(message, **kw)
        return e.error_for_status(
            status or 0,
            url=where or "",
            message=message,
            request_id=exc.request_id,
            retry_after=retry_hint(resp.headers) if resp is not None else None,
        )
    if isinstance(exc, httpx2.TooManyRedirects | httpx2.DecodingError):
        return e.InvalidResponse(f"{type(exc).__name__}: {exc}", url=url)
    if isinstance(exc, httpx2.TimeoutException):
        return e.HubTimeout(f"timed out: {exc}", url=url)
    if isinstance(exc, httpx2.TransportError | ConnectionError | OSError):
        return e.HubConnectionError(f"{type(exc).__name__}: {exc}", url=url)
    raise exc


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
        # token=False: never read HF_TOKEN or ~/.cache/huggingface/token behind our back.
        self.api = HfApi(endpoint=self.endpoint, token=token or False)
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
        """Repos tagged gguf; pages are fetched only as the caller iterates.

        `sort` is descending (`downloads`, `likes`, `last_modified`, `created_at`,
        `trending_score`). `limit` is sent both as the page size and kept as a cap on the
        total, so a limited listing is one request up to the hub's page maximum.
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
        left = limit
        while url is not None and (left is None or left > 0):
            if url in seen:
                raise e.InvalidResponse("the listing's next page is a page it already gave", url=url)
            seen.add(url)
            items, nxt = await self._retrying(functools.partial(self._page, url))
            for item in items if left is None else items[:left]:
                yield summary_from(item, url)
            if left is not None:
                left -= len(items)
            url = nxt

    def _page(self, url: str) -> tuple[list[Any], str | None]:
        """One listing page (blocking): its items and the next page's URL, if any."""
        # The token goes to the configured hub only, wherever a next link points.
        token = self._token if origin(url) == origin(self.endpoint) else None
        headers = build_hf_headers(token=token or False)
        with get_session().stream("GET", url, headers=headers, timeout=self._timeout) as resp:
            if not 200 <= resp.status_code < 300:
                raise _status_error(resp)
            body = bytearray()
            for chunk in resp.iter_bytes():
                body += chunk
                if len(body) > MAX_PAGE_BYTES:
                    raise e.InvalidResponse(
                        f"a listing page over {MAX_PAGE_BYTES} bytes",
                        url=url,
                        status=resp.status_code,
                        request_id=resp.headers.get("X-Request-Id"),
                    )
            nxt = resp.links.get("next", {}).get("url")
            where = str(resp.url)
        try:
            items = json.loads(body)
        except ValueError as exc:  # not JSON, or not UTF-8
            raise e.InvalidResponse(f"the listing page is not JSON: {exc}", url=where) from exc
        if not isinstance(items, list):
            raise e.InvalidResponse(
                f"the listing page is a JSON {type(items).__name__}, not a list", url=where
            )
        return items, urljoin(where, nxt) if nxt else None

    async def repo_info(self, repo_id: str, revision: str | None = None) -> RepoInfo:
        """Repo metadata and every file with its size and LFS sha256, retried when transient."""
        info = await self._retrying(functools.partial(self._model_info, repo_id, revision))
        return info_from(info, f"{self.endpoint}/api/models/{repo_id}")

    def _model_info(self, repo_id: str, revision: str | None) -> Any:
        try:
            return self.api.model_info(repo_id, revision=revision, files_metadata=True, timeout=self._timeout)
        except (HfHubHTTPError, httpx2.HTTPError, OSError, HFValidationError):
            raise  # errors of the request (or of the repo id asked for): mapped by _call
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            # HfApi builds its ModelInfo straight from the body: a malformed one fails in there.
            raise e.InvalidResponse(
                f"malformed repo info: {type(exc).__name__}: {exc}",
                url=f"{self.endpoint}/api/models/{repo_id}",
            ) from exc

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
        except (HfHubHTTPError, httpx2.HTTPError, OSError) as exc:
            raise map_error(exc, self.endpoint) from exc
