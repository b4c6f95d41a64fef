"""Header fetch cost of a multi-quant corpus, four ways side by side; then crawl speed.

    python bench/crawl.py                     # both parts (a few minutes on 2 cores)
    python bench/crawl.py --repos 200         # a smaller crawl
    python bench/crawl.py --per-host-too 8    # part 2 also with 8 requests per host in flight
    python bench/crawl.py --project 150000 1500000 50 --project-workers 8
                                              # part 1, then what a hub that size would cost
    python bench/crawl.py --workers 1,2,4     # distributed: 1, 2, 4 worker processes (PostgreSQL)

Both parts run against one fake hub (tests/fakehub) in a separate process, so its memory
and CPU are not the crawler's; every request to it waits `--latency` (50 ms) first.

Part 1 reads the multi-quant corpus (`tests.fakehub.corpus.sibling_corpus`: repos of 8 to 24
quants over 32k to 262k token vocabularies, with and without imatrix keys, a quant with 1% of
its tokens changed in place, one with a longer vocabulary, two models in one repo, a split
quant, projector and imatrix files) four ways:
- reuse on: the crawler's repo read (`workers.crawl.build_snapshot`) with `hub.sibling_reuse`;
- reuse off: the same with each file's header read in full;
- hf-js: @huggingface/gguf's documented strategy, sequential 2 MB (2,000,000-byte) range
  requests until the header parses;
- go: gguf-parser-go's, a HEAD for the size, then ranged reads in 4 MiB buffers.
Bytes are body bytes received, over the sum of the files' header sizes. "data req" counts
range GETs and HEADs per file; "http req" adds redirect hops (the hub's 302 to the CDN,
which the crawler follows once per file and the others on every request). CPU is this
process's CPU time per file (the peers' strategies run here with this project's parser).
The bench checks that every artifact's facts with reuse on equal those of the full read, and
that the quants whose vocabulary differs from their leader's were told apart.

Part 2 crawls `--repos` multi-quant repos (8 to 24 quants each, 32k to 262k token
vocabularies) into a fresh SQLite catalog in a child process and reports files/s and that
process's peak RSS (ru_maxrss), with the default settings (sibling reuse on), and the
ceilings the per-host limit puts on it: each file needs one request to the hub and its data
requests to the CDN, so with `--latency` per request no more than per_host_concurrency /
latency files a second by the hub, and that over the data requests per file by the CDN;
`--per-host-too N` repeats it with per_host_concurrency N and `--reuse-off-too` with
`hub.sibling_reuse` off (both informational).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import aiohttp  # noqa: E402

from registry.gguf.errors import NeedMoreData  # noqa: E402
from registry.gguf.reader import parse_header  # noqa: E402

BYTES_TARGET = 0.2  # reuse on: total bytes / sum of header sizes
REQUESTS_TARGET = 1.5  # reuse on: data requests per file
FILES_PER_S_TARGET = 150.0
RSS_TARGET_MB = 400.0
HF_JS_CHUNK = 2 * 10**6  # HTTP_CHUNK_SIZE in @huggingface/gguf
GO_BUFFER = 4 * 1024 * 1024
DEFAULT_REPOS = 1000
STRATEGIES = ("reuse on", "reuse off", "hf-js 2MB", "go HEAD+4MiB")
# The quants of sibling_corpus whose vocabulary differs from their leader's.
CHANGED_VOCAB = ("sib/Llama-2-7B-Chat-GGUF/llama-2-7b-chat-Q4_1.gguf",
                 "sib/Meta-Llama-3.1-8B-Instruct-GGUF/Meta-Llama-3.1-8B-Instruct-Q4_0.gguf")  # fmt: skip


@dataclass
class Cost:
    bytes: int = 0
    data_requests: int = 0
    http_requests: int = 0
    cpu: float = 0.0  # seconds of this process
    files: int = 0

    def add(self, other: Cost) -> None:
        self.bytes += other.bytes
        self.data_requests += other.data_requests
        self.http_requests += other.http_requests
        self.cpu += other.cpu
        self.files += other.files


@dataclass
class Run:
    """One strategy over the corpus: its cost per repo and what the crawler recorded."""

    costs: dict[str, Cost] = field(default_factory=dict)
    records: dict[str, Any] = field(default_factory=dict)  # "repo/path" -> ArtifactRecord


# -- the fake hub in its own process --------------------------------------------------------


def start_hub(repos: int, latency: float) -> tuple[subprocess.Popen[str], str]:
    cmd = [sys.executable, "-m", "tests.fakehub", "--port", "0", "--repos", str(repos), "--multi-quant",
           "--sibling-corpus", "--latency", str(latency)]  # fmt: skip
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()  # "fake hub http://127.0.0.1:N cdn ... repos N"
    if not line.startswith("fake hub "):
        proc.kill()
        raise SystemExit(f"fake hub did not start: {line!r}")
    return proc, line.split()[2]


# -- part 1: four strategies over the multi-quant corpus ------------------------------------


def _counting_session() -> tuple[aiohttp.ClientSession, list[int]]:
    """A session like the crawler's that counts every HTTP request it sends (redirects too)."""
    from registry.hub.http import HttpOptions, client_timeout

    sent = [0]

    async def on_start(*_: object) -> None:
        sent[0] += 1

    trace = aiohttp.TraceConfig()
    trace.on_request_start.append(on_start)
    session = aiohttp.ClientSession(timeout=client_timeout(HttpOptions()), auto_decompress=False,
                                    cookie_jar=aiohttp.DummyCookieJar(), trace_configs=[trace])  # fmt: skip
    return session, sent


async def _ours(endpoint: str, repo_ids: list[str], reuse: bool) -> Run:
    from registry.hub.client import HubClient
    from registry.hub.http import HttpOptions, HubHttp
    from workers.crawl import CrawlReport, ReadOptions, build_snapshot
    from workers.templates import TemplateScanner

    client = HubClient(endpoint)
    run = Run()
    scanner = TemplateScanner()
    session, sent = _counting_session()
    try:
        async with HubHttp(HttpOptions(endpoint=endpoint), session=session) as http:
            for repo_id in repo_ids:
                info = await client.repo_info(repo_id)
                report = CrawlReport()
                before_http, cpu = sent[0], time.process_time()
                snap = await build_snapshot(client, http, info, ReadOptions(scanner=scanner, sibling_reuse=reuse),
                                            report)  # fmt: skip
                run.costs[repo_id] = Cost(report.bytes_fetched, report.requests, sent[0] - before_http,
                                          time.process_time() - cpu, report.files)  # fmt: skip
                for record in snap.artifacts:
                    run.records[f"{repo_id}/{record.path}"] = record
    finally:
        await session.close()
        await scanner.aclose()
    return run


async def _chunked(session: aiohttp.ClientSession, url: str, chunk: int, head: bool) -> Cost:
    """Sequential fixed-size range reads until the header parses (redirects followed each time)."""
    cost = Cost(files=1)
    cpu = time.process_time()
    size: int | None = None
    if head:
        async with session.head(url, allow_redirects=True) as resp:
            cost.data_requests += 1
            cost.http_requests += 1 + len(resp.history)
            size = int(resp.headers["Content-Length"])
    buf = bytearray()
    while True:
        end = len(buf) + chunk if size is None else min(len(buf) + chunk, size)
        async with session.get(url, headers={"Range": f"bytes={len(buf)}-{end - 1}"}) as resp:
            body = await resp.read()
            cost.data_requests += 1
            cost.http_requests += 1 + len(resp.history)
            cost.bytes += len(body)
            if size is None:
                size = int(resp.headers["Content-Range"].rsplit("/", 1)[1])
        buf += body
        try:
            parse_header(bytes(buf), file_size=size)
            cost.cpu = time.process_time() - cpu
            return cost
        except NeedMoreData:
            if len(buf) >= size:
                raise


async def _peer(endpoint: str, repo_ids: list[str], chunk: int, head: bool) -> Run:
    from registry.hub.client import HubClient

    client = HubClient(endpoint)
    run = Run()
    async with aiohttp.ClientSession(auto_decompress=False) as session:
        for repo_id in repo_ids:
            info = await client.repo_info(repo_id)
            total = Cost()
            for f in info.files:
                if f.is_gguf:
                    total.add(
                        await _chunked(session, client.resolve_url(repo_id, info.sha, f.path), chunk, head)
                    )
            run.costs[repo_id] = total
    return run


async def measure(endpoint: str) -> tuple[list[str], list[Run]]:
    from tests.fakehub.corpus import sibling_corpus

    repo_ids = [r.repo_id for r in sibling_corpus()]
    runs = [await _ours(endpoint, repo_ids, reuse=True), await _ours(endpoint, repo_ids, reuse=False),
            await _peer(endpoint, repo_ids, HF_JS_CHUNK, head=False),
            await _peer(endpoint, repo_ids, GO_BUFFER, head=True)]  # fmt: skip
    return repo_ids, runs


def _header_sizes(run: Run) -> dict[str, int]:
    """Each repo's sum of header sizes (data offsets), from full reads."""
    sizes: dict[str, int] = {}
    for key, record in run.records.items():
        repo = key.rsplit("/", len(record.path.split("/")))[0]
        sizes[repo] = sizes.get(repo, 0) + sum(s.header_bytes or 0 for s in record.shards)
    return sizes


def check_facts(on: Run, off: Run) -> list[tuple[str, bool, str]]:
    """Every artifact's facts with reuse on equal the full read's; changed vocabularies told apart."""
    differ = [k for k, r in off.records.items() if on.records.get(k) is None
              or (on.records[k].facts, on.records[k].error) != (r.facts, r.error)]  # fmt: skip
    modes: dict[str, int] = {}
    for r in on.records.values():
        modes[r.header_read or "none"] = modes.get(r.header_read or "none", 0) + 1
    checks = [(f"facts equal a full read ({len(off.records)} artifacts)", not differ,
               f"{len(differ)} differ" + (f": {differ[:3]}" if differ else ""))]  # fmt: skip
    for key in CHANGED_VOCAB:
        record, full = on.records.get(key), off.records.get(key)
        leader = (
            on.records.get(f"{key.rsplit('/', 1)[0]}/{record.header_leader}")
            if record and record.header_leader
            else None
        )
        ok = (record is not None and full is not None and record.facts == full.facts
              and (record.header_read == "full" or (leader is not None and leader.facts is not None
                   and record.facts is not None and record.facts.vocab_sha256 != leader.facts.vocab_sha256)))  # fmt: skip
        how = record.header_read if record is not None else "missing"
        checks.append((f"changed vocabulary detected: {key.rsplit('/', 1)[1]}", ok, f"read {how}"))
    checks.append(("header reads (reuse on)", True, ", ".join(f"{k} {v}" for k, v in sorted(modes.items()))))
    return checks


def report1(repo_ids: list[str], runs: list[Run]) -> tuple[bool, list[Cost], int]:
    sizes = _header_sizes(runs[1])
    print("Part 1: header fetch cost per strategy on the multi-quant corpus "
          "(MB received / data requests / http requests incl. redirects / CPU ms per file)")  # fmt: skip
    head = f"{'repo':<34} {'files':>5} {'headers MB':>10} | " + " | ".join(f"{s:>25}" for s in STRATEGIES)
    print(head)
    print("-" * len(head))
    totals = [Cost() for _ in runs]
    for repo_id in repo_ids:
        files = runs[1].costs[repo_id].files
        cells = []
        for total, run in zip(totals, runs, strict=True):
            c = run.costs[repo_id]
            total.add(c)
            cells.append(
                f"{c.bytes / 1e6:>8.1f} {c.data_requests:>4} {c.http_requests:>4} {c.cpu / max(c.files, 1) * 1e3:>5.1f}"
            )
        label = repo_id.split("/", 1)[1]
        print(f"{label[:34]:<34} {files:>5} {sizes.get(repo_id, 0) / 1e6:>10.1f} | " + " | ".join(cells))
    print("-" * len(head))
    header_total = sum(sizes.values())
    files = totals[1].files
    print(f"{'total':<34} {files:>5} {header_total / 1e6:>10.1f} | " + " | ".join(
        f"{t.bytes / 1e6:>8.1f} {t.data_requests:>4} {t.http_requests:>4} {t.cpu / max(t.files, 1) * 1e3:>5.1f}"
        for t in totals))  # fmt: skip
    for name, t in zip(STRATEGIES, totals, strict=True):
        print(f"  {name:<13} bytes {t.bytes / header_total:.3f}x the header sizes, {t.data_requests / files:.2f} data "
              f"requests and {t.http_requests / files:.2f} http requests per file, {t.cpu / files * 1e3:.1f} ms CPU per file")  # fmt: skip
    on = totals[0]
    checks = [
        (f"reuse on: bytes <= {BYTES_TARGET}x headers", on.bytes / header_total <= BYTES_TARGET,
         f"{on.bytes / header_total:.3f}x"),
        (f"reuse on: data requests/file <= {REQUESTS_TARGET}", on.data_requests / files <= REQUESTS_TARGET,
         f"{on.data_requests / files:.2f}"),
        ("reuse on: less CPU per file than reuse off", on.cpu < totals[1].cpu,
         f"{on.cpu / files * 1e3:.1f} vs {totals[1].cpu / files * 1e3:.1f} ms"),
        *check_facts(runs[0], runs[1]),
    ]  # fmt: skip
    for name, ok, value in checks:
        print(
            f"  {'target' if name[0] != 'h' else '      '} {name:<58} {value:<28} {'met' if ok else 'MISSED'}"
        )
    return all(ok for _, ok, _ in checks), totals, header_total


# -- the projection: what a crawl of a whole hub would cost ---------------------------------


def project(totals: list[Cost], repos: int, files: int, rate: float, workers: int) -> None:
    """Scale part 1's per-file figures to a hub of `repos` repos and `files` GGUF files.

    Requests: every HTTP request per file as measured, plus one repo info per repo and one
    listing page per 1,000 repos. The hub's rate limit counts the requests to the hub itself:
    the listing, repo infos and each `/resolve/` (a redirected request is one to the hub and
    one to the CDN). Wall time: the longer of those requests at `rate` per second and the
    CPU spread over `workers` crawler processes.
    """
    print(f"\nProjection: {repos:,} repos, {files:,} GGUF files, {rate:g} hub requests/s allowed, "
          f"{workers} crawler processes (per-file figures from part 1)")  # fmt: skip
    head = (f"{'strategy':<14} {'bytes':>10} {'requests':>10} {'to the hub':>11} {'CPU hours':>10} "
            f"{'wall hours':>11}  bound by")  # fmt: skip
    print(head)
    print("-" * len(head))
    for name, t in zip(STRATEGIES, totals, strict=True):
        n = max(t.files, 1)
        per_repo = repos + repos / 1000  # repo infos and listing pages, whoever reads the files
        requests = files * t.http_requests / n + per_repo
        to_hub = files * (t.http_requests - t.data_requests) / n + per_repo
        cpu_s = files * t.cpu / n
        by_rate, by_cpu = to_hub / rate, cpu_s / workers
        print(f"{name:<14} {files * t.bytes / n / 1e12:>7.2f} TB {requests / 1e6:>8.2f} M {to_hub / 1e6:>9.2f} M "
              f"{cpu_s / 3600:>10.1f} {max(by_rate, by_cpu) / 3600:>11.1f}  "
              f"{'the rate limit' if by_rate >= by_cpu else 'CPU'}")  # fmt: skip
    print(f"  ({totals[1].files} files measured; latency is left out: enough requests in flight hide it)")


async def part1(endpoint: str) -> tuple[bool, list[Cost]]:
    repo_ids, runs = await measure(endpoint)
    ok, totals, _ = report1(repo_ids, runs)
    return ok, totals


# -- part 2: a 1,000-repo crawl in a child process -------------------------------------------


async def _crawl_child(
    endpoint: str, repos: int, concurrency: int | None, per_host: int | None, reuse: bool
) -> dict[str, float]:
    from registry import heap
    from registry.catalog.db import Database
    from registry.config import HubSettings
    from workers.crawl import CrawlParams, crawl_from_settings

    hub = HubSettings(endpoint=endpoint, sibling_reuse=reuse)
    if concurrency:
        hub = replace(hub, crawl_concurrency=concurrency)
    if per_host:
        hub = replace(hub, per_host_concurrency=per_host)
    with tempfile.TemporaryDirectory() as tmp:
        db = Database.from_url(f"sqlite+aiosqlite:///{tmp}/catalog.db")
        heap.settle()  # as `registry crawl` does once started
        start, cpu = time.perf_counter(), time.process_time()
        # --search mq: the multi-quant repos only, not part 1's corpus.
        report = await crawl_from_settings(db, hub, CrawlParams(search="mq", limit=repos))
        seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
        await db.dispose()
    rss_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    return {"files": report.files, "repos": report.indexed, "failed": report.failed, "seconds": seconds,
            "cpu": cpu, "bytes": report.bytes_fetched, "requests": report.requests, "rss_mb": rss_kb / 1024,
            "concurrency": hub.crawl_concurrency, "per_host": hub.per_host_concurrency,
            "sibling_reads": report.sibling_reads, "fallbacks": report.sibling_fallbacks}  # fmt: skip


def _cpu_seconds(pid: int) -> float:
    """User and system CPU time of another process so far (Linux /proc), 0.0 where unknown."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def part2(
    endpoint: str,
    repos: int,
    latency: float,
    concurrency: int | None,
    per_host: int | None,
    *,
    reuse: bool = True,
    hub_pid: int | None = None,
    informational: bool = False,
) -> bool:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", endpoint, "--repos", str(repos)]
    if concurrency:
        cmd += ["--concurrency", str(concurrency)]
    if per_host:
        cmd += ["--per-host-concurrency", str(per_host)]
    if not reuse:
        cmd += ["--reuse-off"]
    hub_cpu = _cpu_seconds(hub_pid) if hub_pid else 0.0
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
    hub_cpu = (_cpu_seconds(hub_pid) - hub_cpu) if hub_pid else 0.0
    if out.returncode != 0:
        print(out.stderr[-3000:])
        raise SystemExit("crawl child failed")
    r = json.loads(out.stdout.strip().splitlines()[-1])
    rate = r["files"] / r["seconds"]
    print(f"\nPart 2 (sibling reuse {'on' if reuse else 'off'}): crawl of {repos} multi-quant repos, "
          f"{latency * 1000:.0f} ms added per request, crawl_concurrency {r['concurrency']}, "
          f"per_host_concurrency {r['per_host']}")  # fmt: skip
    print(f"  {r['repos']} repos indexed, {r['failed']} failed, {r['files']} files in {r['seconds']:.1f} s: "
          f"{rate:.1f} files/s; {r['bytes'] / 1e9:.2f} GB in {r['requests']} data requests "
          f"({r['bytes'] / max(r['files'], 1) / 1e6:.2f} MB/file, {r['requests'] / max(r['files'], 1):.2f} "
          f"requests/file); {r['sibling_reads']} sibling reads, {r['fallbacks']} fallbacks")  # fmt: skip
    print(f"  crawling process: {r['cpu'] / max(r['files'], 1) * 1e3:.1f} ms CPU per file "
          f"({r['cpu'] / r['seconds']:.0%} of a core), peak RSS {r['rss_mb']:.0f} MB; the fake hub's process: "
          f"{hub_cpu / max(r['files'], 1) * 1e3:.1f} ms CPU per file ({hub_cpu / r['seconds']:.0%} of a core)")  # fmt: skip
    # Every file costs one request to the hub itself (its /resolve/ answer redirects to the
    # CDN) and its data requests to the CDN, each taking `latency`; at most
    # per_host_concurrency of them are in flight on each host.
    per_s, per_file = r["per_host"] / latency, max(r["requests"] / max(r["files"], 1), 1e-9)
    print(f"  ceiling of per_host_concurrency {r['per_host']} at {latency * 1000:.0f} ms a request: "
          f"{per_s:.0f} requests/s a host, so at most {per_s:.0f} files/s by the hub (one request a file) "
          f"and {per_s / per_file:.0f} by the CDN ({per_file:.2f} requests a file)")  # fmt: skip
    if not reuse or informational:
        return True  # informational: the targets are the default settings'
    ok_rate, ok_rss = rate >= FILES_PER_S_TARGET, r["rss_mb"] < RSS_TARGET_MB
    print(
        f"  target files/s >= {FILES_PER_S_TARGET:.0f}{'':<22} {rate:<24.1f} {'met' if ok_rate else 'MISSED'}"
    )
    print(
        f"  target peak RSS < {RSS_TARGET_MB:.0f} MB{'':<20} {r['rss_mb']:<24.0f} {'met' if ok_rss else 'MISSED'}"
    )
    return ok_rate and ok_rss


def _workers_mode(args: argparse.Namespace) -> int:
    from bench import crawl_workers

    repos = args.repos if args.repos != DEFAULT_REPOS else 60  # a few minutes for three runs
    proc, endpoint = start_hub(repos, args.latency)
    try:
        counts = [int(n) for n in args.workers.split(",")]
        crawl_workers.run(endpoint, counts, args.concurrency or 4, args.latency)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--repos",
        type=int,
        default=DEFAULT_REPOS,
        help="multi-quant repos to crawl in part 2 (8 to 24 quants each)",
    )
    p.add_argument("--latency", type=float, default=0.05, help="seconds the fake hub adds to every request")
    p.add_argument(
        "--concurrency", type=int, help="crawl_concurrency for part 2 (default: the setting's default)"
    )
    p.add_argument("--per-host-concurrency", type=int,
                   help="per_host_concurrency for part 2 (default: the setting's default)")  # fmt: skip
    p.add_argument("--skip-crawl", action="store_true", help="part 1 only")
    p.add_argument("--per-host-too", type=int, metavar="N",
                   help="also crawl part 2's repos with per_host_concurrency N (informational)")  # fmt: skip
    p.add_argument("--reuse-off-too", action="store_true",
                   help="also crawl part 2's repos with hub.sibling_reuse off (informational)")  # fmt: skip
    p.add_argument("--project", nargs=3, type=float, metavar=("REPOS", "FILES", "RATE"),
                   help="after part 1 (part 2 skipped): what crawling a hub of REPOS repos and FILES GGUF files "
                   "would cost at RATE requests per second")  # fmt: skip
    p.add_argument("--project-workers", type=int, default=8, metavar="N",
                   help="crawler processes the projection spreads the CPU over (default 8)")  # fmt: skip
    p.add_argument("--workers", metavar="N,...",
                   help="instead: the distributed crawl with these numbers of `registry worker` processes on "
                   "PostgreSQL (e.g. 1,2,4; $REGISTRY_TEST_POSTGRES_URL; --repos defaults to 60 there)")  # fmt: skip
    p.add_argument("--child", metavar="ENDPOINT", help=argparse.SUPPRESS)
    p.add_argument("--reuse-off", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        result = asyncio.run(
            _crawl_child(
                args.child, args.repos, args.concurrency, args.per_host_concurrency, not args.reuse_off
            )
        )
        print(json.dumps(result))
        return 0
    if args.workers:
        return _workers_mode(args)
    proc, endpoint = start_hub(args.repos, args.latency)
    try:
        ok, totals = asyncio.run(part1(endpoint))
        if args.project:
            repos, files, rate = args.project
            project(totals, int(repos), int(files), rate, args.project_workers)
        elif not args.skip_crawl:
            per_host = args.per_host_concurrency
            ok = part2(endpoint, args.repos, args.latency, args.concurrency, per_host, hub_pid=proc.pid) and ok
            if args.per_host_too:
                part2(endpoint, args.repos, args.latency, args.concurrency, args.per_host_too, hub_pid=proc.pid,
                      informational=True)  # fmt: skip
            if args.reuse_off_too:
                part2(endpoint, args.repos, args.latency, args.concurrency, per_host, reuse=False, hub_pid=proc.pid)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    print("\nall targets met" if ok else "\nsome targets MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    raise SystemExit(main())
