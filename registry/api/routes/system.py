"""Operational routes: liveness, readiness, metrics and the API description."""

from __future__ import annotations

import asyncio
import logging

from aiohttp import web
from sqlalchemy import text

from registry.api.errors import ServiceUnavailable
from registry.api.keys import METRICS_KEY, OPENAPI_KEY, REQUEST_ID_KEY, SESSIONMAKER_KEY
from registry.api.metrics import CONTENT_TYPE
from registry.api.params import parse_query
from registry.api.responses import json_response

log = logging.getLogger("registry.api")
routes = web.RouteTableDef()

READY_TIMEOUT_S = 5.0


@routes.get("/healthz", name="healthz")
async def healthz(request: web.Request) -> web.Response:
    parse_query(request, ())
    return json_response({"status": "ok"})


@routes.get("/readyz", name="readyz")
async def readyz(request: web.Request) -> web.Response:
    parse_query(request, ())
    try:
        async with asyncio.timeout(READY_TIMEOUT_S), request.app[SESSIONMAKER_KEY]() as session:
            await session.execute(text("SELECT 1"))
    except Exception as exc:
        # The reason goes to the log, not the client: it may name hosts or credentials.
        log.warning("readiness check failed: %r", exc, extra={"request_id": request.get(REQUEST_ID_KEY)})
        raise ServiceUnavailable("the database is not reachable", details={"component": "database", "check": "database"}) from None
    return json_response({"status": "ready", "checks": {"database": "ok"}})


@routes.get("/metrics", name="metrics")
async def metrics(request: web.Request) -> web.Response:
    parse_query(request, ())
    body = request.app[METRICS_KEY].render()
    return web.Response(body=body.encode("utf-8"), headers={"Content-Type": CONTENT_TYPE})


@routes.get("/openapi.json", name="openapi")
async def openapi(request: web.Request) -> web.Response:
    parse_query(request, ())
    return json_response(request.app[OPENAPI_KEY])
