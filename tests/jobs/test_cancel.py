"""A crawl cancelled over the API, in both modes: `registry serve` running its jobs over
SQLite, and an API process with a `registry worker` over PostgreSQL.

The crawl reads repos one at a time from a slow hub; once one repo is written it is
cancelled. The jobs still queued end without asking the hub for anything, the repo being
read ends as it would have, the crawl's counters add up to every repo, and the catalog
holds exactly the repos the crawl read, each whole.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from registry.catalog.db import Database
from tests.catalog.conftest import TempDatabases
from tests.fakehub import FakeHub
from tests.jobs.conftest import (
    API_TOKEN,
    REPOS,
    ROOT,
    Processes,
    Snapshot,
    catalog_snapshot,
    free_port,
    job_env,
    post_crawl,
    server_up,
    wait_for,
)

AUTH = {"Authorization": f"Bearer {API_TOKEN}"}


async def _get(base: str, path: str) -> dict[str, Any]:
    async with aiohttp.ClientSession() as http, http.get(base + path) as r:
        assert r.status == 200, await r.text()
        body: dict[str, Any] = await r.json()
        return body


async def _start(mode: str, temp_databases: TempDatabases, hub: FakeHub, processes: Processes,
                 tmp_path: Path) -> tuple[str, str]:  # fmt: skip
    """Start the mode's processes; their API's base URL and the catalog's URL."""
    if mode == "embedded":
        url = f"sqlite+aiosqlite:///{tmp_path / 'catalog.db'}"
        env = job_env(url, hub, tmp_path, REGISTRY_JOBS_CONCURRENCY="1")
    else:
        url = temp_databases.new_url("postgresql")
        env = job_env(url, hub, tmp_path, REGISTRY_JOBS_MODE="distributed")
        upgrade = await asyncio.to_thread(
            subprocess.run, [sys.executable, "-m", "registry.cli", "db", "upgrade"],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert upgrade.returncode == 0, upgrade.stderr
        processes.start("worker", ["worker", "--concurrency", "1"], env)
    port = free_port()
    processes.start("serve", ["serve", "--port", str(port)], env)
    base = f"http://127.0.0.1:{port}"
    await wait_for(lambda: server_up(base), 30, "registry serve to answer")
    return base, url


@pytest.mark.parametrize("mode", ["embedded", pytest.param("distributed", marks=pytest.mark.postgres)])
async def test_a_crawl_cancelled_over_the_api_stops_and_keeps_what_it_read(
    mode: str,
    temp_databases: TempDatabases,
    slow_hub: FakeHub,
    processes: Processes,
    reference: Snapshot,
    tmp_path: Path,
) -> None:
    base, url = await _start(mode, temp_databases, slow_hub, processes, tmp_path)
    crawl_url = base + (await post_crawl(base))["url"]

    async def one_repo_written() -> bool:
        return int((await _get(base, crawl_url[len(base):]))["counters"].get("indexed", 0)) >= 1

    await wait_for(one_repo_written, 60, "the crawl to write its first repo", every=0.05)
    async with aiohttp.ClientSession() as http, http.post(crawl_url + "/cancel", headers=AUTH) as r:
        assert r.status == 200, await r.text()
        assert (await r.json())["status"] == "cancelled"

    async def drained() -> bool:
        return (await _get(base, crawl_url[len(base):]))["counters"].get("pending") == 0

    await wait_for(drained, 60, "the cancelled crawl's jobs to end")
    crawl = await _get(base, crawl_url[len(base):])
    c = crawl["counters"]
    assert crawl["status"] == "cancelled" and crawl["errors"] == []
    assert (c["listed"], c["queued"], c["failed"]) == (REPOS, REPOS, 0)
    assert c["indexed"] >= 1 and c["cancelled"] >= REPOS // 2 and c["indexed"] + c["cancelled"] == REPOS
    for status in ("queued", "running"):
        assert (await _get(base, f"/v1/jobs?status={status}"))["items"] == []
    db = Database.from_url(url)
    try:
        written = await catalog_snapshot(db)
    finally:
        await db.dispose()
    repos = {row[0] for row in written}
    assert len(repos) == c["indexed"]
    assert written == [row for row in reference if row[0] in repos]
