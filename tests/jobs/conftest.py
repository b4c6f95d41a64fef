"""Helpers for the job runner tests: worker and server subprocesses, catalog snapshots.

Worker and server processes are real `python -m registry.cli ...` subprocesses whose
settings come from the environment; every one started is killed by its pid at the end.
The fake hub runs in the test's own event loop, on loopback.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from sqlalchemy import select, text

from registry.api.auth import hash_token
from registry.catalog import migrate
from registry.catalog.db import Database
from registry.catalog.models import Artifact, Repo, Verification
from registry.catalog.services import upsert_repo_snapshot
from registry.catalog.snapshot import ArtifactRecord, RepoSnapshot, ShardRecord
from registry.config import load_settings
from registry.hub.client import HubClient
from registry.hub.http import HttpOptions, HubHttp
from tests.catalog.conftest import temp_databases  # noqa: F401  (session fixture)
from tests.catalog.factories import make_facts
from tests.fakehub import FakeHub, Fault
from tests.fakehub.corpus import Corpus, synthetic_corpus
from tests.fakehub.testing import FAST_RETRY, TOKEN
from workers.crawl import CrawlParams, crawl_hub
from workers.queue_embedded import EmbeddedQueue

ROOT = Path(__file__).resolve().parents[2]
REPOS = 12  # 3 files each: enough jobs to share between two workers, quick to read
API_TOKEN = "jobs-test-token"


@pytest.fixture(scope="module")
def corpus() -> Corpus:
    return synthetic_corpus(REPOS, seed=7)


@pytest.fixture
async def slow_hub(corpus: Corpus) -> AsyncIterator[FakeHub]:
    """The corpus with 150 ms per request: jobs last long enough to be killed mid-way."""
    async with FakeHub(corpus, tokens={TOKEN}, record=False,
                       faults=[Fault("latency", route="*", delay=0.15, times=None)]) as hub:  # fmt: skip
        yield hub


Snapshot = list[tuple[Any, ...]]
COLUMNS = (Repo.repo_id, Repo.revision, Artifact.path, Artifact.status, Artifact.error_code, Artifact.shard_count,
           Artifact.file_size, Artifact.architecture, Artifact.file_type, Artifact.parameter_count)  # fmt: skip


async def catalog_snapshot(db: Database) -> Snapshot:
    """Every artifact with the facts a crawl writes, in a stable order (ids excluded)."""
    async with db.sessions() as session:
        rows = await session.execute(
            select(*COLUMNS).join(Artifact, Artifact.repo_pk == Repo.id).order_by(Repo.repo_id, Artifact.path)
        )
        return [tuple(r) for r in rows.all()]


@pytest.fixture(scope="module")
def reference(corpus: Corpus, tmp_path_factory: pytest.TempPathFactory) -> Snapshot:
    """The catalog one plain in-process crawl of the corpus writes (no latency)."""

    async def crawl() -> Snapshot:
        db = Database.from_url(f"sqlite+aiosqlite:///{tmp_path_factory.mktemp('ref') / 'ref.db'}")
        try:
            await migrate.ensure_schema(db.engine)
            async with FakeHub(corpus, tokens={TOKEN}, record=False) as hub:
                client = HubClient(hub.endpoint, TOKEN, retry=FAST_RETRY)
                async with HubHttp(HttpOptions(endpoint=hub.endpoint, token=TOKEN, retry=FAST_RETRY)) as http:
                    report = await crawl_hub(db, client, http, CrawlParams())
            assert report.failed == 0 and report.indexed == REPOS
            return await catalog_snapshot(db)
        finally:
            await db.dispose()

    return asyncio.run(crawl())


async def add_verifications(db: Database, *statuses: str) -> tuple[int, list[int]]:
    """A hub artifact in the catalog and one verification of it per status."""
    shard = ShardRecord("tiny-Q8_0.gguf", size=1000, sha256="ab" * 32, header_bytes=100)
    async with db.sessions() as session, session.begin():
        await upsert_repo_snapshot(
            session, RepoSnapshot("org/tiny-GGUF", "c" * 40, (ArtifactRecord(shard.path, (shard,), make_facts()),))
        )
    async with db.sessions() as session, session.begin():
        artifact_id = (await session.scalars(select(Artifact.id))).one()
        rows = [Verification(artifact_id=artifact_id, status=s) for s in statuses]
        session.add_all(rows)
    return artifact_id, [r.id for r in rows]


def job_env(db_url: str, hub: FakeHub, data_dir: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("REGISTRY_")}
    env.update({
        "REGISTRY_CONFIG": str(ROOT / "config" / "registry.toml"),
        "REGISTRY_DATABASE_URL": db_url,
        "REGISTRY_GENERAL_DATA_DIR": str(data_dir),
        "REGISTRY_HUB_ENDPOINT": hub.endpoint,
        "REGISTRY_HUB_TOKEN": TOKEN,
        "REGISTRY_HUB_BACKOFF_BASE": "0.05",
        "REGISTRY_JOBS_HEARTBEAT_SECONDS": "1",
        "REGISTRY_JOBS_STALLED_SECONDS": "3",
        "REGISTRY_JOBS_RETRY_WAIT": "1",
        "REGISTRY_API_TOKENS": hash_token(API_TOKEN),
    })  # fmt: skip
    env.update(extra)
    return env


def settings_from(env: dict[str, str]) -> Any:
    return load_settings(env=env)


class Processes:
    """Subprocesses of one test, each stopped by its own pid when the test ends."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, name: str, args: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
        log = open(self.tmp / f"{name}.log", "ab")  # noqa: SIM115 - closed with the process
        proc = subprocess.Popen([sys.executable, "-m", "registry.cli", *args], cwd=ROOT, env=env,
                                stdout=log, stderr=subprocess.STDOUT)  # fmt: skip
        log.close()
        self.procs.append(proc)
        return proc

    def log(self, name: str) -> str:
        return (self.tmp / f"{name}.log").read_text(errors="replace")

    @staticmethod
    def kill(proc: subprocess.Popen[bytes]) -> None:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)

    def stop_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill(proc)


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[Processes]:
    procs = Processes(tmp_path)
    try:
        yield procs
    finally:
        procs.stop_all()


async def wait_for(predicate: Any, timeout: float, what: str, every: float = 0.2) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not await predicate():
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(every)


async def scalar(db: Database, sql: str, **params: Any) -> Any:
    async with db.engine.connect() as conn:
        return (await conn.execute(text(sql), params)).scalar()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def server_up(base: str) -> bool:
    try:
        async with aiohttp.ClientSession() as http, http.get(f"{base}/healthz") as r:
            return r.status == 200
    except aiohttp.ClientError:
        return False


async def post_crawl(base: str) -> dict[str, Any]:
    """POST /v1/crawls as an operator would."""
    auth = {"Authorization": f"Bearer {API_TOKEN}"}
    async with (
        aiohttp.ClientSession() as http,
        http.post(f"{base}/v1/crawls", json={"source": "hub"}, headers=auth) as r,
    ):
        assert r.status == 202, await r.text()
        body: dict[str, Any] = await r.json()
        return body


@asynccontextmanager
async def pool_running(queue: EmbeddedQueue, concurrency: int = 1) -> AsyncIterator[None]:
    """The embedded queue's job pool running for the length of the block, then stopped."""
    pool = asyncio.create_task(queue.run(concurrency=concurrency))
    try:
        yield
    finally:
        pool.cancel()
        await asyncio.gather(pool, return_exceptions=True)


async def drain(queue: EmbeddedQueue, *, concurrency: int = 1, timeout: float = 60) -> None:
    """Run the embedded queue's job pool until every queued job has ended."""
    async with pool_running(queue, concurrency):
        await asyncio.wait_for(queue.join(), timeout)
