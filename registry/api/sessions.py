"""`read_session`: the catalog session of a read-only request.

SQLAlchemy's `async with session` closes the session in a task of its own, shielded from
cancellation. That task cost a turn of the event loop per request: the answer waited
behind every other request ready to run. Writes keep `async with session.begin()`.

The session is a `registry.catalog.readpath.ReadSession` on both databases: the catalog's
SELECTs run on the driver without SQLAlchemy's execution machinery, a quarter of the API's
CPU on SQLite and more on PostgreSQL (see there). It offers what the read routes use of an
AsyncSession and hands anything else to a real one, so it is passed on as one. It is closed
in the request's own task: on SQLite that ends a read transaction without a trip; on
PostgreSQL it rolls back on the driver, and a cancellation that cuts that short has the
connection closed and dropped from the pool rather than given back mid-ROLLBACK.

Either way a request's reads see one snapshot of the catalog, so that an answer put
together from several statements (an artifact and its shards, a repo and its artifacts, a
lineage walk, facet counts and the generation they are kept under) is never part before and
part after a crawl's commit: on SQLite the ReadSession's read transaction, on PostgreSQL a
`REPEATABLE READ READ ONLY` transaction (at READ COMMITTED, the default, each statement
reads a snapshot of its own). A read-only transaction at that level never fails for
serialization, and a write in it is refused. An engine the read path does not take (echo
on: its statements must be logged) reads through SQLAlchemy's session at the same level,
set on the driver's connection and sent with the BEGIN: no extra round trip.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import cast

from aiohttp import web
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from registry.api.keys import SESSIONMAKER_KEY
from registry.catalog.readpath import SNAPSHOT_READ, ReadSession, uses_read_path


@contextlib.asynccontextmanager
async def read_session(request: web.Request) -> AsyncIterator[AsyncSession]:
    async with open_read_session(request.app[SESSIONMAKER_KEY]) as session:
        yield session


@contextlib.asynccontextmanager
async def open_read_session(sessions: async_sessionmaker[AsyncSession]) -> AsyncIterator[AsyncSession]:
    """A read-only session reading one snapshot of the catalog (see the module doc)."""
    engine = sessions.kw.get("bind")
    if isinstance(engine, AsyncEngine) and uses_read_path(engine):
        lean = ReadSession(engine, sessions)
        try:
            yield cast(AsyncSession, lean)
        finally:
            await lean.close()
        return
    session = sessions()
    try:
        if session.bind is not None and session.bind.dialect.name == "postgresql":
            await session.connection(execution_options=SNAPSHOT_READ)
        yield session
    finally:
        if session.bind is not None and session.bind.dialect.name == "sqlite":
            await session.close()
        else:
            await asyncio.shield(asyncio.ensure_future(session.close()))
