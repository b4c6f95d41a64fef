"""The API on a real loopback socket, served from a thread of its own, for clients that call
it synchronously (schemathesis, a generated client)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from aiohttp import web

from registry.api import create_app
from registry.api.launchers import CrawlLauncher
from registry.catalog import migrate
from registry.catalog.db import Database
from registry.catalog.services import upsert_repo_snapshot
from tests.api.conftest import RowVerifier, settings_with
from tests.api.data import sample_catalog


class LiveServer:
    """The app over a migrated database at `url` holding the sample catalog, with the
    test token and webhook secret, `launcher` for crawls and a row-recording verifier."""

    def __init__(self, url: str, launcher: CrawlLauncher) -> None:
        self.url = url
        self.launcher = launcher
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.runner: web.AppRunner | None = None
        self.db: Database | None = None

    def _run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(60)

    async def _start(self) -> int:
        self.db = Database.from_url(self.url)
        await migrate.upgrade(self.db.engine)
        for snap in sample_catalog():
            async with self.db.sessions() as session, session.begin():
                await upsert_repo_snapshot(session, snap)
        app = create_app(settings_with(), self.db.sessions, launcher=self.launcher, verifier=RowVerifier(self.db))
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        return int(self.runner.addresses[0][1])

    async def _stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()
        if self.db is not None:
            await self.db.dispose()

    def start(self) -> str:
        self.thread.start()
        return f"http://127.0.0.1:{self._run(self._start())}"

    def stop(self) -> None:
        self._run(self._stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
