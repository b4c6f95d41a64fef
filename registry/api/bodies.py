"""Validation of JSON request bodies into typed requests.

Bodies are small and few, so each is checked by hand against the rules of its model in
`registry.responses.requests` (whose JSON Schema the OpenAPI document holds: unknown fields
rejected, lengths and ranges bounded, with the same bounds) and those a schema cannot state;
errors are 400 `invalid_body` naming the offending field in `details.field`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from registry.api.errors import InvalidBody
from registry.api.launchers import CrawlSpec
from registry.responses.requests import (
    EVENT_WORD_PATTERN,
    LOCAL_SOURCE,
    MAX_CRAWL_LIMIT,
    MAX_CRAWL_REPOS,
    MAX_SEARCH,
    REPO_ID_PATTERN,
)
from registry.responses.vocab import BIGINT_MAX, REPO_PART

# Hub ids: "org/name", each part starting with an alphanumeric (the hub's own rule, which
# also rules out "..", absolute paths and URLs). Matched with fullmatch: `$` alone also
# matches before a final newline.
REPO_ID = re.compile(REPO_ID_PATTERN)
AUTHOR = re.compile(rf"^{REPO_PART}$")


async def read_json_object(request: web.Request) -> dict[str, Any]:
    if request.content_type != "application/json":
        raise InvalidBody("the body must be JSON (Content-Type: application/json)", details={"field": None})
    try:
        body = json.loads(await request.read() or b"null")
    except (ValueError, UnicodeDecodeError):
        raise InvalidBody("the body is not valid JSON", details={"field": None}) from None
    except RecursionError:  # a few kB of "[[[[..." outnest the parser's recursion limit
        raise InvalidBody("the body nests too deeply", details={"field": None}) from None
    if not isinstance(body, dict):
        raise InvalidBody("the body must be a JSON object", details={"field": None})
    return body


def _reject_unknown(body: Mapping[str, Any], allowed: Collection[str]) -> None:
    for name in body:
        if name not in allowed:
            raise InvalidBody(
                f"unknown field {name!r}", details={"field": name, "allowed": sorted(allowed)}
            )


def _storable(value: str) -> bool:
    """Whether the catalog can store the text: PostgreSQL refuses NUL in text and jsonb, and
    a lone surrogate (JSON's "\\ud800") has no UTF-8 form."""
    if "\x00" in value:
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _optional_str(body: Mapping[str, Any], name: str, pattern: re.Pattern[str] | None, max_len: int) -> str | None:
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip() or len(value) > max_len:
        raise InvalidBody(f"{name} must be a non-empty string of at most {max_len} characters", details={"field": name})
    if not _storable(value):
        raise InvalidBody(f"{name} must not contain NUL or unpaired surrogate characters", details={"field": name})
    if pattern is not None and not pattern.fullmatch(value):
        raise InvalidBody(f"{name} is not a valid hub name: {value!r}", details={"field": name})
    return value


def _optional_int(body: Mapping[str, Any], name: str, minimum: int, maximum: int) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)  # JSON has one number type: 5.0 is the integer 5
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
        raise InvalidBody(f"{name} must be an integer from {minimum} to {maximum}", details={"field": name})
    return value


def crawl_spec(body: Mapping[str, Any], sources: Collection[str]) -> CrawlSpec:
    _reject_unknown(body, ("source", "repos", "author", "search", "limit", "full"))
    source = body.get("source")
    if not isinstance(source, str) or source not in sources:
        raise InvalidBody(
            "source must name a configured source", details={"field": "source", "allowed": sorted(sources)}
        )
    repos = body.get("repos", [])
    if not isinstance(repos, list) or len(repos) > MAX_CRAWL_REPOS:
        raise InvalidBody(f"repos must be a list of at most {MAX_CRAWL_REPOS} repo ids", details={"field": "repos"})
    for repo in repos:
        if not isinstance(repo, str) or not REPO_ID.fullmatch(repo):
            raise InvalidBody(f"repos: not an org/name repo id: {repo!r}", details={"field": "repos"})
    full = body.get("full", False)
    if not isinstance(full, bool):
        raise InvalidBody("full must be a boolean", details={"field": "full"})
    if source == LOCAL_SOURCE:
        for name in ("repos", "author", "search", "limit"):
            if body.get(name) not in (None, [], False):
                raise InvalidBody(f"{name}: a crawl of the local source indexes the server's configured folders, "
                                  "whole", details={"field": name})  # fmt: skip
    return CrawlSpec(
        source=source,
        repos=tuple(dict.fromkeys(repos)),  # dedupe, keep order
        author=_optional_str(body, "author", AUTHOR, 96),
        search=_optional_str(body, "search", None, MAX_SEARCH),
        limit=_optional_int(body, "limit", 1, MAX_CRAWL_LIMIT),
        full=full,
    )


def verification_artifact_id(body: Mapping[str, Any]) -> int:
    _reject_unknown(body, ("artifact_id",))
    value = _optional_int(body, "artifact_id", 1, BIGINT_MAX)
    if value is None:
        raise InvalidBody("artifact_id is required", details={"field": "artifact_id"})
    return value


EVENT_WORD = re.compile(EVENT_WORD_PATTERN)
MAIN_REF = "refs/heads/main"


@dataclass(frozen=True)
class HubEvent:
    """What a hub webhook delivery asks of the catalog: the repos to crawl (the repo, and
    the id a move gave it), or why it asks for nothing."""

    action: str
    scope: str
    repos: tuple[str, ...] = ()
    ignored: str | None = None


def _object_field(body: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    value = body.get(name)
    if not isinstance(value, dict):
        raise InvalidBody(f"{name} must be an object", details={"field": name})
    return value


def _repo_name(value: Any, field: str) -> str:
    if not isinstance(value, str) or not REPO_ID.fullmatch(value):
        raise InvalidBody(f"{field} must be an org/name repo id", details={"field": field})
    return value


def hub_event(body: Mapping[str, Any]) -> HubEvent:
    """A webhook delivery of the Hugging Face Hub (payload version 3): `event` {action,
    scope}, `repo` {type, name}, and with a move `movedTo` {name}; with new commits
    `updatedRefs` [{ref, ...}]. Other fields are the hub's and are left alone.

    Model repos' events of scope `repo` or below (`repo.content`, `repo.config`, and
    narrower ones the hub may add) ask for a crawl of the repo, and of the id it moved to;
    discussion events, other repo types and commits that touch no main branch (pull
    requests, tags) ask for nothing."""
    event = _object_field(body, "event")
    words = {}
    for name in ("action", "scope"):
        value = event.get(name)
        if not isinstance(value, str) or not EVENT_WORD.fullmatch(value):
            raise InvalidBody(f"event.{name} must be a word of the hub's (e.g. update, repo.content)",
                              details={"field": f"event.{name}"})  # fmt: skip
        words[name] = value
    action, scope = words["action"], words["scope"]
    repo = _object_field(body, "repo")
    kind = repo.get("type")
    if not isinstance(kind, str):
        raise InvalidBody("repo.type must be a string", details={"field": "repo.type"})
    name = _repo_name(repo.get("name"), "repo.name")
    repos = [name]
    if "movedTo" in body:
        repos.append(_repo_name(_object_field(body, "movedTo").get("name"), "movedTo.name"))
    refs = body.get("updatedRefs")
    if "updatedRefs" in body and not (
        isinstance(refs, list) and all(isinstance(r, dict) and isinstance(r.get("ref", ""), str) for r in refs)
    ):
        raise InvalidBody("updatedRefs must be a list of objects whose ref is a string", details={"field": "updatedRefs"})
    if kind != "model":
        return HubEvent(action, scope, ignored=f"a {kind} repo: the catalog holds model repos")
    if scope != "repo" and not scope.startswith("repo."):
        return HubEvent(action, scope, ignored=f"a {scope} event changes no file")
    if refs is not None and not any(r.get("ref") == MAIN_REF for r in refs):
        return HubEvent(action, scope, ignored=f"no change to {MAIN_REF}, the revision the catalog indexes")
    return HubEvent(action, scope, repos=tuple(dict.fromkeys(repos)))
