"""One shape for every paged list (`ArtifactPage`, `CrawlPage`, `JobPage`, `VerificationPage`: `items`, `next`,
`limit`), and a `Link: rel="next"` header beside it."""

from __future__ import annotations

from aiohttp import web

from registry.api.replies import json_response
from registry.responses import ArtifactPage, CrawlPage, JobPage
from registry.responses.operations import VerificationPage


def next_url(request: web.Request, cursor: str) -> str:
    # A relative reference: the Host header is client-supplied, so it is not echoed back.
    return str(request.rel_url.update_query({"cursor": cursor}))


def page_response(request: web.Request, page: ArtifactPage | CrawlPage | JobPage | VerificationPage) -> web.Response:
    response = json_response(page)
    if page.next is not None:
        response.headers["Link"] = f'<{next_url(request, page.next)}>; rel="next"'
    return response
