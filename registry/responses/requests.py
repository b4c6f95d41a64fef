"""The bodies the API reads, declared for its OpenAPI document: a crawl request, a
verification request and a hub webhook delivery. `registry.api.bodies` checks a body
against the same rules (and those a schema cannot state: text the catalog can store, the
sources the server has), naming the offending field.
"""

from __future__ import annotations

from typing import Annotated

import msgspec
from msgspec import Meta

from registry.responses.base import Response, doc
from registry.responses.vocab import BIGINT_MAX, REPO_PART

MAX_CRAWL_REPOS = 100
MAX_CRAWL_LIMIT = 1_000_000
MAX_SEARCH = 200
# Not blank, with no NUL anywhere: the server refuses NUL, which the catalog cannot store.
# `\s` and the characters Python's str.strip() strips that ECMA's `\s` does not cover.
NOT_BLANK = r"[^\s\x00\x1c-\x1f\x85]"
SEARCH_TEXT = rf"^[^\x00]*{NOT_BLANK}[^\x00]*$"
REPO_ID_PATTERN = f"^{REPO_PART}/{REPO_PART}$"

RepoId = Annotated[str, Meta(pattern=REPO_ID_PATTERN)]
LOCAL_SOURCE = "local"  # the server's local.folders


class CrawlRequest(Response, kw_only=True):
    """Start a crawl of a configured hub source: its listing, or the repos named."""

    source: Annotated[str, doc("Name of a configured source (`hub`); never a URL.")]
    repos: Annotated[list[RepoId], Meta(max_length=MAX_CRAWL_REPOS),
                     doc("Hub repo ids (org/name) to look at instead of the hub's listing.")] = msgspec.field(default_factory=list)  # fmt: skip
    author: Annotated[Annotated[str, Meta(pattern=f"^{REPO_PART}$")] | None,
                      doc("Only repos of this user or organisation; null: any.")] = None  # fmt: skip
    search: Annotated[Annotated[str, Meta(min_length=1, max_length=MAX_SEARCH, pattern=SEARCH_TEXT)] | None,
                      doc("The hub's own search term; null: none.")] = None  # fmt: skip
    limit: Annotated[Annotated[int, Meta(ge=1, le=MAX_CRAWL_LIMIT)] | None,
                     doc("Look at most at this many repos; null: all.")] = None  # fmt: skip
    full: Annotated[bool, doc("Read and write repos whose revision did not change (after an upgrade).")] = False


class LocalCrawlRequest(Response, kw_only=True):
    """Start a crawl of the `local` source: the server's local.folders, each whole."""

    source: Annotated[str, Meta(extra_json_schema={"const": LOCAL_SOURCE})]
    full: Annotated[bool, doc("Write unchanged folders again (after an upgrade).")] = False


class VerificationRequest(Response, kw_only=True):
    """Queue a verification of an artifact."""

    artifact_id: Annotated[int, Meta(ge=1, le=BIGINT_MAX)]


# A hub webhook's event words (`repo.content`, `update`): short words of the hub's own.
EVENT_WORD_PATTERN = "^[A-Za-z0-9._-]{1,64}$"
_EVENT_WORD = Annotated[str, Meta(pattern=EVENT_WORD_PATTERN)]


class HubEvent(Response, kw_only=True, forbid_unknown_fields=False):
    action: Annotated[_EVENT_WORD, doc("create, delete, move or update.")]
    scope: Annotated[_EVENT_WORD, doc("repo, repo.content, repo.config, discussion, ...")]


class HubRepo(Response, kw_only=True, forbid_unknown_fields=False):
    type: Annotated[str, doc("model, dataset or space: only model repos are crawled.")]
    name: RepoId


class HubMovedTo(Response, kw_only=True, forbid_unknown_fields=False):
    name: RepoId


class HubRef(Response, kw_only=True, forbid_unknown_fields=False):
    ref: str = ""


class HubWebhook(Response, kw_only=True, forbid_unknown_fields=False):
    """A delivery of the Hugging Face Hub's webhook (payload version 3); the hub sends more fields than these
    (ids, urls, owner, headSha, ...), which are left alone."""

    event: HubEvent
    repo: HubRepo
    moved_to: HubMovedTo | msgspec.UnsetType = msgspec.field(default=msgspec.UNSET, name="movedTo")
    updated_refs: Annotated[
        list[HubRef] | msgspec.UnsetType,
        doc("With new commits: a crawl only when `refs/heads/main` is among them."),
    ] = msgspec.field(default=msgspec.UNSET, name="updatedRefs")


__all__ = [
    "EVENT_WORD_PATTERN",
    "LOCAL_SOURCE",
    "MAX_CRAWL_LIMIT",
    "MAX_CRAWL_REPOS",
    "MAX_SEARCH",
    "NOT_BLANK",
    "REPO_ID_PATTERN",
    "SEARCH_TEXT",
    "CrawlRequest",
    "HubEvent",
    "HubMovedTo",
    "HubRef",
    "HubRepo",
    "HubWebhook",
    "LocalCrawlRequest",
    "VerificationRequest",
]  # fmt: skip
