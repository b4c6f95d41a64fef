"""`bench/crawl.py --workers 1,2,4`: the distributed crawl with 1, 2, 4 worker processes.

For each count: a fresh PostgreSQL database set up by `registry db upgrade` (distributed
mode), N `registry worker` subprocesses (each `--concurrency` jobs at once), then one crawl
deferred as the API defers it and timed until every job has finished. Files/s counts the
GGUF files indexed (shards), and the ratio is against one worker. Workers are started and
registered before the clock starts, so process start-up is not measured, and an untimed
warm-up crawl runs first (the fake hub synthesizes each header on its first request).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from sqlalchemy import make_url, text

ROOT = Path(__file__).resolve().parent.parent
PG_ADMIN = os.environ.get(
    "REGISTRY_TEST_POSTGRES_URL", "postgresql+asyncpg://postgres@127.0.0.1:5432/postgres"
)
UNFINISHED = "SELECT count(*) FROM procrastinate_jobs WHERE status IN ('todo', 'doing')"
CRAWL_DONE = (
    "SELECT count(*) FROM procrastinate_jobs WHERE task_name = 'registry.crawl' AND status = 'succeeded'"
)


async def _admin(sql: str) -> None:
    from registry.catalog.db import create_engine

    engine = create_engine(PG_ADMIN, isolation_level="AUTOCOMMIT")
    try:
        async with engine.connect() as conn:
            await conn.execute(text(sql))
    finally:
        await engine.dispose()


async def _timed_crawl(env: dict[str, str], n: int, timeout: float) -> tuple[float, int]:
    from registry.catalog.db import Database
    from registry.config import load_settings
    from workers.jobs import create_scheduled_crawl
    from workers.queue_procrastinate import ProcrastinateQueue, build_app

    settings = load_settings(env=env)
    db = Database.from_settings(settings)

    async def count(sql: str) -> int:
        async with db.engine.connect() as conn:
            return int((await conn.execute(text(sql))).scalar() or 0)

    try:
        deadline = time.monotonic() + 60
        while await count("SELECT count(*) FROM procrastinate_workers") < n:
            if time.monotonic() > deadline:
                raise SystemExit("workers did not register within 60 s")
            await asyncio.sleep(0.2)
        t0 = time.perf_counter()
        crawl_id = await create_scheduled_crawl(db, settings)
        app = build_app(settings)
        async with app.open_async():
            await ProcrastinateQueue(app).enqueue_crawl(crawl_id)
        while not (await count(CRAWL_DONE) and await count(UNFINISHED) == 0):
            if time.perf_counter() - t0 > timeout:
                raise SystemExit(f"the crawl did not finish within {timeout} s")
            await asyncio.sleep(0.1)
        elapsed = time.perf_counter() - t0
        return elapsed, await count("SELECT count(*) FROM shards")
    finally:
        await db.dispose()


def _run_one(endpoint: str, n: int, concurrency: int, timeout: float) -> tuple[float, int]:
    name = f"bench_crawl_{os.getpid()}_{n}"
    asyncio.run(_admin(f'CREATE DATABASE "{name}"'))
    url = make_url(PG_ADMIN).set(database=name).render_as_string(hide_password=False)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            env = {k: v for k, v in os.environ.items() if not k.startswith("REGISTRY_")}
            env.update({"REGISTRY_DATABASE_URL": url, "REGISTRY_HUB_ENDPOINT": endpoint,
                        "REGISTRY_JOBS_MODE": "distributed", "REGISTRY_JOBS_CONCURRENCY": str(concurrency),
                        "REGISTRY_GENERAL_DATA_DIR": tmp})  # fmt: skip
            cli = [sys.executable, "-m", "registry.cli"]
            subprocess.run([*cli, "db", "upgrade"], cwd=ROOT, env=env, check=True, capture_output=True)
            procs = [subprocess.Popen([*cli, "worker"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL) for _ in range(n)]  # fmt: skip
            return asyncio.run(_timed_crawl(env, n, timeout))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        asyncio.run(_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


def run(endpoint: str, counts: list[int], concurrency: int, latency: float, timeout: float = 600) -> None:
    print(f"\n== distributed crawl: `registry worker` processes on PostgreSQL, {latency * 1000:.0f} ms "
          f"per request, {concurrency} jobs per worker, {os.cpu_count()} CPU(s) ==")  # fmt: skip
    # The fake hub builds each synthetic header on first request and keeps it: one untimed
    # crawl first, so the first timed run does not pay the hub's cost alone.
    _run_one(endpoint, max(counts), concurrency, timeout)
    print(f"{'workers':>8} {'files':>7} {'seconds':>9} {'files/s':>9} {'scaling':>8}")
    base: float | None = None
    for n in counts:
        elapsed, files = _run_one(endpoint, n, concurrency, timeout)
        rate = files / elapsed
        base = base or rate
        print(f"{n:>8} {files:>7} {elapsed:>9.1f} {rate:>9.1f} {rate / base:>7.2f}x", flush=True)
