"""The operations pages, read-only: crawls (a running one refreshes itself when scripts run),
jobs and verifications, from the reads and models of the API's /v1/crawls, /v1/jobs and
/v1/verifications."""

from __future__ import annotations

from urllib.parse import urlencode

from aiohttp import web

from registry.api.keys import JOBS_KEY, LAUNCHER_KEY, SETTINGS_KEY
from registry.api.params import parse_query, path_int
from registry.api.routes.crawls import crawls_page, read_crawl
from registry.api.routes.jobs import jobs_page
from registry.api.routes.verifications import read_verification, verifications_page
from registry.api.sessions import read_session
from registry.responses.params import crawl_list_params, job_list_params, verification_list_params
from registry.responses.vocab import VERIFICATION_STATUSES
from registry.web.render import render, twin

routes = web.RouteTableDef()


def _next_url(path: str, request: web.Request, cursor: str | None) -> str | None:
    kept = {k: v for k, v in request.query.items() if k != "cursor"}
    return f"{path}?{urlencode({**kept, 'cursor': cursor})}" if cursor else None


@routes.get("/crawls", name="web_crawls")
async def crawls(request: web.Request) -> web.Response:
    args = parse_query(request, crawl_list_params(request.app[SETTINGS_KEY].api.max_limit), blank_is_absent=True)
    async with read_session(request) as session:
        page = await crawls_page(session, status=args["status"], limit=args["limit"], cursor=args["cursor"])
    launcher = request.app.get(LAUNCHER_KEY)
    sources = sorted(launcher.sources()) if launcher is not None else []
    return render(request, "crawls.html", title="Crawls", page=page, next_url=_next_url("/crawls", request, page.next),
                  sources=sources,
                  json_url=twin("/v1/crawls", request))  # fmt: skip


@routes.get("/crawls/{id}", name="web_crawl")
async def crawl(request: web.Request) -> web.Response:
    parse_query(request, (), blank_is_absent=True)
    crawl_id = path_int(request, "id")
    body = await read_crawl(request, crawl_id)
    return render(request, "crawl.html", title=f"Crawl {crawl_id}", c=body, json_url=body.url,
                  running=body.status == "running")  # fmt: skip


@routes.get("/jobs", name="web_jobs")
async def jobs(request: web.Request) -> web.Response:
    args = parse_query(request, job_list_params(request.app[SETTINGS_KEY].api.max_limit), blank_is_absent=True)
    page = await jobs_page(request.app[JOBS_KEY], status=args["status"], limit=args["limit"], cursor=args["cursor"])
    return render(request, "jobs.html", title="Jobs", page=page, next_url=_next_url("/jobs", request, page.next),
                  json_url=twin("/v1/jobs", request))  # fmt: skip


@routes.get("/verifications", name="web_verifications")
async def verifications(request: web.Request) -> web.Response:
    args = parse_query(request, verification_list_params(request.app[SETTINGS_KEY].api.max_limit), blank_is_absent=True)
    async with read_session(request) as session:
        page = await verifications_page(session, status=args["status"], artifact_id=args["artifact"],
                                        limit=args["limit"], cursor=args["cursor"])  # fmt: skip
    return render(request, "verifications.html", title="Verifications", page=page, chosen=args["status"],
                  statuses=VERIFICATION_STATUSES,
                  artifact=args["artifact"], next_url=_next_url("/verifications", request, page.next),
                  json_url=twin("/v1/verifications", request))  # fmt: skip


@routes.get("/verifications/{id}", name="web_verification")
async def verification(request: web.Request) -> web.Response:
    parse_query(request, (), blank_is_absent=True)
    verification_id = path_int(request, "id")
    body = await read_verification(request, verification_id)
    return render(request, "verification.html", title=f"Verification {verification_id}", v=body,
                  json_url=body.url, running=body.status in ("queued", "running"))  # fmt: skip
