"""Stalled procrastinate jobs on a real PostgreSQL: a job that kills every worker taking it is
not retried for ever.

A worker takes jobs as procrastinate's worker does and dies with them (its heartbeat is set
in the past), then the stalled-job sweep runs; again and again. A job killed fewer than
`jobs.max_attempts` times is put back as before; at the limit it ends failed, and its crawl
or verification ends as in the embedded queue. Every worker sweeps: a sweeper acting on a
list read a moment earlier changes nothing once the job is no longer that stalled run.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import procrastinate
import pytest

from registry.catalog import migrate
from registry.catalog.db import Database
from registry.catalog.models import Artifact, Crawl, Verification
from registry.config import Settings, load_settings
from tests.catalog.conftest import TempDatabases
from tests.jobs.conftest import add_verifications
from workers.crawl_jobs import resume_orphaned_crawls
from workers.jobs import create_scheduled_crawl
from workers.queue_procrastinate import (
    ProcrastinateQueue,
    apply_schema,
    build_app,
    handle_stalled_job,
    retry_stalled_jobs,
)

pytestmark = pytest.mark.postgres

MAX_ATTEMPTS = 3
STALLED_S = 30.0
TICK = 1_800_000_000  # a schedule tick, Unix seconds
STOPPED = f"the worker stopped during the job {MAX_ATTEMPTS} times (jobs.max_attempts = {MAX_ATTEMPTS})"


@pytest.fixture
async def catalog(temp_databases: TempDatabases, tmp_path: Path) -> AsyncIterator[tuple[Settings, Database]]:
    settings = load_settings(env={
        "REGISTRY_CONFIG": "", "REGISTRY_DATABASE_URL": temp_databases.new_url("postgresql"),
        "REGISTRY_GENERAL_DATA_DIR": str(tmp_path), "REGISTRY_JOBS_MODE": "distributed",
        "REGISTRY_JOBS_MAX_ATTEMPTS": str(MAX_ATTEMPTS), "REGISTRY_JOBS_STALLED_SECONDS": str(STALLED_S),
        "REGISTRY_HUB_ENDPOINT": "http://127.0.0.1:9",
    })  # fmt: skip
    async with Database.from_settings(settings) as db:
        await migrate.upgrade(db.engine)
        assert await apply_schema(settings)
        yield settings, db


async def _take_all_and_die(app: procrastinate.App) -> list[int]:
    """A worker registers, takes every job it may as procrastinate's worker does, and dies
    with them: its last heartbeat is older than the stalled timeout."""
    manager = app.job_manager
    worker = await manager.register_worker()
    taken = []
    while (job := await manager.fetch_job(None, worker)) is not None:
        assert job.id is not None
        taken.append(job.id)
    await app.connector.execute_query_async(
        "UPDATE procrastinate_workers SET last_heartbeat = now() - make_interval(secs => %(s)s) WHERE id = %(w)s",
        s=2 * STALLED_S, w=worker,
    )  # fmt: skip
    return taken


async def _jobs(app: procrastinate.App) -> dict[int, tuple[str, int]]:
    rows = await app.connector.execute_query_all_async(
        "SELECT id, status::text AS status, attempts FROM procrastinate_jobs"
    )
    return {r["id"]: (r["status"], r["attempts"]) for r in rows}


async def test_a_job_that_killed_its_worker_max_attempts_times_fails_with_its_crawl_or_verification(
    catalog: tuple[Settings, Database],
) -> None:
    settings, db = catalog
    artifact_id, (verification,) = await add_verifications(db, "running")
    crawl_id = await create_scheduled_crawl(db, settings)  # queued by the API or a schedule
    tick_crawl = await create_scheduled_crawl(db, settings, scheduled_at=TICK)  # its periodic job's row
    app = build_app(settings, periodic_cron="0 * * * *")
    async with app.open_async():
        queue = ProcrastinateQueue(app)
        verify_job, crawl_job = await queue.enqueue_verify(verification), await queue.enqueue_crawl(crawl_id)
        tick_job = await app.configure_task("registry.scheduled_crawl").defer_async(timestamp=TICK)
        assert verify_job is not None and crawl_job is not None
        jobs = [verify_job, crawl_job, tick_job]

        # Killed once, below the limit: every job is put back, its row untouched.
        assert sorted(await _take_all_and_die(app)) == jobs
        assert await retry_stalled_jobs(app, db, STALLED_S, MAX_ATTEMPTS) == 3
        assert await _jobs(app) == {j: ("todo", 1) for j in jobs}
        async with db.sessions() as session:
            assert (await session.get_one(Verification, verification)).status == "running"
            assert (await session.get_one(Crawl, crawl_id)).status == "running"

        # Killed at every run: taken max_attempts times in all, then failed, never again.
        taken = 1
        for _ in range(MAX_ATTEMPTS + 1):
            if not await _take_all_and_die(app):
                break
            taken += 1
            await retry_stalled_jobs(app, db, STALLED_S, MAX_ATTEMPTS)
        assert taken == MAX_ATTEMPTS
        assert await _jobs(app) == {j: ("failed", MAX_ATTEMPTS) for j in jobs}
        info = await queue.get_job(verify_job)
        assert info is not None and (info.status, info.attempts) == ("failed", MAX_ATTEMPTS)
        assert info.error is not None and STOPPED in info.error  # as the embedded runner's row says
        # The sweep does not queue the failed listings again (attempts anew).
        assert await resume_orphaned_crawls(db, queue, idle=timedelta(0)) == 0
        assert await _jobs(app) == {j: ("failed", MAX_ATTEMPTS) for j in jobs}

    async with db.sessions() as session:
        row = await session.get_one(Verification, verification)
        art = await session.get_one(Artifact, artifact_id)
        crawls = {c: await session.get_one(Crawl, c) for c in (crawl_id, tick_crawl)}
    assert (row.status, row.reason, row.finished_at is not None) == ("failed", "crashed", True)
    assert STOPPED in row.details["message"]
    assert art.verification_status == "failed"  # as in the embedded queue
    for job_id, crawl in zip((crawl_job, tick_job), crawls.values(), strict=True):
        assert (crawl.status, crawl.pending_jobs, crawl.counters["listing_failed"]) == ("failed", 0, 1)
        assert crawl.finished_at is not None
        assert [e["error"] for e in crawl.errors] == [f"job_failed: listing job {job_id}: {STOPPED}"]


async def _job_row(app: procrastinate.App, job_id: int) -> tuple[str, int, int | None]:
    row = await app.connector.execute_query_one_async(
        "SELECT status::text AS status, attempts, worker_id FROM procrastinate_jobs WHERE id = %(id)s",
        id=job_id,
    )
    return row["status"], row["attempts"], row["worker_id"]


async def test_a_sweeper_acting_on_a_stale_list_leaves_a_job_another_worker_took_since(
    catalog: tuple[Settings, Database],
) -> None:
    """Sweeper A lists the stalled job; sweeper B retries it first and a live worker takes
    it; then A acts on its list: the job runs on, with that worker, and is not put back."""
    settings, db = catalog
    _, (verification,) = await add_verifications(db, "running")
    app = build_app(settings)
    async with app.open_async():
        job_id = await ProcrastinateQueue(app).enqueue_verify(verification)
        assert await _take_all_and_die(app) == [job_id]
        seen_by_a = list(await app.job_manager.get_stalled_jobs(seconds_since_heartbeat=STALLED_S))
        assert [j.id for j in seen_by_a] == [job_id]

        assert await retry_stalled_jobs(app, db, STALLED_S, MAX_ATTEMPTS) == 1  # sweeper B
        live = await app.job_manager.register_worker()  # its heartbeat is fresh
        taken = await app.job_manager.fetch_job(None, live)
        assert taken is not None and taken.id == job_id
        assert await _job_row(app, job_id) == ("doing", 1, live)

        put_back = [await handle_stalled_job(db, j, STALLED_S, MAX_ATTEMPTS) for j in seen_by_a]
        assert await _job_row(app, job_id) == ("doing", 1, live)
        assert put_back == [0]
        assert await retry_stalled_jobs(app, db, STALLED_S, MAX_ATTEMPTS) == 0  # not stalled now


async def test_a_job_whose_worker_answers_again_before_the_sweep_acts_is_neither_retried_nor_failed(
    catalog: tuple[Settings, Database],
) -> None:
    """The sweep listed a job at its last allowed run, then its worker's heartbeat came back
    (a paused machine, not a dead one): the job and its verification run on."""
    settings, db = catalog
    _, (verification,) = await add_verifications(db, "running")
    app = build_app(settings)
    async with app.open_async():
        job_id = await ProcrastinateQueue(app).enqueue_verify(verification)
        for _ in range(MAX_ATTEMPTS - 1):
            assert await _take_all_and_die(app) == [job_id]
            assert await retry_stalled_jobs(app, db, STALLED_S, MAX_ATTEMPTS) == 1
        assert await _take_all_and_die(app) == [job_id]
        listed = list(await app.job_manager.get_stalled_jobs(seconds_since_heartbeat=STALLED_S))
        assert [(j.id, j.attempts + 1) for j in listed] == [(job_id, MAX_ATTEMPTS)]  # its last run
        _, _, worker = await _job_row(app, job_id)
        assert worker is not None
        await app.job_manager.update_heartbeat(worker)

        put_back = [await handle_stalled_job(db, j, STALLED_S, MAX_ATTEMPTS) for j in listed]
        assert await _job_row(app, job_id) == ("doing", MAX_ATTEMPTS - 1, worker)
        assert put_back == [0]
    async with db.sessions() as session:
        assert (await session.get_one(Verification, verification)).status == "running"
