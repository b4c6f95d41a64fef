"""`serve`: listens, answers, and shuts down cleanly on a stop request or SIGTERM."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap

import aiohttp
import pytest

from registry.api.serve import serve
from registry.config import DatabaseSettings, Settings
from tests.api.conftest import settings_with
from tests.catalog.conftest import TempDatabases


def _settings(url: str) -> Settings:
    return Settings(database=DatabaseSettings(url=url), api=settings_with().api)


async def test_serve_migrates_an_embedded_database_answers_and_stops(temp_databases: TempDatabases) -> None:
    listening: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    stop = asyncio.Event()
    fresh = temp_databases.new_url("sqlite")  # not migrated: serve does it
    task = asyncio.create_task(serve(_settings(fresh), "127.0.0.1", 0, listening=listening, stop=stop))
    port = await asyncio.wait_for(listening, 30)
    async with aiohttp.ClientSession() as session:
        async with session.get(f"http://127.0.0.1:{port}/readyz") as resp:
            assert resp.status == 200
            assert resp.headers["X-Request-Id"]
        async with session.get(f"http://127.0.0.1:{port}/v1/artifacts") as resp:
            assert resp.status == 200
            assert (await resp.json())["items"] == []
    stop.set()
    await asyncio.wait_for(task, 10)
    with pytest.raises(aiohttp.ClientConnectionError):
        async with aiohttp.ClientSession() as session, session.get(f"http://127.0.0.1:{port}/healthz"):
            pass


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_sigterm_shuts_down_gracefully(sqlite_url: str, tmp_path: object) -> None:
    script = textwrap.dedent(
        f"""
        import asyncio, sys
        from registry.api.serve import serve
        from registry.config import DatabaseSettings, Settings

        async def main():
            listening = asyncio.get_running_loop().create_future()
            settings = Settings(database=DatabaseSettings(url={sqlite_url!r}))
            task = asyncio.create_task(serve(settings, "127.0.0.1", 0, listening=listening))
            print(await listening, flush=True)
            await task
            print("stopped", flush=True)

        asyncio.run(main())
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline())
        assert port > 0
        os.kill(proc.pid, signal.SIGTERM)
        out, _ = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0
    assert out.strip() == "stopped"
