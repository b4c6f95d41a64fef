"""Errors of the catalog area; each carries a stable `code` for the API's error envelope."""

from __future__ import annotations

from typing import Any


class CatalogError(Exception):
    code = "catalog_error"
    status = 500

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.details = details

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, "details": self.details}


class InvalidCursor(CatalogError):
    """A pagination cursor that was not made by this server for this sort."""

    code = "invalid_cursor"
    status = 400


class InvalidQuery(CatalogError):
    """An unknown sort key, status or an impossible filter value."""

    code = "invalid_query"
    status = 400


class RepoNotFound(CatalogError):
    code = "repo_not_found"
    status = 404


class ArtifactNotFound(CatalogError):
    """A filter names an artifact id the catalog does not hold (`draft_for`)."""

    code = "artifact_not_found"
    status = 404


class SchemaMismatch(CatalogError):
    """The database is not at the schema revision this code was written for."""

    code = "schema_mismatch"
    status = 503
