"""Engine and session factory from the settings.

SQLite gets WAL (readers never block the writer), enforced foreign keys (off by default in
SQLite) and a busy timeout so concurrent writers wait instead of failing at once.

aiosqlite runs each sqlite3 call on the connection's own thread and wakes the event loop
for every one, and SQLAlchemy's adapter makes four such calls per statement (open a
cursor, execute, fetch, close). `_OneTripCursor` does the four in one trip: under load
each trip is a wait for a turn of the loop, so a page of eight statements waited 32 turns.
"""

from __future__ import annotations

import collections
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import event
from sqlalchemy.connectors.asyncio import AsyncAdapt_dbapi_connection
from sqlalchemy.dialects.sqlite.aiosqlite import (
    AsyncAdapt_aiosqlite_connection,
    AsyncAdapt_aiosqlite_cursor,
    AsyncAdapt_aiosqlite_dbapi,
)
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker, create_async_engine
from sqlalchemy.util import EMPTY_DICT
from sqlalchemy.util.concurrency import await_

from registry.config import Settings

SQLITE_BUSY_TIMEOUT_MS = 30_000
SQLITE_POOL_SIZE = 32
SQLITE_POOL_OVERFLOW = 32
SQLITE_MMAP_BYTES = 1 << 30  # the address space to map per connection; a larger file maps its first GiB


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
    cursor.execute("PRAGMA synchronous=NORMAL")  # safe with WAL; a crash loses no committed-and-synced page
    # Reads straight from the OS page cache through a mapping of the file, instead of a
    # read() and a copy into each connection's own small page cache per page touched.
    cursor.execute(f"PRAGMA mmap_size={SQLITE_MMAP_BYTES}")
    cursor.close()


def _run_statement(
    conn: sqlite3.Connection, operation: str, parameters: Any, many: bool
) -> tuple[Any, list[Any], int, int | None]:
    """On the connection's thread: the whole life of one cursor."""
    cursor = conn.cursor()
    try:
        if many:
            cursor.executemany(operation, parameters)
        elif parameters is None:
            cursor.execute(operation)
        else:
            cursor.execute(operation, parameters)
        description = cursor.description
        rows = cursor.fetchall() if description else []
        return description, rows, cursor.rowcount, cursor.lastrowid
    finally:
        cursor.close()


class _OneTripCursor(AsyncAdapt_aiosqlite_cursor):
    """SQLAlchemy's aiosqlite cursor, with each statement one trip to aiosqlite's thread.

    Rows are fetched whole at execute, as the stock (non-streaming) cursor does too.
    Relies on aiosqlite's `Connection._execute(fn)` (run fn on the connection's thread)."""

    __slots__ = ("_description", "_lastrowid", "_rowcount")

    def __init__(self, adapt_connection: AsyncAdapt_dbapi_connection) -> None:
        self._adapt_connection = adapt_connection
        self._connection = adapt_connection._connection
        self._soft_closed_memoized = EMPTY_DICT
        self._rows = collections.deque()
        self._description: Any = None
        self._rowcount = -1
        self._lastrowid: int | None = None

    @property
    def description(self) -> Any:
        return self._description

    @property
    def rowcount(self) -> int:
        return self._rowcount

    @property
    def lastrowid(self) -> Any:
        return self._lastrowid

    async def _async_soft_close(self) -> None:
        return None  # nothing stays open between trips

    def close(self) -> None:
        self._rows.clear()

    def execute(self, operation: Any, parameters: Any = None) -> Any:
        try:
            return await_(self._run(operation, parameters, False))
        except Exception as error:
            self._adapt_connection._handle_exception(error)

    def executemany(self, operation: Any, seq_of_parameters: Any) -> Any:
        try:
            return await_(self._run(operation, seq_of_parameters, True))
        except Exception as error:
            self._adapt_connection._handle_exception(error)

    async def _run(self, operation: Any, parameters: Any, many: bool) -> None:
        aio = self._connection
        async with self._adapt_connection._execute_mutex:
            result = await aio._execute(lambda: _run_statement(aio._conn, operation, parameters, many))
        self._description, rows, self._rowcount, self._lastrowid = result
        self._rows = collections.deque(rows)

    def setinputsizes(self, *inputsizes: Any) -> None:
        return None


class _OneTripConnection(AsyncAdapt_aiosqlite_connection):
    """Statements in one trip each; COMMIT and ROLLBACK only when a transaction is open.

    sqlite3 opens a transaction only before a write, so a read-only request has nothing to
    end, yet SQLAlchemy rolls back on every return of the connection to the pool: a trip
    to the thread per request for nothing."""

    __slots__ = ()
    _cursor_cls = _OneTripCursor

    def _in_transaction(self) -> bool:
        try:
            return bool(self._connection._conn.in_transaction)
        except (ValueError, sqlite3.Error):  # not connected, or a sqlite3 that checks threads
            return True  # let the stock path do (or report) it

    def rollback(self) -> None:
        if self._in_transaction():
            super().rollback()

    def commit(self) -> None:
        if self._in_transaction():
            super().commit()


class _OneTripDBAPI(AsyncAdapt_aiosqlite_dbapi):
    def connect(self, *arg: Any, **kw: Any) -> AsyncAdapt_aiosqlite_connection:
        stock = super().connect(*arg, **kw)
        return _OneTripConnection(self, stock._connection)


def create_engine(url: str, *, echo: bool = False, **kwargs: Any) -> AsyncEngine:
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:"):
        Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
    if parsed.get_backend_name() == "sqlite" and parsed.get_driver_name() == "aiosqlite":
        import aiosqlite

        kwargs.setdefault("module", _OneTripDBAPI(aiosqlite, sqlite3))
        if parsed.database not in (None, "", ":memory:"):
            # Keep the connections a busy server uses open: past the default pool of 5, each
            # burst opened and closed "overflow" connections, and a SQLite connection costs
            # a thread, the file open, the pragmas and a schema parse. Idle ones cost little.
            kwargs.setdefault("pool_size", SQLITE_POOL_SIZE)
            kwargs.setdefault("max_overflow", SQLITE_POOL_OVERFLOW)
    engine = create_async_engine(parsed, echo=echo, **kwargs)
    if engine.dialect.name == "sqlite":
        event.listen(engine.sync_engine, "connect", _sqlite_pragmas)
    return engine


def session_factory(engine: AsyncEngine) -> async_sessionmaker[AsyncSession]:
    # expire_on_commit=False: rows read in a transaction stay usable after it, without lazy IO.
    return async_sessionmaker(engine, expire_on_commit=False)


@dataclass(frozen=True)
class Database:
    """An engine and its session factory: what the CLI, workers and API pass around."""

    engine: AsyncEngine
    sessions: async_sessionmaker[AsyncSession]

    @classmethod
    def from_url(cls, url: str, *, echo: bool = False, **kwargs: Any) -> Database:
        engine = create_engine(url, echo=echo, **kwargs)
        return cls(engine, session_factory(engine))

    @classmethod
    def from_settings(cls, settings: Settings) -> Database:
        return cls.from_url(settings.database_url, echo=settings.database.echo)

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    async def dispose(self) -> None:
        await self.engine.dispose()

    async def __aenter__(self) -> Database:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.dispose()
