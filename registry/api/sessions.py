"""`read_session`: the catalog session of a read-only request.

SQLAlchemy's `async with session` closes the session in a task of its own, shielded from
cancellation. That task cost a turn of the event loop per request: the answer waited
behind every other request ready to run. A read-only session has no transaction to end
(SQLite reads run on the loop's thread, see registry.catalog.db), so it is closed in the
request's own task. On PostgreSQL closing it rolls back over the network, which a
cancellation (at shutdown) must not cut short, so there it still runs shielded in a task.
Writes keep `async with session.begin()`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from aiohttp import web
from sqlalchemy.ext.asyncio import AsyncSession

from registry.api.keys import SESSIONMAKER_KEY


@contextlib.asynccontextmanager
async def read_session(request: web.Request) -> AsyncIterator[AsyncSession]:
    session = request.app[SESSIONMAKER_KEY]()
    try:
        yield session
    finally:
        if session.bind is not None and session.bind.dialect.name == "sqlite":
            await session.close()
        else:
            await asyncio.shield(asyncio.ensure_future(session.close()))
