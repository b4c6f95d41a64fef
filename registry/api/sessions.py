"""`read_session`: the catalog session of a read-only request.

SQLAlchemy's `async with session` closes the session in a task of its own, shielded from
cancellation. That task cost a turn of the event loop per request: the answer waited
behind every other request ready to run. A read-only session has no transaction to end
(SQLite reads run on the loop's thread, see registry.catalog.db), so it is closed in the
request's own task. On PostgreSQL closing it rolls back over the network, which a
cancellation (at shutdown) must not cut short, so there it still runs shielded in a task.
Writes keep `async with session.begin()`.

On SQLite the session is a `registry.catalog.readpath.ReadSession`: the catalog's SELECTs
run on the driver without SQLAlchemy's execution machinery, a quarter of the API's CPU
(see there). It offers what the read routes use of an AsyncSession and hands anything
else to a real one, so it is passed on as one.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import cast

from aiohttp import web
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession

from registry.api.keys import SESSIONMAKER_KEY
from registry.catalog.readpath import ReadSession, uses_read_path


@contextlib.asynccontextmanager
async def read_session(request: web.Request) -> AsyncIterator[AsyncSession]:
    sessions = request.app[SESSIONMAKER_KEY]
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
        yield session
    finally:
        if session.bind is not None and session.bind.dialect.name == "sqlite":
            await session.close()
        else:
            await asyncio.shield(asyncio.ensure_future(session.close()))
