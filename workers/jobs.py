"""The job functions both runners call, and what they share.

Three jobs, each a plain async function over a `JobContext`:

- `crawl_job(ctx, queue, crawl_id)`: list the hub for the crawl row and queue one
  `index_repo` job per changed repo (`workers.crawl_jobs.enqueue_crawl`); the row stays
  `running` until those jobs have ended, with each repo's outcome counted once. A crawl of
  the `local` source indexes the process's local.folders in the job itself;
- `index_repo_job(ctx, repo_id, known_revision, crawl_id)`: read and write one repo in one
  transaction (`workers.crawl.index_repo`); idempotent, so a retry or a second worker
  changes nothing; on its final attempt it adds its counters to its crawl's row;
- `verify_job(ctx, verification_id)`: run one queued verification.

The embedded runner (`workers.queue_embedded`, inside `registry serve`) and the
distributed one (`workers.queue_procrastinate`, `registry worker`) differ only in where
the queue lives and who picks jobs from it. A `TransientJobError` (rate limits, 5xx,
resets, a file changed mid-read) is retried with backoff by both; any other error fails
the job, visible in `GET /v1/jobs`. A job whose runs killed their worker
`jobs.max_attempts` times is failed for good by its runner, and `end_lost_work` ends what it
was for in the same way in both modes.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from registry.api.launchers import JOB_STATES, JobInfo, JobQueue
from registry.catalog.crawls import repos_wanted_elsewhere
from registry.catalog.db import Database
from registry.catalog.models import Crawl
from registry.catalog.types import utcnow
from registry.config import Settings
from registry.gguf.limits import Limits
from registry.hub.client import HubClient
from registry.hub.errors import FileChanged, HubError
from registry.hub.http import HubHttp
from workers.crawl import CrawlReport, ReadOptions, count_outcome, index_repo
from workers.crawl_jobs import (
    SweptQueue,
    drop_cancelled_jobs,
    enqueue_crawl,
    fail_listing,
    params_of,
    report_repo,
)
from workers.index import index_paths
from workers.schedule import Cron, Every, Schedule
from workers.verify import fail_lost_run, run_verification

__all__ = [
    "JOB_STATES",
    "QUEUE_OF",
    "CrawlQueue",
    "JobContext",
    "JobInfo",
    "JobQueue",
    "TransientJobError",
    "crawl_job",
    "create_scheduled_crawl",
    "end_lost_work",
    "index_repo_job",
    "job_error_text",
    "schedule_cron",
    "verify_job",
    "worker_died_message",
]  # fmt: skip

log = logging.getLogger(__name__)

# Queue of each job kind: workers can be dedicated to one (`registry worker --queues index`).
QUEUE_OF = {"crawl": "crawl", "index_repo": "index", "verify": "verify"}


class TransientJobError(Exception):
    """The job failed for a reason that may pass (the hub said 429/5xx, a reset): retry it."""


@dataclass
class JobContext:
    """What jobs need, opened once per process: the catalog and the hub clients."""

    settings: Settings
    db: Database
    client: HubClient
    http: HubHttp

    @property
    def read_options(self) -> ReadOptions:
        p = self.settings.parser
        limits = Limits(max_kv_count=p.max_kv_count, max_tensor_count=p.max_tensor_count,
                        max_string_length=p.max_string_length, max_array_length=p.max_array_length,
                        max_header_bytes=self.settings.hub.max_header_bytes)  # fmt: skip
        return ReadOptions(
            limits=limits,
            shard_window=self.settings.hub.shard_window,
            sibling_reuse=self.settings.hub.sibling_reuse,
            sibling_samples=self.settings.hub.sibling_samples,
        )


@contextlib.asynccontextmanager
async def open_context(settings: Settings) -> AsyncIterator[JobContext]:
    async with Database.from_settings(settings) as db, HubHttp.from_settings(settings.hub) as http:
        yield JobContext(settings, db, HubClient.from_settings(settings.hub), http)


def _transient(exc: HubError) -> bool:
    return exc.retryable or isinstance(exc, FileChanged)


class CrawlQueue(Protocol):
    """What a crawl job needs of a queue: index-repo jobs that report into their crawl."""

    async def enqueue_index_repo(
        self, repo_id: str, known_revision: str | None = None, crawl_id: int | None = None
    ) -> int | None: ...


async def crawl_job(ctx: JobContext, queue: CrawlQueue, crawl_id: int) -> None:
    async with ctx.db.sessions() as session:
        crawl = await session.get(Crawl, crawl_id)
        kind, status = (crawl.kind, crawl.status) if crawl is not None else (None, None)
        full = crawl is not None and params_of(crawl).full
    if kind == "local":
        await _local_crawl(ctx, crawl_id, status, full=full)
        return

    async def enqueue(repo_id: str, known: str | None) -> int | None:
        return await queue.enqueue_index_repo(repo_id, known, crawl_id)

    report = await enqueue_crawl(ctx.db, ctx.client, crawl_id, enqueue)
    log.info("crawl %s: %s listed, %s unchanged, listing %s", crawl_id, report.listed, report.unchanged,
             report.status)  # fmt: skip


async def _local_crawl(ctx: JobContext, crawl_id: int, status: str | None, *, full: bool = False) -> None:
    """A crawl of the `local` source: index this process's local.folders into the row, as
    `registry index` does (`registry index --full` with `full`). A rerun after the row ended
    (the worker died after its end) does nothing; so does a crawl cancelled before it started."""
    if status != "running":
        log.info("local crawl %s: %s, not run", crawl_id, status)
        return
    folders = ctx.settings.local.paths
    if not folders:
        async with ctx.db.sessions() as session, session.begin():
            row = await session.get_one(Crawl, crawl_id)
            row.status, row.finished_at = "failed", utcnow()
            row.errors = [{"repo": "", "path": "", "error": "no_local_folders: this server has no local.folders"}]
        return
    report = await index_paths(ctx.db, folders, limits=ctx.read_options.limits, crawl_id=crawl_id, full=full)
    log.info("local crawl %s: %d repos, %d artifacts, %d with errors", crawl_id, len(report.results),
             len(report.artifacts), report.errors)  # fmt: skip


async def index_repo_job(
    ctx: JobContext,
    repo_id: str,
    known_revision: str | None = None,
    crawl_id: int | None = None,
    *,
    final_attempt: bool = True,
    queue: SweptQueue | None = None,
) -> None:
    """Index one repo; with `crawl_id`, report its outcome into that crawl's row.

    The runner says whether this is the job's last attempt: a transient error that will be
    retried reports nothing, so the crawl counts each repo once, on its final outcome.
    A job of a cancelled crawl reads nothing, unless another crawl counts on it; with the
    runner's `queue`, it then ends the crawl's other queued jobs at once, in bulk.
    """
    report = CrawlReport(crawl_id=crawl_id)
    crawl = await _crawl_of(ctx.db, crawl_id, repo_id)
    if crawl.cancelled:
        report.cancelled = 1
        await report_repo(ctx.db, crawl.id, repo_id, report)
        log.info("index_repo %s: not read, crawl %s was cancelled", repo_id, crawl.id)
        if queue is not None:
            await drop_cancelled_jobs(ctx.db, queue, crawl.id)
        return
    try:
        result = await index_repo(
            ctx.db, ctx.client, ctx.http, repo_id, ctx.read_options, report, known_revision=known_revision,
            prune=crawl.prunes, full=crawl.full,
        )  # fmt: skip
    except Exception as exc:
        retried = isinstance(exc, HubError) and _transient(exc) and not final_attempt
        if crawl_id is not None and not retried:
            report.failed += 1
            report.error(repo_id, exc)
            await report_repo(ctx.db, crawl_id, repo_id, report)
        if isinstance(exc, HubError) and _transient(exc):
            raise TransientJobError(f"{repo_id}: {exc.code}: {exc}") from exc
        raise
    count_outcome(report, result)
    if crawl_id is not None:
        await report_repo(ctx.db, crawl_id, repo_id, report)
    outcome = ("deleted" if report.deleted else "unchanged" if report.unchanged else
               "no GGUF file, not written" if report.not_gguf else "indexed")  # fmt: skip
    # The pid tells which worker process ran the job (the multi-worker tests count them).
    log.info("index_repo %s: %s (pid %d)", repo_id, outcome, os.getpid())


@dataclass(frozen=True)
class _JobCrawl:
    id: int
    prunes: bool  # the crawl speaks for the catalog's hub (CrawlParams.prune)
    cancelled: bool  # the crawl was cancelled, and no other crawl counts on this job: read nothing
    full: bool = False  # write the repo again even at the revision indexed (CrawlParams.full)


_NO_CRAWL = _JobCrawl(0, prunes=False, cancelled=False)


async def _crawl_of(db: Database, crawl_id: int | None, repo_id: str) -> _JobCrawl:
    """What an index-repo job must know of the crawl that queued it."""
    if crawl_id is None:
        return _NO_CRAWL
    async with db.sessions() as session:
        crawl = await session.get(Crawl, crawl_id)
        if crawl is None:
            return _NO_CRAWL
        cancelled = crawl.status == "cancelled" and not await repos_wanted_elsewhere(session, [repo_id], crawl)
    params = params_of(crawl)
    return _JobCrawl(crawl_id, prunes=params.prune, cancelled=cancelled, full=params.full)


async def verify_job(ctx: JobContext, verification_id: int) -> None:
    await run_verification(ctx.db, ctx.settings, verification_id)


async def create_scheduled_crawl(
    db: Database, settings: Settings, *, scheduled_at: int | None = None, source: str = "hub"
) -> int:
    """Commit the crawl row of a scheduled crawl of `source` (`hub`: schedule.crawl, `local`:
    local.schedule); the caller enqueues it afterwards.

    With `scheduled_at` (the schedule's tick, Unix seconds) it is one row per tick: a rerun
    of the periodic job of a tick (its worker died) finds that tick's row and goes on with
    it instead of starting a second crawl and leaving the first running.
    """
    s = settings.schedule
    params: dict[str, object] = {"source": "hub", "repos": [], "author": s.author or None, "search": s.search or None,
              "limit": s.limit or None, "full": False, "scheduled": True}  # fmt: skip
    if source == "local":
        params = {"source": "local", "scheduled": True}
    async with db.sessions() as session, session.begin():
        if scheduled_at is not None:
            params["scheduled_at"] = scheduled_at
            found = await _scheduled_crawl(session, scheduled_at, source)
            if found is not None:
                return found
        row = Crawl(kind=source, status="running", parameters=params)
        session.add(row)
        await session.flush()
        return row.id


async def _scheduled_crawl(session: AsyncSession, scheduled_at: int, kind: str = "hub") -> int | None:
    """The crawl row of a schedule tick, if one was committed."""
    # A tick's row is recent: look among the newest scheduled crawls only.
    recent = await session.scalars(
        select(Crawl).where(Crawl.kind == kind).order_by(Crawl.id.desc()).limit(200)
    )
    for row in recent:
        if (row.parameters or {}).get("scheduled_at") == scheduled_at:
            return row.id
    return None


ERROR_TEXT_LIMIT = 4000  # characters of a job's error kept: an exception's text is unbounded


def job_error_text(exc: BaseException) -> str:
    """What a job's row says of the exception that ended a run, in both runners: a
    transient error's own message (the job is retried), else the exception's type too."""
    text = str(exc) if isinstance(exc, TransientJobError) else f"{type(exc).__name__}: {exc}"
    return text[:ERROR_TEXT_LIMIT]


def worker_died_message(runs: int, limit: int) -> str:
    """Why a job whose every run killed its worker was failed for good."""
    return f"the worker stopped during the job {runs} times (jobs.max_attempts = {limit})"


async def end_lost_work(
    session: AsyncSession, kind: str, args: Mapping[str, Any], job_id: int, error: str
) -> None:
    """End, in the caller's transaction, what a job failed for good by its runner (its runs
    killed their worker `jobs.max_attempts` times) leaves unfinished: its crawl's listing
    (else the sweep queues it again, attempts anew), its verification's row (else `running`
    for ever). An index job's repo is the sweep's. Both runners call it, with the job's kind
    (`crawl`, `index_repo`, `verify`) and arguments; a scheduled crawl's job names its tick."""
    if kind == "crawl":
        crawl_id = args.get("crawl_id")
        if crawl_id is None and args.get("timestamp") is not None:
            crawl_id = await _scheduled_crawl(session, int(args["timestamp"]))  # None: died before its row
        if crawl_id is not None:
            await fail_listing(session, int(crawl_id), job_id, error)
    elif kind == "verify":
        await fail_lost_run(session, int(args["verification_id"]), error)


def schedule_cron(schedule: Schedule) -> str:
    """The schedule as the cron text procrastinate's periodic tasks take.

    Cron expressions pass through. `every N<unit>` becomes a cron when it is whole minutes
    dividing an hour, whole hours dividing a day or whole days (`every 15m` -> `*/15 * * * *`,
    `every 6h` -> `0 */6 * * *`, `every 2d` -> `0 0 */2 * *`); other intervals cannot be
    written as a cron and are refused with a message saying which intervals work.
    """
    if isinstance(schedule, Cron):
        return schedule.text
    assert isinstance(schedule, Every)
    n = schedule.seconds
    if n % 86400 == 0:
        return f"0 0 */{n // 86400} * *" if n > 86400 else "0 0 * * *"
    if n % 3600 == 0 and 24 % (n // 3600) == 0:
        return f"0 */{n // 3600} * * *" if n > 3600 else "0 * * * *"
    if n % 60 == 0 and 60 % (n // 60) == 0:
        return f"*/{n // 60} * * * *" if n > 60 else "* * * * *"
    raise ValueError(
        f"{schedule.text!r} cannot run as a distributed periodic task: use an interval that divides an "
        "hour or a day (every 15m, every 6h) or a cron expression"
    )
