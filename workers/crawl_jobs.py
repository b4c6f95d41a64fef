"""The accounting of a crawl run as jobs: one listing job, then one index-repo job per repo.

The crawl row stays `running` until its listing and every index-repo job it queued have
ended. `crawls.pending_jobs` holds one for the listing plus one per queued repo, and
`crawl_repos` holds one row per queued repo, the write-once record of its outcome:

    reserved --enqueue--> queued --its job reports--> reported
        |                    |\\--its job ended without reporting (sweep)--> lost
        |                    \\--its crawl was cancelled: the job ended unrun--> reported
        \\--an equal job of another crawl waits--> skipped

Every step is a transaction that changes the row's state and the crawl's counters
together, so that any worker may die between two steps and a rerun counts nothing twice
and leaves nothing pending forever:

- the listing reserves a batch of repos (rows + pending) before it queues their jobs; a
  rerun first queues what the dead attempt had reserved, then skips repos it already has;
  a listing that has ended (its counters are on the row) is not run again;
- a repo job's report moves its row to `reported` once; a second report of the same job
  (its worker died after the report, before the job was marked done) changes nothing;
- `sweep_lost_jobs`, run by both runners, releases rows whose job has ended or vanished
  without a report (a job cancelled by hand, a queue whose finished jobs are purged);
- a cancelled crawl (`registry.catalog.crawls`) lists no further batch, and
  `drop_cancelled_jobs` ends its queued jobs unrun in bulk, each row counted `cancelled` in
  the transaction that releases it. A job the queue had already handed to a worker reports
  itself, as does one another crawl counts on.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from datetime import timedelta
from typing import Any, Protocol

from sqlalchemy import func, insert, select, tuple_, update
from sqlalchemy.ext.asyncio import AsyncSession

from registry.catalog import migrate
from registry.catalog.crawls import crawl_status, repos_wanted_elsewhere
from registry.catalog.db import Database
from registry.catalog.models import Crawl, CrawlRepo
from registry.catalog.types import utcnow
from registry.hub.client import HubClient, RepoSummary
from registry.hub.errors import HubError
from workers.crawl import MAX_ERRORS_KEPT, CrawlParams, CrawlReport, candidates, known_revisions

log = logging.getLogger(__name__)

Enqueue = Callable[[str, str | None], Awaitable[int | None]]  # the job id, None if an equal one waits

# Counters an index-repo job adds to its crawl's row (CrawlReport fields).
REPO_COUNTERS = ("unchanged", "indexed", "rederived", "deleted", "moved", "not_gguf", "failed", "cancelled", "artifacts",
                 "artifact_errors", "files", "sibling_reads", "sibling_fallbacks", "bytes_fetched", "requests")  # fmt: skip
# Counters the listing assigns when it ends; their presence says that it has ended.
LISTING_DONE = "listed"


class SweptQueue(Protocol):
    """What the sweeps need of a queue."""

    async def get_job(self, job_id: int) -> Any:
        """The job's JobInfo (its `status`), None when the queue has forgotten it."""

    async def crawl_job_pending(self, crawl_id: int, scheduled_at: int | None) -> bool:
        """Whether a listing job of this crawl (or of its schedule tick) is queued or running."""

    async def enqueue_crawl(self, crawl_id: int) -> int | None: ...

    async def drop_queued(self, job_ids: Sequence[int], reason: str) -> set[int]:
        """End these jobs, those still queued, without running them (`reason` says why);
        the ids it ended."""


def params_of(crawl: Crawl) -> CrawlParams:
    """The CrawlParams a crawl row was created with (by the API, a schedule or the CLI)."""
    p = crawl.parameters or {}
    return CrawlParams(
        repos=tuple(p.get("repos") or ()), author=p.get("author"), search=p.get("search"),
        limit=p.get("limit"), full=bool(p.get("full")), prune=bool(p.get("prune", True)),
    )  # fmt: skip


async def enqueue_crawl(
    db: Database, client: HubClient, crawl_id: int, enqueue: Enqueue, *, batch: int = 100
) -> CrawlReport:
    """Run crawl `crawl_id` as a job: list the hub and `enqueue(repo_id, known_revision)` each
    changed repo, so that any number of workers share the reading. `enqueue` returns the job
    id, or None when an equal job is already queued (it belongs to another crawl, or to
    this one when a dead attempt queued it without recording so).

    Safe to rerun after its worker died at any point (see the module's docstring).
    """
    await migrate.ensure_schema(db.engine)
    async with db.sessions() as session, session.begin():
        row = await session.get_one(Crawl, crawl_id)
        params = params_of(row)
        report = CrawlReport(crawl_id=crawl_id, status=row.status)
        if LISTING_DONE in (row.counters or {}):
            return report  # a rerun of a listing that ended: its repo jobs do the rest
        # max(): the token of a dead attempt is still held; a rerun must not add a second.
        row.pending_jobs = max(row.pending_jobs, 1)
        cancelled = row.status == "cancelled"  # before this job ran: list nothing
        if not cancelled:
            row.status, row.finished_at, row.heartbeat_at = "running", None, utcnow()
        leftover = list(await session.scalars(
            select(CrawlRepo.repo_id).where(CrawlRepo.crawl_id == crawl_id, CrawlRepo.state == "reserved")))  # fmt: skip
    status = "finished"
    try:
        # Reserved by a dead attempt and perhaps never queued: queue them first.
        known = await known_revisions(db, leftover) if leftover and not params.full else {}
        for repo_id in leftover:
            if await _still_reserved(db, crawl_id, repo_id):  # its job may have run and reported
                job_id = None if cancelled else await enqueue(repo_id, known.get(repo_id))
                await _queue_reserved(db, crawl_id, repo_id, job_id)
        pending: list[RepoSummary] = []
        if not cancelled:
            async for summary in candidates(client, params, db):
                report.listed += 1
                pending.append(summary)
                if len(pending) >= batch:
                    if not await _queue_batch(db, crawl_id, params, pending, enqueue, report):
                        break  # cancelled: queue no more
                    pending = []
            else:
                await _queue_batch(db, crawl_id, params, pending, enqueue, report)
    except HubError as exc:  # the listing failed: what was queued still runs
        status = "failed"
        report.error("", exc)
    except BaseException:
        status = "failed"
        raise
    finally:
        report.status = status
        await _end_listing(db, crawl_id, report)
    return report


async def _queue_batch(
    db: Database,
    crawl_id: int,
    params: CrawlParams,
    batch: Sequence[RepoSummary],
    enqueue: Enqueue,
    report: CrawlReport,
) -> bool:
    """Reserve the batch's changed repos in one transaction, then queue each one's job.
    False when the crawl has been cancelled: nothing is reserved, and the listing stops."""
    if not batch:
        return True
    ids = [s.repo_id for s in batch]
    known = {} if params.full else await known_revisions(db, ids)
    async with db.sessions() as session, session.begin():
        await _lock_crawl(session, crawl_id)
        if await crawl_status(session, crawl_id) == "cancelled":
            return False
        mine = set(await session.scalars(
            select(CrawlRepo.repo_id).where(CrawlRepo.crawl_id == crawl_id, CrawlRepo.repo_id.in_(ids))))  # fmt: skip
        reserve: list[RepoSummary] = []
        for s in batch:
            if s.repo_id in mine:
                continue  # a dead attempt of this listing queued it: counted there
            if s.sha is not None and known.get(s.repo_id) == s.sha:
                report.unchanged += 1  # the listing's sha saves a job per unchanged repo
            else:
                reserve.append(s)
                mine.add(s.repo_id)  # a listing may name a repo twice
        if reserve:
            now = utcnow()
            await session.execute(insert(CrawlRepo), [
                {"crawl_id": crawl_id, "repo_id": s.repo_id, "state": "reserved", "updated_at": now}
                for s in reserve])  # fmt: skip
            await session.execute(
                update(Crawl).where(Crawl.id == crawl_id).values(pending_jobs=Crawl.pending_jobs + len(reserve))
            )
    # Reserved before the jobs exist: a fast worker may report before enqueue returns.
    for s in reserve:
        await _queue_reserved(db, crawl_id, s.repo_id, await enqueue(s.repo_id, known.get(s.repo_id)))
    return True


async def _still_reserved(db: Database, crawl_id: int, repo_id: str) -> bool:
    async with db.sessions() as session:
        state = await session.scalar(
            select(CrawlRepo.state).where(CrawlRepo.crawl_id == crawl_id, CrawlRepo.repo_id == repo_id)
        )
        return state == "reserved"


async def _queue_reserved(db: Database, crawl_id: int, repo_id: str, job_id: int | None) -> None:
    """Record the job of a reserved repo; no job (an equal one waits): skip and release it."""
    async with db.sessions() as session, session.begin():
        await _lock_crawl(session, crawl_id)
        row = await session.get(CrawlRepo, (crawl_id, repo_id))
        if row is None:
            return
        if job_id is not None:
            row.job_id = row.job_id or job_id
            if row.state == "reserved":
                row.state, row.updated_at = "queued", utcnow()
        elif row.state == "reserved":
            # That job reports to its own crawl, or (queued by a dead attempt of this listing)
            # finds this row skipped and adds its counters without a second release.
            row.state, row.updated_at = "skipped", utcnow()
            await _release(session, crawl_id, 1)


async def _end_listing(db: Database, crawl_id: int, report: CrawlReport) -> None:
    async with db.sessions() as session, session.begin():
        await _lock_crawl(session, crawl_id)
        await _end_listing_in(session, crawl_id, report)


async def fail_listing(session: AsyncSession, crawl_id: int, job_id: int, error: str) -> bool:
    """End failed, in the caller's transaction, the listing of a crawl whose listing job
    `job_id` failed for good without ending it (its runs killed the process every time),
    so that no sweep queues it again: the crawl ends `failed` once the repo jobs it queued
    have ended. Repos a dead attempt reserved without recording their job are skipped, as
    when their job was not queued. False when the listing had ended (or the crawl is gone)."""
    if not await _lock_crawl(session, crawl_id):
        return False
    row = await session.get_one(Crawl, crawl_id, populate_existing=True)
    if row.status != "running" or LISTING_DONE in (row.counters or {}):
        return False
    if row.kind == "local":  # one job did the whole crawl: nothing else is pending
        row.status, row.finished_at = "failed", utcnow()
        row.errors = [*(row.errors or []), {"repo": "", "path": "", "error": f"job_failed: job {job_id}: {error}"}]
        return True
    row.pending_jobs = max(row.pending_jobs, 1)  # the listing's own, if it died before taking it
    reserved = list(await session.scalars(
        select(CrawlRepo).where(CrawlRepo.crawl_id == crawl_id, CrawlRepo.state == "reserved")))  # fmt: skip
    for repo in reserved:
        repo.state, repo.updated_at = "skipped", utcnow()
    await session.flush()
    report = CrawlReport(crawl_id=crawl_id, status="failed")
    report.listed = int(await session.scalar(
        select(func.count()).select_from(CrawlRepo).where(CrawlRepo.crawl_id == crawl_id)) or 0)  # fmt: skip
    report.add_error("", "", f"job_failed: listing job {job_id}: {error}")
    await _release(session, crawl_id, len(reserved))
    await _end_listing_in(session, crawl_id, report)
    return True


async def _end_listing_in(session: AsyncSession, crawl_id: int, report: CrawlReport) -> None:
    """Assign the listing's counters and release its pending job; the caller holds the lock."""
    queued = await session.scalar(
        select(func.count()).select_from(CrawlRepo)
        .where(CrawlRepo.crawl_id == crawl_id, CrawlRepo.state != "skipped"))  # fmt: skip
    listing = {LISTING_DONE: report.listed, "listing_unchanged": report.unchanged, "queued": int(queued or 0),
               "listing_failed": int(report.status == "failed")}  # fmt: skip
    # Zeros for the repo counters too: a crawl that queued nothing still shows them all.
    add = {**dict.fromkeys(REPO_COUNTERS, 0), "unchanged": report.unchanged}
    await _release(session, crawl_id, 1, add=add, assign=listing, errors=report.errors)


async def report_repo(db: Database, crawl_id: int, repo_id: str, report: CrawlReport) -> bool:
    """Add one index-repo job's final outcome to its crawl and release its pending count.

    Call it on the job's final attempt only (done, or failed for good): a retried attempt
    reports nothing. Write-once per (crawl, repo): a second report of the same repo adds
    nothing and returns False.
    """
    add = {k: getattr(report, k) for k in REPO_COUNTERS}
    async with db.sessions() as session, session.begin():
        if not await _lock_crawl(session, crawl_id):
            return False  # the crawl is gone: nothing to report into
        row = await session.get(CrawlRepo, (crawl_id, repo_id))
        if row is None:  # a job queued before repos were recorded: record it now
            session.add(CrawlRepo(crawl_id=crawl_id, repo_id=repo_id, state="reported", updated_at=utcnow()))
            released = 1
        elif row.state in ("reserved", "queued"):
            released = 1
        elif row.state == "skipped":
            # This crawl's own job after all (a dead attempt queued it unrecorded): it was
            # released when skipped; its outcome still counts here, and so does the job.
            released = 0
            add["queued"] = 1
        else:
            log.info("crawl %s: a second report of %s ignored", crawl_id, repo_id)
            return False
        if row is not None:
            row.state, row.updated_at = "reported", utcnow()
        await _release(session, crawl_id, released, add=add, errors=report.errors)
    return True


async def sweep_lost_jobs(db: Database, queue: SweptQueue, *, idle: timedelta = timedelta(minutes=1)) -> int:
    """Release the queued repos of running crawls whose job has ended or vanished without
    reporting, each counted as failed; returns how many. Crawls that heard from any of
    their jobs within `idle` are left alone (their jobs are busy)."""
    async with db.sessions() as session:
        rows = (await session.execute(
            select(CrawlRepo.crawl_id, CrawlRepo.repo_id, CrawlRepo.job_id)
            .join(Crawl, Crawl.id == CrawlRepo.crawl_id)
            # A cancelled crawl too: the jobs it queued still end, and its pending count with them.
            .where(Crawl.status.in_(("running", "cancelled")), CrawlRepo.state == "queued",
                   CrawlRepo.job_id.is_not(None),
                   Crawl.heartbeat_at < utcnow() - idle)
            .order_by(CrawlRepo.crawl_id).limit(1000))).all()  # fmt: skip
    released = 0
    for crawl_id, repo_id, job_id in rows:
        if job_id is None:
            continue
        job = await queue.get_job(int(job_id))
        state = getattr(job, "status", None)
        if state in ("queued", "running"):
            continue
        # A job that ended has reported already or never will: its report commits before
        # the job is marked done or failed.
        async with db.sessions() as session, session.begin():
            await _lock_crawl(session, crawl_id)
            row = await session.get(CrawlRepo, (crawl_id, repo_id))
            if row is None or row.state != "queued":
                continue  # reported meanwhile
            row.state, row.updated_at = "lost", utcnow()
            text = f"job {job_id} {'vanished' if job is None else 'ended as ' + str(state)} without reporting"
            await _release(session, crawl_id, 1, add={"failed": 1},
                           errors=[{"repo": repo_id, "path": "", "error": f"lost_job: {text}"}])  # fmt: skip
        log.warning("crawl %s: %s: %s", crawl_id, repo_id, text)
        released += 1
    return released


async def resume_orphaned_crawls(db: Database, queue: SweptQueue, *, idle: timedelta = timedelta(minutes=1)) -> int:
    """Queue the listing again of running crawls that have none: the process that committed
    the row died before it queued the job. Only rows made for a queue (by the API or a
    schedule: `source` in their parameters) whose listing has not ended and that were
    quiet for `idle`; a crawl the CLI runs in-process is never touched. Returns how many."""
    async with db.sessions() as session:
        rows = (await session.execute(
            select(Crawl.id, Crawl.parameters, Crawl.counters)
            .where(Crawl.status == "running", Crawl.kind.in_(("hub", "local")), Crawl.started_at < utcnow() - idle,
                   (Crawl.heartbeat_at.is_(None)) | (Crawl.heartbeat_at < utcnow() - idle))
            .order_by(Crawl.id).limit(100))).all()  # fmt: skip
    resumed = 0
    for crawl_id, parameters, counters in rows:
        parameters = parameters or {}
        if "source" not in parameters or LISTING_DONE in (counters or {}):
            continue
        scheduled_at = parameters.get("scheduled_at")
        if await queue.crawl_job_pending(crawl_id, int(scheduled_at) if scheduled_at is not None else None):
            continue
        if await queue.enqueue_crawl(crawl_id) is not None:
            log.warning("crawl %s had no listing job: queued one", crawl_id)
            resumed += 1
    return resumed


DROP_BATCH = 500  # queued jobs of a cancelled crawl looked at per transaction


async def drop_cancelled_jobs(db: Database, queue: SweptQueue, crawl_id: int | None = None) -> int:
    """End, without running them, the queued index-repo jobs of cancelled crawls (of crawl
    `crawl_id` only, when given), each counted `cancelled` in its crawl; returns how many.

    Without this a cancelled crawl's queued jobs each take a turn of the runner to find
    their crawl cancelled, ahead of any job queued after them. A job that another crawl
    counts on (`catalog.crawls.repos_wanted_elsewhere`) is left to run, and so is one a
    runner has taken meanwhile: it reports itself."""
    dropped = 0
    after: tuple[int, str] = (0, "")
    while True:
        async with db.sessions() as session:
            query = (
                select(CrawlRepo.crawl_id, CrawlRepo.repo_id, CrawlRepo.job_id)
                .join(Crawl, Crawl.id == CrawlRepo.crawl_id)
                .where(Crawl.status == "cancelled", CrawlRepo.state == "queued", CrawlRepo.job_id.is_not(None),
                       tuple_(CrawlRepo.crawl_id, CrawlRepo.repo_id) > tuple_(*after))
                .order_by(CrawlRepo.crawl_id, CrawlRepo.repo_id).limit(DROP_BATCH)
            )  # fmt: skip
            if crawl_id is not None:
                query = query.where(CrawlRepo.crawl_id == crawl_id)
            rows = (await session.execute(query)).all()
            if not rows:
                return dropped
            after = (rows[-1][0], rows[-1][1])
            by_crawl: dict[int, dict[str, int]] = {}
            for cid, repo_id, job_id in rows:
                if job_id is not None:
                    by_crawl.setdefault(cid, {})[repo_id] = int(job_id)
            for cid, jobs in by_crawl.items():
                crawl = await session.get_one(Crawl, cid)
                for repo_id in await repos_wanted_elsewhere(session, jobs, crawl):
                    del jobs[repo_id]
        for cid, jobs in by_crawl.items():
            if jobs:
                dropped += await _drop(db, queue, cid, jobs)


async def _drop(db: Database, queue: SweptQueue, crawl_id: int, jobs: dict[str, int]) -> int:
    """End the queued jobs of these repos of cancelled crawl `crawl_id` and count them."""
    ended = await queue.drop_queued(sorted(jobs.values()), f"cancelled: crawl {crawl_id} was cancelled")
    repos = [repo_id for repo_id, job_id in jobs.items() if job_id in ended]
    if not repos:
        return 0
    async with db.sessions() as session, session.begin():
        await _lock_crawl(session, crawl_id)
        counted = await session.scalars(
            update(CrawlRepo)
            .where(CrawlRepo.crawl_id == crawl_id, CrawlRepo.repo_id.in_(repos), CrawlRepo.state == "queued")
            .values(state="reported", updated_at=utcnow())
            .returning(CrawlRepo.repo_id)
        )
        n = len(list(counted))  # a sweeper that found the job ended may have counted it lost first
        await _release(session, crawl_id, n, add={"cancelled": n})
    log.info("crawl %s: %s queued repo jobs ended, the crawl was cancelled", crawl_id, n)
    return n


async def sweep(db: Database, queue: SweptQueue, *, idle: timedelta) -> None:
    """The sweeps, as the runners call them now and then; errors are logged, not raised."""
    try:
        await resume_orphaned_crawls(db, queue, idle=idle)
        await drop_cancelled_jobs(db, queue)
        await sweep_lost_jobs(db, queue, idle=idle)
    except Exception:
        log.exception("the crawl sweep failed")


async def _lock_crawl(session: AsyncSession, crawl_id: int) -> bool:
    """Take the crawl row's lock (PostgreSQL) or the write lock (SQLite) for the transaction,
    so that read-merge-writes of its counters and repo rows never interleave; also the
    crawl's heartbeat. False when the row is gone."""
    hit = await session.scalar(
        update(Crawl).where(Crawl.id == crawl_id).values(heartbeat_at=utcnow()).returning(Crawl.id)
    )
    return hit is not None


async def _release(
    session: AsyncSession,
    crawl_id: int,
    released: int,
    *,
    add: dict[str, int] | None = None,
    assign: dict[str, int] | None = None,
    errors: Sequence[dict[str, str]] = (),
) -> None:
    """Release `released` pending jobs of a crawl, merge counters and errors, and finish
    the row when nothing is pending. The caller holds the crawl's lock (`_lock_crawl`)."""
    row = await session.get_one(Crawl, crawl_id, populate_existing=True)
    left = row.pending_jobs - released
    row.pending_jobs = left
    counters = dict(row.counters or {})
    for key, n in (add or {}).items():
        counters[key] = int(counters.get(key, 0)) + n
    counters.update(assign or {})
    counters["pending"] = left
    row.counters = counters
    if errors:
        row.errors = [*(row.errors or []), *errors][:MAX_ERRORS_KEPT]
    if left <= 0 and row.status == "running":
        row.status = "failed" if counters.get("listing_failed") else "finished"
        row.finished_at = utcnow()
