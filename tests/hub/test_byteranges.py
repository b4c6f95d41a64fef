"""Multi-range answers: the body splitter on hand-written bodies, and fetch_ranges over the
fake hub's real sockets, whose answers are laid out as nginx lays them out."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from registry.hub.errors import InvalidResponse
from registry.hub.http import HttpOptions, HubHttp
from registry.hub.ranges import NoMultiRange, fetch_ranges, split_byteranges
from tests.fakehub import FakeHub, Fault, ModelSpec
from tests.fakehub.corpus import Corpus, gguf_repo
from tests.fakehub.testing import TOKEN

B = b"THIS_STRING_SEPARATES"


def _part(start: int, data: bytes, size: int = 1000, name: bytes = b"Content-Range") -> bytes:
    return (b"\r\n--" + B + b"\r\nContent-Type: application/octet-stream\r\n" + name
            + f": bytes {start}-{start + len(data) - 1}/{size}\r\n\r\n".encode() + data)  # fmt: skip


def test_split_takes_each_part_by_its_content_range() -> None:
    # The data holds the delimiter itself: it is never searched for inside a part.
    tricky = b"\r\n--" + B + b"--\r\n"
    body = _part(0, b"abc") + _part(500, tricky) + b"\r\n--" + B + b"--\r\n"
    assert split_byteranges(body, B, "u") == ({0: b"abc", 500: tricky}, 1000)


def test_split_allows_preamble_padding_epilogue_and_any_header_case() -> None:
    body = (b"a preamble" + _part(7, b"xy", name=b"content-RANGE")[2:].replace(B + b"\r\n", B + b" \t\r\n", 1)
            + b"\r\n--" + B + b"--\r\nan epilogue")  # fmt: skip
    assert split_byteranges(body, B, "u") == ({7: b"xy"}, 1000)


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (_part(0, b"abc") + b"\r\n--" + B + b"--\r\n", None),
        (b"no boundary here", "close delimiter"),
        (_part(0, b"abc"), "not 3 bytes long"),  # no delimiter after the data
        (_part(0, b"abc")[:-1] + b"\r\n--" + B + b"--\r\n", "not 3 bytes long"),  # a byte short
        (_part(0, b"abc") + _part(9, b"d", size=2000) + b"\r\n--" + B + b"--\r\n", "two file sizes"),
        (_part(0, b"abc", name=b"X-Range") + b"\r\n--" + B + b"--\r\n", "Content-Range"),
        (b"\r\n--" + B + b"junk\r\n\r\n", "header block"),
        (b"--" + B + b"--\r\n", "without parts"),
    ],
)
def test_split_refuses_a_body_that_disagrees_with_itself(body: bytes, why: str | None) -> None:
    if why is None:
        assert split_byteranges(body, B, "u")[0] == {0: b"abc"}
        return
    with pytest.raises(InvalidResponse, match=why):
        split_byteranges(body, B, "u")


@pytest.fixture
async def hub() -> AsyncIterator[FakeHub]:
    corpus = Corpus([gguf_repo("a/tiny-GGUF", ModelSpec(name="Tiny"), quants=("Q8_0",))])
    async with FakeHub(corpus, tokens={TOKEN}) as h:
        yield h


async def test_fetch_ranges_over_a_real_socket(hub: FakeHub) -> None:
    blob = hub.corpus.repos["a/tiny-GGUF"].files[0].blob
    url = hub.resolve_url("a/tiny-GGUF", "tiny-Q8_0.gguf")
    wanted = [(0, 100), (4000, 5024), (blob.size - 64, blob.size), (100, 200)]  # 0-100 and 100-200 merge
    async with HubHttp(HttpOptions(endpoint=hub.endpoint)) as http:
        answer = await fetch_ranges(http, url, wanted, expected_size=blob.size)
    assert answer.parts == {0: blob.read(0, 200), 4000: blob.read(4000, 5024),
                            blob.size - 64: blob.read(blob.size - 64, blob.size)}  # fmt: skip
    assert answer.file_size == blob.size and answer.requests == 1
    cdn = hub.requests_to("cdn")
    assert answer.bytes == cdn[-1].bytes_sent  # the whole body, part headers included


async def test_a_whole_file_answer_is_no_multi_range(hub: FakeHub) -> None:
    hub.faults.add(Fault("no_multirange", multirange="whole", times=None))
    url = hub.resolve_url("a/tiny-GGUF", "tiny-Q8_0.gguf")
    async with HubHttp(HttpOptions(endpoint=hub.endpoint)) as http:
        with pytest.raises(NoMultiRange):
            await fetch_ranges(http, url, [(0, 10), (500, 510)])


async def test_a_body_longer_than_asked_is_cut_off() -> None:
    """A server that streams more than the ranges asked for is not read to its end."""

    async def endless(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(
            status=206, headers={"Content-Type": f"multipart/byteranges; boundary={B.decode()}"}
        )
        await resp.prepare(request)
        await resp.write(_part(0, b"x" * 10))
        for _ in range(1000):
            await resp.write(b"y" * 65536)
        return resp

    app = web.Application()
    app.router.add_get("/f", endless)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        async with HubHttp(HttpOptions(endpoint=f"http://127.0.0.1:{port}")) as http:
            with pytest.raises(InvalidResponse, match="longer than the ranges"):
                await fetch_ranges(http, f"http://127.0.0.1:{port}/f", [(0, 10), (500, 510)])
    finally:
        await runner.cleanup()
