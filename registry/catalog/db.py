"""Engine and session factory from the settings.

SQLite gets WAL (readers never block the writer), enforced foreign keys (off by default in
SQLite) and a busy timeout so concurrent writers wait instead of failing at once.

aiosqlite runs each sqlite3 call on the connection's own thread and wakes the event loop
for every one, and SQLAlchemy's adapter makes four such calls per statement (open a
cursor, execute, fetch, close). `_OneTripCursor` does the four in one trip: under load
each trip is a wait for a turn of the loop, so a page of eight statements waited 32 turns.

Reads go further: a SELECT outside a transaction runs on the calling (event loop's) thread,
no trip at all. In WAL mode a read never waits for a lock, and the catalog's reads are index
seeks that take a fraction of a millisecond, less than the trip to the thread and back (the
hand-over, the wake-up of the loop, and the two threads taking turns at the GIL). A read
that runs longer than `inline_read_ms` is interrupted by SQLite's progress handler and run
again on the connection's thread, so one slow query never holds the loop for longer than
that. Writes, and reads inside a write transaction, always take the thread: they may wait
up to the busy timeout for another writer. A read transaction (`begin_read`, `end_read`:
the statements of one API request reading one snapshot of the file) reads inline too. A
read on the thread whose caller is cancelled (a timeout, a client gone) is interrupted:
SQLite stops it at its next step instead of scanning on for nobody.

A statement on a connection's thread needs the GIL a few times (to start, after each call
into SQLite, to hand back its result). CPython 3.11 asks the holder to drop the GIL only
after a waiter has waited a whole switch interval with no release in between, and a busy
event loop releases and retakes it at every turn (each poll for I/O): the waiter wakes too
late every time and starves until the loop goes idle. A 25 ms scan took 20 s under a busy
loop. `_ThreadTurns` gives such statements their turns (see there).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import contextvars
import functools
import re
import sqlite3
import threading
import time
import weakref
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, cast

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
# Per engine (per process): within PostgreSQL's default max_connections of 100 for a few
# `serve --workers` processes and workers, each keeping only what it has needed at once.
POSTGRES_POOL_SIZE = 20
POSTGRES_POOL_OVERFLOW = 10
SQLITE_MMAP_BYTES = 1 << 30  # the address space to map per connection; a larger file maps its first GiB
SQLITE_INLINE_READ_MS = 5.0  # the longest a read runs on the event loop's thread (0: never)
# SQLite's virtual-machine steps between two calls of the progress handler: a few tens of
# microseconds of work, so the handler costs little and notices the budget spent in time.
_PROGRESS_STEPS = 2000
# While a statement runs on a connection's thread, the loop pauses this long every period
# (see `_ThreadTurns`): the thread's share of the loop's thread.
_THREAD_TURN_PERIOD_S = 0.001
_THREAD_TURN_PAUSE_S = 0.0002
_T = TypeVar("_T")
_WRITE_WORD = re.compile(r"\b(INSERT|UPDATE|DELETE|REPLACE)\b")
_IDLE = threading.Event()  # a connection's thread before its first statement
_IDLE.set()


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    # First: switching a new file to WAL takes its write lock, which processes opening it
    # together then wait for instead of failing with "database is locked".
    cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
    cursor.execute("PRAGMA journal_mode=WAL")
    mode = cursor.fetchone()
    if isinstance(dbapi_connection, _OneTripConnection) and (mode is None or str(mode[0]).lower() != "wal"):
        # Without WAL (an in-memory database) a read can wait for a writer's lock, and a
        # read waiting on the loop's thread could wait for a writer that needs the loop.
        dbapi_connection.stop_inline_reads()
    cursor.execute("PRAGMA foreign_keys=ON")
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


@functools.lru_cache(maxsize=4096)
def _is_read(operation: str) -> bool:
    """A SELECT, or a WITH whose text names no write (SQLAlchemy's statements are few and
    reused, so the answer is cached per statement text)."""
    head = operation.lstrip()[:6].upper()
    return head == "SELECT" or (head[:4] == "WITH" and _WRITE_WORD.search(operation.upper()) is None)


# A longer budget for the reads of one block (`longer_inline_reads`); 0: the engine's.
_BUDGET_OVERRIDE_S: contextvars.ContextVar[float] = contextvars.ContextVar("inline_read_budget", default=0.0)


@contextlib.contextmanager
def longer_inline_reads(budget_ms: float) -> Iterator[None]:
    """Reads in this block may hold the loop's thread for up to `budget_ms` (where inline
    reads are on): for a read that is known to take a few milliseconds and is done once to
    be kept, such as walking a big lineage family into a memo. Holding the loop that long
    once delays the requests behind it by as much; stopping at the usual budget and
    running again on the connection's thread delayed this one request by tens of
    milliseconds under load, waiting for the other thread and then for a turn of the loop."""
    token = _BUDGET_OVERRIDE_S.set(budget_ms / 1000)
    try:
        yield
    finally:
        _BUDGET_OVERRIDE_S.reset(token)


class _ThreadTurns:
    """One event loop's fairness to the connection threads its statements wait on.

    While any statement of this loop runs on a connection's thread, the loop sleeps
    `_THREAD_TURN_PAUSE_S` (releasing the GIL) every `_THREAD_TURN_PERIOD_S`, so the thread
    takes the GIL within a period instead of starving (see the module doc). With nothing on
    a thread it costs nothing: no timer runs. Under a busy loop a 25 ms scan on the thread
    took 20 s without these turns and 37-80 ms with them."""

    __slots__ = ("_loop", "_pending", "_timer")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._pending = 0
        self._timer: asyncio.TimerHandle | None = None

    @classmethod
    async def wait(cls, work: Awaitable[_T]) -> _T:
        """`work`'s result, with turns for threads while it runs. The loop is looked up here,
        when the wait runs on it: a rollback at pool cleanup outside any loop fails as it
        always did (the coroutine is never started), not on the lookup."""
        loop = asyncio.get_running_loop()
        turns = _TURNS.get(loop)
        if turns is None:
            turns = _TURNS[loop] = cls(loop)
        return await turns._wait(work)

    async def _wait(self, work: Awaitable[_T]) -> _T:
        self._pending += 1
        if self._timer is None:
            self._timer = self._loop.call_later(_THREAD_TURN_PERIOD_S, self._turn)
        try:
            return await work
        finally:
            self._pending -= 1

    def _turn(self) -> None:
        if not self._pending:
            self._timer = None
            return
        time.sleep(_THREAD_TURN_PAUSE_S)
        self._timer = self._loop.call_later(_THREAD_TURN_PERIOD_S, self._turn)


_TURNS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _ThreadTurns] = weakref.WeakKeyDictionary()


class _InlineReads:
    """One connection's reads on the calling thread, within a time budget (see the module doc)."""

    __slots__ = ("budget_s", "deadline", "tripped")

    def __init__(self, budget_s: float) -> None:
        self.budget_s = budget_s
        self.deadline = 0.0  # 0: no budget running (the statement is on the connection's thread)
        self.tripped = False

    def _over_budget(self) -> int:
        if self.deadline and time.perf_counter() > self.deadline:
            self.tripped = True
            return 1  # SQLite stops the statement: "interrupted"
        return 0

    def run(
        self, conn: sqlite3.Connection, operation: str, parameters: Any
    ) -> tuple[Any, list[Any], int, int | None] | None:
        """The statement's result, or None: it ran out of budget and was stopped, nothing read."""
        self.tripped = False
        self.deadline = time.perf_counter() + (_BUDGET_OVERRIDE_S.get() or self.budget_s)
        # Only while the loop's thread runs the statement: the handler is Python, and each
        # call takes the GIL. Left on for a statement on the connection's thread, it made
        # that thread and the busy loop's take turns at the GIL thousands of times a scan,
        # each turn waiting out the switch interval: the scan crawled and held up the loop.
        conn.set_progress_handler(self._over_budget, _PROGRESS_STEPS)
        try:
            return _run_statement(conn, operation, parameters, False)
        except sqlite3.OperationalError:
            if self.tripped:
                return None
            raise
        finally:
            conn.set_progress_handler(None, 0)
            self.deadline = 0.0


async def run_statement(
    adapt: _OneTripConnection, operation: str, parameters: Any, many: bool
) -> tuple[Any, list[Any], int, int | None]:
    """One statement on an aiosqlite connection of this module's engines: a read outside a
    transaction or in a read transaction inline (within the connection's budget), anything
    else, or a read that ran
    out of budget, in one trip to the connection's thread. Returns what `_run_statement`
    does; raises sqlite3's own errors."""
    aio = adapt._connection
    async with adapt._execute_mutex:
        inline = adapt._inline
        if inline is not None and not many and (adapt._reading or not aio._conn.in_transaction) and _is_read(operation):
            result = inline.run(aio._conn, operation, parameters)
            if result is not None:
                return result
        done = adapt._thread_done = threading.Event()
        dropped = threading.Event()  # set when nobody waits for a read's rows any more

        def run() -> tuple[Any, list[Any], int, int | None]:
            try:
                if dropped.is_set():  # cancelled while still queued for the thread
                    raise sqlite3.OperationalError("interrupted")
                return _run_statement(aio._conn, operation, parameters, many)
            finally:
                done.set()

        try:
            return await _ThreadTurns.wait(aio._execute(run))
        except asyncio.CancelledError:
            if not many and _is_read(operation):
                # Nobody waits for the rows any more (a timeout, a client gone): SQLite
                # stops the read at its next step instead of running it to its end, and
                # one still waiting for its turn on the thread does not start.
                dropped.set()
                aio._conn.interrupt()
            raise


async def begin_read(adapt: _OneTripConnection) -> None:
    """Open a read transaction on a connection of this module's SQLite engines: the reads
    until `end_read` see one snapshot of the file, the one of the first of them (WAL), and
    run inline as reads outside a transaction do. Nothing but reads may run in it."""
    aio = adapt._connection
    async with adapt._execute_mutex:
        if adapt._inline is not None:
            aio._conn.execute("BEGIN")  # no I/O: SQLite takes the snapshot at the first read
        else:
            await _ThreadTurns.wait(aio._execute(lambda: aio._conn.execute("BEGIN")))
        adapt._reading = True


async def end_read(adapt: _OneTripConnection) -> None:
    """End `begin_read`'s transaction: inline when reads are and the connection's thread
    is idle, else on that thread, after the statement it may still run (one of a cancelled
    request, interrupted by `run_statement`): inline, the call would wait on the loop's
    thread for SQLite's lock on the connection until that statement ends."""
    if not adapt._reading:
        return
    adapt._reading = False
    aio = adapt._connection
    async with adapt._execute_mutex:
        if adapt._inline is None or not adapt._thread_done.is_set():
            await _ThreadTurns.wait(aio._execute(_end_transaction, aio._conn))
        else:
            _end_transaction(aio._conn)


def _end_transaction(conn: sqlite3.Connection) -> None:
    if conn.in_transaction:
        conn.rollback()  # a read transaction: nothing to keep


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
        result = await run_statement(cast(_OneTripConnection, self._adapt_connection), operation, parameters, many)
        self._description, rows, self._rowcount, self._lastrowid = result
        self._rows = collections.deque(rows)

    def setinputsizes(self, *inputsizes: Any) -> None:
        return None


class _OneTripConnection(AsyncAdapt_aiosqlite_connection):
    """Statements in one trip each; COMMIT and ROLLBACK only when a transaction is open.

    sqlite3 opens a transaction only before a write, so a read-only request has nothing to
    end, yet SQLAlchemy rolls back on every return of the connection to the pool: a trip
    to the thread per request for nothing."""

    __slots__ = ("_inline", "_reading", "_thread_done")
    _cursor_cls = _OneTripCursor

    def __init__(self, dbapi: Any, connection: Any, inline_read_s: float) -> None:
        super().__init__(dbapi, connection)
        self._reading = False  # in a read transaction of `begin_read`
        self._thread_done = _IDLE  # set when the last statement sent to the thread has ended
        self._inline: _InlineReads | None = None
        if inline_read_s > 0:
            self._inline = _InlineReads(inline_read_s)

    def stop_inline_reads(self) -> None:
        self._inline = None

    def _in_transaction(self) -> bool:
        try:
            return bool(self._connection._conn.in_transaction)
        except (ValueError, sqlite3.Error):  # not connected, or a sqlite3 that checks threads
            return True  # let the stock path do (or report) it

    def rollback(self) -> None:
        if self._in_transaction():
            self._on_thread(self._connection.rollback)

    def commit(self) -> None:
        if self._in_transaction():
            self._on_thread(self._connection.commit)

    def _on_thread(self, call: Callable[[], Awaitable[None]]) -> None:
        try:
            await_(_ThreadTurns.wait(call()))
        except Exception as error:
            self._handle_exception(error)


OneTripConnection = _OneTripConnection  # the DB-API connections of `create_engine`'s SQLite engines


def has_one_trip_connections(engine: AsyncEngine) -> bool:
    """Whether the engine's connections are this module's (`create_engine` on aiosqlite):
    what `run_statement`, `begin_read` and `end_read` take."""
    return isinstance(engine.sync_engine.dialect.loaded_dbapi, _OneTripDBAPI)


class _OneTripDBAPI(AsyncAdapt_aiosqlite_dbapi):
    def __init__(self, aiosqlite: Any, sqlite: Any, inline_read_s: float) -> None:
        super().__init__(aiosqlite, sqlite)
        self.inline_read_s = inline_read_s

    def connect(self, *arg: Any, **kw: Any) -> AsyncAdapt_aiosqlite_connection:
        if self.inline_read_s > 0:
            kw["check_same_thread"] = False  # inline reads use it from the loop's thread too
        stock = super().connect(*arg, **kw)
        return _OneTripConnection(self, stock._connection, self.inline_read_s)


def create_engine(
    url: str, *, echo: bool = False, inline_read_ms: float = SQLITE_INLINE_READ_MS, **kwargs: Any
) -> AsyncEngine:
    """An async engine; on SQLite with the pragmas, the one-trip adapter and inline reads
    of at most `inline_read_ms` (see the module doc)."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:"):
        Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
    if parsed.get_backend_name() == "sqlite" and parsed.get_driver_name() == "aiosqlite":
        import aiosqlite

        kwargs.setdefault("module", _OneTripDBAPI(aiosqlite, sqlite3, max(inline_read_ms, 0.0) / 1000))
        if parsed.database not in (None, "", ":memory:"):
            # Keep the connections a busy server uses open: past the default pool of 5, each
            # burst opened and closed "overflow" connections, and a SQLite connection costs
            # a thread, the file open, the pragmas and a schema parse. Idle ones cost little.
            kwargs.setdefault("pool_size", SQLITE_POOL_SIZE)
            kwargs.setdefault("max_overflow", SQLITE_POOL_OVERFLOW)
    if parsed.get_backend_name() == "postgresql":
        # The same for PostgreSQL, where a new connection is a new server process: with the
        # default pool of 5, 16 requests at once in one `serve` process opened and closed
        # overflow connections all the time.
        kwargs.setdefault("pool_size", POSTGRES_POOL_SIZE)
        kwargs.setdefault("max_overflow", POSTGRES_POOL_OVERFLOW)
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
        return cls.from_url(
            settings.database_url,
            echo=settings.database.echo,
            inline_read_ms=settings.database.sqlite_inline_read_ms,
        )

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    async def dispose(self) -> None:
        await self.engine.dispose()

    async def __aenter__(self) -> Database:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.dispose()
