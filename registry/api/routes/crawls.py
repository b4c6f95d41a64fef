"""Start, watch and cancel crawls; the hub's webhook starts them too.

The API records a crawl row and hands it to the configured `CrawlLauncher`; the crawl
worker owns the row from then on (counters, heartbeat, end). Without a launcher the
routes that start crawls answer 503, while past crawls stay readable.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from aiohttp import web

from registry.api.auth import WEBHOOK_PATH
from registry.api.bodies import crawl_spec, hub_event, read_json_object
from registry.api.cursors import newest_first
from registry.api.errors import ApiError, Conflict, Forbidden, NotFound, ServiceUnavailable, required
from registry.api.keys import (
    AUTH_KEY,
    LAUNCHER_KEY,
    METRICS_KEY,
    REQUEST_ID_KEY,
    SESSIONMAKER_KEY,
    SETTINGS_KEY,
)
from registry.api.launchers import CrawlLauncher, CrawlSpec
from registry.api.paging import page_response
from registry.api.params import parse_query, path_int
from registry.api.replies import json_response
from registry.api.sessions import read_session
from registry.catalog import crawls
from registry.catalog.models import Crawl
from registry.catalog.readpath import ReadSession
from registry.catalog.types import utcnow
from registry.responses import Crawl as CrawlBody
from registry.responses import CrawlPage, WebhookIgnored
from registry.responses.operations import WebhookEvent
from registry.responses.params import crawl_list_params

log = logging.getLogger("registry.api")
routes = web.RouteTableDef()

WEBHOOK_SECRET_HEADER = "X-Webhook-Secret"  # as the Hugging Face Hub sends it
HUB_SOURCE = "hub"  # the configured hub: the source whose repos webhooks speak of


class WebhookUnauthorized(ApiError):
    status = 401
    code = "unauthorized"


def crawl_launcher(request: web.Request) -> CrawlLauncher:
    return required(request, LAUNCHER_KEY, "crawls cannot be started: this server runs without a crawl worker",
                    "crawler")  # fmt: skip


@routes.post("/v1/crawls", name="start_crawl")
async def start_crawl(request: web.Request) -> web.Response:
    parse_query(request, ())
    launcher = crawl_launcher(request)
    spec = crawl_spec(await read_json_object(request), launcher.sources())
    return await _launch(request, launcher, spec, spec.to_parameters())


@routes.post(WEBHOOK_PATH, name="hub_webhook")
async def hub_webhook(request: web.Request) -> web.Response:
    """A delivery of the hub's webhook: the repo it names (and the id a move gave it) is
    crawled at once, instead of at the next scheduled crawl. Authenticated by the secret
    the hub sends in X-Webhook-Secret (api.webhook_secrets), not by a bearer token."""
    secrets = request.app[AUTH_KEY].webhook_secrets
    if not secrets:
        raise Forbidden("webhooks are disabled: the server has no webhook secrets configured (api.webhook_secrets)")
    secret = request.headers.get(WEBHOOK_SECRET_HEADER)
    if secret is None:
        raise WebhookUnauthorized(f"the {WEBHOOK_SECRET_HEADER} header is required")
    if not secrets.matches(secret):
        raise WebhookUnauthorized(f"the {WEBHOOK_SECRET_HEADER} header does not hold a valid secret")
    parse_query(request, ())  # after the secret, as the auth middleware goes before it on other routes
    event = hub_event(await read_json_object(request))
    metrics = request.app[METRICS_KEY]
    if event.ignored is not None:
        metrics.webhooks.inc("ignored")
        return json_response(WebhookIgnored(ignored=event.ignored, event=WebhookEvent(action=event.action,
                                                                                      scope=event.scope)))
    launcher = crawl_launcher(request)
    if HUB_SOURCE not in launcher.sources():
        raise ServiceUnavailable(
            "crawls of the hub cannot be started: this server's crawl worker has no hub source",
            details={"component": "crawler"},
        )
    spec = CrawlSpec(source=HUB_SOURCE, repos=event.repos)
    webhook = {"action": event.action, "scope": event.scope}
    response = await _launch(request, launcher, spec, {**spec.to_parameters(), "webhook": webhook})
    metrics.webhooks.inc("crawl")
    return response


async def _launch(
    request: web.Request, launcher: CrawlLauncher, spec: CrawlSpec, parameters: dict[str, Any]
) -> web.Response:
    """Record the crawl's row and hand it to the launcher: 202 with the row, or 503."""
    body = await launch_crawl(request, launcher, spec, parameters)
    return json_response(body, status=202, headers={"Location": body.url})


async def launch_crawl(
    request: web.Request, launcher: CrawlLauncher, spec: CrawlSpec, parameters: dict[str, Any]
) -> CrawlBody:
    """Record the crawl's row and hand it to the launcher (the API's route and the web
    catalog's form both start crawls here); ServiceUnavailable when it is not taken."""
    async with request.app[SESSIONMAKER_KEY].begin() as session:
        row = Crawl(kind=launcher.kind_of(spec.source), status="running", parameters=parameters)
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
    return CrawlBody.from_row(row)


async def _mark_failed(request: web.Request, crawl_id: int, reason: str) -> None:
    async with request.app[SESSIONMAKER_KEY].begin() as session:
        row = await session.get(Crawl, crawl_id)
        if row is not None:
            row.status = "failed"
            row.errors = [*(row.errors or []), {"message": reason}]
            row.finished_at = utcnow()


@routes.get("/v1/crawls", name="list_crawls")
async def list_crawls(request: web.Request) -> web.Response:
    args = parse_query(request, crawl_list_params(request.app[SETTINGS_KEY].api.max_limit))
    async with read_session(request) as session:
        page = await crawls_page(session, status=args["status"], limit=args["limit"], cursor=args["cursor"])
    return page_response(request, page)


async def crawls_page(session: ReadSession, *, status: str | None, limit: int, cursor: str | None) -> CrawlPage:
    """A page of crawls, newest first, after `cursor`; the web catalog's crawls page shows the same."""
    where = [] if status is None else [Crawl.status == status]
    rows, next_cursor = await newest_first(session, Crawl, where, limit=limit, cursor=cursor)
    return CrawlPage(items=[CrawlBody.from_row(r) for r in rows], next=next_cursor, limit=limit)


@routes.post("/v1/crawls/{id}/cancel", name="cancel_crawl")
async def cancel_crawl(request: web.Request) -> web.Response:
    """Cancel a running crawl: 200 with the row, now `cancelled` (again, if it already was);
    409 when it has already ended. Its workers stop at their next look at the row; the
    repos they have written stay, and jobs reading a repo now end and still count."""
    parse_query(request, ())
    crawl_id = path_int(request, "id")
    async with request.app[SESSIONMAKER_KEY].begin() as session:
        row = await crawls.cancel_crawl(session, crawl_id)
    if row is None:
        raise NotFound(f"no crawl with id {crawl_id}", details={"crawl_id": crawl_id})
    if row.status != "cancelled":
        raise Conflict(f"crawl {crawl_id} has already ended: {row.status}",
                       details={"crawl_id": crawl_id, "status": row.status})  # fmt: skip
    return json_response(CrawlBody.from_row(row))


@routes.get("/v1/crawls/{id}", name="get_crawl")
async def get_crawl(request: web.Request) -> web.Response:
    parse_query(request, ())
    return json_response(await read_crawl(request, path_int(request, "id")))


async def read_crawl(request: web.Request, crawl_id: int) -> CrawlBody:
    """One crawl (this route and the web catalog's crawl page); NotFound when there is none."""
    async with read_session(request) as session:
        row = await session.get(Crawl, crawl_id)
    if row is None:
        raise NotFound(f"no crawl with id {crawl_id}", details={"crawl_id": crawl_id})
    return CrawlBody.from_row(row)
