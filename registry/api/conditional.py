"""Conditional GETs: every successful read carries an `ETag`, and a request whose
`If-None-Match` names it gets `304 Not Modified` with no body.

Clients that poll (a crawl's counters, the jobs list, a search page a UI refreshes) and
caches in front of the API then revalidate instead of fetching again. The tag is a digest
of the body bytes, so it changes exactly when the answer does, in every process and after a
restart, with nothing kept between requests; it is strong, as the bytes are the same ones
each time (a proxy that compresses them should make it weak, as nginx does). Hashing the
body is a small share of a request's CPU (docs/performance.md).
`Cache-Control: no-cache` asks every cache, the client's own included, to revalidate
before it reuses an answer: the catalog changes at any crawl.
"""

from __future__ import annotations

import hashlib

from aiohttp import web

from registry.api.errors import Handler

CACHE_CONTROL = "no-cache"
_READS = frozenset({"GET", "HEAD"})


def body_etag(body: bytes) -> str:
    return hashlib.sha1(body, usedforsecurity=False).hexdigest()[:32]


@web.middleware
async def conditional_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    response = await handler(request)
    if request.method not in _READS or response.status != 200 or not isinstance(response, web.Response):
        return response
    body = response.body
    if not isinstance(body, bytes):  # a streamed or payload body: not known in full here
        return response
    tag = body_etag(body)
    if _matches(request, tag):
        return web.Response(status=304, headers={"ETag": f'"{tag}"', "Cache-Control": CACHE_CONTROL})
    response.etag = tag
    response.headers.setdefault("Cache-Control", CACHE_CONTROL)
    return response


def _matches(request: web.Request, tag: str) -> bool:
    """`If-None-Match` compares weakly (RFC 9110 13.1.2): `W/"x"` matches `"x"`; `*` matches
    any current answer. A malformed header matches nothing, so the full answer is sent."""
    try:
        offered = request.if_none_match
    except ValueError:
        return False
    if not offered:
        return False
    return any(e.value == "*" or e.value == tag for e in offered)
