"""The one JSON error envelope and the middleware that turns every failure into it.

Every error a client sees has the shape `{"error": {"code", "message", "details"}}`,
built by `error_response` alone. Handlers raise `ApiError` subclasses (which carry their
status); routing errors from aiohttp, domain errors from the catalog and anything
unexpected are mapped here (catalog errors carry their own status and code), so no handler formats an error itself and no traceback ever
reaches a client.

A catalog database that cannot serve right now (down, restarting, unreachable, out of
connections, its pool exhausted, its file locked) is a 503 with `Retry-After`, naming the
database as the component: a client or a load balancer may retry, and nothing was wrong
with the request. Anything else unexpected is a 500 with the request id.
"""

from __future__ import annotations

import logging
import socket
import sqlite3
from collections.abc import Awaitable, Callable, Mapping
from http import HTTPStatus
from typing import Any, TypeVar

from aiohttp import web
from sqlalchemy import exc as sa_exc

from registry.api.keys import REQUEST_ID_KEY
from registry.api.replies import json_response
from registry.catalog.errors import CatalogError, InvalidCursor
from registry.responses import Error, ErrorBody

log = logging.getLogger("registry.api")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

class ApiError(Exception):
    """An error with an HTTP status, a stable machine code and structured details."""

    status: int = 500
    code: str = "internal_error"

    def __init__(
        self,
        message: str,
        *,
        details: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.details: dict[str, Any] = dict(details or {})
        self.headers: dict[str, str] = dict(headers or {})


class BadRequest(ApiError):
    status = 400
    code = "bad_request"


class InvalidParameter(BadRequest):
    """A query or path parameter with a value the route cannot use."""

    code = "invalid_parameter"

    def __init__(self, parameter: str, message: str, **details: Any) -> None:
        super().__init__(message, details={"parameter": parameter, **details})
        self.parameter = parameter


class UnknownParameter(InvalidParameter):
    code = "unknown_parameter"


class InvalidBody(BadRequest):
    code = "invalid_body"


class Unauthorized(ApiError):
    status = 401
    code = "unauthorized"

    def __init__(self, message: str = "a valid bearer token is required") -> None:
        super().__init__(message, headers={"WWW-Authenticate": 'Bearer realm="registry"'})


class Forbidden(ApiError):
    status = 403
    code = "forbidden"


class NotFound(ApiError):
    status = 404
    code = "not_found"


class Moved(ApiError):
    """A repo id the hub has moved: a permanent redirect to the repo's own id. The body is
    the envelope too, so a client that does not follow redirects learns where it went."""

    status = 308
    code = "moved"

    def __init__(self, message: str, repo_id: str, moved_to: str, location: str) -> None:
        super().__init__(
            message, details={"repo": repo_id, "moved_to": moved_to}, headers={"Location": location}
        )


class Conflict(ApiError):
    status = 409
    code = "conflict"


class ServiceUnavailable(ApiError):
    status = 503
    code = "unavailable"


T = TypeVar("T")


def required(request: web.Request, key: web.AppKey[T | None], message: str, component: str) -> T:
    """The application's `key`, a part this server may run without (the crawl launcher, the
    verifier): without it, a 503 naming the missing `component`."""
    value = request.app[key]
    if value is None:
        raise ServiceUnavailable(message, details={"component": component})
    return value


# Codes for the statuses aiohttp raises itself (routing, body size, ...).
_HTTP_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    406: "not_acceptable",
    408: "request_timeout",
    411: "length_required",
    413: "payload_too_large",
    414: "uri_too_long",
    415: "unsupported_media_type",
    429: "too_many_requests",
    431: "headers_too_large",
}


def error_response(
    status: int,
    code: str,
    message: str,
    details: Mapping[str, Any] | None = None,
    headers: Mapping[str, str] | None = None,
) -> web.Response:
    """The only place an error body is built."""
    body = Error(error=ErrorBody(code=code, message=message, details=dict(details or {})))
    # An odd detail value (a Path, a datetime) is written as its str(), never a 500.
    return json_response(body, status=status, headers=headers)


def status_code(status: int) -> str:
    """The error code of an HTTP status that no handler chose."""
    return _HTTP_CODES.get(status) or ("bad_request" if status < 500 else "internal_error")


def _from_http_exception(request: web.Request, exc: web.HTTPException) -> web.Response:
    status = exc.status
    code = status_code(status)
    details: dict[str, Any] = {}
    headers: dict[str, str] = {}
    if isinstance(exc, web.HTTPMethodNotAllowed):
        allowed = sorted(exc.allowed_methods)
        details = {"method": exc.method, "allowed": allowed}
        headers["Allow"] = ", ".join(allowed)
        message = f"method {exc.method} is not allowed on {request.path}"
    elif status == 404:
        message = f"no route matches {request.path}"
    else:
        # aiohttp's own text (e.g. "Maximum request body size ... exceeded") is safe to show.
        message = exc.text or exc.reason or HTTPStatus(status).phrase
    return error_response(status, code, message, details, headers)


def _unexpected(request: web.Request, exc: BaseException) -> web.Response:
    request_id = request.get(REQUEST_ID_KEY, "-")
    log.error(
        "unhandled error",
        exc_info=exc,
        extra={"request_id": request_id, "method": request.method, "path": request.path},
    )
    return error_response(
        500,
        "internal_error",
        "the server could not complete the request; quote the request id when reporting it",
        {"request_id": request_id},
    )


def _from_catalog(request: web.Request, exc: CatalogError) -> web.Response:
    if exc.status >= 500:
        return _unexpected(request, exc)
    details = dict(exc.details)
    if isinstance(exc, InvalidCursor):
        details.setdefault("parameter", "cursor")
    return error_response(exc.status, exc.code, exc.message, details)


# SQLSTATEs of a server that cannot serve now: connection exceptions (class 08), shutting
# down or starting up (57P01-57P03), too many connections (53300).
_UNAVAILABLE_SQLSTATES = frozenset({"08000", "08001", "08003", "08004", "08006", "57P01", "57P02", "57P03", "53300"})
DATABASE_RETRY_AFTER_S = 2


def database_unavailable(exc: BaseException) -> bool:
    """Whether `exc` says the catalog database cannot serve right now, rather than that
    something failed: the connection was lost, none could be made (refused, reset, name
    not resolved), the server is shutting down or full, no pooled connection came free
    within the pool's timeout, or SQLite's file stayed locked past its busy timeout."""
    if isinstance(exc, sa_exc.TimeoutError):  # the pool: all connections busy for pool_timeout
        return True
    if isinstance(exc, sa_exc.DBAPIError) and exc.connection_invalidated:
        return True
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:  # SQLAlchemy's error, the driver's, its cause
        seen.add(id(cause))
        if isinstance(cause, ConnectionError | socket.gaierror):
            return True
        if getattr(cause, "sqlstate", None) in _UNAVAILABLE_SQLSTATES:
            return True
        if isinstance(cause, sqlite3.OperationalError) and str(cause).startswith(("database is locked", "database is busy")):
            return True
        cause = getattr(cause, "orig", None) or cause.__cause__
    return False


def _unavailable(request: web.Request, exc: BaseException) -> web.Response:
    # The cause goes to the log, not the client: it may name hosts or credentials.
    log.warning("catalog database unavailable: %r", exc, extra={"request_id": request.get(REQUEST_ID_KEY, "-")})
    return error_response(
        503,
        "unavailable",
        "the catalog database is not available right now; retry shortly",
        {"component": "database"},
        {"Retry-After": str(DATABASE_RETRY_AFTER_S)},
    )


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except ApiError as exc:
        return error_response(exc.status, exc.code, exc.message, exc.details, exc.headers)
    except CatalogError as exc:
        return _from_catalog(request, exc)
    except web.HTTPException as exc:
        if exc.status < 400:  # redirects and the like are not errors
            raise
        return _from_http_exception(request, exc)
    except Exception as exc:
        if database_unavailable(exc):
            return _unavailable(request, exc)
        return _unexpected(request, exc)
