"""`registry serve`: run the API until SIGINT or SIGTERM, then shut down gracefully.

On a signal the listening socket closes first, requests in flight get up to
`SHUTDOWN_GRACE_S` to finish, then the app's cleanup runs and the engine is disposed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Callable, Coroutine, Iterator, Sequence
from typing import Any

from aiohttp import web

from registry.api.app import create_app
from registry.api.launchers import CrawlLauncher, Verifier
from registry.catalog import migrate
from registry.catalog.db import Database
from registry.config import Settings

log = logging.getLogger("registry.api")

SHUTDOWN_GRACE_S = 30.0


async def serve(
    settings: Settings,
    host: str | None = None,
    port: int | None = None,
    *,
    launcher: CrawlLauncher | None = None,
    verifier: Verifier | None = None,
    listening: asyncio.Future[int] | None = None,
    stop: asyncio.Event | None = None,
    background: Sequence[Callable[[], Coroutine[Any, Any, object]]] = (),
) -> None:
    """Serve until a signal (or `stop`, for tests and embedding) asks to stop.

    `host`/`port` default to `api.host`/`api.port`; port 0 picks a free port, which
    `listening` receives once the socket accepts connections. Each of `background` (the
    crawl scheduler) runs as a task from then on and is cancelled at shutdown."""
    db = Database.from_settings(settings)
    if db.dialect == "sqlite":
        # Embedded mode is one command on one machine: create or migrate the file database
        # as `registry index` does. PostgreSQL deployments migrate as a separate step.
        await migrate.ensure_schema(db.engine)
    app = create_app(settings, db.sessions, launcher=launcher, verifier=verifier)
    # access_log=None: the observe middleware writes the structured access log.
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=SHUTDOWN_GRACE_S)
    stop = stop or asyncio.Event()
    tasks: list[asyncio.Task[object]] = []
    try:
        await runner.setup()
        site = web.TCPSite(runner, host or settings.api.host, settings.api.port if port is None else port)
        await site.start()
        log.info("listening on %s", ", ".join(str(a) for a in runner.addresses))
        if listening is not None and not listening.done():
            listening.set_result(int(runner.addresses[0][1]))
        tasks = [asyncio.create_task(job()) for job in background]
        with _signals_set(stop):
            await stop.wait()
        log.info("shutting down: finishing requests in flight")
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await runner.cleanup()  # stops listening, waits for handlers, runs on_cleanup
        await db.dispose()


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
