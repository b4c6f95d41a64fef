"""`json_response`: every JSON body the API sends, a response model (or a plain value)
encoded once by `registry.responses.encode` (msgspec), as `registry ... --json` prints it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aiohttp import web

from registry.responses import encode


def json_response(body: Any, *, status: int = 200, headers: Mapping[str, str] | None = None) -> web.Response:
    return web.Response(body=encode(body), status=status, headers=headers, content_type="application/json")
