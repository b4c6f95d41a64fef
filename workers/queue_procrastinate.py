"""The distributed runner: procrastinate's PostgreSQL queue and `registry worker` processes.

`build_app(settings)` registers the three job functions of `workers.jobs` as procrastinate
tasks on their queues (crawl, index, verify), with

- a per-repo / per-verification `queueing_lock` (one job waiting) and `lock` (one running),
  so two crawls that overlap never read the same repo twice at once;
- a RetryStrategy retrying `TransientJobError` after `jobs.retry_wait` seconds, doubling
  the wait at each retry, as the embedded queue does;
- the `[schedule] crawl` setting as a periodic task (cron; `every 6h` is converted), run by
  procrastinate's periodic deferrer in every worker and deduplicated in the database.

Stalled jobs: workers send heartbeats; `run_worker` also runs a loop that puts back the
`doing` jobs of workers silent for `jobs.stalled_seconds` (a SIGKILLed or lost machine),
so another worker runs them. Jobs are idempotent, so a rerun writes nothing twice. A job
whose dead run was its `jobs.max_attempts`-th (it kills every worker that takes it: the OS
ending it for memory, say) ends failed instead, with its crawl or verification, as in the
embedded queue. Every worker sweeps, so each job is locked and checked to be still that
stalled run before it is put back or failed (`handle_stalled_job`).

The API process uses the same app only to defer jobs and to read the job tables.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any

import procrastinate
from procrastinate.exceptions import AlreadyEnqueued
from procrastinate.jobs import Job
from sqlalchemy import make_url, text

from registry.catalog import migrate
from registry.catalog.db import Database
from registry.catalog.errors import SchemaMismatch
from registry.config import Settings
from workers.crawl_jobs import sweep
from workers.jobs import (
    QUEUE_OF,
    JobContext,
    JobInfo,
    TransientJobError,
    crawl_job,
    create_scheduled_crawl,
    end_lost_work,
    index_repo_job,
    job_error_text,
    open_context,
    schedule_cron,
    verify_job,
    worker_died_message,
)
from workers.schedule import parse_schedule

log = logging.getLogger(__name__)

CONTEXT_KEY = "registry"  # where a worker's JobContext sits in procrastinate's additional_context
TASK_KIND = {"registry.crawl": "crawl", "registry.scheduled_crawl": "crawl",
             "registry.index_repo": "index_repo", "registry.verify": "verify"}  # fmt: skip
# Our states -> procrastinate's job statuses.
STATUSES = {"queued": ["todo"], "running": ["doing"], "done": ["succeeded"],
            "failed": ["failed", "cancelled", "aborted"]}  # fmt: skip
_STATE_OF = {p: ours for ours, ps in STATUSES.items() for p in ps}


def conninfo(database_url: str) -> str:
    """The libpq URL of the catalog's SQLAlchemy URL (procrastinate talks psycopg)."""
    url = make_url(database_url)
    if url.get_backend_name() != "postgresql":
        raise ValueError("the distributed mode needs a PostgreSQL database.url")
    return url.set(drivername="postgresql").render_as_string(hide_password=False)


def _ctx(context: procrastinate.JobContext) -> JobContext:
    ctx = context.additional_context.get(CONTEXT_KEY)
    if not isinstance(ctx, JobContext):  # pragma: no cover - a worker not started by run_worker
        raise RuntimeError("this procrastinate worker was not started by `registry worker`")
    return ctx


class DoublingRetry(procrastinate.RetryStrategy):
    """`wait` seconds before the first retry, twice as long before each next one: the
    embedded queue's backoff. procrastinate's own `exponential_wait` waits
    exponential_wait ** (attempt + 1) seconds: 10, 100, 1000... for a `jobs.retry_wait` of 10."""

    def get_retry_decision(self, *, exception: BaseException, job: Job) -> procrastinate.RetryDecision | None:
        if super().get_retry_decision(exception=exception, job=job) is None:
            return None
        return procrastinate.RetryDecision(retry_in={"seconds": self.wait * 2**job.attempts})


# A job's error, kept for GET /v1/jobs (procrastinate keeps only the status): every failing
# run writes it, so a job retried after a transient error shows the latest.
_RECORD_ERROR = """
INSERT INTO job_errors (job_id, error, at) VALUES (:id, :error, now())
ON CONFLICT (job_id) DO UPDATE SET error = excluded.error, at = excluded.at
"""
# Errors of jobs procrastinate no longer has (purged by hand or by its remove_old_jobs).
_FORGET_ERRORS = """
DELETE FROM job_errors e WHERE NOT EXISTS (SELECT 1 FROM procrastinate_jobs j WHERE j.id = e.job_id)
"""


async def record_job_error(db: Database, job_id: int, error: str) -> None:
    """Keep why job `job_id` failed; a database that refuses is logged, never raised (the
    job's own failure is what its runner must see)."""
    try:
        async with db.sessions() as session, session.begin():
            await session.execute(text(_RECORD_ERROR), {"id": job_id, "error": error})
    except Exception:
        log.exception("the error of job %s could not be kept", job_id)


async def _run_recorded(context: procrastinate.JobContext, body: Awaitable[None]) -> None:
    """Run a task's body; when it raises, keep the error (then raise it to procrastinate)."""
    try:
        await body
    except Exception as exc:
        assert context.job.id is not None
        await record_job_error(_ctx(context).db, context.job.id, job_error_text(exc))
        raise


def build_app(settings: Settings, *, periodic_cron: str | None = None) -> procrastinate.App:
    """The procrastinate app with the registry's tasks. `periodic_cron` overrides the cron of
    the scheduled crawl (tests use a 6-field cron with seconds)."""
    app = procrastinate.App(
        connector=procrastinate.PsycopgConnector(conninfo=conninfo(settings.database_url))
    )
    s = settings.jobs
    # jobs.max_attempts counts the first run, as the embedded queue does; procrastinate's
    # max_attempts counts the retries after it, and retries without end when it is 0.
    retries = max(0, s.max_attempts - 1)
    retry: procrastinate.RetryStrategy | bool = (
        DoublingRetry(max_attempts=retries, wait=s.retry_wait, retry_exceptions={TransientJobError})
        if retries
        else False
    )

    @app.task(name="registry.crawl", queue=QUEUE_OF["crawl"], pass_context=True, retry=retry)
    async def crawl(context: procrastinate.JobContext, crawl_id: int) -> None:
        await _run_recorded(context, crawl_job(_ctx(context), ProcrastinateQueue(context.app), crawl_id))

    @app.task(name="registry.index_repo", queue=QUEUE_OF["index_repo"], pass_context=True, retry=retry)
    async def index_repo(
        context: procrastinate.JobContext,
        repo_id: str,
        known_revision: str | None,
        crawl_id: int | None = None,
    ) -> None:
        # procrastinate's `attempts` counts earlier runs, so this run is number attempts + 1.
        final = context.job.attempts + 1 >= s.max_attempts
        await _run_recorded(context, index_repo_job(_ctx(context), repo_id, known_revision, crawl_id,
                                                    final_attempt=final, queue=ProcrastinateQueue(context.app)))  # fmt: skip

    @app.task(name="registry.verify", queue=QUEUE_OF["verify"], pass_context=True)
    async def verify(context: procrastinate.JobContext, verification_id: int) -> None:
        await _run_recorded(context, verify_job(_ctx(context), verification_id))

    schedule = parse_schedule(settings.schedule.crawl)
    cron = periodic_cron or (schedule_cron(schedule) if schedule is not None else None)
    if cron is not None:

        @app.periodic(cron=cron, periodic_id="crawl")
        @app.task(name="registry.scheduled_crawl", queue=QUEUE_OF["crawl"], pass_context=True)
        async def scheduled_crawl(context: procrastinate.JobContext, timestamp: int) -> None:
            # The periodic job is the crawl job: its row is committed, then it lists and queues.
            async def run() -> None:
                ctx = _ctx(context)
                crawl_id = await create_scheduled_crawl(ctx.db, ctx.settings, scheduled_at=timestamp)
                await crawl_job(ctx, ProcrastinateQueue(context.app), crawl_id)

            await _run_recorded(context, run())

    return app


async def apply_schema(settings: Settings) -> bool:
    """Create procrastinate's tables unless they exist; True when they were created."""
    app = build_app(settings)
    async with app.open_async():
        row = await app.connector.execute_query_one_async("SELECT to_regclass('procrastinate_jobs') AS t")
        if row["t"] is not None:
            return False
        await app.schema_manager.apply_schema_async()
        return True


class ProcrastinateQueue:
    """A JobQueue over procrastinate; the app must be open (`async with app.open_async()`)."""

    def __init__(self, app: procrastinate.App) -> None:
        self.app = app

    async def _defer(self, task: str, lock: str | None, **kwargs: Any) -> int | None:
        try:
            return await self.app.configure_task(task, lock=lock, queueing_lock=lock).defer_async(**kwargs)
        except AlreadyEnqueued:
            return None  # the same repo or verification is already waiting: that job will do

    async def enqueue_crawl(self, crawl_id: int) -> int | None:
        return await self._defer("registry.crawl", None, crawl_id=crawl_id)

    async def enqueue_index_repo(
        self, repo_id: str, known_revision: str | None = None, crawl_id: int | None = None
    ) -> int | None:
        return await self._defer("registry.index_repo", f"repo:{repo_id}", repo_id=repo_id,
                                 known_revision=known_revision, crawl_id=crawl_id)  # fmt: skip

    async def enqueue_verify(self, verification_id: int) -> int | None:
        return await self._defer(
            "registry.verify", f"verify:{verification_id}", verification_id=verification_id
        )

    async def drop_queued(self, job_ids: Sequence[int], reason: str) -> set[int]:
        ended = set()
        for job_id in job_ids:  # `todo` jobs only: procrastinate ends them `cancelled`
            if await self.app.job_manager.cancel_job_by_id_async(job_id):
                ended.add(job_id)
        if ended:  # why, for GET /v1/jobs
            await self.app.connector.execute_query_async(_DROPPED_ERRORS, ids=sorted(ended), error=reason)
        return ended

    async def crawl_job_pending(self, crawl_id: int, scheduled_at: int | None = None) -> bool:
        row = await self.app.connector.execute_query_one_async(
            _CRAWL_JOB_PENDING, crawl_id=str(crawl_id), tick=None if scheduled_at is None else str(scheduled_at)
        )
        return bool(row["pending"])

    async def list_jobs(
        self, *, status: str | None = None, limit: int = 50, before_id: int | None = None
    ) -> list[JobInfo]:
        rows = await self.app.connector.execute_query_all_async(
            _LIST_JOBS, statuses=STATUSES[status] if status else None, before=before_id, limit=limit, id=None
        )
        return [_info(r) for r in rows]

    async def get_job(self, job_id: int) -> JobInfo | None:
        rows = await self.app.connector.execute_query_all_async(
            _LIST_JOBS, statuses=None, before=None, limit=1, id=job_id
        )
        return _info(rows[0]) if rows else None


_DROPPED_ERRORS = """
INSERT INTO job_errors (job_id, error, at) SELECT unnest(%(ids)s::bigint[]), %(error)s, now()
ON CONFLICT (job_id) DO UPDATE SET error = excluded.error, at = excluded.at
"""

_CRAWL_JOB_PENDING = """
SELECT EXISTS (
  SELECT 1 FROM procrastinate_jobs
   WHERE status IN ('todo', 'doing')
     AND ((task_name = 'registry.crawl' AND args->>'crawl_id' = %(crawl_id)s)
       OR (task_name = 'registry.scheduled_crawl' AND args->>'timestamp' = %(tick)s))
) AS pending
"""

_LIST_JOBS = """
SELECT j.id, j.queue_name, j.task_name, j.status::text AS status, j.args, j.attempts,
       (SELECT min(e.at) FROM procrastinate_events e WHERE e.job_id = j.id AND e.type = 'deferred') AS created_at,
       (SELECT max(e.at) FROM procrastinate_events e WHERE e.job_id = j.id AND e.type = 'started') AS started_at,
       (SELECT max(e.at) FROM procrastinate_events e WHERE e.job_id = j.id
          AND e.type IN ('succeeded', 'failed', 'cancelled', 'aborted')) AS finished_at,
       (SELECT je.error FROM job_errors je WHERE je.job_id = j.id) AS error
  FROM procrastinate_jobs j
 WHERE (%(statuses)s::text[] IS NULL OR j.status::text = ANY(%(statuses)s::text[]))
   AND (%(before)s::bigint IS NULL OR j.id < %(before)s::bigint)
   AND (%(id)s::bigint IS NULL OR j.id = %(id)s::bigint)
 ORDER BY j.id DESC
 LIMIT %(limit)s
"""


def _info(row: dict[str, Any]) -> JobInfo:
    finished: datetime | None = row["finished_at"] if _STATE_OF.get(row["status"]) in ("done", "failed") else None
    return JobInfo(
        id=row["id"], kind=TASK_KIND.get(row["task_name"], row["task_name"]), queue=row["queue_name"],
        status=_STATE_OF.get(row["status"], row["status"]), args=dict(row["args"] or {}),
        # A job that succeeded after failing runs has no error, as in the embedded runner.
        attempts=row["attempts"], error=None if row["status"] == "succeeded" else row["error"],
        created_at=row["created_at"], started_at=row["started_at"],
        finished_at=finished,
    )  # fmt: skip


async def retry_stalled_jobs(
    app: procrastinate.App, db: Database, seconds_since_heartbeat: float, max_attempts: int
) -> int:
    """Put back the running jobs of workers silent for that long, or fail those whose dead
    run was their `max_attempts`-th (and end their crawl or verification); returns how many
    were put back."""
    stalled = await app.job_manager.get_stalled_jobs(seconds_since_heartbeat=seconds_since_heartbeat)
    n = 0
    for job in stalled:
        n += await handle_stalled_job(db, job, seconds_since_heartbeat, max_attempts)
    return n


async def handle_stalled_job(
    db: Database, job: Job, seconds_since_heartbeat: float, max_attempts: int
) -> int:
    """Retry or fail one job `get_stalled_jobs` listed, if it is still that stalled run;
    1 when it was put back.

    Every worker sweeps, so by now another sweeper may have retried the job and a live
    worker taken it; procrastinate's own retry accepts any `doing` job and would put that
    running job back (a second worker then runs it too). So the job's row is locked and
    checked first, and changed in the same transaction of the catalog's database (which
    holds procrastinate's tables): the crawl or verification a failed job leaves ends with
    it, or neither does and the next sweep tries again."""
    assert job.id is not None
    # procrastinate's `attempts` counts the runs that ended: the dead one is attempts + 1.
    runs = job.attempts + 1
    try:
        async with db.sessions() as session, session.begin():
            locked = await session.execute(
                text(_LOCK_STILL_STALLED),
                {"id": job.id, "attempts": job.attempts, "secs": seconds_since_heartbeat},
            )
            if locked.first() is None:
                log.debug("stalled job %s already handled", job.id)
                return 0
            if runs < max_attempts:
                await session.execute(text(_RETRY_JOB), {"id": job.id})
            else:
                error = worker_died_message(runs, max_attempts)
                await end_lost_work(session, TASK_KIND.get(job.task_name, job.task_name), job.task_kwargs,
                                    job.id, error)  # fmt: skip
                await session.execute(text(_FAIL_JOB), {"id": job.id})
                await session.execute(text(_RECORD_ERROR), {"id": job.id, "error": error})
    except Exception:  # the database: the job stays stalled and the next sweep tries again
        log.exception("stalled job %s (%s) could not be retried or failed", job.id, job.task_name)
        return 0
    if runs < max_attempts:
        log.warning("job %s (%s) of a stalled worker retried", job.id, job.task_name)
        return 1
    log.error("job %s (%s) failed: %s", job.id, job.task_name, worker_died_message(runs, max_attempts))
    return 0


# The run the sweep listed is still there and still stalled: `doing`, no run ended since
# (every retry and finish adds one to attempts) and its worker gone or silent.
_LOCK_STILL_STALLED = """
SELECT j.id FROM procrastinate_jobs j
 WHERE j.id = :id AND j.status = 'doing' AND j.attempts = :attempts
   AND (j.worker_id IS NULL OR EXISTS (
        SELECT 1 FROM procrastinate_workers w
         WHERE w.id = j.worker_id AND w.last_heartbeat < now() - make_interval(secs => :secs)))
   FOR UPDATE OF j
"""
# What procrastinate's job manager runs for retry_job (now) and finish_job (failed, kept).
_RETRY_JOB = "SELECT procrastinate_retry_job_v2(:id, now(), NULL, NULL, NULL)"
_FAIL_JOB = "SELECT procrastinate_finish_job_v1(:id, 'failed', false)"


async def _stalled_loop(app: procrastinate.App, db: Database, settings: Settings) -> None:
    s = settings.jobs
    while True:
        await asyncio.sleep(max(1.0, s.stalled_seconds / 2))
        try:
            await retry_stalled_jobs(app, db, s.stalled_seconds, s.max_attempts)
        except Exception:
            log.exception("retrying stalled jobs failed")


async def _sweep_loop(ctx: JobContext, queue: ProcrastinateQueue, seconds: float) -> None:
    """Crawls left pending by a lost job or a listing never queued (every worker sweeps;
    each step is a transaction that checks the row first, so two sweepers agree)."""
    every = max(1.0, seconds)
    while True:
        await sweep(ctx.db, queue, idle=timedelta(seconds=every))
        try:
            async with ctx.db.sessions() as session, session.begin():
                await session.execute(text(_FORGET_ERRORS))
        except Exception:
            log.exception("forgetting the errors of purged jobs failed")
        await asyncio.sleep(every)


async def require_queue_tables(app: procrastinate.App) -> None:
    """SchemaMismatch unless procrastinate's tables exist (`app` open): without them every
    enqueue and every fetch fails with a bare database error."""
    if not await app.check_connection_async():
        raise SchemaMismatch("the job queue's tables are missing: run `registry db upgrade`")


async def run_worker(
    settings: Settings,
    queues: Iterable[str],
    concurrency: int,
    *,
    periodic_cron: str | None = None,
    install_signal_handlers: bool = True,
) -> None:
    """`registry worker`: run jobs of `queues` until SIGINT/SIGTERM (or cancelled).

    Refuses to start (SchemaMismatch) unless the catalog is at this release's head: like
    the API processes, workers do not migrate PostgreSQL (`registry db upgrade` does, once
    per release), and a worker on another schema would fail every job it took. Refuses too
    when procrastinate's tables are missing (`registry db upgrade` in distributed mode
    creates them), which procrastinate itself reports as a bare database error."""
    s = settings.jobs
    app = build_app(settings, periodic_cron=periodic_cron)
    async with open_context(settings) as ctx:
        await migrate.require_schema(ctx.db.engine)
        async with app.open_async():
            await require_queue_tables(app)
            stalled = asyncio.create_task(_stalled_loop(app, ctx.db, settings))
            swept = asyncio.create_task(_sweep_loop(ctx, ProcrastinateQueue(app), s.sweep_seconds))
            try:
                await app.run_worker_async(
                    queues=list(queues), concurrency=concurrency, additional_context={CONTEXT_KEY: ctx},
                    update_heartbeat_interval=s.heartbeat_seconds, stalled_worker_timeout=s.stalled_seconds,
                    install_signal_handlers=install_signal_handlers,
                )  # fmt: skip
            finally:
                stalled.cancel()
                swept.cancel()
                await asyncio.gather(stalled, swept, return_exceptions=True)
