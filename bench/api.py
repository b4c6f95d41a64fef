"""REST API latency and throughput over the synthetic catalog of bench/search.py.

    python -m bench.api                           # SQLite, 100,000 artifacts (cached with bench.search)
    python -m bench.api --db postgresql
    python -m bench.api --artifacts 5000 --repos 1500 --requests 500    # a quick smoke run

`registry serve --workers N` runs in its own process(es) on the bench catalog, exactly as
a user starts it (N defaults to the CPU count, how one deploys it); 32 closed-loop clients
(`--concurrency`) on loopback draw requests from a weighted mix of searches, facets,
artifact and repo pages and lineage trees. Every request is drawn afresh: filter values,
text terms, sorts, artifact and repo ids and lineage roots come from the catalog, and
paged kinds sometimes follow the `next` link of the client's previous page, so no cache
of the server's can answer the same query over and over. p50/p99 are per route, wall
clock at the client, queueing included; a warm-up of WARMUP_REQUESTS is not measured.
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
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

import aiohttp
from sqlalchemy import func, select

from bench import search as bench_search
from registry.catalog import lineage
from registry.catalog.db import Database
from registry.catalog.models import Artifact, LineageEdge, Repo

TARGET_P99_MS = 50.0
WARMUP_REQUESTS = 400


@dataclass(frozen=True)
class Pools:
    """Values drawn from the catalog, so every request differs and no cache sees one query."""

    artifact_ids: list[int]
    repo_ids: list[str]
    lineage_nodes: list[str]  # repos with children; the popular base model's family first
    architectures: list[str]
    licenses: list[str]
    file_types: list[str]


async def _pools(db: Database, rng: random.Random) -> Pools:
    async with db.sessions() as session:
        ids = list((await session.scalars(select(Artifact.id))).all())
        repos = list((await session.scalars(select(Repo.repo_id))).all())
        parents = list((await session.scalars(select(LineageEdge.parent_repo_id).distinct())).all())
        family = [e.child for e in await lineage.descendants(session, bench_search.POPULAR, 1)]

        async def values(column: Any) -> list[str]:
            rows = await session.execute(select(column).where(column.is_not(None)).group_by(column)
                                         .order_by(func.count().desc()).limit(40))  # fmt: skip
            return [r[0] for r in rows]

        archs = await values(Artifact.architecture)
        licenses = await values(Artifact.license)
        types = await values(Artifact.file_type)
    nodes = [bench_search.POPULAR, *family[:50], *rng.sample(parents, min(len(parents), 2000))]
    return Pools(rng.sample(ids, min(len(ids), 20_000)), rng.sample(repos, min(len(repos), 10_000)), nodes,
                 archs, licenses, types)  # fmt: skip


def _q(**params: Any) -> str:
    return urlencode({k: v for k, v in params.items() if v is not None})


# One request of each kind, drawn at random. Rare values are as likely as common ones
# (an architecture, license or file type from the top 40), so plans vary in cost too.
def _kinds(p: Pools) -> dict[str, Callable[[random.Random], str]]:
    sorts = ["downloads", "likes", "last_modified", "parameter_count", "file_size", "downloads:asc"]
    contexts = [None, 2048, 4096, 8192, 32768, 131072]
    words = [*bench_search.WORDS, *(o.lower() for o in bench_search.ORGS), "q4_k", "8b", "gguf", "7b"]
    return {
        "search default": lambda r: "/v1/artifacts?" + _q(sort=r.choice(sorts)),
        "search filters": lambda r: "/v1/artifacts?" + _q(
            architecture=r.choice(p.architectures), file_type=r.choice([None, *p.file_types[:12]]),
            license=r.choice([None, None, *p.licenses[:10]]), min_context=r.choice(contexts)),
        "search text": lambda r: "/v1/artifacts?" + _q(q=" ".join(r.sample(words, r.choice([1, 2])))),
        "search by name, 100": lambda r: "/v1/artifacts?" + _q(sort=r.choice(["name", "name:desc"]), limit=100),
        "descendants": lambda r: "/v1/artifacts?" + _q(descendant_of=r.choice(p.lineage_nodes[:60]),
                                                       file_type=r.choice([None, None, *p.file_types[:6]])),
        "facets": lambda r: "/v1/facets?" + _q(
            architecture=r.choice([None, *p.architectures]), license=r.choice([None, *p.licenses]),
            file_type=r.choice([None, None, *p.file_types])),
        "artifact page": lambda r: f"/v1/artifacts/{r.choice(p.artifact_ids)}",
        "repo page": lambda r: f"/v1/repos/{r.choice(p.repo_ids)}",
        "lineage": lambda r: f"/v1/repos/{r.choice(p.lineage_nodes)}/lineage?" + _q(
            direction=r.choice(["descendants", "ancestors", "both"]), depth=r.choice([1, 2, 3])),
        "error envelope": lambda r: r.choice([
            "/v1/artifacts?limit=0", "/v1/artifacts?sort=nope", f"/v1/artifacts/{10**9 + r.randrange(10**6)}",
            "/v1/artifacts?cursor=bm90LWEtY3Vyc29y", f"/v1/repos/nobody/missing-{r.randrange(10**6)}"]),
    }  # fmt: skip


MIX_WEIGHTS = {  # a browsing session: mostly searches, then pages, some trees
    "search default": 3, "search filters": 3, "search text": 3, "search by name, 100": 1,
    "descendants": 1, "facets": 1, "artifact page": 3, "repo page": 2, "lineage": 2,
    "error envelope": 1,
}  # fmt: skip
# Kinds whose next request sometimes follows the `next` cursor of the client's last page.
PAGED = {"search default", "search filters", "search text", "search by name, 100", "descendants"}
FOLLOW_CURSOR = 0.3


def _ms(times: list[float], q: float) -> float:
    if len(times) < 2:
        return times[0] * 1000 if times else 0.0
    return statistics.quantiles(times, n=100, method="inclusive")[int(q) - 1] * 1000


def _cpu_seconds(pid: int) -> float:
    """CPU time of a process and its children (the replicas), from /proc; 0 elsewhere."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rpartition(")")[2].split()
        own = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime
        kids: list[str] = []
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                kids += f.read().split()
    except (OSError, ValueError, IndexError):
        return 0.0
    return own + sum(_cpu_seconds(int(k)) for k in kids)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _start_server(url: str, workers: int) -> tuple[asyncio.subprocess.Process, str]:
    """`registry serve` in its own process, as a user runs it, on the bench catalog."""
    port = _free_port()
    env = {**os.environ, "REGISTRY_DATABASE_URL": url}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "registry.cli", "serve", "--host", "127.0.0.1", "--port", str(port),
        "--workers", str(workers), env=env, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
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


class Client:
    """One closed-loop client: draws a kind from the mix, builds a fresh request for it."""

    def __init__(self, http: aiohttp.ClientSession, kinds: dict[str, Callable[[random.Random], str]],
                 rng: random.Random) -> None:  # fmt: skip
        self.http, self.kinds, self.rng = http, kinds, rng
        self.next_page: dict[str, str] = {}  # kind -> the `Link: rel="next"` of the last page

    async def request(self, kind: str) -> tuple[int, float]:
        follow = self.next_page.pop(kind, None) if self.rng.random() < FOLLOW_CURSOR else None
        path = follow or self.kinds[kind](self.rng)
        t0 = time.perf_counter()
        async with self.http.get(path) as resp:
            await resp.read()
            elapsed = time.perf_counter() - t0
            link = resp.headers.get("Link", "")
        if kind in PAGED and link.startswith("<"):
            self.next_page[kind] = link[1 : link.index(">")]
        return resp.status, elapsed


async def measure(
    db: Database, url: str, total: int, concurrency: int, seed: int, workers: int
) -> tuple[list[tuple[str, int, float, float]], float, int, tuple[float, float]]:
    """Closed-loop clients drawing requests from the mix; per-kind latencies at the client."""
    rng = random.Random(seed)
    kinds = _kinds(await _pools(db, rng))
    labels = list(MIX_WEIGHTS)
    weights = [MIX_WEIGHTS[label] for label in labels]
    warmup = rng.choices(labels, weights=weights, k=WARMUP_REQUESTS)
    plan = rng.choices(labels, weights=weights, k=total)
    times: dict[str, list[float]] = {label: [] for label in labels}
    errors = 0
    proc, base = await _start_server(url, workers)
    try:
        connector = aiohttp.TCPConnector(limit=concurrency)
        async with aiohttp.ClientSession(base, connector=connector) as http:
            clients = [Client(http, kinds, random.Random(rng.random())) for _ in range(concurrency)]

            async def run(client: Client, queue: Iterator[str], record: bool) -> None:
                nonlocal errors
                for label in queue:
                    status, elapsed = await client.request(label)
                    if not record:
                        continue
                    times[label].append(elapsed)
                    expected_error = label == "error envelope"
                    if (status >= 400) != expected_error or status >= 500:
                        errors += 1

            # Warm-up (not measured): connections open, every process started, pages in memory.
            warm = iter(warmup)
            await asyncio.gather(*(run(c, warm, False) for c in clients))
            queue = iter(plan)
            t0, cpu0, client0 = time.perf_counter(), _cpu_seconds(proc.pid), time.process_time()
            await asyncio.gather(*(run(c, queue, True) for c in clients))
            rate = total / (time.perf_counter() - t0)
            cpu_ms = ((_cpu_seconds(proc.pid) - cpu0) / total * 1000, (time.process_time() - client0) / total * 1000)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), 30)
        except TimeoutError:
            proc.kill()
    rows = [(label, len(ts), _ms(ts, 50), _ms(ts, 99)) for label, ts in times.items() if ts]
    return rows, rate, errors, cpu_ms


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
        rows, rate, errors, cpu_ms = await measure(db, url, args.requests, args.concurrency, args.seed, args.workers)
    finally:
        await db.dispose()
    extra = (f"{args.artifacts:,} artifacts, {args.requests:,} requests, {args.concurrency} clients at once, "
             f"--workers {args.workers}")  # fmt: skip
    ok = report(args.db, rows, rate, errors, extra)
    # Both share this machine's cores (with anything else running): the server's figure is
    # the one to compare across changes, the client's says what the load generator takes.
    print(f"CPU per request: server {cpu_ms[0]:.2f} ms (all its processes and threads), "
          f"bench client {cpu_ms[1]:.2f} ms")  # fmt: skip
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
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1,
                        help="`registry serve --workers N`, as deployed on this machine (default: CPU count)")
    return asyncio.run(run(parser.parse_args(argv)))


if __name__ == "__main__":
    raise SystemExit(main())
