"""Attempts of embedded jobs across restarts: a job that kills its process is not run for ever,
and a pool that stops on its own does not use up its jobs' attempts. And how many
verifications the pool runs at once."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
from sqlalchemy import update

from registry.catalog import migrate
from registry.catalog.db import Database
from registry.catalog.models import Artifact, Job, Verification
from registry.config import Settings, load_settings
from tests.fakehub.testing import TOKEN
from tests.jobs.conftest import add_verifications, wait_for
from workers.queue_embedded import EmbeddedQueue

MAX_ATTEMPTS = 3


def _settings(tmp_path: Path, endpoint: str = "http://127.0.0.1:9") -> Settings:
    return load_settings(env={"REGISTRY_GENERAL_DATA_DIR": str(tmp_path), "REGISTRY_CONFIG": "",
                              "REGISTRY_HUB_ENDPOINT": endpoint, "REGISTRY_HUB_TOKEN": TOKEN,
                              "REGISTRY_JOBS_MAX_ATTEMPTS": str(MAX_ATTEMPTS)})  # fmt: skip


@pytest.fixture
async def db(tmp_path: Path) -> AsyncIterator[Database]:
    database = Database.from_settings(_settings(tmp_path))  # the SQLite file `serve` uses
    await migrate.ensure_schema(database.engine)
    try:
        yield database
    finally:
        await database.dispose()


async def _job(db: Database, job_id: int) -> Job:
    async with db.sessions() as session:
        return await session.get_one(Job, job_id)


async def _run_until(queue: EmbeddedQueue, done: Callable[[], Awaitable[bool]], what: str) -> None:
    """Run the pool until `done()`, then stop it as serve does at shutdown."""
    pool = asyncio.create_task(queue.run(concurrency=1))

    async def ended() -> bool:
        return pool.done() or await done()

    try:
        await wait_for(ended, 30, what)
        assert not pool.done(), pool.exception() if pool.done() else None
    finally:
        pool.cancel()
        await asyncio.gather(pool, return_exceptions=True)


async def test_a_job_that_killed_its_process_max_attempts_times_fails(tmp_path: Path, db: Database) -> None:
    queue = EmbeddedQueue(_settings(tmp_path), db)
    poison = await queue.enqueue_verify(1)  # no such verification: would end `done` at once if run
    other = await queue.enqueue_verify(2)
    assert poison is not None and other is not None
    # As a process killed during its last allowed run leaves its row: claimed (attempts
    # counted), `running`, nothing else written. `other` was killed only once.
    async with db.sessions() as session, session.begin():
        await session.execute(
            update(Job).where(Job.id == poison).values(status="running", attempts=MAX_ATTEMPTS)
        )
        await session.execute(update(Job).where(Job.id == other).values(status="running", attempts=1))

    async def other_done() -> bool:
        return (await _job(db, other)).status == "done"

    await _run_until(queue, other_done, "the job killed once to run again")
    job = await _job(db, poison)
    assert (job.status, job.attempts) == ("failed", MAX_ATTEMPTS)
    assert job.error is not None and f"stopped during the job {MAX_ATTEMPTS} times" in job.error
    assert job.finished_at is not None
    assert (await _job(db, other)).attempts == 2


@contextlib.asynccontextmanager
async def _silent_hub() -> AsyncIterator[str]:
    """A hub on loopback that takes requests and answers none: a job calling it is mid-run
    until it is stopped. At the end it hangs up on every client (the hub client's calls run
    in threads, which a stopped job leaves waiting)."""
    held: list[asyncio.StreamWriter] = []

    async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)
        await reader.read()  # until either side hangs up

    server = await asyncio.start_server(hold, "127.0.0.1", 0)
    async with server:
        try:
            yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        finally:
            for writer in held:
                writer.close()


async def test_a_stopped_pool_gives_its_running_job_back_unused(tmp_path: Path, db: Database) -> None:
    async with _silent_hub() as endpoint:
        queue = EmbeddedQueue(_settings(tmp_path, endpoint), db)
        job_id = await queue.enqueue_index_repo("org/slow-GGUF")
        assert job_id is not None

        async def running() -> bool:
            return (await _job(db, job_id)).status == "running"

        await _run_until(queue, running, "the index job to start")
    job = await _job(db, job_id)
    assert (job.status, job.attempts, job.error) == ("queued", 0, None)


async def test_a_verification_whose_job_killed_its_process_max_attempts_times_ends_crashed(
    tmp_path: Path, db: Database
) -> None:
    queue = EmbeddedQueue(_settings(tmp_path), db)
    artifact_id, (lost, judged) = await add_verifications(db, "running", "passed")
    # Both jobs' last allowed runs killed the process; `judged`'s after its row had its verdict.
    jobs = [await queue.enqueue_verify(v) for v in (lost, judged)]
    async with db.sessions() as session, session.begin():
        await session.execute(update(Job).where(Job.id.in_(jobs)).values(status="running", attempts=MAX_ATTEMPTS))

    async def failed() -> bool:
        return [(await _job(db, j)).status for j in jobs if j is not None] == ["failed", "failed"]

    await _run_until(queue, failed, "the jobs to fail")
    async with db.sessions() as session:
        row = await session.get_one(Verification, lost)
        kept = await session.get_one(Verification, judged)
        art = await session.get_one(Artifact, artifact_id)
    assert (row.status, row.reason, row.finished_at is not None) == ("failed", "crashed", True)
    assert f"stopped during the job {MAX_ATTEMPTS} times" in row.details["message"]
    assert art.verification_status == "failed"  # as when the check process dies
    assert (kept.status, kept.reason) == ("passed", None)


async def test_the_pool_runs_at_most_verify_concurrency_verifications_at_once(
    tmp_path: Path, db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """verify.concurrency bounds verifications (each needs a model's memory) within
    jobs.concurrency; the other workers still take crawl and index jobs meanwhile."""
    running: list[str] = []
    most = 0
    index_ran_during_verify = False

    async def fake_verify(ctx: object, verification_id: int) -> None:
        nonlocal most
        running.append("verify")
        most = max(most, running.count("verify"))
        await asyncio.sleep(0.3)
        running.remove("verify")

    async def fake_index(ctx: object, repo_id: str, *args: object, **kwargs: object) -> None:
        nonlocal index_ran_during_verify
        index_ran_during_verify = index_ran_during_verify or "verify" in running

    monkeypatch.setattr("workers.queue_embedded.verify_job", fake_verify)
    monkeypatch.setattr("workers.queue_embedded.index_repo_job", fake_index)
    settings = load_settings(env={"REGISTRY_GENERAL_DATA_DIR": str(tmp_path), "REGISTRY_CONFIG": "",
                                  "REGISTRY_HUB_ENDPOINT": "http://127.0.0.1:9",
                                  "REGISTRY_JOBS_CONCURRENCY": "3", "REGISTRY_VERIFY_CONCURRENCY": "1"})  # fmt: skip
    queue = EmbeddedQueue(settings, db)
    jobs = [await queue.enqueue_verify(v) for v in (1, 2, 3)]
    jobs.append(await queue.enqueue_index_repo("org/other-GGUF"))

    async def all_done() -> bool:
        return [(await _job(db, j)).status for j in jobs if j is not None] == ["done"] * 4

    pool = asyncio.create_task(queue.run())
    try:
        await wait_for(all_done, 30, "every job to end")
    finally:
        pool.cancel()
        await asyncio.gather(pool, return_exceptions=True)
    assert most == 1
    assert index_ran_during_verify
