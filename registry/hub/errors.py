"""Typed errors for everything that goes wrong talking to a hub or its CDN.

Each error carries a stable `code`, the `url` it is about, the HTTP `status` (when there
was a response), the server's `request_id` (X-Request-Id, for a support ticket) and a
`message`. `retryable` says whether the same request may succeed later; the range reader
retries those itself and raises them only when its attempts or wait budget run out.
Errors of the file's content (bad GGUF) are `registry.gguf.errors.GGUFError`, not these.
"""

from __future__ import annotations

from collections.abc import Mapping


class HubError(Exception):
    code = "hub_error"
    retryable = False

    def __init__(
        self,
        message: str,
        *,
        url: str | None = None,
        status: int | None = None,
        request_id: str | None = None,
    ) -> None:
        self.message = message
        self.url = url
        self.status = status
        self.request_id = request_id
        parts = [message]
        if status is not None:
            parts.append(f"status {status}")
        if url is not None:
            parts.append(url)
        if request_id:
            parts.append(f"request id {request_id}")
        super().__init__(" | ".join(parts))

    def to_dict(self) -> dict[str, object]:
        return {
            "code": self.code,
            "message": self.message,
            "url": self.url,
            "status": self.status,
            "request_id": self.request_id,
        }


class HubHTTPError(HubError):
    """An HTTP status the caller cannot do anything about (400, 405, ...)."""

    code = "http_error"


class NotAuthorized(HubError):
    """401/403 that is not a missing repo: bad token or no access."""

    code = "not_authorized"


class RepoNotFound(HubError):
    code = "repo_not_found"


class RevisionNotFound(HubError):
    code = "revision_not_found"


class EntryNotFound(HubError):
    """The file does not exist in the repo at that revision."""

    code = "entry_not_found"


class GatedRepo(HubError):
    """The repo needs its terms accepted by the token's user before files can be read."""

    code = "gated_repo"


class RateLimited(HubError):
    code = "rate_limited"
    retryable = True

    def __init__(
        self,
        message: str,
        *,
        retry_after: float | None = None,
        url: str | None = None,
        status: int | None = None,
        request_id: str | None = None,
    ) -> None:
        super().__init__(message, url=url, status=status, request_id=request_id)
        self.retry_after = retry_after  # seconds the server asked for (Retry-After, RateLimit)


class ServerError(HubError):
    code = "server_error"
    retryable = True


class HubConnectionError(HubError):
    """Connection refused, reset mid-body, or the server closed early."""

    code = "connection_error"
    retryable = True


class HubTimeout(HubError):
    code = "timeout"
    retryable = True


class TruncatedBody(HubError):
    """A response body shorter than the range it was asked for and announced."""

    code = "truncated_body"
    retryable = True


class RangeNotSatisfiable(HubError):
    """416: the range starts at or beyond the end of the file."""

    code = "range_not_satisfiable"


class InvalidResponse(HubError):
    """A response that breaks HTTP rules we rely on (bad Content-Range, redirect loop...)."""

    code = "invalid_response"


class EncodedBody(InvalidResponse):
    """A body sent compressed although identity was asked for: its bytes are not the file's."""

    code = "encoded_body"
    retryable = True  # a CDN edge's doing, not the file's: another request may get the bytes


class FileChanged(HubError):
    """The file changed between two reads of the same header (its ETag moved)."""

    code = "file_changed"


class HeaderTooLarge(HubError):
    """The header needs more bytes than the per-file budget allows."""

    code = "header_too_large"

    def __init__(self, message: str, *, needed: int, budget: int, url: str | None = None) -> None:
        super().__init__(message, url=url)
        self.needed = needed
        self.budget = budget


_BY_ERROR_CODE: Mapping[str, type[HubError]] = {
    "RepoNotFound": RepoNotFound,
    "RevisionNotFound": RevisionNotFound,
    "EntryNotFound": EntryNotFound,
    "GatedRepo": GatedRepo,
}


def error_for_status(
    status: int,
    *,
    url: str,
    message: str,
    request_id: str | None = None,
    error_code: str | None = None,
    retry_after: float | None = None,
) -> HubError:
    """The one mapping from an HTTP error response to our error type."""
    cls: type[HubError]
    if error_code is not None and error_code in _BY_ERROR_CODE:
        cls = _BY_ERROR_CODE[error_code]
    elif status == 429:
        return RateLimited(message, retry_after=retry_after, url=url, status=status, request_id=request_id)
    elif status == 416:
        cls = RangeNotSatisfiable
    elif status in (401, 403):
        cls = NotAuthorized
    elif status == 404:
        cls = EntryNotFound
    elif status >= 500:
        cls = ServerError
    else:
        cls = HubHTTPError
    return cls(message, url=url, status=status, request_id=request_id)
