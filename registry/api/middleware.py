"""Request id, structured access log and request metrics: the outermost middleware.

It runs outside the error middleware, so it sees the final status of every request,
errors included, and every response (error or not) carries the request id.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import re
import time

from aiohttp import web

from registry.api.errors import Handler
from registry.api.keys import METRICS_KEY, REQUEST_ID_KEY, SHARES_KEY
from registry.responses import encode_text

REQUEST_ID_HEADER = "X-Request-Id"
CLIENT_CLOSED = 499  # nginx's convention for "client closed the connection"
access_log = logging.getLogger("registry.api.access")

# A client-chosen id is echoed into logs and headers, so only harmless ones are honoured.
_SAFE_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")


class _RequestIds:
    """Ids unique across processes and restarts: a random per-process prefix and a counter.

    A uuid4 per request reads the OS random source each time, which showed in profiles;
    ids need to be unique, not unguessable. The prefix is redrawn in a forked child."""

    def __init__(self) -> None:
        self._pid = -1
        self._prefix = ""
        self._counter = itertools.count()

    def next(self) -> str:
        if self._pid != os.getpid():
            self._pid, self._prefix, self._counter = os.getpid(), os.urandom(10).hex(), itertools.count()
        return f"{self._prefix}{next(self._counter):012x}"


_ids = _RequestIds()


def request_id_for(request: web.Request) -> str:
    offered = request.headers.get(REQUEST_ID_HEADER)
    return offered if offered and _SAFE_ID.match(offered) else _ids.next()


def route_label(request: web.Request) -> str:
    """The route template, not the path: per-id paths would explode metric cardinality."""
    info = request.match_info
    if info.http_exception is not None:
        return "unmatched"
    resource = info.route.resource
    return resource.canonical if resource is not None else "unmatched"


@web.middleware
async def observe_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    request_id = request_id_for(request)
    request[REQUEST_ID_KEY] = request_id
    metrics = request.app[METRICS_KEY]
    started = time.perf_counter()
    status = 500
    metrics.in_flight.inc()
    try:
        response = await handler(request)
        status = response.status
        response.headers[REQUEST_ID_HEADER] = request_id
        shares = request.app.get(SHARES_KEY)
        if shares is not None and shares.over_share():
            response.force_close()  # the client reconnects, to whichever process (balance.py)
        return response
    except web.HTTPException as exc:  # only non-errors (redirects) get past the error middleware
        status = exc.status
        exc.headers[REQUEST_ID_HEADER] = request_id
        raise
    except asyncio.CancelledError:
        status = CLIENT_CLOSED  # the client went away before the answer
        raise
    finally:
        elapsed = time.perf_counter() - started
        metrics.in_flight.dec()
        route = route_label(request)
        metrics.observe_request(request.method, route, status, elapsed)
        _log_access(request, request_id, route, status, elapsed)


def _log_access(request: web.Request, request_id: str, route: str, status: int, elapsed: float) -> None:
    if not access_log.isEnabledFor(logging.INFO):
        return
    record = {
        "event": "http_request",
        "request_id": request_id,
        "method": request.method,
        "path": request.path,
        "route": route,
        "status": status,
        "duration_ms": round(elapsed * 1000, 3),
        "remote": request.remote,
    }
    # The message is the JSON itself so any handler prints one parseable line; the fields
    # are also attached to the record for handlers that format structured output.
    access_log.info(encode_text(record), extra={"access": record})
