"""Several byte ranges of one remote file in one request (`multipart/byteranges`).

A sibling header read asks for its first bytes, the bytes between the leader's large
arrays, samples inside those arrays and its tail at once. The answer is read whole,
never more than what was asked for plus a bounded allowance for the part headers (a hostile
or broken server cannot make it buffer without bound), and split by each part's own
Content-Range (`split_byteranges`).

A server that answers such a request with one range, or with the whole file (200), does
not support multi-range requests: `NoMultiRange` says so and the caller reads the file in
full instead. One range asked for is an ordinary 206.
"""

from __future__ import annotations

import builtins
import email.message
import re
from collections.abc import Sequence
from dataclasses import dataclass

import aiohttp

from registry.hub.errors import FileChanged, HubError, InvalidResponse
from registry.hub.http import FileRead, HubHttp, transport_error

_CONTENT_RANGE = re.compile(r"^bytes (\d+)-(\d+)/(\d+|\*)$")
_CHUNK = 64 * 1024
# Per part: the boundary line and the part's Content-Type and Content-Range headers.
_PART_OVERHEAD = 512
MAX_RANGES = 128  # some servers refuse more ranges in one header (the fake hub: 200)


class NoMultiRange(HubError):
    """The server answered a multi-range request with one range or the whole file."""

    code = "no_multirange"


@dataclass
class RangeAnswer:
    """The bytes received, by the start offset of each range received."""

    parts: dict[int, builtins.bytes]
    file_size: int
    etag: str | None
    bytes: int  # body bytes received, part headers included
    requests: int
    final_url: str

    def slice(self, start: int, end: int) -> builtins.bytes | None:
        """The bytes [start, end) if one received range holds them all."""
        data = self.parts.get(start)  # most often asked: a range as it was received
        if data is not None and end - start <= len(data):
            return data[: end - start]
        for at, data in self.parts.items():
            if at <= start and end <= at + len(data):
                return data[start - at : end - at]
        return None


def merge(ranges: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """Sorted ranges with overlapping and touching ones joined; empty ones dropped."""
    out: list[tuple[int, int]] = []
    for start, end in sorted(r for r in ranges if r[1] > r[0]):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


async def fetch_ranges(
    client: HubHttp,
    url: str,
    ranges: Sequence[tuple[int, int]],
    *,
    etag: str | None = None,
    final_url: str | None = None,
    expected_size: int | None = None,
) -> RangeAnswer:
    """GET the byte ranges [start, end) of `url` in one request (retried as any range read).

    With `etag`, the request carries If-Range: a file that changed answers 200, which is
    `FileChanged`. `final_url` (a CDN URL an earlier request was redirected to) saves the
    hub a request.
    """
    wanted = merge(ranges)
    if not wanted or len(wanted) > MAX_RANGES:
        raise ValueError(f"between 1 and {MAX_RANGES} ranges, got {len(wanted)}")
    f = FileRead(url=url, final=final_url or url, expected_size=expected_size, etag=etag)
    answer = RangeAnswer({}, 0, etag, 0, 0, url)

    async def once() -> None:
        answer.parts.clear()
        await _request(client, f, wanted, answer)

    await client.with_retries(f, once)
    answer.requests = f.requests
    answer.bytes = f.bytes
    answer.final_url = f.final
    return answer


async def _request(client: HubHttp, f: FileRead, wanted: list[tuple[int, int]], answer: RangeAnswer) -> None:
    spec = ",".join(f"{s}-{e - 1}" for s, e in wanted)
    headers = {"Range": f"bytes={spec}", "Accept-Encoding": "identity"}
    if f.etag is not None and not f.etag.startswith("W/"):
        headers["If-Range"] = f.etag
    resp, release = await client.open_response(f, headers)
    done = False
    try:
        f.requests += 1
        etag = resp.headers.get("ETag")
        if resp.status == 200:
            if (f.etag is not None and etag == f.etag) or f.etag is None:
                raise NoMultiRange("the server sent the whole file for a range request", url=f.final)
            raise FileChanged(f"ETag changed from {f.etag} to {etag} between reads", url=f.url, status=200)
        if resp.status != 206:
            raise client.status_error(resp, f.final)
        if f.etag is not None and etag != f.etag:
            raise FileChanged(f"ETag changed from {f.etag} to {etag} between reads", url=f.url, status=206)
        answer.etag = etag
        budget = sum(e - s for s, e in wanted) + _PART_OVERHEAD * len(wanted)
        content_type = resp.headers.get("Content-Type", "")
        if content_type.lower().startswith("multipart/byteranges"):
            await _read_multipart(resp, f, answer, budget)
        else:
            start, last, size = _content_range(resp.headers.get("Content-Range", ""), f.final)
            if len(wanted) > 1 and not (start <= wanted[0][0] and wanted[-1][1] <= last + 1):
                raise NoMultiRange("the server answered several ranges with one", url=f.final)
            answer.file_size = size
            answer.parts[start] = await _read_capped(resp.content, last + 1 - start, budget, f)
        if f.expected_size is not None and answer.file_size != f.expected_size:
            raise FileChanged(
                f"the server reports {answer.file_size} bytes, the hub lists {f.expected_size}", url=f.url
            )
        done = True
    except (TimeoutError, aiohttp.ClientError) as exc:
        raise transport_error(exc, f.final) from exc
    finally:
        if done:
            resp.release()
        else:
            resp.close()  # drops the connection: a whole file sent instead of ranges is never read
        release()


async def _read_multipart(resp: aiohttp.ClientResponse, f: FileRead, answer: RangeAnswer, budget: int) -> None:
    """Read a byteranges body whole (never more than `budget` bytes) and split it."""
    message = email.message.Message()
    message["Content-Type"] = resp.headers.get("Content-Type", "")
    boundary = message.get_param("boundary")
    if not isinstance(boundary, str) or not boundary:
        raise InvalidResponse("a byteranges answer without a boundary", url=f.final, status=206)
    body = bytearray()
    while chunk := await resp.content.read(min(_CHUNK, budget + 1 - len(body))):
        body += chunk
        if len(body) > budget:
            raise InvalidResponse("a byteranges answer longer than the ranges asked for", url=f.final)
    f.bytes += len(body)
    answer.parts, answer.file_size = split_byteranges(bytes(body), boundary.encode("latin-1"), f.final)


def split_byteranges(body: bytes, boundary: bytes, url: str) -> tuple[dict[int, bytes], int]:
    """The parts of a `multipart/byteranges` body by start offset, and the file size.

    Each part's length is taken from its own Content-Range and the delimiter must follow
    right after it (RFC 2046 section 5.1.1, RFC 7233 appendix A), so no data byte is searched
    for the boundary and a body that disagrees with itself is refused. A preamble, transport
    padding after a delimiter and an epilogue are allowed, as the RFCs allow them. A sibling
    read asks for dozens of small parts: splitting one buffer costs far less CPU than a
    streaming multipart reader's per-part line reads.
    """
    delimiter = b"--" + boundary
    pos = body.find(delimiter)
    parts: dict[int, bytes] = {}
    sizes: set[int] = set()
    while pos >= 0:
        pos += len(delimiter)
        if body.startswith(b"--", pos):  # the close delimiter: the rest is an epilogue
            break
        line_end = body.find(b"\r\n", pos)
        heads_end = body.find(b"\r\n\r\n", pos)
        if line_end < 0 or heads_end < 0 or body[pos:line_end].strip(b" \t"):
            raise InvalidResponse("a byteranges part without a header block", url=url, status=206)
        content_range = ""
        for line in body[line_end + 2 : heads_end].split(b"\r\n"):
            name, _, value = line.decode("latin-1").partition(":")
            if name.strip().lower() == "content-range":
                content_range = value.strip()
        start, last, size = _content_range(content_range, url)
        sizes.add(size)
        data_start = heads_end + 4
        data_end = data_start + last + 1 - start
        if not body.startswith(b"\r\n" + delimiter, data_end):
            raise InvalidResponse(f"the part of the range {start}-{last} is not {last + 1 - start} bytes long",
                                  url=url, status=206)  # fmt: skip
        parts[start] = body[data_start:data_end]
        pos = data_end + 2
    else:
        raise InvalidResponse("a byteranges answer without its close delimiter", url=url, status=206)
    if len(sizes) != 1:
        raise InvalidResponse("a byteranges answer without parts or with two file sizes", url=url, status=206)
    return parts, sizes.pop()


async def _read_capped(content: aiohttp.StreamReader, want: int, budget: int, f: FileRead) -> bytes:
    if want > budget:
        raise NoMultiRange(f"the server answered with {want} bytes for {budget} asked", url=f.final)
    data = await content.read(want)  # at most `want`: never past what Content-Range says
    while len(data) < want:
        chunk = await content.read(want - len(data))
        if not chunk:
            raise InvalidResponse(f"got {len(data)} of {want} bytes", url=f.final, status=206)
        data += chunk
    f.bytes += len(data)
    return data


def _content_range(value: str, url: str) -> tuple[int, int, int]:
    m = _CONTENT_RANGE.match(value.strip())
    if m is None or m.group(3) == "*":
        raise InvalidResponse(f"bad Content-Range {value!r}", url=url, status=206)
    start, last, size = int(m.group(1)), int(m.group(2)), int(m.group(3))
    if last < start or last >= size:
        raise InvalidResponse(f"bad Content-Range {value!r}", url=url, status=206)
    return start, last, size
