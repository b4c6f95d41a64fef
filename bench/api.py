"""REST API latency and throughput over the synthetic catalog of bench/search.py.

    python -m bench.api                           # SQLite, 100,000 artifacts (cached with bench.search)
    python -m bench.api --db postgresql --runs 200 --concurrency 16
    python -m bench.api --artifacts 5000 --repos 1500 --runs 20    # a quick smoke run

The app runs in-process on a loopback socket (real HTTP, real middlewares: request id,
access log off, metrics, auth, error envelope). Each request kind runs `--runs` times
from `--concurrency` clients after a warm-up; p50/p99 are per request, wall clock at
the client. The catalog call behind each search is timed alone too, so the table shows
what the HTTP layer adds on top of the database.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
from aiohttp import web
from sqlalchemy import select

from bench import search as bench_search
from registry.api import create_app
from registry.catalog.db import Database
from registry.catalog.models import Artifact, Repo
from registry.catalog.search import SearchQuery, search
from registry.config import Settings

TARGET_P99_MS = 100.0


async def _targets(db: Database) -> list[tuple[str, str, SearchQuery | None]]:
    """(label, path, the equivalent catalog query if any) for the request kinds measured."""
    async with db.sessions() as session:
        artifact_id = (await session.scalars(select(Artifact.id).order_by(Artifact.downloads.desc()).limit(1))).one()
        repo_id = (await session.scalars(select(Repo.repo_id).order_by(Repo.downloads.desc()).limit(1))).one()
    return [
        ("search default", "/v1/artifacts", SearchQuery()),
        ("search filters", "/v1/artifacts?architecture=llama&file_type=Q4_K_M&min_context=8192",
         SearchQuery(architecture="llama", file_type="Q4_K_M", min_context=8192)),
        ("search text", "/v1/artifacts?q=instruct+coder", SearchQuery(text="instruct coder")),
        ("search by name, 100", "/v1/artifacts?sort=name&limit=100", SearchQuery(sort="name", limit=100)),
        ("descendants", f"/v1/artifacts?descendant_of={bench_search.POPULAR}",
         SearchQuery(descendant_of=bench_search.POPULAR)),
        ("facets", "/v1/facets?architecture=llama", None),
        ("artifact page", f"/v1/artifacts/{artifact_id}", None),
        ("repo page", f"/v1/repos/{repo_id}", None),
        ("lineage", f"/v1/repos/{bench_search.POPULAR}/lineage?direction=descendants&depth=2", None),
        ("error envelope", "/v1/artifacts?limit=0", None),
    ]  # fmt: skip


async def _timed(n: int, concurrency: int, call: Callable[[], Awaitable[Any]]) -> list[float]:
    times: list[float] = []
    left = n

    async def worker() -> None:
        nonlocal left
        while left > 0:
            left -= 1
            t0 = time.perf_counter()
            await call()
            times.append(time.perf_counter() - t0)

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return times


def _ms(times: list[float], q: float) -> float:
    if len(times) < 2:
        return times[0] * 1000 if times else 0.0
    return statistics.quantiles(times, n=100, method="inclusive")[int(q) - 1] * 1000


async def measure(db: Database, runs: int, concurrency: int) -> list[tuple[str, float, float, float | None, float]]:
    app = create_app(Settings(), db.sessions)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    base = f"http://127.0.0.1:{runner.addresses[0][1]}"
    rows = []
    try:
        connector = aiohttp.TCPConnector(limit=concurrency)
        async with aiohttp.ClientSession(base, connector=connector) as http:
            for label, path, query in await _targets(db):

                async def get(path: str = path) -> None:
                    async with http.get(path) as resp:
                        await resp.read()
                        if resp.status >= 500:
                            raise RuntimeError(f"{path}: {resp.status}")

                await _timed(min(runs, 5), 1, get)  # warm-up
                t0 = time.perf_counter()
                times = await _timed(runs, concurrency, get)
                rate = runs / (time.perf_counter() - t0)
                direct = None
                if query is not None:

                    async def call(query: SearchQuery = query) -> None:
                        async with db.sessions() as session:
                            await search(session, query)

                    direct = _ms(await _timed(runs, 1, call), 50)
                rows.append((label, _ms(times, 50), _ms(times, 99), direct, rate))
    finally:
        await runner.cleanup()
    return rows


def report(dialect: str, rows: list[tuple[str, float, float, float | None, float]], extra: str) -> bool:
    print(f"\n## REST API on {dialect} ({extra})\n")
    print("| request | p50 ms | p99 ms | catalog call p50 ms | req/s |")
    print("|---|---:|---:|---:|---:|")
    ok = True
    for label, p50, p99, direct, rate in rows:
        ok = ok and p99 < TARGET_P99_MS
        shown = f"{direct:.1f}" if direct is not None else "-"
        print(f"| {label} | {p50:.1f} | {p99:.1f} | {shown} | {rate:.0f} |")
    return ok


async def run(args: argparse.Namespace) -> int:
    key = f"{args.seed}-{args.repos}-{args.artifacts}-{bench_search._schema_hash()}"
    if args.db == "sqlite":
        bench_search.CACHE.mkdir(parents=True, exist_ok=True)
        url = f"sqlite+aiosqlite:///{bench_search.CACHE / f'search-{key}.db'}"
    else:
        url = await bench_search._pg_database(args.pg_url, f"registry_bench_{key.replace('-', '_')}")
    print(f"preparing {args.db} ...", file=sys.stderr)
    db = await bench_search.prepare(url, args)
    try:
        rows = await measure(db, args.runs, args.concurrency)
    finally:
        await db.dispose()
    extra = f"{args.artifacts:,} artifacts, {args.runs} requests per kind, {args.concurrency} clients"
    ok = report(args.db, rows, extra)
    print(f"\ntarget p99 < {TARGET_P99_MS:.0f} ms on every request kind: {'met' if ok else 'MISSED'}")
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--db", choices=["sqlite", "postgresql"], default="sqlite")
    parser.add_argument("--pg-url", default="postgresql+asyncpg://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--repos", type=int, default=30_000)
    parser.add_argument("--artifacts", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--seed", type=int, default=7)
    return asyncio.run(run(parser.parse_args(argv)))


if __name__ == "__main__":
    raise SystemExit(main())
