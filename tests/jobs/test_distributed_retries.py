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
