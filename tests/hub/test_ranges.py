"""Multi-range answers from a server that misbehaves: a typed error, never an unbounded read."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import pytest
from aiohttp import web

from registry.hub.errors import InvalidResponse
from registry.hub.http import HttpOptions, HubHttp
from registry.hub.ranges import NoMultiRange, fetch_ranges
from tests.fakehub.testing import FAST_RETRY, Sleeps

SIZE = 1 << 20
Body = Callable[[str], bytes]


def _part(start: int, end: int, data: bytes) -> bytes:
    return (f"\r\n--B\r\nContent-Type: application/octet-stream\r\nContent-Range: bytes {start}-{end}/{SIZE}"
            "\r\n\r\n").encode() + data  # fmt: skip


@pytest.fixture
async def server() -> AsyncIterator[Callable[[bytes, dict[str, str], int], str]]:
    answers: dict[str, tuple[bytes, dict[str, str], int]] = {}

    async def handle(request: web.Request) -> web.StreamResponse:
        body, headers, status = answers[request.match_info["name"]]
        return web.Response(body=body, headers=headers, status=status)

    app = web.Application()
    app.router.add_get("/{name}", handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    def add(body: bytes, headers: dict[str, str], status: int = 206) -> str:
        name = f"f{len(answers)}"
        answers[name] = (body, headers, status)
        return f"http://127.0.0.1:{port}/{name}"

    yield add
    await runner.cleanup()


MULTI = {"Content-Type": "multipart/byteranges; boundary=B", "ETag": '"e"'}


async def test_a_well_formed_answer_is_read(server: Callable[..., str]) -> None:
    url = server(_part(0, 3, b"abcd") + _part(100, 101, b"xy") + b"\r\n--B--\r\n", MULTI)
    async with HubHttp(HttpOptions(retry=FAST_RETRY), sleep=Sleeps()) as http:
        answer = await fetch_ranges(http, url, [(0, 4), (100, 102)])
    assert answer.slice(0, 4) == b"abcd" and answer.slice(100, 102) == b"xy" and answer.file_size == SIZE


@pytest.mark.parametrize(
    ("body", "headers", "status", "error"),
    [
        # A part far longer than the ranges asked for.
        (_part(0, SIZE - 1, b"\0" * SIZE) + b"\r\n--B--\r\n", MULTI, 206, InvalidResponse),
        # A part shorter than its Content-Range says.
        (_part(0, 99, b"abc") + b"\r\n--B--\r\n", MULTI, 206, InvalidResponse),
        # No parts at all.
        (b"\r\n--B--\r\n", MULTI, 206, InvalidResponse),
        # One range for two: a server without multi-range support.
        (b"abcd", {"Content-Range": f"bytes 0-3/{SIZE}", "ETag": '"e"'}, 206, NoMultiRange),
        # The whole file.
        (b"\0" * 4096, {"ETag": '"e"'}, 200, NoMultiRange),
    ],
    ids=["part_too_long", "part_short", "no_parts", "one_range", "whole_file"],
)
async def test_a_bad_answer_is_a_typed_error(
    server: Callable[..., str], body: bytes, headers: dict[str, str], status: int, error: type[Exception]
) -> None:
    url = server(body, headers, status)
    async with HubHttp(HttpOptions(retry=FAST_RETRY), sleep=Sleeps()) as http:
        with pytest.raises(error):
            await fetch_ranges(http, url, [(0, 4), (100, 102)])
