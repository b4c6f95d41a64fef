"""Jinja2 with autoescape on every template: every string from a file, a card or a hub is
text on the page, never markup."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any
from urllib.parse import urlencode

import jinja2
from aiohttp import web

from registry.web import format as fmt
from registry.web.session import page_context

TEMPLATES = "templates"


class Renderer:
    def __init__(self) -> None:
        self.env = jinja2.Environment(
            loader=jinja2.PackageLoader("registry.web", TEMPLATES),
            autoescape=True,
            undefined=jinja2.StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
        )
        self.env.filters.update(bytes=fmt.size, count=fmt.count, tokens=fmt.tokens, when=fmt.when)
        # The stylesheet's and the script's versioned URLs: hashing the files per page cost more than the page.
        self.css: str | None = None
        self.js: str | None = None


    def page(self, request: web.Request, name: str, *, status: int = 200, **context: Any) -> web.Response:
        if self.css is None:
            self.css = str(request.app.router["web_static"].url_for(filename="web.css"))
            self.js = str(request.app.router["web_static"].url_for(filename="web.js"))
        context["css"], context["js"] = self.css, self.js
        context.update(page_context(request))
        html = self.env.get_template(name).render(**context)
        return web.Response(text=html, status=status, content_type="text/html", charset="utf-8")


RENDERER_KEY = web.AppKey("web_renderer", Renderer)


def render(request: web.Request, name: str, **context: Any) -> web.Response:
    return request.app[RENDERER_KEY].page(request, name, **context)


def twin(path: str, request: web.Request, names: Collection[str] | None = None) -> str:
    """A page's JSON twin under /v1: the route at `path` with the page's own query string,
    or with only its parameters in `names` (a page that reads more than its twin does)."""
    if names is None:
        return f"{path}?{request.query_string}" if request.query_string else path
    kept = [(k, v) for k, v in request.query.items() if k in names]
    return f"{path}?{urlencode(kept)}" if kept else path
