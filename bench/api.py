"""REST API latency and throughput over the synthetic catalog of bench/search.py.

    python -m bench.api                           # SQLite, 100,000 artifacts (cached with bench.search)
    python -m bench.api --db postgresql
    python -m bench.api --artifacts 5000 --repos 1500 --requests 500    # a quick smoke run

`registry serve` runs in its own process on the bench catalog, exactly as a user starts
it; 32 closed-loop clients (`--concurrency`) on loopback draw requests from a weighted
mix of searches, facets, artifact and repo pages and lineage trees. p50/p99 are per
route, wall clock at the client, queueing included.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import signal
import socket
import statistics
import sys
import time

import aiohttp
from sqlalchemy import select

from bench import search as bench_search
from registry.catalog.db import Database
from registry.catalog.models import Artifact, Repo
from registry.catalog.search import SearchQuery

TARGET_P99_MS = 50.0


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


MIX_WEIGHTS = {  # a browsing session: mostly searches, then pages, some trees
    "search default": 3, "search filters": 3, "search text": 3, "search by name, 100": 1,
    "descendants": 1, "facets": 1, "artifact page": 3, "repo page": 2, "lineage": 2,
    "error envelope": 1,
}  # fmt: skip


def _ms(times: list[float], q: float) -> float:
    if len(times) < 2:
        return times[0] * 1000 if times else 0.0
    return statistics.quantiles(times, n=100, method="inclusive")[int(q) - 1] * 1000


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _start_server(url: str) -> tuple[asyncio.subprocess.Process, str]:
    """`registry serve` in its own process, as a user runs it, on the bench catalog."""
    port = _free_port()
    env = {**os.environ, "REGISTRY_DATABASE_URL": url}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "registry.cli", "serve", "--host", "127.0.0.1", "--port", str(port),
        env=env, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    async with aiohttp.ClientSession() as http:
        for _ in range(600):
            if proc.returncode is not None:
                raise RuntimeError(f"registry serve exited with {proc.returncode}")
            try:
                async with http.get(f"{base}/readyz") as resp:
                    if resp.status == 200:
                        return proc, base
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.1)
    proc.kill()
    raise RuntimeError("registry serve did not become ready in 60 s")


async def measure(
    db: Database, url: str, total: int, concurrency: int, seed: int
) -> tuple[list[tuple[str, int, float, float]], float, int]:
    """Closed-loop clients drawing requests from the mix; per-kind latencies at the client."""
    targets = [(label, path) for label, path, _ in await _targets(db)]
    weights = [MIX_WEIGHTS[label] for label, _ in targets]
    rng = random.Random(seed)
    plan = rng.choices(targets, weights=weights, k=total)
    times: dict[str, list[float]] = {label: [] for label, _ in targets}
    errors = 0
    proc, base = await _start_server(url)
    try:
        connector = aiohttp.TCPConnector(limit=concurrency)
        async with aiohttp.ClientSession(base, connector=connector) as http:

            async def get(path: str) -> int:
                async with http.get(path) as resp:
                    await resp.read()
                    return resp.status

            for _label, path in targets:  # warm-up: plans cached, pages in memory
                for _ in range(3):
                    await get(path)
            queue = iter(plan)

            async def client() -> None:
                nonlocal errors
                for label, path in queue:
                    t0 = time.perf_counter()
                    status = await get(path)
                    times[label].append(time.perf_counter() - t0)
                    expected_error = label == "error envelope"
                    if (status >= 400) != expected_error or status >= 500:
                        errors += 1

            t0 = time.perf_counter()
            await asyncio.gather(*(client() for _ in range(concurrency)))
            rate = total / (time.perf_counter() - t0)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), 30)
        except TimeoutError:
            proc.kill()
    rows = [(label, len(ts), _ms(ts, 50), _ms(ts, 99)) for label, ts in times.items() if ts]
    return rows, rate, errors


def report(dialect: str, rows: list[tuple[str, int, float, float]], rate: float, errors: int, extra: str) -> bool:
    print(f"\n## registry serve on {dialect} ({extra})\n")
    print(f"{'route':<24} {'requests':>9} {'p50 ms':>8} {'p99 ms':>8}")
    ok = errors == 0
    for label, n, p50, p99 in rows:
        ok = ok and p99 < TARGET_P99_MS
        print(f"{label:<24} {n:>9} {p50:>8.1f} {p99:>8.1f}")
    print(f"\nthroughput: {rate:.0f} requests/s, unexpected statuses: {errors}")
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
        rows, rate, errors = await measure(db, url, args.requests, args.concurrency, args.seed)
    finally:
        await db.dispose()
    extra = f"{args.artifacts:,} artifacts, {args.requests:,} requests, {args.concurrency} clients at once"
    ok = report(args.db, rows, rate, errors, extra)
    print(f"target p99 < {TARGET_P99_MS:.0f} ms on every route and no errors: {'met' if ok else 'MISSED'}")
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--db", choices=["sqlite", "postgresql"], default="sqlite")
    parser.add_argument("--pg-url", default="postgresql+asyncpg://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--repos", type=int, default=30_000)
    parser.add_argument("--artifacts", type=int, default=100_000)
    parser.add_argument("--requests", type=int, default=4000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--seed", type=int, default=7)
    return asyncio.run(run(parser.parse_args(argv)))


if __name__ == "__main__":
    raise SystemExit(main())
