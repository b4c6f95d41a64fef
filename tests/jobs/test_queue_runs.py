"""Crawls and verifications run through the embedded queue in-process, on SQLite.

A crawl run as jobs stays `running` while its index-repo jobs are pending and finishes
with their counters added up; a retried repo job counts once. A verification posted to
the queue runs in the pool and ends with a reason on its row.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sqlalchemy import select

from registry.api.launchers import QueueVerifier
from registry.catalog import migrate
from registry.catalog.db import Database
from registry.catalog.models import Artifact, Crawl, Job, Verification
from registry.hub.client import HubClient
from registry.hub.errors import ServerError
from tests.fakehub import FakeHub
from tests.jobs.conftest import REPOS, Snapshot, drain, job_env, pool_running, scalar, settings_from, wait_for
from tests.runner.reference64 import Spec
from tests.runner.synthetic import make_weights, write_gguf
from tests.verify.conftest import make_settings
from workers import jobs
from workers.index import index_paths
from workers.jobs import create_scheduled_crawl
from workers.queue_embedded import EmbeddedQueue

JOBS = "SELECT count(*) FROM jobs WHERE kind = :kind AND status = :status"


@pytest.fixture
async def embedded(slow_hub: FakeHub, tmp_path: Path) -> AsyncIterator[EmbeddedQueue]:
    env = job_env(f"sqlite+aiosqlite:///{tmp_path / 'catalog.db'}", slow_hub, tmp_path,
                  REGISTRY_JOBS_RETRY_WAIT="0", REGISTRY_JOBS_MAX_ATTEMPTS="3")  # fmt: skip
    settings = settings_from(env)
    db = Database.from_settings(settings)
    await migrate.ensure_schema(db.engine)
    try:
        yield EmbeddedQueue(settings, db)
    finally:
        await db.dispose()


async def _crawl(queue: EmbeddedQueue, during: Callable[[], Awaitable[None]] | None = None) -> Crawl:
    crawl_id = await create_scheduled_crawl(queue.db, queue.settings)
    assert await queue.enqueue_crawl(crawl_id) is not None
    async with pool_running(queue, concurrency=3):
        if during is not None:
            await during()
        await asyncio.wait_for(queue.join(), 60)
    async with queue.db.sessions() as session:
        return await session.get_one(Crawl, crawl_id)


async def test_a_crawl_runs_until_its_repo_jobs_end_and_adds_up_their_counters(
    embedded: EmbeddedQueue, reference: Snapshot
) -> None:
    db = embedded.db
    seen: dict[str, Any] = {}

    async def mid_crawl() -> None:
        async def listed_and_indexing() -> bool:
            return (
                await scalar(db, JOBS, kind="crawl", status="done") == 1
                and await scalar(db, JOBS, kind="index_repo", status="done") >= 1
                and await scalar(db, JOBS, kind="index_repo", status="queued") >= 2
            )

        await wait_for(listed_and_indexing, 30, "the listing done and repo jobs pending", every=0.05)
        seen["status"] = await scalar(db, "SELECT status FROM crawls")
        seen["pending"] = await scalar(db, "SELECT pending_jobs FROM crawls")

    crawl = await _crawl(embedded, mid_crawl)
    # Each queued job takes more than one 150 ms request: the crawl was mid-way, not done.
    assert seen["status"] == "running" and seen["pending"] >= 2
    assert crawl.status == "finished" and crawl.finished_at is not None and crawl.pending_jobs == 0
    c = crawl.counters
    assert (c["listed"], c["queued"], c["indexed"], c["failed"], c["pending"]) == (REPOS, REPOS, REPOS, 0, 0)
    assert c["artifacts"] == len(reference) and c["files"] >= c["artifacts"]
    assert c["bytes_fetched"] > 0 and c["requests"] >= c["files"]
    assert await scalar(db, JOBS, kind="index_repo", status="done") == REPOS

    # A second crawl of the same hub: every repo is unchanged, from the listing's sha or its job.
    again = await _crawl(embedded)
    assert again.status == "finished" and again.counters["indexed"] == 0
    assert again.counters["unchanged"] == REPOS and again.counters["pending"] == 0


async def test_a_retried_repo_job_counts_once_and_a_failed_one_is_reported(
    embedded: EmbeddedQueue, monkeypatch: pytest.MonkeyPatch, reference: Snapshot
) -> None:
    real = jobs.index_repo
    attempts: dict[str, int] = {}
    repos = sorted(await _repo_ids(embedded))
    flaky, broken = repos[0], repos[1]

    async def index_repo(db: Database, client: Any, http: Any, repo_id: str, *args: Any, **kw: Any) -> Any:
        attempts[repo_id] = attempts.get(repo_id, 0) + 1
        result = await real(db, client, http, repo_id, *args, **kw)  # counters of a real attempt
        if (repo_id == flaky and attempts[repo_id] == 1) or repo_id == broken:
            raise ServerError("503 after reading", status=503)
        return result

    monkeypatch.setattr(jobs, "index_repo", index_repo)
    crawl = await _crawl(embedded)
    assert attempts[flaky] == 2 and attempts[broken] == 3  # max_attempts
    c = crawl.counters
    assert crawl.status == "finished" and crawl.pending_jobs == 0
    assert (c["indexed"], c["failed"]) == (REPOS - 2, 1)
    # The flaky repo's first attempt wrote its snapshot, so its retry finds it unchanged.
    # Only final attempts count: each repo's artifacts once, though three were read twice or more.
    assert c["unchanged"] == 1 and c["artifacts"] == len(reference)
    assert [e["repo"] for e in crawl.errors] == [broken] and "server_error" in crawl.errors[0]["error"]
    assert await scalar(embedded.db, JOBS, kind="index_repo", status="failed") == 1


async def _repo_ids(queue: EmbeddedQueue) -> list[str]:
    """The hub's repos, listed the way the crawl job lists them."""
    client = HubClient.from_settings(queue.settings.hub)
    return [s.repo_id async for s in client.list_gguf_repos()]


async def test_a_verification_runs_through_the_embedded_queue(tmp_path: Path) -> None:
    settings = make_settings(tmp_path)
    settings = dataclasses.replace(settings, jobs=dataclasses.replace(settings.jobs, mode="embedded"))
    db = Database.from_settings(settings)
    await migrate.ensure_schema(db.engine)
    spec = Spec("llama")
    make_weights(spec, np.random.default_rng(0), np.float32)
    (tmp_path / "models").mkdir()
    write_gguf(spec, tmp_path / "models" / "tiny-llama-F32.gguf")
    await index_paths(db, [tmp_path / "models"])
    async with db.sessions() as session:
        artifact_id = (await session.scalars(select(Artifact.id))).one()

    queue = EmbeddedQueue(settings, db)
    verification_id = await QueueVerifier(db.sessions, queue).enqueue(artifact_id)
    await drain(queue, timeout=30)
    async with db.sessions() as session:
        row = await session.get_one(Verification, verification_id)
        job = (await session.scalars(select(Job))).one()
    # The synthetic model has weights but no tokenizer: the verifier reads every tensor, then
    # refuses to load it, which is a failed row with its reason, not a stuck or crashed job.
    assert (row.status, row.reason) == ("failed", "invalid_model")
    assert row.tensors_checked == len(spec.weights) and row.finished_at is not None
    assert (job.kind, job.status, job.error, job.args) == (
        "verify",
        "done",
        None,
        {"verification_id": row.id},
    )
    await db.dispose()
