"""`registry crawl`, `serve`, `worker` and `jobs`: the long-running parts and their jobs."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from registry import heap
from registry.cli.common import (
    EXIT_ERROR,
    EXIT_OK,
    EXIT_USAGE,
    INT64_MAX,
    Handler,
    Subcommands,
    add_param,
    catalog_call,
    int_in,
    parser_limits,
)
from registry.config import Settings


def add_crawl(sub: Subcommands) -> tuple[str, Handler]:
    p = sub.add_parser(
        "crawl",
        help="crawl a hub: index the headers of every changed GGUF repo",
        description="List GGUF repos on the hub (or take the REPO ids given), and for each one whose "
        "revision changed since the last crawl read every GGUF file's header by range requests and index it. "
        "One failing repo is recorded and the crawl goes on. Creates or migrates the database when needed. "
        "Exit status: 0 when the crawl finished, 1 when it failed (e.g. the listing could not be read) or was "
        "cancelled (--cancel, POST /v1/crawls/{id}/cancel).",
    )
    p.add_argument("repos", nargs="*", type=_repo_id, metavar="REPO",
                   help="org/name ids to look at instead of the hub's listing (each looked up, whatever its "
                   "revision: a repo the hub moved or deleted is recorded so)")  # fmt: skip
    p.add_argument("--endpoint", metavar="URL", help="hub to crawl for this run (default: hub.endpoint)")
    p.add_argument("--search", metavar="Q", help="only repos matching the hub's search term")
    p.add_argument("--author", metavar="A", help="only repos of this user or organization")
    p.add_argument("--limit", type=int_in(1, INT64_MAX), metavar="N", help="look at most at N repos")
    p.add_argument("--full", action="store_true",
                   help="re-read repos whose revision did not change (those an older release wrote are re-read without it)")  # fmt: skip
    p.add_argument("--cancel", type=int_in(1, INT64_MAX), metavar="ID",
                   help="cancel crawl ID instead, whoever runs it (registry serve, a worker, another registry "
                   "crawl): it reads no more repos, and what it wrote stays. Exit status 0 when it is cancelled, "
                   "1 when it had already ended or there is no such crawl")  # fmt: skip
    p.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    return "crawl", _cmd_crawl


def _cancel_crawl(args: argparse.Namespace, settings: Settings) -> int:
    from registry.catalog import crawls
    from registry.catalog.db import Database
    from registry.responses import Crawl, encode_text

    async def work() -> int:
        async with Database.from_settings(settings) as db, db.sessions() as session, session.begin():
            row = await crawls.cancel_crawl(session, args.cancel)
            if row is None:
                print(f"registry: crawl: no crawl with id {args.cancel}", file=sys.stderr)
                return EXIT_ERROR
            body = Crawl.from_row(row)
        status, counters = body.status, body.counters
        if args.json:  # as POST /v1/crawls/{id}/cancel answers
            print(encode_text(body))
        elif status == "cancelled":
            pending = counters.get("pending")
            print(f"crawl {args.cancel} cancelled" + (f" ({pending} repo jobs still to end)" if pending else ""))
        else:
            print(f"registry: crawl: crawl {args.cancel} has already ended: {status}", file=sys.stderr)
        return EXIT_OK if status == "cancelled" else EXIT_ERROR

    return catalog_call("crawl", work)


def _cmd_crawl(args: argparse.Namespace, settings: Settings) -> int:
    import dataclasses

    from registry.catalog.db import Database
    from registry.catalog.models import Crawl as CrawlRow
    from registry.responses import Crawl, encode_text
    from workers.crawl import CrawlParams, crawl_from_settings

    if args.cancel is not None:
        if args.repos or args.author or args.search or args.limit or args.full or args.endpoint:
            print("registry: crawl: --cancel ID takes no REPO ids and no other crawl options", file=sys.stderr)
            return EXIT_USAGE
        return _cancel_crawl(args, settings)
    hub = settings.hub
    other_hub = bool(args.endpoint) and args.endpoint.rstrip("/") != hub.endpoint.rstrip("/")
    if other_hub:
        # The configured token belongs to the configured hub: never hand it to another host.
        hub = dataclasses.replace(hub, endpoint=args.endpoint.rstrip("/"), token="")
    # Another hub's answers say nothing of the repos the catalog has from the configured one.
    if args.repos and (args.author or args.search):
        print("registry: crawl: name REPO ids or filter the listing (--author, --search), not both", file=sys.stderr)
        return EXIT_USAGE
    params = CrawlParams(repos=tuple(args.repos), author=args.author, search=args.search, limit=args.limit,
                         full=args.full, prune=not other_hub)  # fmt: skip
    progress = _CrawlProgress(sys.stderr)

    async def work() -> int:
        async with Database.from_settings(settings) as db:
            heap.settle()
            report = await crawl_from_settings(db, hub, params, limits=parser_limits(settings), progress=progress)
            async with db.sessions() as session:
                row = await session.get(CrawlRow, report.crawl_id)
        progress.close()
        if row is None:  # the crawl's own row: gone only if someone deleted it meanwhile
            print(f"registry: crawl: crawl {report.crawl_id} has no row", file=sys.stderr)
            return EXIT_ERROR
        body = Crawl.from_row(row)  # as GET /v1/crawls/{id} answers
        print(encode_text(body) if args.json else _crawl_summary(body, hub.endpoint))
        return EXIT_OK if body.status == "finished" else EXIT_ERROR

    return catalog_call("crawl", work)


class _CrawlProgress:
    """A one-line live display on a terminal; on a pipe, a plain line at most every 10 s."""

    def __init__(self, stream: Any) -> None:
        import time

        self.stream = stream
        self.tty = bool(getattr(stream, "isatty", lambda: False)())
        self.clock = time.monotonic
        self.start = self.last = self.clock()
        self.shown = False

    def __call__(self, r: Any) -> None:
        now = self.clock()
        if now - self.last < (0.2 if self.tty else 10.0):
            return
        self.last = now
        rate = r.files / max(now - self.start, 1e-9)
        line = (f"repos {r.listed} seen, {r.indexed} indexed, {r.unchanged} unchanged, {r.failed} failed | "
                f"files {r.files} ({rate:.1f}/s) | {r.bytes_fetched / 1e6:.1f} MB in {r.requests} requests")  # fmt: skip
        if self.tty:
            self.stream.write("\r\x1b[K" + line[:200])
            self.shown = True
        else:
            self.stream.write(f"registry: crawl: {line}\n")
        self.stream.flush()

    def close(self) -> None:
        if self.shown:
            self.stream.write("\r\x1b[K")
            self.stream.flush()


def _crawl_summary(crawl: Any, endpoint: str) -> str:
    """A hub crawl's `responses.Crawl` for people."""
    c = crawl.counters
    lines = [
        f"crawl {crawl.id} {crawl.status} ({endpoint})",
        f"  repos:     {c['listed']} seen, {c['indexed']} indexed, "
        + (f"{c['rederived']} of them at the same revision (an older release wrote them), "
           if c.get("rederived") else "")
        + f"{c['unchanged']} unchanged, "
        + (f"{c['deleted']} deleted (the hub no longer has them), " if c.get("deleted") else "")
        + (f"{c['moved']} moved (the hub has them under another id), " if c.get("moved") else "")
        + (f"{c['not_gguf']} without a GGUF file (not catalogued), " if c.get("not_gguf") else "")
        + (f"{c['cancelled']} not read (the crawl was cancelled), " if c.get("cancelled") else "")
        + f"{c['failed']} failed",
        f"  artifacts: {c['artifacts']} read, {c['artifact_errors']} with errors; {c['files']} files"
        + (f", {c['sibling_reads']} read from a sibling's header" if c.get("sibling_reads") else "")
        + (f", {c['sibling_fallbacks']} sibling reads not trusted (read in full)" if c.get("sibling_fallbacks")
           else ""),
        f"  transfer:  {c['bytes_fetched']:,} bytes in {c['requests']} requests",
    ]
    lines += [
        f"  error: {e['repo']}{'/' + e['path'] if e['path'] else ''}: {e['error']}" for e in crawl.errors
    ]
    return "\n".join(lines)


def add_serve(sub: Subcommands) -> tuple[str, Handler]:
    p = sub.add_parser(
        "serve",
        help="run the REST API (embedded mode: with the job pool and the crawl schedule)",
        description="Serve the catalog API until SIGINT/SIGTERM. With jobs.mode = embedded, crawls and "
        "verifications posted to the API run in this process's job pool and [schedule] crawl runs them "
        "periodically; with jobs.mode = distributed the API only queues them for `registry worker`. A SQLite "
        "database is created or migrated at start; PostgreSQL must already be at the current schema "
        "(`registry db upgrade`).",
    )
    p.add_argument("--host", help="address to listen on (default: api.host)")
    p.add_argument("--port", type=int_in(0, 65535), help="TCP port (default: api.port; 0 picks a free one)")
    p.add_argument("--workers", type=_positive_int, default=1, metavar="N",
                   help="processes answering on the one port (SO_REUSEPORT), e.g. the number of cores; "
                   "background jobs run in the first only (default: 1)")  # fmt: skip
    # Internal: how the first process starts the other N-1 (see registry/api/serve.py).
    p.add_argument("--replica", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--shares", type=_shares, help=argparse.SUPPRESS)  # SLOT:FILE (registry.api.balance)
    return "serve", _cmd_serve


def _shares(text: str) -> tuple[str, int]:
    slot, sep, path = text.partition(":")
    if not sep or not slot.isdigit() or not path:
        raise argparse.ArgumentTypeError(f"expected SLOT:FILE, got {text!r}")
    return path, int(slot)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, got {text!r}")
    return value


def _repo_id(text: str) -> str:
    """An org/name hub repo id, as the API's crawl requests take them."""
    from registry.api.bodies import REPO_ID

    if not REPO_ID.fullmatch(text):
        raise argparse.ArgumentTypeError(f"not an org/name repo id: {text!r}")
    return text


def _cmd_serve(args: argparse.Namespace, settings: Settings) -> int:
    import logging

    from registry.api.serve import serve
    from workers.runtime import JobsConfigError, check_mode, serve_jobs
    from workers.schedule import ScheduleError, parse_schedule

    try:
        parse_schedule(settings.schedule.crawl)
        check_mode(settings)
    except (ScheduleError, JobsConfigError) as exc:
        print(f"registry: serve: configuration error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx2").setLevel(logging.WARNING)  # one line per hub API call drowns the rest

    async def work() -> int:
        # Embedded: the job pool and the crawl schedule run in this process, jobs kept in the
        # catalog so a restart resumes them. Distributed: the API only enqueues.
        async with serve_jobs(settings) as jobs:
            await serve(settings, args.host, args.port, launcher=jobs.launcher, verifier=jobs.verifier,
                        job_queue=jobs.queue, background=jobs.background,
                        workers=args.workers, replica=args.replica, config=args.config,
                        shares=args.shares)  # fmt: skip
        return EXIT_OK

    return catalog_call("serve", work)


def add_worker(sub: Subcommands) -> tuple[str, Handler]:
    p = sub.add_parser(
        "worker",
        help="run distributed jobs (crawl, index, verify) from the PostgreSQL queue",
        description="Take jobs from procrastinate's PostgreSQL queue until SIGINT/SIGTERM: crawls, per-repo "
        "indexing and verifications, and the periodic crawl of [schedule] crawl. Needs jobs.mode = "
        "distributed and a PostgreSQL database.url; run `registry db upgrade` first.",
    )
    p.add_argument("--queues", metavar="Q,...", help="comma-separated queues (default: jobs.queues)")
    p.add_argument("--concurrency", type=_positive_int, metavar="N", help="jobs at once (default: jobs.concurrency)")
    return "worker", _cmd_worker


def _cmd_worker(args: argparse.Namespace, settings: Settings) -> int:
    import logging

    from workers.runtime import JobsConfigError, check_mode
    from workers.schedule import ScheduleError

    try:
        if check_mode(settings) != "distributed":
            raise JobsConfigError("`registry worker` needs jobs.mode = distributed (embedded jobs run in serve)")
        from workers.queue_procrastinate import build_app, run_worker

        build_app(settings)  # refuses a schedule procrastinate cannot run before anything starts
    except (ScheduleError, JobsConfigError, ValueError) as exc:
        print(f"registry: worker: configuration error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    queues = [q.strip() for q in (args.queues or settings.jobs.queues).split(",") if q.strip()]
    concurrency = args.concurrency or settings.jobs.concurrency

    async def work() -> int:
        heap.settle()
        await run_worker(settings, queues, concurrency)
        return EXIT_OK

    return catalog_call("worker", work)


def add_jobs(sub: Subcommands) -> tuple[str, Handler]:
    from registry.responses.params import job_list_params

    p = sub.add_parser("jobs", help="list jobs: queued, running, failed and done (either mode)",
                       description="List crawl, index_repo and verify jobs, newest first, as GET /v1/jobs does.")  # fmt: skip
    declared = job_list_params(JOBS_MAX_LIMIT)
    for param in declared:
        add_param(p, param, {q.name for q in declared})
    p.add_argument("--json", action="store_true", help='print the page as the API answers it: {"items": [...], '
                   '"next": cursor-or-null, "limit": N}')  # fmt: skip
    return "jobs", _cmd_jobs


# The most jobs a page of the command lists: it reads the queue itself, not through a
# server's api.max_limit.
JOBS_MAX_LIMIT = 1000


def _cmd_jobs(args: argparse.Namespace, settings: Settings) -> int:
    from registry.api.errors import ApiError
    from registry.api.routes.jobs import jobs_page
    from registry.catalog.db import Database
    from registry.responses import encode_text
    from workers.runtime import JobsConfigError, open_queue
    from workers.schedule import ScheduleError

    async def work() -> int:
        async with Database.from_settings(settings) as db, open_queue(settings, db) as queue:
            page = await jobs_page(queue, status=args.status, limit=args.limit, cursor=args.cursor)
        if args.json:
            print(encode_text(page))
            return EXIT_OK
        for j in page.items:
            target = ", ".join(f"{k}={v}" for k, v in j.args.items() if v is not None)
            print(f"{j.id:>8}  {j.status:<8} {j.kind:<10} {j.queue:<7} attempts {j.attempts}  {target}"
                  + (f"  ({j.error})" if j.error else ""))  # fmt: skip
        if not page.items:
            print("no jobs", file=sys.stderr)
        if page.next:
            print(f"more: --cursor {page.next}")
        return EXIT_OK

    try:
        return catalog_call("jobs", work)
    except (JobsConfigError, ScheduleError) as exc:
        print(f"registry: jobs: configuration error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except ApiError as exc:  # a malformed cursor
        print(f"registry: jobs: {exc.message}", file=sys.stderr)
        return EXIT_USAGE
