"""Distributed mode on a real PostgreSQL: `registry worker` subprocesses share one crawl.

A crawl is one crawl job that lists the fake hub and queues one index-repo job per repo;
two workers split those, a SIGKILLed worker's jobs are retried by another once its
heartbeat is stale, and the periodic crawl fires from procrastinate's periodic deferrer.
Every test ends with the catalog equal to one plain in-process crawl of the same corpus.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from registry.api import create_app
from registry.catalog import migrate
from registry.catalog.db import Database
from registry.catalog.models import Crawl
from registry.config import Settings
from tests.api.conftest import ApiClient
from tests.catalog.conftest import TempDatabases
from tests.fakehub import FakeHub
from tests.jobs.conftest import (
    REPOS,
    ROOT,
    Processes,
    Snapshot,
    catalog_snapshot,
    free_port,
    job_env,
    post_crawl,
    scalar,
    server_up,
    settings_from,
    wait_for,
)
from workers.jobs import create_scheduled_crawl
from workers.queue_procrastinate import ProcrastinateQueue, build_app, run_worker

pytestmark = pytest.mark.postgres

UNFINISHED = "SELECT count(*) FROM procrastinate_jobs WHERE status IN ('todo', 'doing')"
CRAWLS_DONE = "SELECT count(*) FROM procrastinate_jobs WHERE task_name IN ('registry.crawl', 'registry.scheduled_crawl') AND status = 'succeeded'"
INDEX_JOBS = (
    "SELECT count(*) FROM procrastinate_jobs WHERE task_name = 'registry.index_repo' AND status = :status"
)


@pytest.fixture
async def distributed(
    temp_databases: TempDatabases, slow_hub: FakeHub, tmp_path: Path
) -> AsyncIterator[tuple[dict[str, str], Settings, Database]]:
    """A new PostgreSQL catalog set up by `registry db upgrade` in distributed mode."""
    url = temp_databases.new_url("postgresql")
    env = job_env(url, slow_hub, tmp_path, REGISTRY_JOBS_MODE="distributed")
    upgrade = await asyncio.to_thread(
        subprocess.run, [sys.executable, "-m", "registry.cli", "db", "upgrade"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert upgrade.returncode == 0, upgrade.stderr
    assert "procrastinate job queue schema applied" in upgrade.stdout
    settings = settings_from(env)
    db = Database.from_settings(settings)
    try:
        await migrate.check(db.engine)  # procrastinate's tables are no drift for alembic
        yield env, settings, db
    finally:
        await db.dispose()


async def _start_crawl(settings: Settings, db: Database) -> int:
    """What the API does: commit the crawl row, then defer its job."""
    crawl_id = await create_scheduled_crawl(db, settings)
    app = build_app(settings)
    async with app.open_async():
        assert await ProcrastinateQueue(app).enqueue_crawl(crawl_id) is not None
    return crawl_id


async def _all_done(db: Database) -> bool:
    return await scalar(db, CRAWLS_DONE) >= 1 and await scalar(db, UNFINISHED) == 0


async def _assert_each_repo_indexed_once(db: Database) -> None:
    per_repo = await scalar(
        db,
        "SELECT max(n) FROM (SELECT count(*) AS n FROM procrastinate_jobs "
        "WHERE task_name = 'registry.index_repo' GROUP BY args->>'repo_id') AS t",
    )
    assert per_repo == 1
    assert await scalar(db, INDEX_JOBS, status="succeeded") == REPOS
    assert await scalar(db, "SELECT count(*) FROM procrastinate_jobs WHERE status = 'failed'") == 0


async def _assert_crawl_finished_with_every_repo(db: Database, reference: Snapshot) -> None:
    """The crawl row ended after its repo jobs, with their counters added up across workers."""
    async with db.sessions() as session:
        crawl = (await session.scalars(select(Crawl))).one()
    c = crawl.counters
    assert (crawl.status, crawl.pending_jobs, c["pending"]) == ("finished", 0, 0)
    assert (c["listed"], c["queued"], c["indexed"], c["failed"]) == (REPOS, REPOS, REPOS, 0)
    assert c["artifacts"] == len(reference) and c["bytes_fetched"] > 0 and crawl.errors == []


async def test_two_worker_processes_share_a_crawl_and_index_every_artifact_once(
    distributed: tuple[dict[str, str], Settings, Database],
    processes: Processes,
    reference: Snapshot,
    aiohttp_client: Any,
) -> None:
    env, settings, db = distributed
    workers = [processes.start(name, ["worker", "--concurrency", "2"], env) for name in ("w1", "w2")]
    # The crawl comes in through an API process of the distributed mode: it only enqueues.
    base = f"http://127.0.0.1:{free_port()}"
    processes.start("api", ["serve", "--port", base.rsplit(":", 1)[1]], env)
    await wait_for(lambda: server_up(base), 30, "registry serve (distributed) to answer")
    await post_crawl(base)
    await wait_for(lambda: _all_done(db), 90, "the crawl and its index-repo jobs")
    assert all(w.poll() is None for w in workers)
    assert await catalog_snapshot(db) == reference
    await _assert_each_repo_indexed_once(db)
    # Both processes took index-repo jobs: the crawl was shared, not run by one of them.
    for name in ("w1", "w2"):
        assert "index_repo " in processes.log(name), processes.log(name)[-2000:]
    assert "index_repo " not in processes.log("api")  # the API process ran no job
    await _assert_crawl_finished_with_every_repo(db, reference)

    # The API shows the same jobs from procrastinate's tables (responses validated against /openapi.json).
    app = build_app(settings)
    async with app.open_async():
        web_app = create_app(settings, db.sessions, jobs=ProcrastinateQueue(app))
        api = ApiClient(await aiohttp_client(web_app), web_app)
        page = (await api.get("/v1/jobs?status=done&limit=100")).body
        kinds = sorted(j["kind"] for j in page["items"])
        assert kinds == ["crawl"] + ["index_repo"] * REPOS
        assert all(j["started_at"] and j["finished_at"] for j in page["items"])
        one = (await api.get(f"/v1/jobs/{page['items'][0]['id']}")).body
        assert one["status"] == "done" and one["queue"] in ("crawl", "index")
        assert (await api.get("/v1/jobs?status=queued")).body["items"] == []


async def test_a_sigkilled_worker_loses_nothing(
    distributed: tuple[dict[str, str], Settings, Database], processes: Processes, reference: Snapshot
) -> None:
    env, settings, db = distributed
    first = processes.start("w1", ["worker", "--concurrency", "2"], env)
    await _start_crawl(settings, db)

    async def mid_crawl() -> bool:
        done = await scalar(db, INDEX_JOBS, status="succeeded")
        return done >= 1 and await scalar(db, INDEX_JOBS, status="doing") >= 1

    await wait_for(mid_crawl, 60, "a worker in the middle of index-repo jobs", every=0.05)
    processes.kill(first)  # SIGKILL: no cleanup, its jobs stay `doing`
    assert await scalar(db, "SELECT count(*) FROM procrastinate_jobs WHERE status = 'doing'") >= 1
    assert await catalog_snapshot(db) != reference  # really mid-way
    processes.start("w2", ["worker", "--concurrency", "2"], env)
    # w2 retries the dead worker's jobs once its heartbeat is older than stalled_seconds (3 s).
    await wait_for(lambda: _all_done(db), 90, "the stalled jobs retried and the crawl finished")
    assert await catalog_snapshot(db) == reference  # no duplicates, nothing half-written
    assert await scalar(db, "SELECT count(*) FROM procrastinate_jobs WHERE status = 'failed'") == 0
    assert "of a stalled worker retried" in processes.log("w2")
    # Finished once the retried jobs ended; the counters are not pinned here: a worker killed
    # between reporting a repo and procrastinate recording the job as done reports it twice.
    assert await scalar(db, "SELECT status FROM crawls") == "finished"
    listed = await asyncio.to_thread(
        subprocess.run, [sys.executable, "-m", "registry.cli", "jobs", "--status", "done", "--limit", "100", "--json"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert listed.returncode == 0, listed.stderr
    done = json.loads(listed.stdout)["items"]  # the API's JobPage
    indexed = {j["args"]["repo_id"] for j in done if j["kind"] == "index_repo"}
    assert indexed == {row[0] for row in reference}  # every repo, through `registry jobs`


async def test_periodic_crawl_fires_from_the_periodic_deferrer(
    distributed: tuple[dict[str, str], Settings, Database], reference: Snapshot
) -> None:
    """A real firing: the worker's periodic deferrer defers the scheduled crawl. The schedule
    here is a 6-field cron with seconds (every 2 s) standing in for `[schedule] crawl`, whose
    texts are converted by `schedule_cron` (tested in test_jobs_units)."""
    _env, settings, db = distributed
    worker = asyncio.create_task(
        run_worker(
            settings, ["crawl", "index"], 2, periodic_cron="*/2 * * * * *", install_signal_handlers=False
        )
    )
    try:
        await wait_for(lambda: _all_done(db), 60, "a scheduled crawl and its jobs")
        scheduled = await scalar(
            db, "SELECT count(*) FROM procrastinate_jobs WHERE task_name = 'registry.scheduled_crawl'"
        )
        assert scheduled >= 1
        assert await scalar(db, "SELECT count(*) FROM crawls WHERE status = 'finished'") >= 1
        await wait_for(lambda: _snapshot_is(db, reference), 30, "the catalog of the scheduled crawl")
    finally:
        worker.cancel()
        await asyncio.gather(worker, return_exceptions=True)


async def _snapshot_is(db: Database, reference: Snapshot) -> bool:
    return await catalog_snapshot(db) == reference
