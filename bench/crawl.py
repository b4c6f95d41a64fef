"""Header fetch cost side by side with the Hub's JS reader and gguf-parser-go, then crawl speed.

    python bench/crawl.py                     # both parts (a few minutes on 2 cores)
    python bench/crawl.py --repos 200         # a smaller crawl
    python bench/crawl.py --workers 1,2,4     # distributed: 1, 2, 4 worker processes (PostgreSQL)

Both parts run against one fake hub (tests/fakehub) in a separate process, so its memory
and CPU are not the crawler's; every request to it waits `--latency` (50 ms) first.

Part 1, bytes and requests per file, for the realistic header corpus (the two sample models,
a llama3-style 128k vocabulary with 280k merges, a qwen2-style 152k one, a projector, a
LoRA and a 4-shard split model), read three ways:
- ours: the crawler's reader (first window chosen from the file name and listed size, then
  one read sized by the parser's estimate);
- hf-js: @huggingface/gguf's documented strategy, sequential 2 MB (2,000,000-byte) range
  requests until the header parses;
- go: gguf-parser-go's, a HEAD for the size, then ranged reads in 4 MiB buffers.
Bytes are body bytes received. "data req" counts range GETs and HEADs; "http req" adds the
hub's 302 to the CDN, which ours follows once per file and the others (fetch and Go's
http.Client follow redirects on their own) on every request.

Part 2 crawls `--repos` synthetic repos (3 files each; the real vocabulary families, 32k to
262k tokens, so headers of 0.7 to 6.3 MB) into a fresh SQLite catalog in a child process and
reports files/s and that process's peak RSS (ru_maxrss). `--small-vocab-too` repeats it with
1k-2k token vocabularies, which separates the crawler's network and database work from the
cost of walking real vocabularies in the pure-Python parser.
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
from dataclasses import dataclass, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import aiohttp  # noqa: E402

from registry.gguf.errors import NeedMoreData  # noqa: E402
from registry.gguf.reader import parse_header  # noqa: E402

BYTES_TARGET = 1.3  # total bytes / sum of header sizes
REQUESTS_TARGET = 1.5  # data requests per file
FILES_PER_S_TARGET = 50.0
RSS_TARGET_MB = 400.0
HF_JS_CHUNK = 2 * 10**6  # HTTP_CHUNK_SIZE in @huggingface/gguf
GO_BUFFER = 4 * 1024 * 1024
DEFAULT_REPOS = 1000


@dataclass
class Cost:
    bytes: int = 0
    data_requests: int = 0
    http_requests: int = 0

    def add(self, other: Cost) -> None:
        self.bytes += other.bytes
        self.data_requests += other.data_requests
        self.http_requests += other.http_requests


# -- the fake hub in its own process --------------------------------------------------------


def start_hub(repos: int, latency: float, *, big_vocab: bool = True) -> tuple[subprocess.Popen[str], str]:
    cmd = [sys.executable, "-m", "tests.fakehub", "--port", "0", "--repos", str(repos), "--header-corpus",
           "--latency", str(latency)] + (["--big-vocab"] if big_vocab else [])  # fmt: skip
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()  # "fake hub http://127.0.0.1:N cdn ... repos N"
    if not line.startswith("fake hub "):
        proc.kill()
        raise SystemExit(f"fake hub did not start: {line!r}")
    return proc, line.split()[2]


# -- part 1: three strategies over the header corpus ----------------------------------------


async def _ours(endpoint: str, repo_id: str, files: list[tuple[str, int | None]]) -> tuple[Cost, int]:
    from registry.gguf.filename import group_shards
    from registry.hub.client import HubClient
    from registry.hub.http import HttpOptions, HubHttp, first_window_for

    client = HubClient(endpoint)
    sizes = dict(files)
    cost, header_bytes = Cost(), 0
    async with HubHttp(HttpOptions(endpoint=endpoint)) as http:
        info = await client.repo_info(repo_id)
        for group in group_shards(sizes):
            results = await asyncio.gather(*(
                http.fetch_header(
                    client.resolve_url(repo_id, info.sha, p),
                    first_window=first_window_for(p, split_no=i, size=sizes[p], first_window=http.options.first_window,
                                                  small_window=256 * 1024),
                )
                for i, p in enumerate(group.paths)
            ))  # fmt: skip
            for r in results:
                cost.add(Cost(r.bytes_fetched, r.requests, r.http_requests))
                header_bytes += r.header.data_offset
    return cost, header_bytes


async def _chunked(session: aiohttp.ClientSession, url: str, chunk: int, head: bool) -> Cost:
    """Sequential fixed-size range reads until the header parses (redirects followed each time)."""
    cost = Cost()
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
            return cost
        except NeedMoreData:
            if len(buf) >= size:
                raise


async def part1(endpoint: str) -> bool:
    from registry.hub.client import HubClient
    from tests.fakehub.corpus import header_corpus

    corpus = header_corpus()
    client = HubClient(endpoint)
    rows: list[tuple[str, int, int, Cost, Cost, Cost]] = []
    async with aiohttp.ClientSession(auto_decompress=False) as session:
        for repo in corpus:
            info = await client.repo_info(repo.repo_id)
            ggufs = [(f.path, f.size) for f in info.files if f.is_gguf]
            ours, header_total = await _ours(endpoint, repo.repo_id, ggufs)
            js, go = Cost(), Cost()
            for path, _ in ggufs:
                url = client.resolve_url(repo.repo_id, info.sha, path)
                js.add(await _chunked(session, url, HF_JS_CHUNK, head=False))
                go.add(await _chunked(session, url, GO_BUFFER, head=True))
            label = repo.repo_id.split("/", 1)[1] + (f" ({len(ggufs)} shards)" if len(ggufs) > 1 else "")
            rows.append((label, len(ggufs), header_total, ours, js, go))
    return _report1(rows)


def _report1(rows: list[tuple[str, int, int, Cost, Cost, Cost]]) -> bool:
    print(
        "Part 1: header fetch cost per strategy (bytes received / data requests / http requests incl. redirects)"
    )
    head = (
        f"{'file':<40} {'files':>5} {'header':>11} | {'ours':>24} | {'hf-js 2MB':>24} | {'go HEAD+4MiB':>24}"
    )
    print(head)
    print("-" * len(head))
    totals = [Cost(), Cost(), Cost()]
    files = headers = 0
    for label, n, header, *costs in rows:
        files += n
        headers += header
        cells = []
        for total, c in zip(totals, costs, strict=True):
            total.add(c)
            cells.append(f"{c.bytes:>12,} {c.data_requests:>4} {c.http_requests:>4}")
        print(f"{label[:40]:<40} {n:>5} {header:>11,} | " + " | ".join(f"{c:>24}" for c in cells))
    print("-" * len(head))
    print(f"{'total':<40} {files:>5} {headers:>11,} | "
          + " | ".join(f"{t.bytes:>12,} {t.data_requests:>4} {t.http_requests:>4}" for t in totals))  # fmt: skip
    ratios = [(t.bytes / headers, t.data_requests / files) for t in totals]
    for name, (b, r) in zip(("ours", "hf-js", "go"), ratios, strict=True):
        print(f"  {name:<6} bytes {b:.3f}x the header sizes, {r:.2f} data requests per file")
    (ob, orq), (jb, jrq), (gb, grq) = ratios
    checks = [
        (f"bytes <= {BYTES_TARGET}x headers", ob <= BYTES_TARGET, f"{ob:.3f}x"),
        (f"requests/file <= {REQUESTS_TARGET}", orq <= REQUESTS_TARGET, f"{orq:.2f}"),
        ("fewer bytes than both baselines", ob < min(jb, gb), f"{ob:.3f} vs {jb:.3f}, {gb:.3f}"),
        ("fewer requests than both baselines", orq < min(jrq, grq), f"{orq:.2f} vs {jrq:.2f}, {grq:.2f}"),
    ]
    for name, ok, value in checks:
        print(f"  target {name:<36} {value:<24} {'met' if ok else 'MISSED'}")
    return all(ok for _, ok, _ in checks)


# -- part 2: a 1,000-repo crawl in a child process -------------------------------------------


async def _crawl_child(endpoint: str, repos: int, concurrency: int | None) -> dict[str, float]:
    from registry.catalog.db import Database
    from registry.config import HubSettings
    from workers.crawl import CrawlParams, crawl_from_settings

    hub = HubSettings(endpoint=endpoint)
    if concurrency:
        hub = replace(hub, crawl_concurrency=concurrency)
    with tempfile.TemporaryDirectory() as tmp:
        db = Database.from_url(f"sqlite+aiosqlite:///{tmp}/catalog.db")
        start = time.perf_counter()
        # --search org: the synthetic repos only, not part 1's corpus.
        report = await crawl_from_settings(db, hub, CrawlParams(search=os.environ.get("BENCH_SEARCH", "org"), limit=repos))
        seconds = time.perf_counter() - start
        await db.dispose()
    rss_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    return {"files": report.files, "repos": report.indexed, "failed": report.failed, "seconds": seconds,
            "bytes": report.bytes_fetched, "requests": report.requests, "rss_mb": rss_kb / 1024,
            "concurrency": hub.crawl_concurrency}  # fmt: skip


def part2(endpoint: str, repos: int, latency: float, concurrency: int | None, *, label: str = "") -> bool:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", endpoint, "--repos", str(repos)]
    if concurrency:
        cmd += ["--concurrency", str(concurrency)]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        print(out.stderr[-3000:])
        raise SystemExit("crawl child failed")
    r = json.loads(out.stdout.strip().splitlines()[-1])
    rate = r["files"] / r["seconds"]
    print(f"\nPart 2{label}: crawl of {repos} synthetic repos, {latency * 1000:.0f} ms added per request, "
          f"crawl_concurrency {r['concurrency']}")  # fmt: skip
    print(f"  {r['repos']} repos indexed, {r['failed']} failed, {r['files']} files in {r['seconds']:.1f} s: "
          f"{rate:.1f} files/s; {r['bytes'] / 1e9:.2f} GB in {r['requests']} requests "
          f"({r['bytes'] / max(r['files'], 1) / 1e6:.2f} MB/file)")  # fmt: skip
    print(f"  peak RSS of the crawling process: {r['rss_mb']:.0f} MB")
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
        "--repos", type=int, default=DEFAULT_REPOS, help="synthetic repos to crawl in part 2 (3 files each)"
    )
    p.add_argument("--latency", type=float, default=0.05, help="seconds the fake hub adds to every request")
    p.add_argument(
        "--concurrency", type=int, help="crawl_concurrency for part 2 (default: the setting's default)"
    )
    p.add_argument("--skip-crawl", action="store_true", help="part 1 only")
    p.add_argument("--small-vocab-too", action="store_true",
                   help="also crawl the same number of repos with 1k-2k token vocabularies (informational: "
                   "shows what is network-bound and what is parse-bound)")  # fmt: skip
    p.add_argument("--workers", metavar="N,...",
                   help="instead: the distributed crawl with these numbers of `registry worker` processes on "
                   "PostgreSQL (e.g. 1,2,4; $REGISTRY_TEST_POSTGRES_URL; --repos defaults to 60 there)")  # fmt: skip
    p.add_argument("--child", metavar="ENDPOINT", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        print(json.dumps(asyncio.run(_crawl_child(args.child, args.repos, args.concurrency))))
        return 0
    if args.workers:
        return _workers_mode(args)
    proc, endpoint = start_hub(args.repos, args.latency)
    try:
        ok = asyncio.run(part1(endpoint))
        if not args.skip_crawl:
            ok = part2(endpoint, args.repos, args.latency, args.concurrency) and ok
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    if args.small_vocab_too and not args.skip_crawl:
        proc, endpoint = start_hub(args.repos, args.latency, big_vocab=False)
        try:
            part2(
                endpoint,
                args.repos,
                args.latency,
                args.concurrency,
                label=" (informational, 1k-2k token vocabularies)",
            )
        finally:
            proc.terminate()
            proc.wait(timeout=10)
    print("\nall targets met" if ok else "\nsome targets MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    raise SystemExit(main())
