"""`serve`: listens, answers, and shuts down cleanly on a stop request or SIGTERM."""

from __future__ import annotations

import asyncio
import json
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


async def _raw(port: int, request: bytes) -> tuple[bytes, bytes]:
    """(status line and headers, body) of the answer to `request` sent as it is."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request)
    await writer.drain()
    answer = await asyncio.wait_for(reader.read(), 10)  # the server closes after an error
    writer.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    return head, body


@pytest.mark.parametrize(
    ("request_bytes", "message"),
    [
        (b"GET /v1/artifacts HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n", "Invalid header token"),
        (b"GET /v1/artifacts?q=" + b"a" * 9000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", "8190 bytes"),
        (b"GET /v1/artifacts HTTP/1.1\r\nHost: x\r\nX-Big: " + b"b" * 9000 + b"\r\n\r\n", "8190 bytes"),
        (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03 TLS hello\r\n\r\n", "HTTPS traffic"),
    ],
)
async def test_requests_the_http_parser_refuses_get_the_json_error_envelope(
    temp_databases: TempDatabases, request_bytes: bytes, message: str
) -> None:
    """README: every error has the body {"error": {...}}; also a request aiohttp's parser
    refuses before any route runs (it answered those in plain text)."""
    listening: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    stop = asyncio.Event()
    task = asyncio.create_task(
        serve(_settings(temp_databases.new_url("sqlite")), "127.0.0.1", 0, listening=listening, stop=stop)
    )
    try:
        port = await asyncio.wait_for(listening, 30)
        head, body = await _raw(port, request_bytes)
        assert head.split(b"\r\n")[0].split(b" ")[1] == b"400", head
        assert b"content-type: application/json" in head.lower(), head
        error = json.loads(body)["error"]
        assert error["code"] == "bad_request" and message.lower() in error["message"].lower(), error
        assert len(error["message"]) <= 200 and error["details"] == {}
        async with aiohttp.ClientSession() as session, session.get(f"http://127.0.0.1:{port}/healthz") as resp:
            assert resp.status == 200  # the server goes on answering
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)
