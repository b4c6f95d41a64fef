"""The accounting of crawls run as jobs survives dead workers at every step.

A repo job that reports twice counts once; a listing SIGKILLed between reserving repos and
queuing their jobs (or between a job and the record of it) is rerun and the crawl still
ends with every repo indexed and counted once; a job that ended without reporting and a
crawl whose listing was never queued are found by the sweeps; a schedule tick is one crawl.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import select, update

from registry.catalog import migrate
from registry.catalog.crawls import cancel_crawl
from registry.catalog.db import Database
from registry.catalog.models import Crawl, CrawlRepo, Job
from registry.catalog.types import utcnow
from registry.config import Settings
from registry.hub.client import HubClient
from registry.hub.http import HttpOptions, HubHttp
from tests.catalog.conftest import TempDatabases
from tests.fakehub import FakeHub
from tests.fakehub.testing import FAST_RETRY, TOKEN
from tests.jobs.conftest import (
    REPOS,
    ROOT,
    Snapshot,
    catalog_snapshot,
    drain,
    job_env,
    pool_running,
    scalar,
    settings_from,
    wait_for,
)
from workers import jobs
from workers.crawl import CrawlParams, CrawlReport, crawl_hub
from workers.crawl_jobs import (
    drop_cancelled_jobs,
    enqueue_crawl,
    report_repo,
    resume_orphaned_crawls,
    sweep_lost_jobs,
)
from workers.jobs import create_scheduled_crawl, open_context
from workers.queue_embedded import EmbeddedQueue

DIALECTS = ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]
NOW = timedelta(0)  # sweeps look at every crawl, however recently it was heard from


@pytest.fixture(params=DIALECTS)
async def queue(
    request: pytest.FixtureRequest, temp_databases: TempDatabases, slow_hub: FakeHub, tmp_path: Path
) -> AsyncIterator[EmbeddedQueue]:
    """An embedded queue over a new catalog of each dialect (its pool not running)."""
    env = job_env(temp_databases.new_url(request.param), slow_hub, tmp_path, REGISTRY_JOBS_RETRY_WAIT="0")
    settings = settings_from(env)
    async with Database.from_settings(settings) as db:
        await migrate.ensure_schema(db.engine)
        q = EmbeddedQueue(settings, db)
        q.env = env  # type: ignore[attr-defined]
        yield q


async def _run_pool(queue: EmbeddedQueue) -> None:
    await drain(queue, concurrency=3, timeout=90)


async def _crawl(db: Database, crawl_id: int) -> Crawl:
    async with db.sessions() as session:
        return await session.get_one(Crawl, crawl_id)


async def _states(db: Database, crawl_id: int) -> dict[str, int]:
    async with db.sessions() as session:
        rows = await session.scalars(select(CrawlRepo.state).where(CrawlRepo.crawl_id == crawl_id))
        out: dict[str, int] = {}
        for state in rows:
            out[state] = out.get(state, 0) + 1
        return out


async def _list(queue: EmbeddedQueue, crawl_id: int) -> None:
    """The listing job, run here: its repo jobs wait in the queue."""
    client = HubClient.from_settings(queue.settings.hub)

    async def enqueue(repo_id: str, known: str | None) -> int | None:
        return await queue.enqueue_index_repo(repo_id, known, crawl_id)

    await enqueue_crawl(queue.db, client, crawl_id, enqueue)


async def _assert_every_repo_counted_once(
    db: Database, crawl_id: int, reference: Snapshot, *, reread: int = 0
) -> None:
    """`reread`: repos whose job may have run twice (see the killed listing's test)."""
    crawl = await _crawl(db, crawl_id)
    c = crawl.counters
    assert (crawl.status, crawl.pending_jobs, c["pending"]) == ("finished", 0, 0)
    assert (c["listed"], c["queued"], c["indexed"], c["failed"], c["unchanged"]) == (REPOS, REPOS, REPOS, 0, 0)
    assert c["artifacts"] == len(reference) and crawl.errors == []
    assert await _states(db, crawl_id) == {"reported": REPOS}
    # One index job per repo ran to the end, and the catalog is what one plain crawl writes.
    per_repo = await scalar(db, "SELECT max(n) FROM (SELECT count(*) AS n FROM jobs WHERE kind = 'index_repo' "
                                "AND status = 'done' GROUP BY lock) AS t")  # fmt: skip
    assert per_repo in ((1, 2) if reread else (1,))
    done = await scalar(db, "SELECT count(*) FROM jobs WHERE kind = 'index_repo' AND status = 'done'")
    assert REPOS <= done <= REPOS + reread
    assert await catalog_snapshot(db) == reference


async def test_a_second_report_of_a_repo_counts_nothing(queue: EmbeddedQueue, reference: Snapshot) -> None:
    db = queue.db
    crawl_id = await create_scheduled_crawl(db, queue.settings)
    await _list(queue, crawl_id)
    assert (await _crawl(db, crawl_id)).pending_jobs == REPOS  # the listing released its own
    assert await _states(db, crawl_id) == {"queued": REPOS}
    await _run_pool(queue)
    await _assert_every_repo_counted_once(db, crawl_id, reference)
    before = (await _crawl(db, crawl_id)).counters

    # The same job again, as after a worker died between its report and the job's end.
    repo = reference[0][0]
    async with open_context(queue.settings) as ctx:
        await jobs.index_repo_job(ctx, repo, None, crawl_id)
    assert (await _crawl(db, crawl_id)).counters == before
    assert await report_repo(db, crawl_id, repo, CrawlReport(indexed=1)) is False
    assert (await _crawl(db, crawl_id)).counters == before


@pytest.mark.parametrize("when", ["before", "after"])
async def test_a_listing_killed_mid_batch_is_rerun_and_counts_every_repo_once(
    queue: EmbeddedQueue, reference: Snapshot, tmp_path: Path, when: str
) -> None:
    """SIGKILL at the third repo of the first batch of five: `before` its job was queued
    (two queued, three reserved), or `after` (the job exists, its row still says reserved)."""
    db = queue.db
    crawl_id = await create_scheduled_crawl(db, queue.settings)
    marker = tmp_path / "hung"
    env = {**queue.env, "PYTHONPATH": str(ROOT)}  # type: ignore[attr-defined]
    child = subprocess.Popen([sys.executable, "-m", "tests.jobs.listing_child", str(crawl_id), "3", str(marker), when],
                             cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)  # fmt: skip
    try:

        async def hung() -> bool:
            assert child.poll() is None, child.stdout.read().decode() if child.stdout else ""
            return marker.exists()

        await wait_for(hung, 60, "the listing to reach its third repo")
    finally:
        if child.poll() is None:
            os.kill(child.pid, signal.SIGKILL)
        child.wait(10)
    crawl = await _crawl(db, crawl_id)
    assert crawl.status == "running" and crawl.pending_jobs == 1 + 5  # the listing's own + the batch
    assert await _states(db, crawl_id) == {"queued": 2, "reserved": 3}
    assert await scalar(db, "SELECT count(*) FROM jobs") == (2 if when == "before" else 3)

    # The crawl job is queued again (a stalled job put back, a restarted server) and the pool runs.
    # `after`: the rerun queues the third repo again; if the dead attempt's job for it is
    # running by then, the new one waits and reads the repo once more (an equal job that runs
    # may have read the repo before what queued the new one), counted once all the same.
    assert await queue.enqueue_crawl(crawl_id) is not None
    await _run_pool(queue)
    await _assert_every_repo_counted_once(db, crawl_id, reference, reread=int(when == "after"))


async def test_a_job_that_ended_without_reporting_is_swept(queue: EmbeddedQueue, reference: Snapshot) -> None:
    db = queue.db
    crawl_id = await create_scheduled_crawl(db, queue.settings)
    await _list(queue, crawl_id)
    repo = reference[0][0]
    async with db.sessions() as session, session.begin():  # an operator cancels one job
        await session.execute(update(Job).where(Job.lock == f"repo:{repo}")
                              .values(status="failed", error="cancelled by an operator"))  # fmt: skip
    await _run_pool(queue)
    crawl = await _crawl(db, crawl_id)
    assert crawl.status == "running" and crawl.pending_jobs == 1  # nobody will report that repo

    assert await sweep_lost_jobs(db, queue, idle=timedelta(hours=1)) == 0  # heard from too recently
    assert await sweep_lost_jobs(db, queue, idle=NOW) == 1
    crawl = await _crawl(db, crawl_id)
    assert (crawl.status, crawl.pending_jobs) == ("finished", 0)
    assert (crawl.counters["indexed"], crawl.counters["failed"]) == (REPOS - 1, 1)
    assert [e["repo"] for e in crawl.errors] == [repo]
    assert crawl.errors[0]["error"].startswith("lost_job: job ") and "ended as failed" in crawl.errors[0]["error"]
    assert await _states(db, crawl_id) == {"reported": REPOS - 1, "lost": 1}
    assert await sweep_lost_jobs(db, queue, idle=NOW) == 0  # once


async def test_a_crawl_whose_listing_was_never_queued_is_resumed(queue: EmbeddedQueue, reference: Snapshot) -> None:
    db = queue.db
    # The server committed the row and died before queuing its job.
    crawl_id = await create_scheduled_crawl(db, queue.settings)
    async with db.sessions() as session, session.begin():  # and a crawl the CLI runs in-process
        cli = Crawl(kind="hub", status="running", parameters=CrawlParams().to_parameters())
        session.add(cli)
    assert await resume_orphaned_crawls(db, queue, idle=timedelta(hours=1)) == 0  # too recent
    assert await resume_orphaned_crawls(db, queue, idle=NOW) == 1
    assert await resume_orphaned_crawls(db, queue, idle=NOW) == 0  # its job is queued now
    assert await queue.crawl_job_pending(crawl_id) and not await queue.crawl_job_pending(cli.id)
    await _run_pool(queue)
    await _assert_every_repo_counted_once(db, crawl_id, reference)
    assert (await _crawl(db, cli.id)).status == "running"  # not ours to touch
    assert await scalar(db, "SELECT count(*) FROM jobs WHERE kind = 'crawl'") == 1


async def test_a_schedule_tick_is_one_crawl(queue: EmbeddedQueue) -> None:
    db, settings = queue.db, queue.settings
    first = await create_scheduled_crawl(db, settings, scheduled_at=1_800_000_000)
    assert await create_scheduled_crawl(db, settings, scheduled_at=1_800_000_000) == first
    second = await create_scheduled_crawl(db, settings, scheduled_at=1_800_003_600)
    assert second != first
    assert await create_scheduled_crawl(db, settings) not in (first, second)  # no tick: always new
    assert (await _crawl(db, second)).parameters["scheduled_at"] == 1_800_003_600


@pytest.mark.postgres
async def test_procrastinate_tells_whether_a_crawl_has_a_listing_job(
    temp_databases: TempDatabases, slow_hub: FakeHub, tmp_path: Path
) -> None:
    from workers.queue_procrastinate import ProcrastinateQueue, apply_schema, build_app

    env = job_env(temp_databases.new_url("postgresql"), slow_hub, tmp_path, REGISTRY_JOBS_MODE="distributed")
    settings: Settings = settings_from(env)
    async with Database.from_settings(settings) as db:
        await migrate.ensure_schema(db.engine)
    assert await apply_schema(settings)
    app = build_app(settings, periodic_cron="0 * * * *")
    async with app.open_async():
        q = ProcrastinateQueue(app)
        assert not await q.crawl_job_pending(5)
        assert await q.enqueue_crawl(5) is not None
        assert await q.crawl_job_pending(5) and not await q.crawl_job_pending(6)
        await app.configure_task("registry.scheduled_crawl").defer_async(timestamp=1_800_000_000)
        assert await q.crawl_job_pending(7, 1_800_000_000)
        assert not await q.crawl_job_pending(7, 1_800_003_600) and not await q.crawl_job_pending(7, None)
        await app.connector.execute_query_async("UPDATE procrastinate_jobs SET status = 'succeeded'")
        assert not await q.crawl_job_pending(5) and not await q.crawl_job_pending(7, 1_800_000_000)

        # Ending queued jobs unrun: only those still `todo`, each with the reason.
        todo = [await q.enqueue_index_repo(f"org/m{i}-GGUF", None, 5) for i in range(3)]
        assert all(isinstance(i, int) for i in todo)
        ids = [int(i) for i in todo if i is not None]
        await app.connector.execute_query_async(f"UPDATE procrastinate_jobs SET status = 'doing' WHERE id = {ids[0]}")
        assert await q.drop_queued(ids, "cancelled: crawl 5 was cancelled") == set(ids[1:])
        assert await q.drop_queued(ids, "again") == set()
        for job_id in ids[1:]:
            info = await q.get_job(job_id)
            assert info is not None and (info.status, info.error) == ("failed", "cancelled: crawl 5 was cancelled")
            assert info.finished_at is not None
        assert await q.enqueue_index_repo("org/m1-GGUF", None, 6) is not None  # its lock is free again


async def test_a_crawl_whose_listing_job_killed_its_process_every_time_ends_failed(queue: EmbeddedQueue) -> None:
    db, limit = queue.db, queue.settings.jobs.max_attempts
    crawl_id = await create_scheduled_crawl(db, queue.settings)
    job_id = await queue.enqueue_crawl(crawl_id)
    assert job_id is not None
    long_ago = utcnow() - timedelta(hours=1)  # quiet for longer than the sweep waits
    async with db.sessions() as session, session.begin():
        # As its last allowed run leaves it: killed after reserving a repo, before queuing its job.
        await session.execute(update(Job).where(Job.id == job_id).values(status="running", attempts=limit))
        await session.execute(update(Crawl).where(Crawl.id == crawl_id)
                              .values(pending_jobs=2, started_at=long_ago, heartbeat_at=long_ago))  # fmt: skip
        session.add(CrawlRepo(crawl_id=crawl_id, repo_id="org/reserved-GGUF", state="reserved", updated_at=long_ago))
    pool = asyncio.create_task(queue.run(concurrency=1))

    async def settled() -> bool:  # the crawl ended, or its listing was queued again
        listings = await scalar(db, "SELECT count(*) FROM jobs WHERE kind = 'crawl'")
        return pool.done() or listings > 1 or (await _crawl(db, crawl_id)).status != "running"

    try:
        await wait_for(settled, 30, "the crawl to end or its listing to be queued again")
        assert not pool.done(), pool.exception() if pool.done() else None
    finally:
        pool.cancel()
        await asyncio.gather(pool, return_exceptions=True)
    assert await scalar(db, "SELECT count(*) FROM jobs WHERE kind = 'crawl'") == 1
    crawl = await _crawl(db, crawl_id)
    assert (crawl.status, crawl.pending_jobs, crawl.counters["listing_failed"]) == ("failed", 0, 1)
    assert crawl.finished_at is not None and crawl.counters["queued"] == 0
    stopped = f"the worker stopped during the job {limit} times (jobs.max_attempts = {limit})"
    assert [e["error"] for e in crawl.errors] == [f"job_failed: listing job {job_id}: {stopped}"]
    assert await _states(db, crawl_id) == {"skipped": 1}  # its repo job was never queued
    assert await resume_orphaned_crawls(db, queue, idle=NOW) == 0


async def _cancel(db: Database, crawl_id: int) -> None:
    async with db.sessions() as session, session.begin():
        row = await cancel_crawl(session, crawl_id)
    assert row is not None and row.status == "cancelled"


async def _assert_cancelled(db: Database, crawl_id: int, **counts: int) -> Crawl:
    crawl = await _crawl(db, crawl_id)
    assert (crawl.status, crawl.pending_jobs, crawl.counters["pending"]) == ("cancelled", 0, 0)
    assert {k: crawl.counters[k] for k in counts} == counts, crawl.counters
    return crawl


async def test_a_cancelled_crawl_reads_no_more_repos(queue: EmbeddedQueue) -> None:
    db = queue.db
    crawl_id = await create_scheduled_crawl(db, queue.settings)
    await _list(queue, crawl_id)
    await _cancel(db, crawl_id)
    ended_at = (await _crawl(db, crawl_id)).finished_at
    await _run_pool(queue)
    # Every queued job ended at once, counted in the crawl; the hub was not asked for a repo.
    crawl = await _assert_cancelled(db, crawl_id, listed=REPOS, queued=REPOS, cancelled=REPOS, indexed=0, failed=0,
                                    requests=0)  # fmt: skip
    assert crawl.finished_at == ended_at  # the end is the cancelling, not the last job's
    assert await _states(db, crawl_id) == {"reported": REPOS}
    # The first job to find its crawl cancelled ended the others in the queue, unrun.
    async with db.sessions() as session:
        ended = (await session.execute(select(Job.status, Job.error).where(Job.kind == "index_repo"))).all()
    assert len(ended) == REPOS and ("done", None) in ended
    assert {e for e in ended if e[0] != "done"} == {("failed", f"cancelled: crawl {crawl_id} was cancelled")}
    assert await catalog_snapshot(db) == []


async def test_the_queued_jobs_of_a_cancelled_crawl_end_in_bulk(queue: EmbeddedQueue, reference: Snapshot) -> None:
    db = queue.db
    first = await create_scheduled_crawl(db, queue.settings)
    await _list(queue, first)
    assert await drop_cancelled_jobs(db, queue) == 0  # not cancelled: nothing to end
    await _cancel(db, first)
    assert await drop_cancelled_jobs(db, queue, first + 1) == 0  # another crawl's only
    async with db.sessions() as session, session.begin():  # a runner took one job meanwhile
        await session.execute(update(Job).where(Job.lock == f"repo:{reference[0][0]}").values(status="running"))
    assert await drop_cancelled_jobs(db, queue) == REPOS - 1
    assert await drop_cancelled_jobs(db, queue) == 0  # once
    crawl = await _crawl(db, first)
    assert (crawl.status, crawl.pending_jobs, crawl.counters["cancelled"]) == ("cancelled", 1, REPOS - 1)
    assert await _states(db, first) == {"reported": REPOS - 1, "queued": 1}
    assert await scalar(db, "SELECT count(*) FROM jobs WHERE status = 'failed'") == REPOS - 1

    # A crawl that found the jobs of a second, now cancelled, crawl waiting counts on them.
    second = await create_scheduled_crawl(db, queue.settings)
    async with db.sessions() as session, session.begin():
        await session.execute(update(Job).where(Job.status == "running").values(status="done"))
    await _list(queue, second)
    third = await create_scheduled_crawl(db, queue.settings)
    await _list(queue, third)
    assert await _states(db, third) == {"skipped": REPOS}
    await _cancel(db, second)
    assert await drop_cancelled_jobs(db, queue) == 0
    assert await scalar(db, "SELECT count(*) FROM jobs WHERE status = 'queued'") == REPOS


async def test_a_cancelled_crawls_jobs_still_read_what_another_crawl_left_to_them(
    queue: EmbeddedQueue, reference: Snapshot
) -> None:
    db = queue.db
    first = await create_scheduled_crawl(db, queue.settings)
    await _list(queue, first)
    second = await create_scheduled_crawl(db, queue.settings)
    await _list(queue, second)  # every repo's job of the first crawl waits: the second leaves them to it
    assert await _states(db, second) == {"skipped": REPOS}
    assert (await _crawl(db, second)).status == "finished"
    await _cancel(db, first)
    await _run_pool(queue)
    await _assert_cancelled(db, first, queued=REPOS, indexed=REPOS, cancelled=0)
    assert await catalog_snapshot(db) == reference


async def test_a_listing_cancelled_before_it_ran_lists_nothing(queue: EmbeddedQueue) -> None:
    db = queue.db
    crawl_id = await create_scheduled_crawl(db, queue.settings)
    await _cancel(db, crawl_id)
    await _list(queue, crawl_id)
    await _assert_cancelled(db, crawl_id, listed=0, queued=0, cancelled=0)
    assert await scalar(db, "SELECT count(*) FROM jobs") == 0


async def test_a_listing_stops_at_the_batch_after_its_crawl_was_cancelled(queue: EmbeddedQueue) -> None:
    db = queue.db
    crawl_id = await create_scheduled_crawl(db, queue.settings)
    client = HubClient.from_settings(queue.settings.hub)
    queued: list[str] = []

    async def enqueue(repo_id: str, known: str | None) -> int | None:
        if not queued:
            await _cancel(db, crawl_id)  # while the listing queues its first batch
        queued.append(repo_id)
        return await queue.enqueue_index_repo(repo_id, known, crawl_id)

    await enqueue_crawl(db, client, crawl_id, enqueue, batch=4)
    assert len(queued) == 4  # the batch it had reserved, and no other
    crawl = await _crawl(db, crawl_id)
    assert (crawl.status, crawl.counters["listed"], crawl.counters["queued"]) == ("cancelled", 8, 4)
    await _run_pool(queue)
    await _assert_cancelled(db, crawl_id, queued=4, cancelled=4, indexed=0)
    assert await catalog_snapshot(db) == []


async def test_an_in_process_crawl_stops_when_cancelled(
    queue: EmbeddedQueue, slow_hub: FakeHub, reference: Snapshot
) -> None:
    """`registry crawl` and the in-process launcher look at the row before each repo."""
    db = queue.db
    crawl_id = await create_scheduled_crawl(db, queue.settings)
    tasks: list[asyncio.Task[None]] = []

    def progress(report: CrawlReport) -> None:
        if report.indexed == 1 and not tasks:
            tasks.append(asyncio.create_task(_cancel(db, crawl_id)))

    client = HubClient(slow_hub.endpoint, TOKEN, retry=FAST_RETRY)
    async with HubHttp(HttpOptions(endpoint=slow_hub.endpoint, token=TOKEN, retry=FAST_RETRY)) as http:
        report = await crawl_hub(db, client, http, CrawlParams(), crawl_id=crawl_id, concurrency=1,
                                 progress=progress)  # fmt: skip
    await asyncio.gather(*tasks)
    assert report.status == "cancelled" and report.listed == REPOS
    assert report.indexed >= 1 and report.cancelled >= 1 and report.indexed + report.cancelled == REPOS
    crawl = await _crawl(db, crawl_id)
    assert crawl.status == "cancelled" and crawl.counters == report.counters()
    # The repos it read are whole: each as the plain crawl writes it.
    written = await catalog_snapshot(db)
    repos = {row[0] for row in written}
    assert len(repos) == report.indexed
    assert written == [row for row in reference if row[0] in repos]


async def test_a_repo_changed_while_its_job_runs_is_read_again(
    queue: EmbeddedQueue, slow_hub: FakeHub, reference: Snapshot
) -> None:
    """A job queued while an equal one runs (a webhook's push during a crawl) is queued, not
    folded into the running one, which may have read the repo before the push; it runs once
    that one has ended, as procrastinate's locks do in the distributed mode."""
    db = queue.db
    slow_hub.record = True
    repo_id = reference[0][0]
    pushed = slow_hub.corpus.get(repo_id)
    assert pushed is not None
    files, sha = list(pushed.files), pushed.sha  # the corpus is the module's: put back after
    first = await queue.enqueue_index_repo(repo_id)
    try:
        async with pool_running(queue, concurrency=2):

            async def reading_files() -> bool:  # its repo info is read: the push comes too late for it
                return any(r.repo == repo_id and r.route != "api" for r in slow_hub.requests)

            await wait_for(reading_files, 30, "the first job to read the repo's files", every=0.01)
            removed = next(f.path for f in pushed.files if f.path.endswith(".gguf"))
            pushed.files = [f for f in pushed.files if f.path != removed]
            pushed.sha = "e" * 40
            second = await queue.enqueue_index_repo(repo_id)
            assert second is not None and second != first
            assert await queue.enqueue_index_repo(repo_id) is None  # the queued one will do
            await asyncio.wait_for(queue.join(), 60)
    finally:
        pushed.files, pushed.sha = files, sha
    async with db.sessions() as session:
        ran = {j.id: j for j in await session.scalars(select(Job).where(Job.lock == f"repo:{repo_id}"))}
    assert [ran[i].status for i in (first, second)] == ["done", "done"]
    assert ran[first].finished_at <= ran[second].started_at  # one at a time
    rows = {row[2]: row for row in await catalog_snapshot(db) if row[0] == repo_id}
    assert {row[1] for row in rows.values()} == {"e" * 40}
    assert rows[removed][3] == "gone" and {row[3] for p, row in rows.items() if p != removed} == {"indexed"}
