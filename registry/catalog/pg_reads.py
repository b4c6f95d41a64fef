"""The API's reads of a PostgreSQL catalog: statements on the asyncpg connection that the
engine's pool hands out (`AsyncEngine.raw_connection()`, `.driver_connection`), through
public APIs of SQLAlchemy and asyncpg only.

A request's reads are one `REPEATABLE READ READ ONLY` transaction begun on the driver (one
BEGIN, as SQLAlchemy's would be) and rolled back at its end, so the pool's own reset finds
nothing to do. Statements go through asyncpg's statement cache (`fetch`); the first run of a
shape prepares it once to learn the column types that choose SQLAlchemy's result processors.

A connection whose state is unknown after a request (cut off mid-statement by a
cancellation, lost, a ROLLBACK that failed) is closed and dropped from the pool. A lost one
also retires every connection the pool made before it, as SQLAlchemy's own execution does:
after a server restart they are all gone, and each would otherwise fail a request of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import asyncpg
from sqlalchemy import event, exc
from sqlalchemy.engine.interfaces import DBAPIConnection
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.pool import ConnectionPoolEntry, PoolProxiedConnection

from registry.catalog.shapes import Shape

MADE_AT = "registry.made_at"  # a pooled connection's info: when the pool made it (monotonic)
CLOSE_TIMEOUT_S = 2.0  # a graceful close of a connection in an unknown state, then a hard one
# SQLSTATE classes and the DB-API error each stands for, as the asyncpg dialect maps them.
_ERROR_CLASSES = {"23": "IntegrityError", "42": "ProgrammingError"}


class PostgresReads:
    """Reads of one engine's pool; knows when a lost connection retired the older ones."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self.dialect = engine.dialect
        self.retired_before = 0.0  # connections made before this (monotonic) are not used
        event.listen(engine.sync_engine, "connect", _stamp)

    async def open(self) -> PostgresReadConnection:
        """A pooled connection with its snapshot begun; one made before a lost connection was
        found is dropped first, and one that fails to begin is discarded."""
        while True:
            raw = await self.engine.raw_connection()
            if raw.info.get(MADE_AT, 0.0) > self.retired_before:
                break
            await _discard(raw)
        driver = raw.driver_connection
        assert driver is not None  # a connection the pool just handed out
        try:
            transaction = driver.transaction(isolation="repeatable_read", readonly=True)
            await transaction.start()
        except BaseException as error:
            raise await self.discarded(raw, "BEGIN", error) from error
        return PostgresReadConnection(self, raw, driver, transaction)

    async def discarded(self, raw: PoolProxiedConnection, sql: str, error: BaseException) -> BaseException:
        """After `error` at `sql` (a BEGIN or ROLLBACK of the read path's own) the connection is
        in no known state: discard it, and answer what to raise (SQLAlchemy's error for the
        driver's; a cancellation as it is)."""
        if not isinstance(error, Exception):
            await _discard(raw)
            return error
        translated, lost = self.translated(raw.driver_connection, sql, (), error)
        await _discard(raw)
        if lost:
            self.retired_before = time.monotonic()
        return translated

    def translated(self, driver: Any, sql: str, args: tuple[Any, ...], error: Exception) -> tuple[Exception, bool]:
        """asyncpg's error as SQLAlchemy's execution raises it (its DB-API class for the error,
        wrapped in SQLAlchemy's exception), and whether the connection was lost."""
        dbapi = self.dialect.loaded_dbapi
        lost = bool(driver.is_closed()) or isinstance(error, OSError | asyncpg.ConnectionDoesNotExistError)
        if isinstance(error, asyncpg.InterfaceError):
            name = "InterfaceError"
        elif isinstance(error, asyncpg.PostgresError):
            name = _ERROR_CLASSES.get(str(error.sqlstate or "")[:2], "Error")
        elif isinstance(error, OSError):
            name = "OperationalError"
        else:
            name = "Error"
        wrapped = getattr(dbapi, name)(f"{type(error)}: {error}")
        wrapped.__cause__ = error
        translated = exc.DBAPIError.instance(sql, args, wrapped, dbapi.Error, connection_invalidated=lost)
        return translated, lost


def _stamp(_dbapi_connection: DBAPIConnection, record: ConnectionPoolEntry) -> None:
    record.info[MADE_AT] = time.monotonic()


async def _discard(raw: PoolProxiedConnection) -> None:
    """Close the connection and have the pool forget it: a graceful close first, which lets
    asyncpg tell the server to cancel a statement cut off (else it runs on there)."""
    driver = raw.driver_connection
    if driver is not None:
        with contextlib.suppress(Exception):  # gone already: the invalidation below ends what is left
            await asyncio.wait_for(driver.close(timeout=CLOSE_TIMEOUT_S), CLOSE_TIMEOUT_S * 2)
    raw.invalidate()


class PostgresReadConnection:
    """One request's pooled connection, in its read-only snapshot."""

    def __init__(self, owner: PostgresReads, raw: PoolProxiedConnection, driver: Any, transaction: Any) -> None:
        self._owner = owner
        self._raw: PoolProxiedConnection | None = raw
        self._driver = driver
        self._transaction = transaction
        self._broken = False

    async def fetch(self, shape: Shape, sql: str, args: tuple[Any, ...]) -> list[Any]:
        try:
            if shape.driver_types is None:
                prepared = await self._driver.prepare(sql)
                shape.driver_types = tuple(a.type.oid for a in prepared.get_attributes())
                raw = await prepared.fetch(*args)
            else:
                raw = await self._driver.fetch(sql, *args)
        except Exception as error:
            translated, lost = self._owner.translated(self._driver, sql, args, error)
            if lost:
                self._broken = True
                self._owner.retired_before = time.monotonic()
            raise translated from error
        except BaseException:
            self._broken = True  # cancelled mid-statement: what the connection is doing is unknown
            raise
        return shape.rows(raw, shape.driver_types)

    async def close(self) -> None:
        raw, self._raw = self._raw, None
        if raw is None:
            return
        if self._broken:
            await _discard(raw)
            return
        try:
            await self._transaction.rollback()
        except BaseException as error:
            failure = await self._owner.discarded(raw, "ROLLBACK", error)
            if failure is error:
                raise
            raise failure from error
        raw.close()  # back to the pool; its reset finds no transaction of SQLAlchemy's to end


__all__ = ["PostgresReadConnection", "PostgresReads"]
