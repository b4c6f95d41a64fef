"""What the API needs from the workers, as Protocols passed into `create_app`.

The crawl and verify workers are separate parts of the product (a job pool inside
`registry serve` in the embedded mode, a procrastinate queue in the distributed one); the
API only asks them to start work, through one `JobQueue` protocol in both modes
(`QueueLauncher`, `QueueVerifier`), and reads jobs back through it. A crawl request names a configured source, never a URL or a path: the
launcher resolves the name to the endpoint or folder from the settings, so nothing a
client sends can make the service fetch an arbitrary address.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from registry.catalog.models import Job, Verification
from registry.responses.vocab import JOB_STATES as JOB_STATES  # what the runners say of a job

if TYPE_CHECKING:
    from registry.catalog.db import Database
    from registry.config import Settings
    from workers.crawl import CrawlReport

log = logging.getLogger("registry.api")


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


async def queued_verification(sessions: async_sessionmaker[AsyncSession], artifact_id: int) -> int:
    """The id of a new `queued` verification of `artifact_id`, committed before any job that
    runs it is started or queued."""
    async with sessions() as session:
        row = Verification(artifact_id=artifact_id, status="queued")
        session.add(row)
        await session.commit()
        return row.id


class TaskVerifier:
    """Runs verifications as asyncio tasks of this process, at most `concurrency` at once.

    `enqueue` writes the `queued` row and returns at once; `run(verification_id)` is the
    job function (`workers.verify.run_verification` bound to its database and settings),
    passed in so that the API does not import the workers. The row is the queue: `resume`
    picks up rows a stopped server left queued or running.
    """

    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        run: Callable[[int], Awaitable[None]],
        *,
        concurrency: int = 1,
    ) -> None:
        self._sessions = sessions
        self._run = run
        self._slots = asyncio.Semaphore(max(1, concurrency))
        self._tasks: set[asyncio.Task[None]] = set()

    async def enqueue(self, artifact_id: int) -> int:
        verification_id = await queued_verification(self._sessions, artifact_id)
        self._start(verification_id)  # after the commit: the job must find its row
        return verification_id

    async def resume(self) -> None:
        """Start every verification left queued, running (its process died) or cancelled (its
        server stopped) (a background job for serve)."""
        cancelled = (Verification.status == "failed") & (Verification.reason == "cancelled")
        async with self._sessions() as session:
            ids = list(
                await session.scalars(
                    select(Verification.id)
                    .where(Verification.status.in_(("queued", "running")) | cancelled)
                    .order_by(Verification.id)
                )
            )
        for verification_id in ids:
            self._start(verification_id)

    def _start(self, verification_id: int) -> None:
        task = asyncio.create_task(self._guarded(verification_id), name=f"verification-{verification_id}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _guarded(self, verification_id: int) -> None:
        async with self._slots:
            await self._run(verification_id)

    async def join(self) -> None:
        """Wait for every started verification to finish."""
        while self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    async def close(self) -> None:
        """Cancel running verifications: their rows stay queued or end `cancelled`, for `resume`."""
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


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


class LauncherBusy(RuntimeError):
    """Every crawl slot of an in-process launcher is taken."""


class InProcessLauncher:
    """Runs whole crawls as tasks of this process, without a job queue (for embedding the
    API in another program; `registry serve` uses `QueueLauncher` over its job queue).

    Each accepted crawl becomes an asyncio task running `workers.crawl` against the row the
    API created; at most `max_running` run at once and a launch beyond that is refused, so
    the API answers 503 instead of queueing unbounded work in memory. `aclose()` cancels
    what still runs (each crawl then marks its row failed) and disposes the engine.
    The worker is imported when first used: the API package itself does not depend on it.
    """

    def __init__(self, settings: Settings, *, max_running: int = 2) -> None:
        self.settings = settings
        self.max_running = max_running
        self._db: Database | None = None
        self._tasks: set[asyncio.Task[Any]] = set()

    def sources(self) -> Collection[str]:
        return ("hub",)

    def kind_of(self, source: str) -> str:
        return "hub"

    @property
    def running(self) -> int:
        return len(self._tasks)

    def _database(self) -> Database:
        if self._db is None:
            from registry.catalog.db import Database

            self._db = Database.from_settings(self.settings)
        return self._db

    async def launch(self, crawl_id: int, spec: CrawlSpec) -> None:
        if len(self._tasks) >= self.max_running:
            raise LauncherBusy(f"{self.max_running} crawls are already running")
        task = asyncio.create_task(self.crawl(spec, crawl_id), name=f"crawl-{crawl_id}")
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("crawl task %s failed", task.get_name(), exc_info=task.exception())

    async def crawl(self, spec: CrawlSpec, crawl_id: int | None = None) -> CrawlReport:
        """Run one crawl now and return its report (the scheduler awaits this directly)."""
        from workers.crawl import CrawlParams, crawl_from_settings

        params = CrawlParams(
            repos=spec.repos, author=spec.author, search=spec.search, limit=spec.limit, full=spec.full
        )
        return await crawl_from_settings(self._database(), self.settings.hub, params, crawl_id=crawl_id)

    async def aclose(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._db is not None:
            await self._db.dispose()
            self._db = None


# -- the job queue: one protocol for the embedded pool and procrastinate ---------------------


@dataclass(frozen=True)
class JobInfo:
    """One job as a runner holds it (the API and `registry jobs` show it as `responses.Job`)."""

    id: int
    kind: str  # "crawl", "index_repo", "verify"
    queue: str
    status: str  # one of JOB_STATES (registry.responses.vocab)
    args: dict[str, Any]
    attempts: int
    error: str | None
    created_at: datetime | None
    started_at: datetime | None
    finished_at: datetime | None


@runtime_checkable
class JobReader(Protocol):
    async def list_jobs(
        self, *, status: str | None = None, limit: int = 50, before_id: int | None = None
    ) -> list[JobInfo]:
        """Jobs newest first; `before_id` pages (ids below it)."""
        ...

    async def get_job(self, job_id: int) -> JobInfo | None: ...


@runtime_checkable
class JobQueue(JobReader, Protocol):
    """Where jobs go. Call the enqueue methods only after the transaction that created the
    row a job works on (crawl, verification) has committed: a worker may start at once.
    Each returns the job id, or None when an equal job is already queued or running."""

    async def enqueue_crawl(self, crawl_id: int) -> int | None: ...

    async def enqueue_index_repo(self, repo_id: str, known_revision: str | None = None) -> int | None: ...

    async def enqueue_verify(self, verification_id: int) -> int | None: ...


def job_info(row: Job) -> JobInfo:
    return JobInfo(id=row.id, kind=row.kind, queue=row.queue, status=row.status, args=dict(row.args or {}),
                   attempts=row.attempts, error=row.error, created_at=row.created_at,
                   started_at=row.started_at, finished_at=row.finished_at)  # fmt: skip


class CatalogJobs:
    """A JobReader over the catalog's `jobs` table: the embedded runner's record, read by
    the API even in a process that runs no jobs itself."""

    def __init__(self, sessions: async_sessionmaker[AsyncSession]) -> None:
        self._sessions = sessions

    async def list_jobs(
        self, *, status: str | None = None, limit: int = 50, before_id: int | None = None
    ) -> list[JobInfo]:
        query = select(Job).order_by(Job.id.desc()).limit(limit)
        if status is not None:
            query = query.where(Job.status == status)
        if before_id is not None:
            query = query.where(Job.id < before_id)
        async with self._sessions() as session:
            return [job_info(r) for r in await session.scalars(query)]

    async def get_job(self, job_id: int) -> JobInfo | None:
        async with self._sessions() as session:
            row = await session.get(Job, job_id)
            return job_info(row) if row is not None else None


class QueueLauncher:
    """The CrawlLauncher of both modes: the API committed the crawl row, the queue runs it.

    Sources: `hub`, and `local` when the server has local folders (local.folders); the
    folders come from the settings of the process that runs the job, never from a request."""

    def __init__(self, queue: JobQueue, *, local: bool = False) -> None:
        self.queue = queue
        self._sources = ("hub", "local") if local else ("hub",)

    def sources(self) -> Collection[str]:
        return self._sources

    def kind_of(self, source: str) -> str:
        return source

    async def launch(self, crawl_id: int, spec: CrawlSpec) -> None:
        await self.queue.enqueue_crawl(crawl_id)


class QueueVerifier:
    """The Verifier of both modes: commit the `queued` row, then enqueue its job."""

    def __init__(self, sessions: async_sessionmaker[AsyncSession], queue: JobQueue) -> None:
        self._sessions = sessions
        self.queue = queue

    async def enqueue(self, artifact_id: int) -> int:
        verification_id = await queued_verification(self._sessions, artifact_id)
        await self.queue.enqueue_verify(verification_id)
        return verification_id
