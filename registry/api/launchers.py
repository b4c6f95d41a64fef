"""What the API needs from the workers, as Protocols passed into `create_app`.

The crawl and verify workers are separate parts of the product (in-process tasks in the
embedded mode, a procrastinate queue in the distributed one); the API only asks them to
start work. A crawl request names a configured source, never a URL or a path: the
launcher resolves the name to the endpoint or folder from the settings, so nothing a
client sends can make the service fetch an arbitrary address.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable


@dataclass(frozen=True)
class CrawlSpec:
    """A validated crawl request."""

    source: str  # a name from CrawlLauncher.sources(): "hub", "local", ...
    repos: tuple[str, ...] = ()  # explicit "org/name" ids; empty means "list the source"
    author: str | None = None  # only repos of this org/user
    search: str | None = None  # the hub's own search term
    limit: int | None = None  # at most this many repos
    full: bool = False  # re-index repos whose revision did not change

    def to_parameters(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "repos": list(self.repos),
            "author": self.author,
            "search": self.search,
            "limit": self.limit,
            "full": self.full,
        }


@runtime_checkable
class CrawlLauncher(Protocol):
    def sources(self) -> Collection[str]:
        """Names of the configured sources a crawl may use (e.g. {"hub"})."""
        ...

    def kind_of(self, source: str) -> str:
        """The catalog crawl kind ("hub" or "local") of a configured source."""
        ...

    async def launch(self, crawl_id: int, spec: CrawlSpec) -> None:
        """Start (or enqueue) the crawl whose row `crawl_id` the API just created.

        Must return promptly; the crawl itself runs elsewhere and updates its row."""
        ...


@runtime_checkable
class Verifier(Protocol):
    async def enqueue(self, artifact_id: int) -> int:
        """Queue a verification of an artifact; returns the verification id."""
        ...


@dataclass
class RecordingLauncher:
    """A launcher that remembers what it was asked to start and does nothing else.

    Useful for tests and for a read-only replica that should accept and record crawl
    requests for another process to pick up."""

    source_kinds: dict[str, str] = field(default_factory=lambda: {"hub": "hub"})
    launched: list[tuple[int, CrawlSpec]] = field(default_factory=list)

    def sources(self) -> Collection[str]:
        return tuple(self.source_kinds)

    def kind_of(self, source: str) -> str:
        return self.source_kinds[source]

    async def launch(self, crawl_id: int, spec: CrawlSpec) -> None:
        self.launched.append((crawl_id, spec))
