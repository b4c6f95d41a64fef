"""A fake Hugging Face Hub on loopback: the API HfApi uses, /resolve/ redirects and a CDN.

Two aiohttp apps on two loopback ports, so that "the hub" and "the CDN" are different
origins exactly as in production: `/resolve/` on the hub answers 302 to the CDN, which
serves bytes with Range support, multi-range requests included (206 `multipart/byteranges`).
Every request is recorded (headers, whether an Authorization header arrived, the range asked,
the ranges served, the bytes actually written) for tests to assert on, and `Faults` inject
latency, errors, resets, ignored ranges, no multi-range support, truncated or compressed
bodies, files changing between reads, listing links that loop or lead elsewhere and API
answers with a given body or a huge one.

    async with FakeHub(sample_corpus(), tokens={"hf_test"}) as hub:
        HfApi(endpoint=hub.endpoint, token="hf_test").model_info(...)
        hub.requests  # list[RequestRecord]
"""

from __future__ import annotations

import asyncio
import base64
import gzip
import itertools
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

from aiohttp import web

from tests.fakehub.corpus import Blob, Corpus, Repo
from tests.fakehub.faults import Fault, Faults

CHUNK = 256 * 1024
MAX_PAGE = 1000
_RANGE_SPEC = re.compile(r"^\s*(\d*)-(\d*)\s*$")
# Ranges in one request beyond which the server ignores the header and sends the whole file
# with 200, as Apache's MaxRanges (200 by default) does.
MAX_RANGES = 200


@dataclass
class RequestRecord:
    server: str  # "hub" or "cdn"
    route: str  # "api", "resolve" or "cdn"
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    repo: str = ""
    file: str = ""
    status: int = 0
    bytes_sent: int = 0
    faults: list[str] = field(default_factory=list)
    served: list[tuple[int, int]] = field(default_factory=list)  # (start, end exclusive) of each part

    @property
    def authorization(self) -> bool:
        return any(k.lower() == "authorization" for k in self.headers)

    @property
    def range(self) -> str | None:
        return next((v for k, v in self.headers.items() if k.lower() == "range"), None)


class FakeHub:
    def __init__(
        self,
        corpus: Corpus,
        *,
        faults: Faults | Iterable[Fault] | None = None,
        tokens: Iterable[str] = ("hf_test_token",),
        page_size: int = 100,
        max_page: int = MAX_PAGE,
        host: str = "127.0.0.1",
        port: int = 0,
        cdn_port: int = 0,
        record: bool = True,
    ) -> None:
        self.corpus = corpus
        self.faults = faults if isinstance(faults, Faults) else Faults(list(faults or []))
        self.tokens = set(tokens)
        self.page_size = page_size  # a listing page without a `limit`
        self.max_page = max_page  # the most one page holds, whatever `limit` asks (the Hub: 1000)
        self.host = host
        self._ports = (port, cdn_port)
        self.record = record
        self.requests: list[RequestRecord] = []
        self.endpoint = ""
        self.cdn_url = ""
        self._ids = itertools.count(1)
        self._versions: dict[str, int] = {}  # oid -> how many times a "change" fault rewrote it
        self._replaced: dict[str, Blob] = {}  # oid -> the bytes served for it since change_file
        self._runners: list[web.AppRunner] = []
        # Requests being handled now and the most at once, per server ("hub", "cdn").
        self.inflight: dict[str, int] = {"hub": 0, "cdn": 0}
        self.max_inflight: dict[str, int] = {"hub": 0, "cdn": 0}

    def _counter(self, server: str) -> Any:
        @web.middleware
        async def count(request: web.Request, handler: Any) -> web.StreamResponse:
            self.inflight[server] += 1
            self.max_inflight[server] = max(self.max_inflight[server], self.inflight[server])
            try:
                return await handler(request)
            finally:
                self.inflight[server] -= 1

        return count

    # -- lifecycle --------------------------------------------------------------------
    async def start(self) -> None:
        hub = web.Application(middlewares=[self._counter("hub")])
        hub.router.add_get("/api/models", self._list_models)
        hub.router.add_get("/api/models/{org}/{name}", self._model_info)
        hub.router.add_get("/api/models/{org}/{name}/revision/{rev}", self._model_info)
        hub.router.add_route("*", "/{org}/{name}/resolve/{rev}/{path:.+}", self._resolve)
        cdn = web.Application(middlewares=[self._counter("cdn")])
        cdn.router.add_route("*", "/lfs/{oid}", self._cdn)
        urls = []
        for app, port in zip((hub, cdn), self._ports, strict=True):
            runner = web.AppRunner(app, access_log=None, handler_cancellation=False)
            await runner.setup()
            site = web.TCPSite(runner, self.host, port)
            await site.start()
            self._runners.append(runner)
            sock = site._server.sockets[0]  # type: ignore[union-attr]
            urls.append(f"http://{self.host}:{sock.getsockname()[1]}")
        self.endpoint, self.cdn_url = urls

    async def close(self) -> None:
        for runner in reversed(self._runners):
            await runner.cleanup()
        self._runners.clear()

    async def __aenter__(self) -> FakeHub:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- helpers for tests ------------------------------------------------------------
    def resolve_url(self, repo_id: str, path: str, revision: str = "main") -> str:
        return f"{self.endpoint}/{repo_id}/resolve/{revision}/{path}"

    def requests_to(self, route: str | None = None, *, file: str | None = None) -> list[RequestRecord]:
        return [
            r
            for r in self.requests
            if (route is None or r.route == route) and (file is None or r.file == file)
        ]

    def change_file(self, repo_id: str, path: str, content: Blob | None = None) -> None:
        """Make the next reads of a file see a new version (new ETag) and, given `content`,
        new bytes too (served from the same URLs, its size included) while the listing
        still shows the old size: a file re-uploaded between the listing and the reads."""
        repo = self.corpus.get(repo_id)
        f = repo.file(path) if repo else None
        if f is None:
            raise KeyError(f"{repo_id}/{path}")
        self._versions[f.blob.sha256] = self._versions.get(f.blob.sha256, 0) + 1
        if content is not None:
            self._replaced[f.blob.sha256] = content

    # -- plumbing ---------------------------------------------------------------------
    def _begin(
        self, request: web.Request, server: str, route: str, repo: str = "", file: str = ""
    ) -> RequestRecord:
        rec = RequestRecord(
            server,
            route,
            request.method,
            request.path,
            dict(request.query),
            dict(request.headers),
            repo,
            file,
        )
        if self.record:
            self.requests.append(rec)
        return rec

    def _headers(self, **extra: str) -> dict[str, str]:
        return {"X-Request-Id": f"fake-{next(self._ids)}", **extra}

    def _error(
        self, rec: RequestRecord, status: int, message: str, code: str | None = None, **headers: str
    ) -> web.Response:
        rec.status = status
        h = self._headers(**headers)
        if code:
            h["X-Error-Code"] = code
        h["X-Error-Message"] = message
        return web.json_response({"error": message}, status=status, headers=h)

    async def _apply(self, rec: RequestRecord) -> tuple[web.Response | None, list[Fault]]:
        """Sleep for latency faults; answer now for status faults; return the rest."""
        hit = self.faults.pick(rec.route, rec.repo, rec.file, rec.method)
        rec.faults = [f.kind for f in hit]
        delay = sum(f.delay for f in hit if f.kind == "latency")
        if delay:
            await asyncio.sleep(delay)
        for f in hit:
            if f.kind == "body":
                rec.status = 200
                headers = self._headers(**({"Content-Encoding": f.encoding} if f.encoding else {}))
                return web.Response(body=f.body, content_type="application/json", headers=headers), hit
            if f.kind == "status":
                extra = {}
                if f.retry_after is not None:
                    extra["Retry-After"] = f.retry_after
                if f.ratelimit is not None:
                    extra["RateLimit"] = f.ratelimit
                    extra["RateLimit-Policy"] = '"fixed window";"api";q=500;w=300'
                return self._error(rec, f.status, f"injected {f.status}", **extra), hit
        return None, hit

    def _authed(self, request: web.Request) -> bool | None:
        """True for a known token, False for none, None for a bad one."""
        auth = request.headers.get("Authorization")
        if auth is None:
            return False
        return True if auth.removeprefix("Bearer ").strip() in self.tokens else None

    def _lookup(
        self, request: web.Request, rec: RequestRecord, rev: str | None
    ) -> tuple[Repo | None, web.Response | None]:
        authed = self._authed(request)
        if authed is None:
            return None, self._error(rec, 401, "Invalid credentials in Authorization header")
        repo = self.corpus.get(rec.repo)
        new = self.corpus.moved_to(rec.repo) if repo is None else None
        if new is not None:  # a renamed repo: the hub redirects its old id to the new one
            rec.status = 307
            location = request.path_qs.replace(f"/{rec.repo}", f"/{new}", 1)
            return None, web.Response(status=307, headers=self._headers(Location=location))
        if repo is None or (repo.private and not authed):
            return None, self._error(rec, 401 if not authed else 404, "Repository not found", "RepoNotFound")
        if rev is not None and rev not in ("main", repo.sha):
            return None, self._error(rec, 404, "Invalid rev id", "RevisionNotFound")
        return repo, None

    # -- API --------------------------------------------------------------------------
    def _summary(self, repo: Repo, *, full: bool, expand: list[str]) -> dict[str, Any]:
        every = {
            "_id": repo.sha[:24],
            "id": repo.repo_id,
            "modelId": repo.repo_id,
            "author": repo.author,
            "sha": repo.sha,
            "lastModified": repo.last_modified,
            "createdAt": repo.created_at,
            "private": repo.private,
            "gated": repo.gated,
            "disabled": False,
            "downloads": repo.downloads,
            "likes": repo.likes,
            "trendingScore": repo.likes // 10,
            "tags": list(repo.tags),
            "library_name": "gguf",
            "pipeline_tag": "text-generation",
            "cardData": dict(repo.card),
            "siblings": [{"rfilename": f.path} for f in repo.files],
        }
        if expand:
            return {"_id": every["_id"], "id": repo.repo_id, **{k: every[k] for k in expand if k in every}}
        keys = [
            "_id",
            "id",
            "likes",
            "trendingScore",
            "private",
            "downloads",
            "tags",
            "pipeline_tag",
            "library_name",
            "createdAt",
            "modelId",
        ]
        if full:
            keys += ["author", "sha", "lastModified", "gated", "disabled", "siblings"]
        return {k: every[k] for k in keys}

    async def _list_models(self, request: web.Request) -> web.StreamResponse:
        rec = self._begin(request, "hub", "api")
        early, hit = await self._apply(rec)
        if early is not None:
            return early
        authed = self._authed(request)
        q = request.query
        filters = q.getall("filter", [])
        author, search = q.get("author"), (q.get("search") or "").lower()
        repos = [
            r
            for r in self.corpus
            if all(f in r.tags for f in filters)
            and (author is None or r.author == author)
            and search in r.repo_id.lower()
            and (authed or not r.private)
        ]
        sort = q.get("sort")
        if sort:
            attr = {
                "lastModified": "last_modified",
                "createdAt": "created_at",
                "trendingScore": "likes",
                "id": "repo_id",
            }
            key = attr.get(sort, sort)
            if key not in ("downloads", "likes", "last_modified", "created_at", "repo_id"):
                return self._error(rec, 400, f"invalid sort {sort!r}")
            repos.sort(key=lambda r: getattr(r, key), reverse=q.get("direction", "-1") == "-1")
        try:
            size = min(int(q.get("limit", self.page_size)), self.max_page)
            start = int(base64.urlsafe_b64decode(q["cursor"]).decode()) if "cursor" in q else 0
        except ValueError:
            return self._error(rec, 400, "bad limit or cursor")
        page = repos[start : start + size]
        expand = q.getall("expand", [])
        body = [self._summary(r, full=q.get("full", "").lower() == "true", expand=expand) for r in page]
        headers = self._headers()
        link = next((f for f in hit if f.kind == "next_link"), None)
        if link is not None:  # a broken cursor (the page itself) or a link to another server
            headers["Link"] = f'<{link.link or self.endpoint + request.path_qs}>; rel="next"'
        elif any(f.kind == "repeat" for f in hit):
            # "repeat": the next page is this page again under a new URL, without end.
            again = int(q.get("again", "0")) + 1
            nxt = [(k, v) for k, v in q.items() if k != "again"] + [("again", str(again))]
            headers["Link"] = f'<{self.endpoint}/api/models?{urlencode(nxt)}>; rel="next"'
        elif start + size < len(repos):
            # "overlap": the next page starts one entry early, as an offset cursor does when a
            # repo moved to the top of a lastModified listing while it was paged.
            step = size - 1 if size > 1 and any(f.kind == "overlap" for f in hit) else size
            nxt = [(k, v) for k, v in q.items() if k != "cursor"]
            nxt.append(("cursor", base64.urlsafe_b64encode(str(start + step).encode()).decode()))
            headers["Link"] = f'<{self.endpoint}/api/models?{urlencode(nxt)}>; rel="next"'
        rec.status = 200
        return web.json_response(body, headers=headers)

    async def _model_info(self, request: web.Request) -> web.StreamResponse:
        repo_id = f"{request.match_info['org']}/{request.match_info['name']}"
        rec = self._begin(request, "hub", "api", repo_id)
        early, hit = await self._apply(rec)
        if early is not None:
            return early
        big = next((f for f in hit if f.kind == "big_body"), None)
        if big is not None:
            return await self._big_json(request, rec, repo_id, big.size)
        repo, err = self._lookup(request, rec, request.match_info.get("rev"))
        if err is not None or repo is None:
            return err or self._error(rec, 404, "not found")
        body = self._summary(repo, full=True, expand=[])
        body["cardData"] = dict(repo.card)
        blobs = request.query.get("blobs", "").lower() == "true"
        siblings = []
        for f in repo.files:
            s: dict[str, Any] = {"rfilename": f.path}
            if blobs:
                s["blobId"] = f.blob.sha256[:40]
                s["size"] = f.blob.size
                if f.blob.lfs:
                    s["lfs"] = {"sha256": f.blob.sha256, "size": f.blob.size, "pointerSize": 135}
            siblings.append(s)
        body["siblings"] = siblings
        body["usedStorage"] = sum(f.blob.size for f in repo.files) if blobs else None
        rec.status = 200
        return web.json_response(body, headers=self._headers())

    async def _big_json(
        self, request: web.Request, rec: RequestRecord, repo_id: str, size: int
    ) -> web.StreamResponse:
        """A valid repo info `size` bytes long, padded, sent in chunks with no Content-Length."""
        head = f'{{"id": "{repo_id}", "sha": "{"0" * 40}", "padding": "'.encode()
        left = size - len(head) - 2
        resp = web.StreamResponse(headers=self._headers(**{"Content-Type": "application/json"}))
        rec.status = 200
        await resp.prepare(request)
        try:
            for part in itertools.chain((head,), _padding(left), (b'"}',)):
                await resp.write(part)
                rec.bytes_sent += len(part)
            await resp.write_eof()
        except (ConnectionError, RuntimeError):
            pass  # the client hung up: what a reader with a size cap does
        return resp

    # -- files ------------------------------------------------------------------------
    def _etag(self, blob: Blob) -> str:
        v = self._versions.get(blob.sha256, 0)
        return f'"{blob.sha256}"' if v == 0 else f'"{blob.sha256}-v{v}"'

    async def _resolve(self, request: web.Request) -> web.StreamResponse:
        m = request.match_info
        rec = self._begin(request, "hub", "resolve", f"{m['org']}/{m['name']}", m["path"])
        if request.method not in ("GET", "HEAD"):
            return self._error(rec, 405, "method not allowed")
        early, hit = await self._apply(rec)
        if early is not None:
            return early
        repo, err = self._lookup(request, rec, m["rev"])
        if err is not None or repo is None:
            return err or self._error(rec, 404, "not found")
        f = repo.file(m["path"])
        if f is None:
            return self._error(rec, 404, "Entry not found", "EntryNotFound")
        if repo.gated and not self._authed(request):
            return self._error(rec, 401, "Access to this model is restricted", "GatedRepo")
        headers = self._headers(**{"X-Repo-Commit": repo.sha, "X-Linked-Etag": f'"{f.blob.sha256}"'})
        if f.blob.lfs:
            query = urlencode({"repo": repo.repo_id, "file": f.path, "expires": "4102444800", "sig": "fake"})
            headers["X-Linked-Size"] = str(f.blob.size)
            headers["Location"] = f"{self.cdn_url}/lfs/{f.blob.sha256}?{query}"
            rec.status = 302
            return web.Response(status=302, headers=headers)
        return await self._serve(request, rec, f.blob, hit, headers)

    async def _cdn(self, request: web.Request) -> web.StreamResponse:
        oid = request.match_info["oid"]
        rec = self._begin(request, "cdn", "cdn", request.query.get("repo", ""), request.query.get("file", ""))
        if request.method not in ("GET", "HEAD"):
            return self._error(rec, 405, "method not allowed")
        early, hit = await self._apply(rec)
        if early is not None:
            return early
        blob = self.corpus.blob(oid)
        if blob is None:
            return self._error(rec, 404, "NoSuchKey")
        for f in hit:
            if f.kind == "change":
                self._versions[oid] = self._versions.get(oid, 0) + 1
        headers = self._headers()
        repo = self.corpus.get(rec.repo)
        if repo is not None:
            headers["X-Repo-Commit"] = repo.sha
        return await self._serve(request, rec, blob, hit, headers)

    async def _serve(
        self, request: web.Request, rec: RequestRecord, blob: Blob, hit: list[Fault], headers: dict[str, str]
    ) -> web.StreamResponse:
        etag = self._etag(blob)
        blob = self._replaced.get(blob.sha256, blob)
        size = blob.size
        headers.update({"ETag": etag, "Accept-Ranges": "bytes", "Content-Type": "application/octet-stream"})
        kinds = {f.kind for f in hit}
        spans, status = [(0, size)], 200
        rng = request.headers.get("Range")
        if_range = request.headers.get("If-Range")
        if rng is not None and "ignore_range" not in kinds and (if_range is None or if_range == etag):
            ranges = parse_ranges(rng, size)
            if ranges is None:
                return self._error(rec, 400, f"bad range {rng!r}")
            if not ranges:
                return self._error(
                    rec, 416, "Requested Range Not Satisfiable", **{"Content-Range": f"bytes */{size}"}
                )
            no_multi = next((f for f in hit if f.kind == "no_multirange"), None)
            if len(ranges) > 1 and no_multi is not None and no_multi.multirange == "first":
                ranges = ranges[:1]
            if len(ranges) == 1 or (no_multi is None and len(ranges) <= MAX_RANGES):
                cap = next((f.after_bytes for f in hit if f.kind == "short_range"), None)
                if cap is not None:  # a CDN that serves at most `cap` bytes per range, honestly
                    ranges = [(start, min(end, start + cap)) for start, end in ranges]
                spans, status = ranges, 206
        rec.served = spans
        if status == 206 and len(spans) == 1:
            start, end = spans[0]
            headers["Content-Range"] = f"bytes {start}-{end - 1}/{size}"
            pieces: list[bytes | tuple[int, int]] = [spans[0]]
        elif status == 206:
            boundary = f"fakehub{next(self._ids):012d}"
            headers["Content-Type"] = f"multipart/byteranges; boundary={boundary}"
            pieces = multipart_pieces(spans, size, boundary)
        else:
            pieces = [(0, size)]
        length = sum(len(p) if isinstance(p, bytes) else p[1] - p[0] for p in pieces)
        if "gzip" in kinds:  # a CDN edge compressing although asked for identity
            packed = gzip.compress(b"".join(_body(blob, pieces, CHUNK)))
            headers.update({"Content-Encoding": "gzip", "Content-Length": str(len(packed))})
            rec.status = status
            return web.Response(status=status, body=packed, headers=headers)
        cut = next((f.after_bytes for f in hit if f.kind in ("reset", "truncate")), None)
        send = length if cut is None else min(cut, length)
        # "truncate" frames the short body honestly (Content-Length says the short length,
        # Content-Range still the long one); "reset" promises it all and hangs up.
        headers["Content-Length"] = str(send if "truncate" in kinds else length)
        resp = web.StreamResponse(status=status, headers=headers)
        rec.status = status
        await resp.prepare(request)
        if request.method == "HEAD":
            return resp
        try:
            for chunk in _body(blob, pieces, send):
                await resp.write(chunk)
                rec.bytes_sent += len(chunk)
            if "reset" in kinds and send < length:
                assert request.transport is not None
                request.transport.close()
                return resp
            await resp.write_eof()
        except (ConnectionError, RuntimeError):
            pass  # the client hung up: exactly what a reader that stops early does
        return resp


def parse_ranges(header: str, size: int) -> list[tuple[int, int]] | None:
    """The satisfiable (start, end exclusive) ranges of a `bytes=` Range header, in the order
    asked (RFC 7233 section 2.1); None when the header is malformed.

    Unsatisfiable ranges are dropped, so an empty list means 416. Ranges are neither sorted
    nor coalesced: a client that asks for overlapping ranges gets them as asked.
    """
    unit, _, specs = header.strip().partition("=")
    if unit.strip() != "bytes" or not specs.strip():
        return None
    ranges = []
    for spec in specs.split(","):
        m = _RANGE_SPEC.match(spec)
        if m is None or m.group(1) == m.group(2) == "":
            return None
        if m.group(1) == "":  # a suffix: the last N bytes
            start, end = max(0, size - int(m.group(2))), size
        else:
            start = int(m.group(1))
            end = min(size, int(m.group(2)) + 1) if m.group(2) else size
            if m.group(2) and int(m.group(2)) < start:
                return None  # "last-byte-pos less than first-byte-pos": syntactically invalid
        if start < size and start < end:
            ranges.append((start, end))
    return ranges


def multipart_pieces(spans: list[tuple[int, int]], size: int, boundary: str) -> list[bytes | tuple[int, int]]:
    """A `multipart/byteranges` body (RFC 7233 appendix A) as literal bytes and file ranges.

    Laid out as nginx does: every part's delimiter starts with CRLF, the first one too (a
    preamble of one empty line, which a reader must skip), and the closing delimiter ends
    with CRLF.
    """
    pieces: list[bytes | tuple[int, int]] = []
    for start, end in spans:
        head = (
            f"\r\n--{boundary}\r\nContent-Type: application/octet-stream\r\n"
            f"Content-Range: bytes {start}-{end - 1}/{size}\r\n\r\n"
        )
        pieces += [head.encode(), (start, end)]
    pieces.append(f"\r\n--{boundary}--\r\n".encode())
    return pieces


def _body(blob: Blob, pieces: list[bytes | tuple[int, int]], limit: int) -> Iterable[bytes]:
    """The first `limit` bytes of a body in chunks of at most CHUNK, reading the blob lazily."""
    left = limit
    for piece in pieces:
        if left <= 0:
            return
        if isinstance(piece, bytes):
            yield piece[:left]
            left -= len(piece[:left])
            continue
        pos, end = piece[0], min(piece[1], piece[0] + left)
        while pos < end:
            chunk = blob.read(pos, min(pos + CHUNK, end))
            yield chunk
            left -= len(chunk)
            pos += len(chunk)


def _padding(n: int) -> Iterable[bytes]:
    """`n` padding bytes in chunks, never all at once."""
    while n > 0:
        yield b"x" * min(CHUNK, n)
        n -= CHUNK
