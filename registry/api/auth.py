"""Bearer-token access control.

Settings hold only sha256 hex digests of the tokens, so a leaked config file leaks no
credential. A presented token is hashed and compared against every digest with
`hmac.compare_digest`, without stopping at the first match, so timing says nothing about
which digest (or how much of one) matched.

Writes (any method other than GET/HEAD/OPTIONS) always need a token; reads need one only
when `api.private_reads` is on. Health probes stay open so orchestrators need no secret.
The hub's webhook (`POST /v1/hooks/hub`) brings no bearer token: it is checked against
`api.webhook_secrets` instead, the same way (digests only, every one compared).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable

from aiohttp import web

from registry.api.errors import Forbidden, Handler, Unauthorized
from registry.api.keys import AUTH_KEY
from registry.config import ApiSettings

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
PUBLIC_PATHS = frozenset({"/healthz", "/readyz"})
WEBHOOK_PATH = "/v1/hooks/hub"  # authenticated by its route, with the hub's X-Webhook-Secret
_HEX = frozenset("0123456789abcdef")
# The cookie the web catalog keeps a signed-in visitor's token in (registry.web.session).
WEB_TOKEN_COOKIE = "registry_token"
# Web routes open even with private reads: where one signs in, and the stylesheet and script.
WEB_OPEN_ROUTES = frozenset({"web_signin", "web_static"})


def hash_token(token: str) -> str:
    """The digest to put in `api.tokens` for a token."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def parse_token_hashes(raw: str, setting: str = "api.tokens") -> tuple[str, ...]:
    hashes = tuple(h.strip().lower() for h in raw.split(",") if h.strip())
    for h in hashes:
        if len(h) != 64 or not set(h) <= _HEX:
            # Catch a raw token pasted where its digest belongs: it would never match.
            raise ValueError(f"{setting} must hold sha256 hex digests (64 hex characters), comma-separated")
    return hashes


class Digests:
    """The sha256 digests of the secrets a server accepts (tokens, webhook secrets)."""

    def __init__(self, hashes: Iterable[str]) -> None:
        self._hashes = tuple(hashes)

    def __bool__(self) -> bool:
        return bool(self._hashes)

    def matches(self, secret: str) -> bool:
        try:
            presented = hash_token(secret).encode("ascii")
        except UnicodeEncodeError:  # header bytes that are not UTF-8 (surrogate-escaped): never a secret
            return False
        matched = False
        for digest in self._hashes:
            matched |= hmac.compare_digest(presented, digest.encode("ascii"))
        return matched


class TokenAuth:
    def __init__(
        self, token_hashes: Iterable[str], *, private_reads: bool = False, webhook_hashes: Iterable[str] = ()
    ) -> None:
        self._tokens = Digests(token_hashes)
        self.private_reads = private_reads
        self.webhook_secrets = Digests(webhook_hashes)

    @classmethod
    def from_settings(cls, api: ApiSettings) -> TokenAuth:
        return cls(
            parse_token_hashes(api.tokens),
            private_reads=api.private_reads,
            webhook_hashes=parse_token_hashes(api.webhook_secrets, "api.webhook_secrets"),
        )

    @property
    def writes_enabled(self) -> bool:
        return bool(self._tokens)

    def is_valid(self, token: str) -> bool:
        return self._tokens.matches(token)

    def check(self, request: web.Request) -> None:
        """Raise the ApiError that refuses this request, or return if it may go on."""
        if request.path in PUBLIC_PATHS or request.path == WEBHOOK_PATH:
            return
        write = request.method not in SAFE_METHODS
        route = request.match_info.route.name or ""
        web_page = route.startswith("web_")
        if web_page and (write or route in WEB_OPEN_ROUTES):
            return  # the web catalog's forms check the signed-in cookie and their CSRF token
        if not write and not self.private_reads:
            return
        if write and not self.writes_enabled:
            raise Forbidden("writes are disabled: the server has no API tokens configured (api.tokens)")
        token = _bearer(request)
        if token is None and web_page:
            token = request.cookies.get(WEB_TOKEN_COOKIE)
        if token is None:
            raise Unauthorized()
        if not self.is_valid(token):
            raise Unauthorized("the bearer token is not valid")


def _bearer(request: web.Request) -> str | None:
    header = request.headers.get("Authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        return None
    return value.strip()


@web.middleware
async def auth_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    # Unmatched paths and methods fall through to their 404/405: refusing them with 401/403
    # would only hide which mistake the client made.
    if request.match_info.http_exception is None:
        request.app[AUTH_KEY].check(request)
    return await handler(request)
