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
from registry.api.replies import json_response
from registry.api.sessions import read_session
from registry.catalog.stats import CatalogStats, catalog_stats
from registry.responses import Health, Ready
from registry.responses.operations import ReadyChecks

log = logging.getLogger("registry.api")
routes = web.RouteTableDef()

READY_TIMEOUT_S = 5.0
STATS_TIMEOUT_S = 2.0  # the catalog's counts in /metrics; a scrape must not hang on the database


@routes.get("/healthz", name="healthz")
async def healthz(request: web.Request) -> web.Response:
    parse_query(request, ())
    return json_response(Health(status="ok"))


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
    return json_response(Ready(status="ready", checks=ReadyChecks(database="ok")))


@routes.get("/metrics", name="metrics")
async def metrics(request: web.Request) -> web.Response:
    parse_query(request, ())
    metrics = request.app[METRICS_KEY]
    try:
        async with asyncio.timeout(STATS_TIMEOUT_S), read_session(request) as session:
            stats: CatalogStats | None = await catalog_stats(session)
    except Exception as exc:  # the process's own metrics are still worth a scrape
        log.warning("catalog counts for /metrics failed: %r", exc, extra={"request_id": request.get(REQUEST_ID_KEY)})
        stats = None
    metrics.set_catalog(stats)
    body = metrics.render()
    return web.Response(body=body.encode("utf-8"), headers={"Content-Type": CONTENT_TYPE})


@routes.get("/openapi.json", name="openapi")
async def openapi(request: web.Request) -> web.Response:
    parse_query(request, ())
    return json_response(request.app[OPENAPI_KEY])
