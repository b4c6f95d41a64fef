"""One shape for every paged list: `{"items", "next", "limit"}` plus a `Link: rel="next"`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from aiohttp import web

from registry.api.params import Param, int_param, text_param
from registry.api.responses import json_response

DEFAULT_LIMIT = 20
MAX_CURSOR = 1000


def paging_params(max_limit: int) -> tuple[Param, Param]:
    return (
        int_param("limit", f"Page size, 1 to {max_limit}.", minimum=1, maximum=max_limit,
                  default=min(DEFAULT_LIMIT, max_limit)),
        text_param("cursor", "Opaque cursor from a previous page's `next`.", max_length=MAX_CURSOR),
    )


def next_url(request: web.Request, cursor: str) -> str:
    # A relative reference: the Host header is client-supplied, so it is not echoed back.
    return str(request.rel_url.update_query({"cursor": cursor}))


def page_response(
    request: web.Request, items: Sequence[dict[str, Any]], next_cursor: str | None, limit: int
) -> web.Response:
    body = {"items": list(items), "next": next_cursor, "limit": limit}
    response = json_response(body)
    if next_cursor is not None:
        response.headers["Link"] = f'<{next_url(request, next_cursor)}>; rel="next"'
    return response
