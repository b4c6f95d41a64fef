"""A procrastinate worker in-process on a real PostgreSQL: retries of a transient failure.

`jobs.max_attempts` counts attempts with the first included, in both modes: a repo job that
keeps failing with a transient hub error runs that many times, its last run is the one
told it is final, and the job ends failed.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from registry.catalog import migrate
from registry.catalog.db import Database
from registry.config import load_settings
from registry.hub.errors import ServerError
from tests.catalog.conftest import TempDatabases
from tests.jobs.conftest import scalar, wait_for
from workers import jobs
from workers.queue_procrastinate import ProcrastinateQueue, apply_schema, build_app, run_worker

pytestmark = pytest.mark.postgres

MAX_ATTEMPTS = 2


async def test_a_transient_failure_runs_max_attempts_times_as_in_the_embedded_queue(
    temp_databases: TempDatabases, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = load_settings(env={
        "REGISTRY_CONFIG": "", "REGISTRY_DATABASE_URL": temp_databases.new_url("postgresql"),
        "REGISTRY_JOBS_MODE": "distributed", "REGISTRY_JOBS_MAX_ATTEMPTS": str(MAX_ATTEMPTS),
        "REGISTRY_JOBS_RETRY_WAIT": "1", "REGISTRY_HUB_ENDPOINT": "http://127.0.0.1:9",
    })  # fmt: skip
    db = Database.from_settings(settings)
    await migrate.upgrade(db.engine)
    assert await apply_schema(settings)
    finals: list[bool] = []
    real_job = jobs.index_repo_job

    async def index_repo(*args: Any, **kw: Any) -> Any:
        raise ServerError("503 from the hub", status=503)

    async def index_repo_job(*args: Any, final_attempt: bool = True, **kw: Any) -> None:
        finals.append(final_attempt)
        await real_job(*args, final_attempt=final_attempt, **kw)

    monkeypatch.setattr(jobs, "index_repo", index_repo)
    monkeypatch.setattr("workers.queue_procrastinate.index_repo_job", index_repo_job)
    app = build_app(settings)
    async with app.open_async():
        assert await ProcrastinateQueue(app).enqueue_index_repo("org/flaky") is not None
    worker = asyncio.create_task(run_worker(settings, ["index"], 1, install_signal_handlers=False))
    failed = "SELECT count(*) FROM procrastinate_jobs WHERE status = 'failed'"
    try:

        async def ended() -> bool:
            return bool(await scalar(db, failed))

        await wait_for(ended, 120, "the repo job to fail for good")
    finally:
        worker.cancel()
        await asyncio.gather(worker, return_exceptions=True)
        await db.dispose()
    assert finals == [False] * (MAX_ATTEMPTS - 1) + [True]
    async with app.open_async():
        [info] = await ProcrastinateQueue(app).list_jobs(status="failed")
    # The embedded runner's row says the same: a transient error's own message.
    assert info.error is not None and "503 from the hub" in info.error, info


async def test_a_failed_job_shows_its_error_and_a_purged_job_loses_it(
    temp_databases: TempDatabases, monkeypatch: pytest.MonkeyPatch
) -> None:
    """procrastinate keeps no error text: the worker keeps it for GET /v1/jobs, and a job
    that succeeds on a later run shows none, as in the embedded runner."""
    settings = load_settings(env={
        "REGISTRY_CONFIG": "", "REGISTRY_DATABASE_URL": temp_databases.new_url("postgresql"),
        "REGISTRY_JOBS_MODE": "distributed", "REGISTRY_JOBS_MAX_ATTEMPTS": "2", "REGISTRY_JOBS_RETRY_WAIT": "1",
        "REGISTRY_JOBS_SWEEP_SECONDS": "1", "REGISTRY_HUB_ENDPOINT": "http://127.0.0.1:9",
    })  # fmt: skip
    db = Database.from_settings(settings)
    await migrate.upgrade(db.engine)
    assert await apply_schema(settings)
    runs: dict[str, int] = {}

    async def index_repo_job(ctx: Any, repo_id: str, *args: Any, **kw: Any) -> None:
        runs[repo_id] = runs.get(repo_id, 0) + 1
        if repo_id == "org/broken":
            raise ValueError("a bug, " + "x" * 10_000)
        if runs[repo_id] == 1:
            raise jobs.TransientJobError("429 from the hub")

    monkeypatch.setattr("workers.queue_procrastinate.index_repo_job", index_repo_job)
    app = build_app(settings)
    async with app.open_async():
        queue = ProcrastinateQueue(app)
        broken, flaky = [await queue.enqueue_index_repo(r) for r in ("org/broken", "org/flaky")]
    worker = asyncio.create_task(run_worker(settings, ["index"], 1, install_signal_handlers=False))
    ended = "SELECT count(*) FROM procrastinate_jobs WHERE status IN ('failed', 'succeeded')"
    try:

        async def both_ended() -> bool:
            return await scalar(db, ended) == 2

        await wait_for(both_ended, 120, "both jobs to end")
        async with app.open_async():
            infos = {i.id: i for i in await ProcrastinateQueue(app).list_jobs()}
            assert (infos[broken].status, infos[flaky].status) == ("failed", "done")
            assert infos[broken].error == ("ValueError: a bug, " + "x" * 10_000)[: jobs.ERROR_TEXT_LIMIT]
            assert infos[flaky].error is None and runs["org/flaky"] == 2
            await app.connector.execute_query_async("DELETE FROM procrastinate_events")
            await app.connector.execute_query_async("DELETE FROM procrastinate_jobs")

        async def forgotten() -> bool:
            return await scalar(db, "SELECT count(*) FROM job_errors") == 0

        await wait_for(forgotten, 30, "the sweep to forget the purged jobs' errors")
    finally:
        worker.cancel()
        await asyncio.gather(worker, return_exceptions=True)
        await db.dispose()
