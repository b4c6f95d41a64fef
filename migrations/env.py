"""Alembic environment, async.

Three ways in: `registry db ...` and the test suite hand over an open connection in
`config.attributes["connection"]` (so migrations run inside their event loop); running
`alembic` directly uses `sqlalchemy.url` when set, else the registry settings.
"""

from __future__ import annotations

import asyncio

from alembic import context
from sqlalchemy.engine import Connection

from registry.catalog.db import create_engine
from registry.catalog.models import Base
from registry.catalog.search import MEMORY_SORT_INDEX
from registry.catalog.search_index import is_search_index_object
from registry.config import load_settings

config = context.config
target_metadata = Base.metadata


def include_object(obj: object, name: str | None, type_: str, reflected: bool, compare_to: object) -> bool:
    # The FTS5 table, its shadow tables and triggers, and the pg_trgm index are created by
    # hand in a migration (SQLAlchemy cannot declare them); autogenerate must not drop them.
    # procrastinate's tables, types and functions (distributed mode) are its own schema,
    # applied by `registry db upgrade` from the installed procrastinate, not by alembic.
    if name is not None and name.startswith("procrastinate_"):
        return False
    # SQLite's index for the sort by memory is made by hand too: the models do not declare
    # an index for one database only.
    return not is_search_index_object(name) and name != MEMORY_SORT_INDEX


def _configure(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        include_object=include_object,
        render_as_batch=connection.dialect.name == "sqlite",  # SQLite alters by copying the table
        compare_type=True,
    )


def _run(connection: Connection) -> None:
    _configure(connection)
    with context.begin_transaction():
        context.run_migrations()


async def _run_async(url: str) -> None:
    engine = create_engine(url)
    try:
        async with engine.connect() as connection:
            await connection.run_sync(_run)
            await connection.commit()
    finally:
        await engine.dispose()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    url = config.get_main_option("sqlalchemy.url") or load_settings().database_url
    asyncio.run(_run_async(url))


if context.is_offline_mode():
    url = config.get_main_option("sqlalchemy.url") or load_settings().database_url
    context.configure(
        url=url, target_metadata=target_metadata, literal_binds=True, include_object=include_object
    )
    with context.begin_transaction():
        context.run_migrations()
else:
    run_migrations_online()
