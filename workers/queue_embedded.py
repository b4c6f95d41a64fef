"""The embedded runner: a bounded pool of asyncio workers inside `registry serve`.

The catalog's `jobs` table is the queue, so a server killed mid-crawl resumes on restart:
rows left `running` by a dead process go back to `queued` when the pool starts (one
embedded server per database; the distributed mode is for more). Each claim counts an
attempt, so a job whose runs killed the process `jobs.max_attempts` times (the OS ending
it for memory, say) ends `failed` instead of running again at every start, and so does what
it was for: its crawl (else the sweep would queue its listing again, with attempts anew) or
its verification (`crashed`); a pool that stops on its own (serve shutting down) gives its
jobs back without using up an attempt.
Each enqueue commits its row before the pool is woken. A per-repo or per-verification
`lock` keeps at most one job of each waiting, and runs them one at a time: a job asked for
while an equal one waits is that one, while an equal one runs it is queued behind it (the
running one may have read the repo before the change that asked for the new one), as
procrastinate's `queueing_lock` and `lock` do in the distributed mode. At most `verify.concurrency` of
the pool's `jobs.concurrency` workers run a verification at once (each needs a model's
memory); while that many run, the others take only crawl and index jobs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from sqlalchemy import exists, select, update
from sqlalchemy.orm import aliased

from registry.api.launchers import CatalogJobs
from registry.catalog import migrate
from registry.catalog.db import Database
from registry.catalog.models import Job
from registry.catalog.types import utcnow
from registry.config import Settings
from workers.crawl_jobs import sweep
from workers.jobs import (
    QUEUE_OF,
    JobContext,
    JobInfo,
    TransientJobError,
    crawl_job,
    end_lost_work,
    index_repo_job,
    job_error_text,
    open_context,
    verify_job,
    worker_died_message,
)

log = logging.getLogger(__name__)
IDLE_POLL_S = 1.0  # also picks up retries whose wait ended


class EmbeddedQueue:
    """A JobQueue over the `jobs` table; `run()` is the pool (a background task of serve)."""

    def __init__(self, settings: Settings, db: Database) -> None:
        self.settings = settings
        self.db = db
        self._reader = CatalogJobs(db.sessions)
        self._wake = asyncio.Event()
        self._claim = asyncio.Lock()  # one claimer at a time: SQLite has no SKIP LOCKED
        self._claimed: set[int] = set()  # jobs of this pool whose end is not recorded yet
        self._verifying = 0  # verify jobs this pool runs now, at most verify.concurrency

    # -- JobQueue -----------------------------------------------------------------------------

    async def enqueue_crawl(self, crawl_id: int) -> int | None:
        return await self._enqueue("crawl", {"crawl_id": crawl_id}, None)

    async def enqueue_index_repo(
        self, repo_id: str, known_revision: str | None = None, crawl_id: int | None = None
    ) -> int | None:
        args = {"repo_id": repo_id, "known_revision": known_revision, "crawl_id": crawl_id}
        return await self._enqueue("index_repo", args, f"repo:{repo_id}")

    async def enqueue_verify(self, verification_id: int) -> int | None:
        return await self._enqueue(
            "verify", {"verification_id": verification_id}, f"verify:{verification_id}"
        )

    async def list_jobs(
        self, *, status: str | None = None, limit: int = 50, before_id: int | None = None
    ) -> list[JobInfo]:
        return await self._reader.list_jobs(status=status, limit=limit, before_id=before_id)

    async def get_job(self, job_id: int) -> JobInfo | None:
        return await self._reader.get_job(job_id)

    async def crawl_job_pending(self, crawl_id: int, scheduled_at: int | None = None) -> bool:
        async with self.db.sessions() as session:
            args = await session.scalars(
                select(Job.args).where(Job.kind == "crawl", Job.status.in_(("queued", "running")))
            )
            return any((a or {}).get("crawl_id") == crawl_id for a in args)

    async def drop_queued(self, job_ids: Sequence[int], reason: str) -> set[int]:
        async with self.db.sessions() as session, session.begin():
            ended = await session.scalars(
                update(Job)
                .where(Job.id.in_(list(job_ids)), Job.status == "queued")
                .values(status="failed", error=reason, finished_at=utcnow())
                .returning(Job.id)
            )
            return set(ended)

    async def _enqueue(self, kind: str, args: dict[str, Any], lock: str | None) -> int | None:
        async with self.db.sessions() as session, session.begin():
            if lock is not None:
                waiting = await session.scalar(select(Job.id).where(Job.lock == lock, Job.status == "queued").limit(1))
                if waiting is not None:
                    return None
            row = Job(kind=kind, queue=QUEUE_OF[kind], status="queued", args=args, lock=lock)
            session.add(row)
            await session.flush()
            job_id = row.id
        self._wake.set()  # after the commit: a worker must find the row
        return job_id

    # -- the pool -----------------------------------------------------------------------------

    async def run(self, concurrency: int | None = None) -> None:
        """Run jobs until cancelled, `jobs.concurrency` at once. Rows of a dead process resume."""
        await migrate.ensure_schema(self.db.engine)
        await self._recover()
        async with open_context(self.settings) as ctx:
            n = max(1, concurrency or self.settings.jobs.concurrency)
            workers = [asyncio.create_task(self._worker(ctx), name=f"job-worker-{i}") for i in range(n)]
            workers.append(asyncio.create_task(self._sweeper(), name="crawl-sweeper"))
            try:
                await asyncio.gather(*workers)
            finally:
                for task in workers:
                    task.cancel()
                await asyncio.gather(*workers, return_exceptions=True)
                await self._give_back()

    async def _recover(self) -> None:
        """Rows `running` at start lost their process mid-run: queue them again, unless that
        was their last attempt (the claim counted it) and they fail instead."""
        limit = self.settings.jobs.max_attempts
        async with self.db.sessions() as session, session.begin():
            for job in await session.scalars(select(Job).where(Job.status == "running")):
                if job.attempts < limit:
                    job.status = "queued"
                    continue
                job.status, job.finished_at = "failed", utcnow()
                job.error = worker_died_message(job.attempts, limit)
                log.error("job %s (%s) failed: %s", job.id, job.kind, job.error)
                await end_lost_work(session, job.kind, job.args or {}, job.id, job.error)

    async def _give_back(self) -> None:
        """Queue again, without counting the attempt, the jobs this pool stopped mid-run: being
        stopped says nothing of the job. If this fails, the rows stay `running` and count."""
        if not self._claimed:
            return
        try:
            async with self.db.sessions() as session, session.begin():
                await session.execute(
                    update(Job)
                    .where(Job.id.in_(self._claimed), Job.status == "running")
                    .values(status="queued", attempts=Job.attempts - 1)
                )
            self._claimed.clear()
        except Exception:
            log.exception("job pool: the jobs stopped mid-run could not be queued again")

    async def join(self) -> None:
        """Wait until no job is queued or running (tests, `registry crawl`-like callers)."""
        while await self.list_jobs(status="queued", limit=1) or await self.list_jobs(
            status="running", limit=1
        ):
            await asyncio.sleep(0.1)

    async def _sweeper(self) -> None:
        """Crawls left pending by a lost job or a listing never queued: at start, then now and then."""
        every = max(1.0, self.settings.jobs.sweep_seconds)
        while True:
            await sweep(self.db, self, idle=timedelta(seconds=every))
            await asyncio.sleep(every)

    async def _worker(self, ctx: JobContext) -> None:
        while True:
            try:
                row = await self._next()
                if row is not None:
                    try:
                        await self._execute(ctx, row)
                    finally:
                        if row.kind == "verify":
                            self._verifying -= 1
                            self._wake.set()  # a queued verification may start now
                    continue
            except Exception:
                # The catalog failed the claim or the job's record (locked, disk full, a
                # restarting server): the pool outlives it. A job whose end went unrecorded
                # stays `running` and is queued again when the pool next starts.
                log.exception("job pool: the jobs table could not be read or written; trying again")
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), IDLE_POLL_S)

    async def _next(self) -> Job | None:
        async with self._claim, self.db.sessions() as session, session.begin():
            running = aliased(Job)
            query = select(Job).where(
                Job.status == "queued",
                Job.run_after <= utcnow(),
                # Not while an equal job runs: it waits for that one's end.
                Job.lock.is_(None) | ~exists().where(running.lock == Job.lock, running.status == "running"),
            )
            if self._verifying >= self.settings.verify.concurrency:
                query = query.where(Job.kind != "verify")
            row = await session.scalar(query.order_by(Job.id).limit(1))
            if row is not None:
                row.status, row.started_at, row.attempts = "running", utcnow(), row.attempts + 1
                self._claimed.add(row.id)
        if row is not None and row.kind == "verify":  # counted once the claim is committed
            self._verifying += 1
        return row

    async def _execute(self, ctx: JobContext, row: Job) -> None:
        status, error, run_after = "done", None, None
        try:
            # The last attempt is the one whose outcome counts in its crawl (no retry follows).
            await self._call(
                ctx, row.kind, row.args, final_attempt=row.attempts >= self.settings.jobs.max_attempts
            )
        except TransientJobError as exc:
            error = job_error_text(exc)
            if row.attempts < self.settings.jobs.max_attempts:
                status = "queued"
                wait = self.settings.jobs.retry_wait * 2 ** (row.attempts - 1)
                run_after = utcnow() + timedelta(seconds=wait)
            else:
                status = "failed"
        except Exception as exc:  # a failed job is a row saying why, never a dead pool
            log.exception("job %s (%s) failed", row.id, row.kind)
            status, error = "failed", job_error_text(exc)
        async with self.db.sessions() as session, session.begin():
            job = await session.get_one(Job, row.id)
            job.status, job.error = status, error
            if run_after is not None:
                job.run_after = run_after
            else:
                job.finished_at = utcnow()
        self._claimed.discard(row.id)

    async def _call(self, ctx: JobContext, kind: str, args: dict[str, Any], *, final_attempt: bool) -> None:
        if kind == "crawl":
            await crawl_job(ctx, self, int(args["crawl_id"]))
        elif kind == "index_repo":
            crawl_id = args.get("crawl_id")
            await index_repo_job(ctx, str(args["repo_id"]), args.get("known_revision"),
                                 int(crawl_id) if crawl_id is not None else None,
                                 final_attempt=final_attempt, queue=self)  # fmt: skip
        elif kind == "verify":
            await verify_job(ctx, int(args["verification_id"]))
        else:  # pragma: no cover - the check constraint allows no other kind
            raise ValueError(f"unknown job kind {kind!r}")
