"""Fault injection for the fake hub, configurable per test and changeable while it runs.

A fault matches requests by route ("api", "resolve", "cdn" or "*"), repo and file globs
and method, skips the first `skip` matches and then hits `times` requests (None: all).
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from typing import Literal

FaultKind = Literal[
    "latency",
    "status",
    "reset",
    "ignore_range",
    "truncate",
    "short_range",
    "change",
    "next_link",
    "overlap",
    "repeat",
    "body",
    "gzip",
    "big_body",
    "no_multirange",
]

# How a server without multi-range support answers `Range: bytes=a-b,c-d`. Both are common:
# "whole" is what Amazon S3 and nginx beyond `max_ranges` do (ignore the header, 200 and the
# whole file); "first" is what some CDNs and object stores do (206 for the first range only,
# with a single Content-Range and no multipart body).
MultirangeMode = Literal["whole", "first"]


@dataclass
class Fault:
    kind: FaultKind
    route: str = "cdn"
    repo: str = "*"
    file: str = "*"
    method: str = "*"
    times: int | None = 1
    skip: int = 0
    status: int = 503  # for "status"
    retry_after: str | None = None  # Retry-After header value, for "status"
    ratelimit: str | None = None  # RateLimit header value, e.g. '"api";r=0;t=55'
    delay: float = 0.0  # seconds, for "latency"
    after_bytes: int = 1024  # body bytes sent before a "reset" or "truncate"; the "short_range" cap
    body: bytes = b""  # for "body": the API answers 200 with exactly these bytes as JSON
    encoding: str = ""  # for "body": the Content-Encoding it claims `body` has (already applied)
    size: int = 0  # for "big_body": repo info answers 200 with valid JSON this long, streamed
    link: str = ""  # for "next_link": the listing's next page URL; empty: the page itself (a loop)
    multirange: MultirangeMode = "whole"  # for "no_multirange": how a multi-range request is answered
    seen: int = field(default=0, init=False)
    hits: int = field(default=0, init=False)

    def matches(self, route: str, repo: str, file: str, method: str) -> bool:
        return (
            fnmatch.fnmatchcase(route, self.route)
            and fnmatch.fnmatchcase(repo, self.repo)
            and fnmatch.fnmatchcase(file, self.file)
            and fnmatch.fnmatchcase(method, self.method)
        )

    def take(self) -> bool:
        """Count one matching request; True when this one is hit."""
        self.seen += 1
        if self.seen <= self.skip:
            return False
        if self.times is not None and self.hits >= self.times:
            return False
        self.hits += 1
        return True


class Faults:
    """The active faults of one fake hub."""

    def __init__(self, faults: list[Fault] | None = None) -> None:
        self.faults: list[Fault] = list(faults or [])

    def add(self, *faults: Fault) -> None:
        self.faults.extend(faults)

    def clear(self) -> None:
        self.faults.clear()

    def pick(self, route: str, repo: str, file: str, method: str) -> list[Fault]:
        return [f for f in self.faults if f.matches(route, repo, file, method) and f.take()]
