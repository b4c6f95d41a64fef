"""The embedded pool through a database outage: its workers wait it out, none of them dies."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest
from sqlalchemy import text

from registry.catalog import migrate
from registry.catalog.db import Database
from registry.config import load_settings
from tests.jobs.conftest import wait_for
from workers.queue_embedded import EmbeddedQueue


async def test_a_failed_claim_does_not_end_the_pool(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    settings = load_settings(env={"REGISTRY_GENERAL_DATA_DIR": str(tmp_path), "REGISTRY_CONFIG": "",
                                  "REGISTRY_HUB_ENDPOINT": "http://127.0.0.1:9"})  # fmt: skip
    db = Database.from_settings(settings)
    await migrate.ensure_schema(db.engine)
    queue = EmbeddedQueue(settings, db)
    # While `outage` has a row, every update of a job fails as a full or locked disk would.
    async with db.engine.begin() as conn:
        await conn.execute(text("CREATE TABLE outage (x INTEGER)"))
        await conn.execute(text("INSERT INTO outage VALUES (1)"))
        await conn.execute(text(
            "CREATE TRIGGER outage BEFORE UPDATE ON jobs WHEN (SELECT count(*) FROM outage) > 0 "
            "BEGIN SELECT RAISE(ABORT, 'disk I/O error'); END"
        ))  # fmt: skip
    job_id = await queue.enqueue_verify(12345)  # no such verification: the job ends at once
    caplog.set_level(logging.ERROR, logger="workers.queue_embedded")
    pool = asyncio.create_task(queue.run(concurrency=1))
    try:

        async def claim_failed() -> bool:
            return pool.done() or "disk I/O error" in caplog.text

        await wait_for(claim_failed, 30, "a claim to fail during the outage", every=0.05)
        assert not pool.done(), pool.exception() if pool.done() else None
        async with db.engine.begin() as conn:
            await conn.execute(text("DELETE FROM outage"))

        async def done() -> bool:
            job = await queue.get_job(job_id) if job_id is not None else None
            return pool.done() or (job is not None and job.status == "done")

        await wait_for(done, 30, "the job to run once the outage is over")
        assert not pool.done()
    finally:
        pool.cancel()
        await asyncio.gather(pool, return_exceptions=True)
        await db.dispose()
