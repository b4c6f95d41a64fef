"""Embedded mode: the crawl runs as jobs inside `registry serve`, kept in the SQLite catalog.

A `registry serve` subprocess gets a crawl over the API, is SIGKILLed in the middle of its
index-repo jobs and started again; the restarted server resumes the jobs and the catalog
ends equal to one plain crawl of the same corpus. The jobs show in `GET /v1/jobs`.
"""

from __future__ import annotations

from pathlib import Path

import aiohttp

from registry.catalog.db import Database
from tests.fakehub import FakeHub
from tests.jobs.conftest import (
    REPOS,
    Processes,
    Snapshot,
    catalog_snapshot,
    free_port,
    job_env,
    post_crawl,
    scalar,
    server_up,
    wait_for,
)

JOBS = "SELECT count(*) FROM jobs WHERE kind = :kind AND status = :status"


async def test_embedded_crawl_killed_and_restarted_finishes_with_the_same_catalog(
    slow_hub: FakeHub, processes: Processes, reference: Snapshot, tmp_path: Path
) -> None:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = job_env(f"sqlite+aiosqlite:///{tmp_path / 'catalog.db'}", slow_hub, tmp_path,
                  REGISTRY_JOBS_CONCURRENCY="2")  # fmt: skip
    server = processes.start("serve1", ["serve", "--port", str(port)], env)
    await wait_for(lambda: server_up(base), 30, "registry serve to answer")
    await post_crawl(base)

    db = Database.from_url(env["REGISTRY_DATABASE_URL"])
    try:

        async def mid_crawl() -> bool:
            done = await scalar(db, JOBS, kind="index_repo", status="done")
            return done >= 1 and await scalar(db, JOBS, kind="index_repo", status="running") >= 1

        await wait_for(mid_crawl, 60, "the server in the middle of index-repo jobs", every=0.05)
        processes.kill(server)  # SIGKILL: rows stay `running`, nothing else is written
        assert await scalar(db, "SELECT count(*) FROM jobs WHERE status IN ('queued', 'running')") >= 1
        assert await catalog_snapshot(db) != reference

        processes.start("serve2", ["serve", "--port", str(port)], env)
        await wait_for(lambda: server_up(base), 30, "the restarted server to answer")

        async def finished() -> bool:
            return (
                await scalar(db, JOBS, kind="index_repo", status="done") == REPOS
                and await scalar(db, "SELECT count(*) FROM jobs WHERE status IN ('queued', 'running')") == 0
            )

        await wait_for(finished, 90, "the resumed jobs")
        assert await catalog_snapshot(db) == reference
        assert await scalar(db, "SELECT count(*) FROM jobs WHERE status = 'failed'") == 0
        assert await scalar(db, "SELECT max(attempts) FROM jobs") >= 2  # a killed job ran again
        # The crawl row ended with its resumed repo jobs, not when the first server queued them.
        assert await scalar(db, "SELECT status FROM crawls") == "finished"
        assert await scalar(db, "SELECT pending_jobs FROM crawls") == 0
    finally:
        await db.dispose()

    async with aiohttp.ClientSession() as http, http.get(f"{base}/v1/jobs?status=done&limit=100") as r:
        body = await r.json()
    assert r.status == 200
    assert sorted(j["kind"] for j in body["items"]).count("index_repo") == REPOS
    assert {j["status"] for j in body["items"]} == {"done"}
