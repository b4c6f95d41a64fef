"""Start and watch crawls.

The API records a crawl row and hands it to the configured `CrawlLauncher`; the crawl
worker owns the row from then on (counters, heartbeat, end). Without a launcher the
routes that start crawls answer 503, while past crawls stay readable.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from aiohttp import web
from sqlalchemy import select

from registry.api import present
from registry.api.bodies import crawl_spec, read_json_object
from registry.api.cursors import decode_id_cursor, encode_id_cursor
from registry.api.errors import NotFound, ServiceUnavailable
from registry.api.keys import LAUNCHER_KEY, METRICS_KEY, REQUEST_ID_KEY, SESSIONMAKER_KEY, SETTINGS_KEY
from registry.api.launchers import CrawlLauncher
from registry.api.paging import page_response, paging_params
from registry.api.params import Param, choice_param, parse_query, path_int
from registry.api.responses import json_response
from registry.api.sessions import read_session
from registry.catalog.models import CRAWL_STATUSES, Crawl
from registry.catalog.types import utcnow

log = logging.getLogger("registry.api")
routes = web.RouteTableDef()


def list_params(max_limit: int) -> tuple[Param, ...]:
    return (choice_param("status", "Only crawls in this status.", CRAWL_STATUSES), *paging_params(max_limit))


def _launcher(request: web.Request) -> CrawlLauncher:
    launcher = request.app[LAUNCHER_KEY]
    if launcher is None:
        raise ServiceUnavailable(
            "crawls cannot be started: this server runs without a crawl worker",
            details={"component": "crawler"},
        )
    return launcher


@routes.post("/v1/crawls", name="start_crawl")
async def start_crawl(request: web.Request) -> web.Response:
    parse_query(request, ())
    launcher = _launcher(request)
    spec = crawl_spec(await read_json_object(request), launcher.sources())
    async with request.app[SESSIONMAKER_KEY].begin() as session:
        row = Crawl(kind=launcher.kind_of(spec.source), status="running", parameters=spec.to_parameters())
        session.add(row)
    try:
        # Shielded: a client hanging up must not leave a recorded crawl that was never handed over.
        await asyncio.shield(launcher.launch(row.id, spec))
    except Exception:
        log.exception("crawl launcher failed", extra={"request_id": request.get(REQUEST_ID_KEY)})
        await _mark_failed(request, row.id, "the crawl worker did not accept the crawl")
        raise ServiceUnavailable(
            "the crawl worker did not accept the crawl", details={"component": "crawler", "crawl_id": row.id}
        ) from None
    request.app[METRICS_KEY].crawls_started.inc(row.kind)
    body = present.crawl(row)
    return json_response(body, status=202, headers={"Location": body["url"]})


async def _mark_failed(request: web.Request, crawl_id: int, reason: str) -> None:
    async with request.app[SESSIONMAKER_KEY].begin() as session:
        row = await session.get(Crawl, crawl_id)
        if row is not None:
            row.status = "failed"
            row.errors = [*(row.errors or []), {"message": reason}]
            row.finished_at = utcnow()


@routes.get("/v1/crawls", name="list_crawls")
async def list_crawls(request: web.Request) -> web.Response:
    args = parse_query(request, list_params(request.app[SETTINGS_KEY].api.max_limit))
    limit: int = args["limit"]
    query = select(Crawl).order_by(Crawl.id.desc()).limit(limit + 1)
    if args["status"] is not None:
        query = query.where(Crawl.status == args["status"])
    if args["cursor"] is not None:
        query = query.where(Crawl.id < decode_id_cursor(args["cursor"]))
    async with read_session(request) as session:
        rows = list((await session.scalars(query)).all())
    more = len(rows) > limit
    rows = rows[:limit]
    items: list[dict[str, Any]] = [present.crawl(r) for r in rows]
    return page_response(request, items, encode_id_cursor(rows[-1].id) if more else None, limit)


@routes.get("/v1/crawls/{id}", name="get_crawl")
async def get_crawl(request: web.Request) -> web.Response:
    parse_query(request, ())
    crawl_id = path_int(request, "id")
    async with read_session(request) as session:
        row = await session.get(Crawl, crawl_id)
    if row is None:
        raise NotFound(f"no crawl with id {crawl_id}", details={"crawl_id": crawl_id})
    return json_response(present.crawl(row))
