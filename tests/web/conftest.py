"""Web catalog fixtures: the catalog's databases, shared rather than copied."""

from tests.catalog.conftest import (  # noqa: F401
    db,
    db_url,
    postgresql_url,
    sqlite_url,
    temp_databases,
)
