"""`registry serve`: run the API until SIGINT or SIGTERM, then shut down gracefully.

On a signal the listening socket closes first, requests in flight get up to
`SHUTDOWN_GRACE_S` to finish, then the app's cleanup runs and the engine is disposed.

`--workers N` runs N processes on one port (SO_REUSEPORT: the kernel spreads connections
over them, and registry.api.balance evens out keep-alive ones), because one Python process
answers on one core. The first process is the primary: it migrates the SQLite file, runs
the `background` tasks (the embedded job pool, the crawl schedule) and starts the N-1
replicas as `registry serve --replica` on its port.
Replicas answer every route, writes included, but run no background task: a schedule
fires once, and a job a replica enqueues is run by the primary's pool (embedded mode) or
by the workers (distributed). SQLite in WAL mode takes several reader processes and
serialises writers with its busy timeout. Replicas stop with the primary, and stop by
themselves if it dies. The default is 1, the embedded product on a small machine; set it
to the number of cores for throughput.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Coroutine, Iterator, Sequence
from pathlib import Path
from typing import Any

from aiohttp import web
from aiohttp.web_protocol import RequestHandler
from aiohttp.web_request import BaseRequest

from registry import heap
from registry.api.app import create_app
from registry.api.balance import ConnectionShares
from registry.api.errors import error_response, status_code
from registry.api.keys import SHARES_KEY
from registry.api.launchers import CrawlLauncher, JobQueue, Verifier
from registry.catalog import migrate
from registry.catalog.db import Database
from registry.config import Settings

log = logging.getLogger("registry.api")

SHUTDOWN_GRACE_S = 30.0
PARENT_POLL_S = 1.0


# Each connection's handler options: access_log None, as the observe middleware writes the
# structured access log.
HANDLER_OPTIONS: dict[str, Any] = {"access_log": None}
LISTEN_BACKLOG = 128  # connections the kernel queues before accept, aiohttp's sites' default
PROTOCOL_ERROR_TEXT = 200  # characters of the parser's message kept (it quotes the request)


class _JsonErrorHandler(RequestHandler):
    """aiohttp answers a request it cannot parse (a bad header, a request line or header
    over 8,190 bytes) before any route or middleware runs, in plain text: here in the API's
    JSON error envelope too."""

    def handle_error(
        self, request: BaseRequest, status: int = 500, exc: BaseException | None = None, message: str | None = None
    ) -> web.StreamResponse:
        plain = super().handle_error(request, status, exc, message)  # logs; refuses a response begun
        text = (message or "").strip() or plain.reason or "error"
        resp = error_response(status, status_code(status), text[:PROTOCOL_ERROR_TEXT])
        resp.force_close()  # the request's bytes are not understood: nothing after them is either
        return resp


async def serve(
    settings: Settings,
    host: str | None = None,
    port: int | None = None,
    *,
    launcher: CrawlLauncher | None = None,
    verifier: Verifier | None = None,
    job_queue: JobQueue | None = None,
    listening: asyncio.Future[int] | None = None,
    stop: asyncio.Event | None = None,
    background: Sequence[Callable[[], Coroutine[Any, Any, object]]] = (),
    workers: int = 1,
    replica: bool = False,
    config: str | None = None,
    shares: tuple[str, int] | None = None,
) -> None:
    """Serve until a signal (or `stop`, for tests and embedding) asks to stop.

    `host`/`port` default to `api.host`/`api.port`; port 0 picks a free port, which
    `listening` receives once the socket accepts connections. Each of `background` (the
    crawl scheduler) runs as a task from then on and is cancelled at shutdown.

    `workers` > 1 starts that many processes in all (see the module doc); a `replica` is
    one of them, started by the primary: it skips `background` and the migration. Replicas
    load their settings as the primary did: from `config` (the `--config` file), else the
    inherited environment and the default file. `shares` is a replica's (file, slot) of
    the connection counts that keep keep-alive connections even over the processes
    (registry.api.balance)."""
    if workers < 1:
        raise ValueError("workers must be at least 1")
    db = Database.from_settings(settings)
    try:
        if db.dialect == "sqlite" and not replica:
            # Embedded mode is one command on one machine: create or migrate the file database
            # as `registry index` does. PostgreSQL deployments migrate as a separate step, and
            # a server on any other schema refuses to start instead of failing every request.
            await migrate.ensure_schema(db.engine)
        elif db.dialect != "sqlite":
            await migrate.require_schema(db.engine)
    except BaseException:
        await db.dispose()
        raise
    app = create_app(settings, db.sessions, launcher=launcher, verifier=verifier, jobs=job_queue)
    counts = None
    if workers > 1 and not replica:
        counts = ConnectionShares.create(workers)
    elif replica and shares is not None:
        counts = ConnectionShares.attach(Path(shares[0]), shares[1])
    if counts is not None:
        app[SHARES_KEY] = counts
    runner = web.AppRunner(app, shutdown_timeout=SHUTDOWN_GRACE_S, **HANDLER_OPTIONS)
    listener: asyncio.Server | None = None
    stop = stop or asyncio.Event()
    tasks: list[asyncio.Task[object]] = []
    replicas: list[subprocess.Popen[bytes]] = []
    host = host or settings.api.host
    try:
        await runner.setup()
        shared = workers > 1 or replica
        listener = await _listen(runner, host, settings.api.port if port is None else port, reuse_port=shared)
        addresses = [sock.getsockname() for sock in listener.sockets]
        bound = int(addresses[0][1])
        if counts is not None:
            server = runner.server
            counts.watch(lambda: len(server.connections) if server is not None else 0)
        # Full collections walking what start-up left alive made the slowest requests slow.
        heap.settle()
        log.info("listening on %s", ", ".join(str(a) for a in addresses))
        replicas = [
            _start_replica(host, bound, config, (str(counts.path), slot) if counts is not None else None)
            for slot in range(1, workers)
        ]
        if listening is not None and not listening.done():
            listening.set_result(bound)
        coros = [job() for job in background] if not replica else [_parent_gone(stop)]
        tasks = [asyncio.create_task(coro) for coro in coros]
        with _signals_set(stop):
            await stop.wait()
        log.info("shutting down: finishing requests in flight")
    finally:
        for proc in replicas:
            proc.terminate()  # SIGTERM: each finishes its own requests in flight
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if listener is not None:
            listener.close()  # no new connection; those open finish as the runner shuts down
        await runner.cleanup()  # waits for handlers in flight, runs on_cleanup
        await db.dispose()
        await asyncio.gather(*(asyncio.to_thread(_reap, proc) for proc in replicas))
        if counts is not None:
            counts.close()  # the primary's removes the file, after its replicas are gone


async def _listen(runner: web.AppRunner, host: str, port: int, *, reuse_port: bool) -> asyncio.Server:
    """Accept connections for the runner's application, each handled by a `_JsonErrorHandler`
    (a site would use aiohttp's plain-text one)."""
    server = runner.server
    if server is None:
        raise RuntimeError("the runner is not set up")
    loop = asyncio.get_running_loop()

    def handler() -> RequestHandler:
        return _JsonErrorHandler(server, loop=loop, **HANDLER_OPTIONS)

    return await loop.create_server(handler, host, port, backlog=LISTEN_BACKLOG, reuse_port=reuse_port or None)


def _start_replica(
    host: str, port: int, config: str | None, shares: tuple[str, int] | None
) -> subprocess.Popen[bytes]:
    """One more `registry serve` on the primary's port, with the primary's settings."""
    options = ["--config", config] if config else []
    argv = [sys.executable, "-m", "registry.cli", *options, "serve", "--host", host, "--port", str(port), "--replica"]
    if shares is not None:
        argv += ["--shares", f"{shares[1]}:{shares[0]}"]
    return subprocess.Popen(argv)


def _reap(proc: subprocess.Popen[bytes]) -> None:
    try:
        proc.wait(SHUTDOWN_GRACE_S + 5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


async def _parent_gone(stop: asyncio.Event) -> None:
    """A replica whose primary died (SIGKILL, OOM) stops rather than serve on alone."""
    parent = os.getppid()
    while os.getppid() == parent:
        await asyncio.sleep(PARENT_POLL_S)
    log.warning("primary process %d is gone: stopping", parent)
    stop.set()


@contextlib.contextmanager
def _signals_set(stop: asyncio.Event) -> Iterator[None]:
    loop = asyncio.get_running_loop()
    installed = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, stop.set)
            installed.append(sig)
        except (NotImplementedError, RuntimeError):  # pragma: no cover - not the main thread / Windows
            pass
    try:
        yield
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)
