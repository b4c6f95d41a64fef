"""`read_session`: the catalog session of a read-only request.

The session is a `registry.catalog.readpath.ReadSession`: the catalog's SELECTs run on the
read path (SQLite: read-only connections of the catalog's own, inline on the event loop
within a budget; PostgreSQL: the pool's asyncpg connection), without SQLAlchemy's execution
machinery, and the few session methods the routes use besides (`get`, `scalars`) go to a
real AsyncSession. It is closed in the request's own task: SQLAlchemy's `async with session`
closes in a task of its own, shielded from cancellation, which cost a turn of the event loop
per request. Writes keep `async with session.begin()`.

Either way a request's reads see one snapshot of the catalog, so that an answer put
together from several statements (an artifact and its shards, a repo and its artifacts, a
lineage walk, facet counts and the generation they are kept under) is never part before and
part after a crawl's commit: on SQLite a read transaction, on PostgreSQL a `REPEATABLE READ
READ ONLY` transaction (at READ COMMITTED, the default, each statement reads a snapshot of
its own). A read-only transaction at that level never fails for serialization, and a write
in it is refused.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from aiohttp import web
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from registry.api.keys import SESSIONMAKER_KEY
from registry.catalog.readpath import CATALOG_READS, CatalogReads, ReadSession


@contextlib.asynccontextmanager
async def read_session(request: web.Request) -> AsyncIterator[ReadSession]:
    async with open_read_session(request.app[SESSIONMAKER_KEY]) as session:
        yield session


@contextlib.asynccontextmanager
async def open_read_session(sessions: async_sessionmaker[AsyncSession]) -> AsyncIterator[ReadSession]:
    """A read-only session reading one snapshot of the catalog (see the module doc): on the
    read path of the `Database` the sessions belong to; a session factory of another kind
    reads through SQLAlchemy alone."""
    reads = sessions.kw.get("info", {}).get(CATALOG_READS)
    if not isinstance(reads, CatalogReads):
        engine = sessions.kw.get("bind")
        if not isinstance(engine, AsyncEngine):
            raise TypeError("a read-only session needs a session factory bound to an engine")
        reads = CatalogReads(engine, sessions, read_path=False)  # nothing to close
    session = ReadSession(reads)
    try:
        yield session
    finally:
        await session.close()
