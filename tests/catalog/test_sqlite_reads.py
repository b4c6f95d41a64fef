"""SQLite statements: reads on the event loop's thread within a budget, everything else on
the connection's thread (registry.catalog.db's module doc).

Each test asks SQLite itself which thread ran a statement: `tid()` is a function registered
on the raw connection that returns the calling thread's id, evaluated while the statement runs.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event, text
from sqlalchemy.util.concurrency import greenlet_spawn

from registry.catalog import db as catalog_db
from registry.catalog.db import Database, _InlineReads, longer_inline_reads
from registry.config import load_settings

# A recursive count that runs for a good while (~0.3 s here), far past any budget below.
SLOW_READ = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 2000000) SELECT count(*), tid() FROM c"


def _with_tid(db: Database) -> Database:
    @event.listens_for(db.engine.sync_engine, "connect")
    def _register(dbapi_connection: object, _record: object) -> None:
        raw = dbapi_connection._connection._conn  # type: ignore[attr-defined]  # the sqlite3 connection
        raw.create_function("tid", 0, threading.get_ident)

    return db


@pytest.fixture
async def db(tmp_path: Path) -> AsyncIterator[Database]:
    database = _with_tid(Database.from_url(f"sqlite+aiosqlite:///{tmp_path / 'r.db'}", inline_read_ms=50))
    async with database.engine.begin() as conn:
        await conn.execute(text("CREATE TABLE t (n INTEGER, thread INTEGER)"))
    yield database
    await database.dispose()


async def _scalar(db: Database, sql: str) -> object:
    async with db.engine.connect() as conn:
        return (await conn.execute(text(sql))).scalar_one()


async def test_a_read_runs_on_the_loop_thread(db: Database) -> None:
    assert await _scalar(db, "SELECT tid()") == threading.get_ident()
    assert await _scalar(db, "WITH one(x) AS (SELECT 1) SELECT tid() FROM one") == threading.get_ident()


async def test_a_read_over_budget_is_run_again_on_the_connection_thread(db: Database) -> None:
    async with db.engine.connect() as conn:
        count, thread = (await conn.execute(text(SLOW_READ))).one()
    assert count == 2_000_000  # the whole answer, from the second run
    assert thread != threading.get_ident()


async def test_a_longer_budget_keeps_a_slow_read_on_the_loop_thread(db: Database) -> None:
    with longer_inline_reads(60_000):
        count, thread = (await _one(db, SLOW_READ))
    assert (count, thread) == (2_000_000, threading.get_ident())
    _, after = await _one(db, SLOW_READ)  # the block's budget ended with it
    assert after != threading.get_ident()


async def _one(db: Database, sql: str) -> tuple[object, ...]:
    async with db.engine.connect() as conn:
        return tuple((await conn.execute(text(sql))).one())


async def test_the_loop_keeps_turning_while_a_slow_read_runs(db: Database) -> None:
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0.001)

    ticker = asyncio.create_task(tick())
    await asyncio.sleep(0)
    try:
        await _scalar(db, SLOW_READ.replace(", tid()", ""))
    finally:
        ticker.cancel()
    # The read held the loop for its budget (50 ms) at most, then ran on the other thread
    # while the loop went on: the ticker ran many times meanwhile.
    assert ticks > 10


async def test_writes_and_reads_in_a_write_transaction_take_the_connection_thread(db: Database) -> None:
    async with db.engine.begin() as conn:
        await conn.execute(text("INSERT INTO t VALUES (1, tid())"))
        in_write = (await conn.execute(text("SELECT tid()"))).scalar_one()
    assert in_write != threading.get_ident()
    assert await _scalar(db, "SELECT thread FROM t") != threading.get_ident()
    assert await _scalar(db, "SELECT count(*) FROM t") == 1


async def test_a_failing_read_raises_its_own_error(db: Database) -> None:
    with pytest.raises(Exception, match="no such table"):
        await _scalar(db, "SELECT * FROM missing")
    assert await _scalar(db, "SELECT 2") == 2  # the connection is fine afterwards


async def test_budget_zero_runs_every_statement_on_the_connection_thread(tmp_path: Path) -> None:
    settings = load_settings(
        env={
            "REGISTRY_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'r.db'}",
            "REGISTRY_DATABASE_SQLITE_INLINE_READ_MS": "0",
        }
    )
    db = _with_tid(Database.from_settings(settings))
    try:
        assert await _scalar(db, "SELECT tid()") != threading.get_ident()
    finally:
        await db.dispose()


async def test_an_in_memory_database_runs_reads_on_the_connection_thread() -> None:
    # No WAL there: a read could wait for a writer's lock, which must not happen on the loop.
    db = _with_tid(Database.from_url("sqlite+aiosqlite:///:memory:", inline_read_ms=50))
    try:
        assert await _scalar(db, "SELECT tid()") != threading.get_ident()
    finally:
        await db.dispose()


BUSY_TURNS = 40_000  # ~10 s of a busy loop here; the slow read needs a few hundred turns


@pytest.mark.parametrize("inline_read_ms", [50, 0])
async def test_a_statement_on_the_connection_thread_finishes_while_the_loop_is_busy(
    tmp_path: Path, inline_read_ms: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """CPython 3.11 hands the GIL to a waiting thread only after it waited a whole switch
    interval with no release in between, and a busy loop releases it at every turn: the
    connection's thread starved for as long as the loop stayed busy. It gets its turns, and
    a read stopped over budget (50) leaves no progress handler taking the GIL on the thread."""
    db = _with_tid(Database.from_url(f"sqlite+aiosqlite:///{tmp_path / 'r.db'}", inline_read_ms=inline_read_ms))
    turns = 0
    finished = False
    handler_threads: set[int] = set()
    over_budget = _InlineReads._over_budget

    def recorded(self: _InlineReads) -> int:
        handler_threads.add(threading.get_ident())
        return over_budget(self)

    monkeypatch.setattr(_InlineReads, "_over_budget", recorded)

    async def busy() -> None:  # handlers' Python work, a poll for I/O at every turn
        nonlocal turns
        while not finished and turns < BUSY_TURNS:
            sum(range(20_000))
            turns += 1
            await asyncio.sleep(0)

    try:
        await _scalar(db, "SELECT 1")  # connected before the loop gets busy
        loop_busy = asyncio.create_task(busy())
        await asyncio.sleep(0)
        count, thread = await _one(db, SLOW_READ)
        finished = True
        await loop_busy
    finally:
        await db.dispose()
    assert (count, thread != threading.get_ident()) == (2_000_000, True)
    assert turns < BUSY_TURNS  # done while the loop was still busy
    # The handler ran while the loop's thread read (and stopped the read), never on the other.
    assert handler_threads == ({threading.get_ident()} if inline_read_ms else set())


async def test_a_read_cancelled_while_it_waits_for_the_thread_never_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read queued behind other work on the connection's thread, whose request is then
    cancelled (a timeout, a client gone), does not start once its turn comes: nobody would
    read its rows."""
    db = Database.from_url(f"sqlite+aiosqlite:///{tmp_path / 'r.db'}", inline_read_ms=0)
    ran: list[str] = []
    run = catalog_db._run_statement

    def recorded(conn: Any, operation: str, *args: Any) -> Any:
        ran.append(operation)
        return run(conn, operation, *args)

    raw = await db.engine.raw_connection()
    monkeypatch.setattr(catalog_db, "_run_statement", recorded)  # connected: its pragmas are not counted
    try:
        adapt = raw.dbapi_connection
        gate = threading.Event()
        busy = asyncio.ensure_future(adapt._connection._execute(gate.wait, 10))  # the thread's current work
        read = asyncio.create_task(catalog_db.run_statement(adapt, "SELECT 'dropped'", (), False))
        await asyncio.sleep(0.05)
        read.cancel()
        with pytest.raises(asyncio.CancelledError):
            await read
        gate.set()
        assert await busy
        result = await catalog_db.run_statement(adapt, "SELECT 'next'", (), False)
        assert result[1] == [("next",)]  # the connection reads on
    finally:
        await greenlet_spawn(raw.close)
        await db.dispose()
    assert ran == ["SELECT 'next'"]
