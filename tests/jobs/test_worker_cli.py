"""`registry worker` and `registry serve` (distributed) on a real PostgreSQL whose catalog is
at head but that lacks the job queue's tables: they refuse to start and say what to run."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from registry.catalog import migrate
from registry.catalog.db import create_engine
from registry.catalog.errors import SchemaMismatch
from registry.cli import EXIT_ERROR, EXIT_OK, main
from registry.config import DatabaseSettings, JobsSettings, Settings
from tests.catalog.conftest import TempDatabases
from workers.runtime import serve_jobs

pytestmark = pytest.mark.postgres


async def test_worker_without_the_job_queue_tables_says_to_run_db_upgrade(
    temp_databases: TempDatabases,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    url = temp_databases.new_url("postgresql")
    engine = create_engine(url)
    try:
        await migrate.upgrade(engine)  # the catalog only, as `registry db upgrade` leaves it in embedded mode
    finally:
        await engine.dispose()
    monkeypatch.setenv("REGISTRY_CONFIG", "")
    monkeypatch.setenv("REGISTRY_DATABASE_URL", url)
    monkeypatch.setenv("REGISTRY_JOBS_MODE", "distributed")
    monkeypatch.setenv("REGISTRY_GENERAL_DATA_DIR", str(tmp_path))
    code = await asyncio.to_thread(main, ["worker"])
    err = capsys.readouterr().err
    assert code == EXIT_ERROR
    assert err == (
        "registry: worker: schema_mismatch: the job queue's tables are missing: run `registry db upgrade`\n"
    )
    # The advice is right: that command creates them on a catalog already at head.
    assert await asyncio.to_thread(main, ["db", "upgrade"]) == EXIT_OK
    assert "procrastinate job queue schema applied" in capsys.readouterr().out


async def test_serve_in_distributed_mode_without_the_job_queue_tables_refuses_to_start(
    temp_databases: TempDatabases,
) -> None:
    # The API only enqueues in distributed mode; without the tables every crawl and
    # verification request would be a 500 from a bare database error. serve_jobs is the job
    # wiring `registry serve` enters before it listens.
    url = temp_databases.new_url("postgresql")
    engine = create_engine(url)
    try:
        await migrate.upgrade(engine)  # the catalog only
    finally:
        await engine.dispose()
    settings = Settings(database=DatabaseSettings(url=url), jobs=JobsSettings(mode="distributed"))
    with pytest.raises(SchemaMismatch, match=r"job queue's tables are missing: run `registry db upgrade`"):
        async with serve_jobs(settings):
            pass
