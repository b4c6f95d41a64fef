"""Mounting the web catalog on the API's application."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

from aiohttp import web

from registry.api.errors import ApiError
from registry.web import actions, operations, pages, tree
from registry.web.render import RENDERER_KEY, Renderer, render

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
STATIC = Path(__file__).parent / "static"
# Every response: nothing from another host, no inline script, no framing, no sniffing.
# SVG drawn by the server carries presentation attributes only, so no inline style is needed.
CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; object-src 'none'; "
       "base-uri 'none'; form-action 'self'; frame-ancestors 'none'")  # fmt: skip
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "X-Frame-Options": "DENY",
}


async def _security_headers(_request: web.Request, response: web.StreamResponse) -> None:
    for name, value in SECURITY_HEADERS.items():
        response.headers.setdefault(name, value)


@web.middleware
async def _html_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """A page's refusal (a bad filter value, an unknown id) as a page a person reads, with the
    same status and message the API's JSON envelope carries."""
    if not (request.match_info.route.name or "").startswith("web_"):
        return await handler(request)
    try:
        return await handler(request)
    except ApiError as exc:
        return render(request, "error.html", status=exc.status, title=f"Error {exc.status}", error=exc,
                      json_url="/v1/artifacts")  # fmt: skip


def mount(app: web.Application) -> None:
    app[RENDERER_KEY] = Renderer()
    app.middlewares.append(_html_errors)  # inside the API's error middleware: pages answer first
    app.router.add_routes(pages.routes)
    app.router.add_routes(tree.routes)
    app.router.add_routes(operations.routes)
    app.router.add_routes(actions.routes)
    app.router.add_static("/static", STATIC, name="web_static", append_version=True)
    app.on_response_prepare.append(_security_headers)
