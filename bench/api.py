"""REST API latency and throughput over the synthetic catalog of bench/search.py.

    python -m bench.api                           # SQLite, 100,000 artifacts (cached with bench.search)
    python -m bench.api --db postgresql
    python -m bench.api --artifacts 5000 --repos 1500 --requests 500    # a quick smoke run
    python -m bench.api --baseline ../other-tree --rounds 6   # side by side with another tree

With `--baseline DIR` the same catalog is served by this tree and by DIR's (another
checkout with its own `.venv`, as `make setup` makes it), both running, and the rounds
alternate between the two (this, other; other, this; ...): each round sends both the same
mix of `--requests / --rounds` requests from clients seeded alike, so that the machine's
other load falls on both alike. Every round is printed, then both servers' figures over all
rounds and their ratios.

`registry serve --workers N` runs in its own process(es) on the bench catalog, exactly as
a user starts it (N defaults to the CPU count, how one deploys it); 32 closed-loop clients
(`--concurrency`) on loopback draw requests from a weighted mix of searches, facets,
artifact and repo pages and lineage trees. Every request is drawn afresh: filter values,
text terms, sorts, artifact and repo ids and lineage roots come from the catalog, and
paged kinds sometimes follow the `next` link of the client's previous page, so no cache
of the server's can answer the same query over and over. p50/p99 are per route, wall
clock at the client, queueing included; a warm-up of WARMUP_REQUESTS is not measured.

The default run is long enough for a p99 to mean something: 24,000 requests give the
rarest routes (5% of the mix) about 1,200 samples, so that about 12 of them lie above their
p99. With 4,000 requests they had about 200, and their "p99" was the second or third
slowest request: a route that goes over 50 ms once in 200 requests then reads as missing
the target in about a quarter of runs. The table also counts the requests over the target,
so the tail stays visible whatever the percentile says.

The clients share this machine's cores with the server, so they are kept cheap: one
keep-alive connection each over a minimal HTTP/1.1 protocol (`HttpConnection`), opened
once every replica listens. CPU per request is reported for the server (all processes
and threads, and the part on the event loops; the rest is mostly SQLite on aiosqlite's
threads) and for this process.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import signal
import socket
import sqlite3
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import aiohttp
import asyncpg
from sqlalchemy import func, make_url, select

from bench import search as bench_search
from registry.catalog import lineage, migrate
from registry.catalog.db import Database
from registry.catalog.models import Artifact, LineageEdge, Repo

TARGET_P99_MS = 50.0
KEEP_THROUGHPUT = 0.9  # of the baseline's, with --baseline
WARMUP_REQUESTS = 2000
ROOT = Path(__file__).resolve().parent.parent


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
        family = [e.child for e in (await lineage.descendants(session, bench_search.POPULAR, 1)).edges]

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


def _stat_cpu(path: str) -> float:
    with open(path) as f:
        fields = f.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def _cpu_seconds(pid: int) -> tuple[float, float]:
    """CPU time of a process and its children (the replicas), from /proc; 0 elsewhere:
    (all of it, the part of the processes' main threads, which run the event loops)."""
    try:
        own = _stat_cpu(f"/proc/{pid}/stat")  # every thread's, ended ones too
        main = _stat_cpu(f"/proc/{pid}/task/{pid}/stat")
        kids: list[str] = []
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                kids += f.read().split()
    except (OSError, ValueError, IndexError):
        return 0.0, 0.0
    for kid in kids:
        total, loop = _cpu_seconds(int(kid))
        own, main = own + total, main + loop
    return own, main


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _listeners(port: int) -> int | None:
    """How many sockets listen on the loopback port (one per `serve` process); None: unknown here."""
    try:
        with open("/proc/net/tcp") as f:
            rows = [line.split() for line in f.readlines()[1:]]
    except OSError:
        return None
    return sum(1 for r in rows if r[3] == "0A" and int(r[1].rpartition(":")[2], 16) == port)


async def _start_server(url: str, workers: int, tree: Path | None = None) -> tuple[asyncio.subprocess.Process, str]:
    """`registry serve` in its own process, as a user runs it, on the bench catalog: this
    tree's, or (`tree`) another checkout's with its own interpreter."""
    port = _free_port()
    env = {**os.environ, "REGISTRY_DATABASE_URL": url}
    python = sys.executable if tree is None else str(tree / ".venv" / "bin" / "python")
    if tree is not None:
        env.pop("PYTHONPATH", None)
    proc = await asyncio.create_subprocess_exec(
        python, "-m", "registry.cli", "serve", "--host", "127.0.0.1", "--port", str(port),
        "--workers", str(workers), env=env, cwd=str(tree or ROOT), stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    async with aiohttp.ClientSession() as http:
        for _ in range(600):
            if proc.returncode is not None:
                raise RuntimeError(f"registry serve exited with {proc.returncode}")
            try:
                async with http.get(f"{base}/readyz") as resp:
                    # Every replica listening, or the clients' connections all go to the first.
                    if resp.status == 200 and _listeners(port) in (None, workers):
                        return proc, base
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.1)
    proc.kill()
    raise RuntimeError("registry serve did not become ready in 60 s")


class HttpConnection(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection that speaks just what the bench needs: GET, then
    the status, the headers and a Content-Length (or chunked) body.

    aiohttp's client session took about as much CPU per request as the server on this
    machine's shared cores, so the bench measured itself; this parses a response in a few
    slices of one buffer. One request at a time per connection, as a closed-loop client sends.
    """

    def __init__(self, host: str, port: int) -> None:
        self.address = (host, port)
        self._host = f"{host}:{port}".encode()
        self._transport: asyncio.Transport | None = None
        self._buffer = bytearray()
        self._waiter: asyncio.Future[tuple[int, dict[bytes, bytes], bytes]] | None = None
        self._closed: BaseException | None = None

    @classmethod
    async def open(cls, host: str, port: int) -> HttpConnection:
        loop = asyncio.get_running_loop()
        _, conn = await loop.create_connection(lambda: cls(host, port), host, port)
        return conn

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = exc or ConnectionResetError("the server closed the connection")
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_exception(self._closed)

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        if self._waiter is None or self._waiter.done():
            return
        try:
            parsed = _parse_response(self._buffer)
        except ValueError as exc:
            self._waiter.set_exception(exc)
            return
        if parsed is not None:
            response, used = parsed
            del self._buffer[:used]
            self._waiter.set_result(response)

    async def get(self, path: str) -> tuple[int, dict[bytes, bytes], bytes]:
        """(status, headers by lower-case name, body) of one GET."""
        if self._closed is not None or self._transport is None:
            raise ConnectionResetError("connection closed")
        self._waiter = asyncio.get_running_loop().create_future()
        self._transport.write(b"GET %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (path.encode(), self._host))
        try:
            return await self._waiter
        finally:
            self._waiter = None

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()


def _parse_response(buffer: bytearray) -> tuple[tuple[int, dict[bytes, bytes], bytes], int] | None:
    """A whole response from the front of `buffer` and the bytes it took, or None: not all here yet."""
    end = buffer.find(b"\r\n\r\n")
    if end < 0:
        return None
    lines = bytes(buffer[:end]).split(b"\r\n")
    status = int(lines[0][9:12])
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        headers[name.strip().lower()] = value.strip()
    start = end + 4
    if b"content-length" in headers:
        stop = start + int(headers[b"content-length"])
        return ((status, headers, bytes(buffer[start:stop])), stop) if len(buffer) >= stop else None
    if headers.get(b"transfer-encoding", b"").lower() != b"chunked":
        raise ValueError("a response without Content-Length must be chunked on a keep-alive connection")
    body = bytearray()
    at = start
    while True:
        line_end = buffer.find(b"\r\n", at)
        if line_end < 0:
            return None
        size = int(bytes(buffer[at:line_end]).partition(b";")[0], 16)
        chunk_start = line_end + 2
        if size == 0:  # no trailers from the server: the last chunk is followed by one CRLF
            stop = chunk_start + 2
            return ((status, headers, bytes(body)), stop) if len(buffer) >= stop else None
        if len(buffer) < chunk_start + size + 2:
            return None
        body += buffer[chunk_start : chunk_start + size]
        at = chunk_start + size + 2


class Client:
    """One closed-loop client: draws a kind from the mix, builds a fresh request for it."""

    def __init__(self, conn: HttpConnection, kinds: dict[str, Callable[[random.Random], str]],
                 rng: random.Random) -> None:  # fmt: skip
        self.conn, self.kinds, self.rng = conn, kinds, rng
        self.reconnects = 0
        self.next_page: dict[str, str] = {}  # kind -> the `Link: rel="next"` of the last page

    async def request(self, kind: str) -> tuple[int, float]:
        follow = self.next_page.pop(kind, None) if self.rng.random() < FOLLOW_CURSOR else None
        path = follow or self.kinds[kind](self.rng)
        t0 = time.perf_counter()
        status, headers, _body = await self.conn.get(path)
        elapsed = time.perf_counter() - t0
        if headers.get(b"connection", b"").lower() == b"close":  # the server ends this one
            self.conn.close()
            self.conn = await HttpConnection.open(*self.conn.address)
            self.reconnects += 1
        link = headers.get(b"link", b"").decode()
        if kind in PAGED and link.startswith("<"):
            self.next_page[kind] = link[1 : link.index(">")]
        return status, elapsed


@dataclass
class Round:
    """One server's share of a round: per-route latencies, throughput, CPU per request."""

    times: dict[str, list[float]]
    rate: float
    errors: int
    cpu_ms: tuple[float, float, float]  # server (all), server (event loops), bench client


@dataclass
class Server:
    name: str
    proc: asyncio.subprocess.Process
    host: str
    port: int

    async def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(self.proc.wait(), 30)
        except TimeoutError:
            self.proc.kill()


async def _serve(name: str, url: str, workers: int, tree: Path | None) -> Server:
    proc, base = await _start_server(url, workers, tree)
    host, port = base.removeprefix("http://").rsplit(":", 1)
    return Server(name, proc, host, int(port))


async def _drive(
    server: Server, kinds: dict[str, Callable[[random.Random], str]], labels: list[str], concurrency: int,
    seed: float, record: bool,
) -> Round:  # fmt: skip
    """Closed-loop clients sending `labels` (the kinds of request, in order) to one server."""
    rng = random.Random(seed)
    clients = [Client(await HttpConnection.open(server.host, server.port), kinds, random.Random(rng.random()))
               for _ in range(concurrency)]  # fmt: skip
    times: dict[str, list[float]] = {label: [] for label in MIX_WEIGHTS}
    errors = 0
    try:

        async def run(client: Client, queue: Iterator[str]) -> None:
            nonlocal errors
            for label in queue:
                status, elapsed = await client.request(label)
                times[label].append(elapsed)
                expected_error = label == "error envelope"
                if (status >= 400) != expected_error or status >= 500:
                    errors += 1

        queue = iter(labels)
        t0, cpu0, client0 = time.perf_counter(), _cpu_seconds(server.proc.pid), time.process_time()
        await asyncio.gather(*(run(c, queue) for c in clients))
        elapsed = time.perf_counter() - t0
        cpu1, client1 = _cpu_seconds(server.proc.pid), time.process_time()
    finally:
        for client in clients:
            client.conn.close()
    n = max(len(labels), 1)
    cpu_ms = ((cpu1[0] - cpu0[0]) / n * 1000, (cpu1[1] - cpu0[1]) / n * 1000, (client1 - client0) / n * 1000)
    return Round(times if record else {}, len(labels) / elapsed, errors if record else 0, cpu_ms)


async def _tree_head(tree: Path) -> str:
    """The schema revision another checkout's migrations end at."""
    code = "from alembic.script import ScriptDirectory; print(ScriptDirectory('migrations').get_current_head())"
    proc = await asyncio.create_subprocess_exec(
        str(tree / ".venv" / "bin" / "python"), "-c", code, cwd=str(tree), stdout=asyncio.subprocess.PIPE
    )
    out, _ = await proc.communicate()
    return out.decode().strip()


async def _catalog_for(url: str, tree: Path | None) -> str:
    """The catalog a tree serves: the bench's own, or for a tree from before the baseline
    migration (whose last revision is the baseline's `LEGACY_HEAD`, the same schema) a copy
    stamped with that tree's revision, which it would otherwise refuse as unknown."""
    if tree is None or (head := await _tree_head(tree)) != migrate.LEGACY_HEAD:
        return url
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        source = Path(parsed.database or "")
        copy = source.with_name(f"{source.stem}-{head}.db")
        if not copy.exists():
            with sqlite3.connect(source) as src, sqlite3.connect(copy) as dst:
                src.backup(dst)
                dst.execute("UPDATE alembic_version SET version_num = ?", (head,))
        return str(parsed.set(database=str(copy)))
    name = f"{parsed.database}_{head}"
    admin = await asyncpg.connect(parsed.set(drivername="postgresql", database="postgres").render_as_string(False))
    try:
        if not await admin.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", name):
            await admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{parsed.database}"')
            target = await asyncpg.connect(parsed.set(drivername="postgresql", database=name).render_as_string(False))
            try:
                await target.execute("UPDATE alembic_version SET version_num = $1", head)
            finally:
                await target.close()
    finally:
        await admin.close()
    return str(parsed.set(database=name).render_as_string(False))


async def measure(
    db: Database, url: str, args: argparse.Namespace
) -> tuple[dict[str, list[Round]], list[list[tuple[str, Round]]]]:
    """Every server warmed up, then the rounds: each server's share of each, in turn.
    Returns the rounds of each server and the rounds as run."""
    rng = random.Random(args.seed)
    kinds = _kinds(await _pools(db, rng))
    labels = list(MIX_WEIGHTS)
    weights = [MIX_WEIGHTS[label] for label in labels]
    trees: list[tuple[str, Path | None]] = [("this", None)]
    if args.baseline is not None:
        trees.append(("baseline", Path(args.baseline).resolve()))
    # Everything read from the catalog here is read: let it go, so that PostgreSQL can copy
    # the database for an older baseline (a template must have no other sessions).
    await db.dispose()
    urls = [await _catalog_for(url, tree) for _, tree in trees]  # before any server connects
    servers = [await _serve(name, u, args.workers, tree) for (name, tree), u in zip(trees, urls, strict=True)]
    per_server: dict[str, list[Round]] = {s.name: [] for s in servers}
    rounds: list[list[tuple[str, Round]]] = []
    try:
        # Warm-up (not measured): connections open, every process started, pages in memory.
        warmup = rng.choices(labels, weights=weights, k=WARMUP_REQUESTS)
        for server in servers:
            await _drive(server, kinds, warmup, args.concurrency, rng.random(), record=False)
        share = max(1, args.requests // args.rounds)
        for number in range(args.rounds):
            plan = rng.choices(labels, weights=weights, k=share)
            seed = rng.random()  # the same requests for every server in this round
            order = servers if number % 2 == 0 else servers[::-1]
            ran = []
            for server in order:
                result = await _drive(server, kinds, plan, args.concurrency, seed, record=True)
                per_server[server.name].append(result)
                ran.append((server.name, result))
            rounds.append(ran)
            print(f"round {number + 1}/{args.rounds}: " + ", ".join(
                f"{name} {r.rate:.0f} requests/s" for name, r in ran), file=sys.stderr)  # fmt: skip
    finally:
        for server in servers:
            await server.stop()
    return per_server, rounds


def _pooled(rounds: list[Round]) -> Round:
    times: dict[str, list[float]] = {}
    for r in rounds:
        for label, ts in r.times.items():
            times.setdefault(label, []).extend(ts)
    n = len(rounds)
    cpu = tuple(sum(r.cpu_ms[i] for r in rounds) / n for i in range(3))
    # throughput over all rounds: requests over the time they took together
    total = sum(len(ts) for r in rounds for ts in r.times.values())
    seconds = sum(sum(len(ts) for ts in r.times.values()) / r.rate for r in rounds)
    return Round(times, total / seconds, sum(r.errors for r in rounds), (cpu[0], cpu[1], cpu[2]))


def _rows(r: Round) -> list[tuple[str, int, float, float, int]]:
    return [(label, len(ts), _ms(ts, 50), _ms(ts, 99), sum(t * 1000 >= TARGET_P99_MS for t in ts))
            for label, ts in r.times.items() if ts]  # fmt: skip


def report_side_by_side(rounds: list[list[tuple[str, Round]]], per_server: dict[str, list[Round]]) -> None:
    """Each round's throughput and worst p99 per server, then the routes over all rounds."""
    names = list(per_server)
    print("\n" + f"{'round':<7}" + "".join(f"{n + ' req/s':>16}{n + ' worst p99':>20}" for n in names))
    for number, ran in enumerate(rounds, 1):
        by_name = dict(ran)
        cells = ""
        for n in names:
            r = by_name[n]
            cells += f"{r.rate:>16.0f}{max(p99 for *_, p99, _ in _rows(r)):>20.1f}"
        print(f"{number:<7}{cells}")
    pooled = {n: _pooled(rs) for n, rs in per_server.items()}
    this, other = pooled[names[0]], pooled[names[1]]
    print(f"\n{'route (all rounds)':<24} {'p50 this':>9} {'p50 base':>9} {'p99 this':>9} {'p99 base':>9} {'p99 ratio':>10}")
    base_rows = {label: (p50, p99) for label, _n, p50, p99, _s in _rows(other)}
    for label, _n, p50, p99, _slow in _rows(this):
        b50, b99 = base_rows.get(label, (0.0, 0.0))
        ratio = p99 / b99 if b99 else float("nan")
        print(f"{label:<24} {p50:>9.1f} {b50:>9.1f} {p99:>9.1f} {b99:>9.1f} {ratio:>10.2f}")
    print(f"\nthroughput: this {this.rate:.0f} requests/s, baseline {other.rate:.0f} requests/s, "
          f"ratio {this.rate / other.rate:.2f}")  # fmt: skip
    print(f"CPU per request (server, all processes): this {this.cpu_ms[0]:.2f} ms, baseline {other.cpu_ms[0]:.2f} ms")


def report(
    dialect: str, rows: list[tuple[str, int, float, float, int]], rate: float, errors: int, extra: str
) -> bool:
    print(f"\n## registry serve on {dialect} ({extra})\n")
    over = f">= {TARGET_P99_MS:.0f} ms"
    print(f"{'route':<24} {'requests':>9} {'p50 ms':>8} {'p99 ms':>8} {over:>9}")
    ok = errors == 0
    for label, n, p50, p99, slow in rows:
        ok = ok and p99 < TARGET_P99_MS
        print(f"{label:<24} {n:>9} {p50:>8.1f} {p99:>8.1f} {slow:>9}")
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
        per_server, rounds = await measure(db, url, args)
    finally:
        await db.dispose()
    extra = (f"{args.artifacts:,} artifacts, {args.requests:,} requests in {args.rounds} rounds, "
             f"{args.concurrency} clients at once, --workers {args.workers}")  # fmt: skip
    this = _pooled(per_server["this"])
    ok = report(args.db, _rows(this), this.rate, this.errors, extra)
    # Both share this machine's cores (with anything else running): the server's figure is
    # the one to compare across changes, the client's says what the load generator takes.
    print(f"CPU per request: server {this.cpu_ms[0]:.2f} ms (all its processes and threads; "
          f"{this.cpu_ms[1]:.2f} ms on the event loops), bench client {this.cpu_ms[2]:.2f} ms")  # fmt: skip
    if "baseline" in per_server:
        report_side_by_side(rounds, per_server)
        baseline = _pooled(per_server["baseline"])
        kept = this.rate / baseline.rate
        print(f"target at least {KEEP_THROUGHPUT:.0%} of the baseline's throughput: "
              f"{'met' if kept >= KEEP_THROUGHPUT else 'MISSED'} ({kept:.0%})")  # fmt: skip
        ok = ok and kept >= KEEP_THROUGHPUT
    print(f"target p99 < {TARGET_P99_MS:.0f} ms on every route and no errors: {'met' if ok else 'MISSED'}")
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--db", choices=["sqlite", "postgresql"], default="sqlite")
    parser.add_argument("--pg-url", default="postgresql+asyncpg://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--repos", type=int, default=30_000)
    parser.add_argument("--artifacts", type=int, default=100_000)
    parser.add_argument("--requests", type=int, default=24_000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1,
                        help="`registry serve --workers N`, as deployed on this machine (default: CPU count)")
    parser.add_argument("--baseline", metavar="DIR", default=None,
                        help="another checkout (with its .venv) to serve the same catalog, side by side")
    parser.add_argument("--rounds", type=int, default=1,
                        help="rounds the requests are split into, alternating between the servers")
    return asyncio.run(run(parser.parse_args(argv)))


if __name__ == "__main__":
    raise SystemExit(main())
