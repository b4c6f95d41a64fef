"""A thin typed wrapper over huggingface_hub's HfApi: list GGUF repos, read repo info.

HfApi is blocking, so every call runs in a worker thread (`asyncio.to_thread`); a listing
is pulled a batch at a time, so pagination (`Link: rel="next"`) stays incremental and a
caller that stops early never fetches the remaining pages. Results are frozen
dataclasses that tolerate missing and unknown server fields, and huggingface_hub's
exceptions become our `HubError` types.

The token is always passed explicitly (`token=False` when there is none) so that
huggingface_hub never falls back to a token from the environment or ~/.cache.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import httpx2
from huggingface_hub import HfApi, hf_hub_url
from huggingface_hub.errors import (
    GatedRepoError,
    HfHubHTTPError,
    RemoteEntryNotFoundError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from huggingface_hub.hf_api import ExpandModelProperty_T

from registry.hub import errors as e
from registry.hub.http import RetryPolicy, Sleep, retry_hint

if TYPE_CHECKING:
    from registry.config import HubSettings

T = TypeVar("T")
Sort = Literal["created_at", "downloads", "last_modified", "likes", "trending_score"]
_BATCH = 100  # items pulled per thread hop: about one page, so one request at most
# Only what a crawl needs to tell changed repos from unchanged ones: `full` would also
# send every repo's file list, many times the bytes.
_LIST_FIELDS: tuple[ExpandModelProperty_T, ...] = (
    "sha", "lastModified", "downloads", "likes", "tags", "gated", "private",
)  # fmt: skip


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


def summary_from(info: Any) -> RepoSummary:
    gated, _ = _gated(getattr(info, "gated", None))
    return RepoSummary(
        repo_id=info.id,
        sha=getattr(info, "sha", None),
        last_modified=getattr(info, "last_modified", None),
        downloads=_int(getattr(info, "downloads", None)),
        likes=_int(getattr(info, "likes", None)),
        tags=_str_list(getattr(info, "tags", None)),
        gated=gated,
        private=bool(getattr(info, "private", False)),
    )


def info_from(info: Any) -> RepoInfo:
    card = _card(info)
    gated, mode = _gated(getattr(info, "gated", None))
    files = []
    for s in getattr(info, "siblings", None) or ():
        lfs = getattr(s, "lfs", None)
        sha = lfs.get("sha256") if isinstance(lfs, Mapping) else getattr(lfs, "sha256", None)
        files.append(RepoFile(path=s.rfilename, size=_int(getattr(s, "size", None)), sha256=sha))
    lic = card.get("license")
    relation = card.get("base_model_relation")
    return RepoInfo(
        repo_id=info.id,
        sha=getattr(info, "sha", None),
        last_modified=getattr(info, "last_modified", None),
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
    if isinstance(exc, httpx2.TimeoutException):
        return e.HubTimeout(f"timed out: {exc}", url=url)
    if isinstance(exc, httpx2.TransportError | ConnectionError | OSError):
        return e.HubConnectionError(f"{type(exc).__name__}: {exc}", url=url)
    raise exc


def _take(it: Iterator[T], n: int) -> list[T]:
    out = []
    for item in it:
        out.append(item)
        if len(out) >= n:
            break
    return out


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
        `trending_score`). huggingface_hub sends `limit` both as the page size and as a cap
        on the total, so a limited listing is one request up to the hub's page maximum.
        """

        def start() -> Iterator[Any]:
            return iter(
                self.api.list_models(
                    filter="gguf",
                    search=search,
                    author=author,
                    sort=sort,
                    limit=limit,
                    expand=list(_LIST_FIELDS),
                )
            )

        it = await self._call(start)
        while True:
            batch = await self._call(functools.partial(_take, it, _BATCH))
            for item in batch:
                yield summary_from(item)
            if len(batch) < _BATCH:
                return

    async def repo_info(self, repo_id: str, revision: str | None = None) -> RepoInfo:
        """Repo metadata and every file with its size and LFS sha256, retried when transient."""
        policy, waited, attempt = self.retry, 0.0, 0
        while True:
            attempt += 1
            try:
                info = await self._call(
                    lambda: self.api.model_info(
                        repo_id, revision=revision, files_metadata=True, timeout=self._timeout
                    )
                )
                return info_from(info)
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
