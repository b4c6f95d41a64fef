"""The visitor's session: the API token kept in a cookie, and the CSRF token of its forms."""

from __future__ import annotations

import hashlib
import hmac

from aiohttp import web

from registry.api.auth import WEB_TOKEN_COOKIE as COOKIE
from registry.api.keys import AUTH_KEY, LAUNCHER_KEY, VERIFIER_KEY

__all__ = ["COOKIE", "csrf_token", "page_context", "signed_in"]


def csrf_token(token: str) -> str:
    return hmac.new(token.encode("utf-8"), b"registry web form", hashlib.sha256).hexdigest()


def signed_in(request: web.Request) -> str | None:
    """The valid token the visitor signed in with, or None."""
    token = request.cookies.get(COOKIE)
    return token if token and request.app[AUTH_KEY].is_valid(token) else None


def page_context(request: web.Request) -> dict[str, object]:
    """What every page shows of the visitor's session: signed in, and the forms' CSRF token."""
    token = signed_in(request)
    return {"signed_in": token is not None, "csrf": csrf_token(token) if token else None,
            "can_crawl": request.app.get(LAUNCHER_KEY) is not None,
            "can_verify": request.app.get(VERIFIER_KEY) is not None}  # fmt: skip
