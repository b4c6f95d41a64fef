"""The API's reads of a SQLite catalog (registry.catalog.sqlite_reads): read-only connections
of the catalog's own, reads on the event loop's thread within a budget, the rest on a reader
thread; the pool of them bounded.

Each test asks SQLite itself which thread ran a statement: `tid()` is a function registered
on the read-only connection that returns the calling thread's id, evaluated while the
statement runs.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import exc, text

from registry.catalog.db import Database
from registry.catalog.sqlite_reads import ReadOnlyConnection, SQLiteReads

# A recursive count that runs for a good while (~0.3 s here), far past any budget below.
SLOW_READ = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 2000000) SELECT count(*), tid() FROM c"
LOOP = threading.get_ident


async def _database(path: Path, inline_read_ms: float) -> Database:
    database = Database.from_url(f"sqlite+aiosqlite:///{path}", inline_read_ms=inline_read_ms)
    async with database.engine.begin() as conn:  # the file, in WAL mode, with a table
        await conn.execute(text("CREATE TABLE IF NOT EXISTS t (n INTEGER)"))
    return database


@pytest.fixture
async def db(tmp_path: Path) -> AsyncIterator[Database]:
    database = await _database(tmp_path / "r.db", 50)
    yield database
    await database.dispose()


async def _connection(db: Database) -> ReadOnlyConnection:
    assert db.reads.sqlite is not None
    conn = await db.reads.sqlite.acquire()
    conn.conn.create_function("tid", 0, threading.get_ident)
    return conn


async def _one(conn: ReadOnlyConnection, sql: str, budget_ms: float | None = None) -> tuple[Any, ...]:
    rows = await conn.fetch(sql, (), budget_ms)
    assert len(rows) == 1
    return tuple(rows[0])


async def test_a_read_runs_on_the_loop_thread(db: Database) -> None:
    conn = await _connection(db)
    try:
        assert conn.inline
        assert await _one(conn, "SELECT tid()") == (LOOP(),)
        assert await _one(conn, "WITH one(x) AS (SELECT 1) SELECT tid() FROM one") == (LOOP(),)
    finally:
        conn.release()


async def test_a_read_over_budget_is_run_again_on_a_reader_thread(db: Database) -> None:
    conn = await _connection(db)
    try:
        count, thread = await _one(conn, SLOW_READ)
    finally:
        conn.release()
    assert count == 2_000_000  # the whole answer, from the second run
    assert thread != LOOP()


async def test_a_longer_budget_keeps_a_slow_read_on_the_loop_thread(db: Database) -> None:
    conn = await _connection(db)
    try:
        assert await _one(conn, SLOW_READ, budget_ms=60_000) == (2_000_000, LOOP())
        _, after = await _one(conn, SLOW_READ)  # the next read has the file's budget again
    finally:
        conn.release()
    assert after != LOOP()


async def test_the_loop_keeps_turning_while_a_slow_read_runs(db: Database) -> None:
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0.001)

    conn = await _connection(db)
    ticker = asyncio.create_task(tick())
    await asyncio.sleep(0)
    try:
        await _one(conn, SLOW_READ)
    finally:
        ticker.cancel()
        conn.release()
    # The read held the loop for its budget (50 ms) at most, then ran on the other thread
    # while the loop went on: the ticker ran many times meanwhile.
    assert ticks > 10


async def test_a_failing_read_raises_sqlalchemys_error_and_the_connection_reads_on(db: Database) -> None:
    conn = await _connection(db)
    try:
        with pytest.raises(exc.OperationalError, match="no such table"):
            await conn.fetch("SELECT * FROM missing", ())
        assert await _one(conn, "SELECT 2") == (2,)
    finally:
        conn.release()


async def test_the_connections_are_read_only(db: Database) -> None:
    conn = await _connection(db)
    try:
        with pytest.raises(exc.OperationalError, match="readonly"):
            await conn.fetch("INSERT INTO t VALUES (1)", ())
    finally:
        conn.release()


async def test_a_read_transaction_reads_one_snapshot(db: Database) -> None:
    conn = await _connection(db)
    try:
        await conn.begin()
        assert await _one(conn, "SELECT count(*) FROM t") == (0,)
        async with db.engine.begin() as writer:  # committed meanwhile
            await writer.execute(text("INSERT INTO t VALUES (1)"))
        assert await _one(conn, "SELECT count(*) FROM t") == (0,)
        await conn.end()
        assert not conn.conn.in_transaction
        assert await _one(conn, "SELECT count(*) FROM t") == (1,)
    finally:
        conn.release()


async def test_budget_zero_runs_every_read_on_a_reader_thread(tmp_path: Path) -> None:
    db = await _database(tmp_path / "r.db", 0)
    try:
        conn = await _connection(db)
        try:
            assert not conn.inline
            await conn.begin()  # the transaction too, on the thread
            assert (await _one(conn, "SELECT tid()"))[0] != LOOP()
            await conn.end()
            assert not conn.conn.in_transaction
        finally:
            conn.release()
    finally:
        await db.dispose()


async def test_a_file_not_in_wal_mode_reads_on_a_reader_thread(tmp_path: Path) -> None:
    """Without WAL a read can wait for a writer's lock, which must not happen on the loop."""
    path = tmp_path / "rollback.db"
    with sqlite3.connect(path) as plain:
        plain.execute("CREATE TABLE t (n INTEGER)")
    reads = SQLiteReads(str(path), inline_read_ms=50, size=2, timeout_s=1, busy_timeout_ms=100, mmap_bytes=0)
    try:
        conn = await reads.acquire()
        conn.conn.create_function("tid", 0, threading.get_ident)
        try:
            assert not conn.inline and (await _one(conn, "SELECT tid()"))[0] != LOOP()
        finally:
            conn.release()
    finally:
        reads.close()


async def test_no_free_connection_within_the_timeout_is_a_pool_timeout(tmp_path: Path) -> None:
    """Every read-only connection busy for longer than the timeout: SQLAlchemy's pool
    TimeoutError, which the API answers with a 503; a connection given back is taken again."""
    db = Database.from_url(f"sqlite+aiosqlite:///{tmp_path / 'r.db'}", pool_size=1, max_overflow=0, pool_timeout=0.2)
    try:
        async with db.engine.begin() as writer:
            await writer.execute(text("CREATE TABLE t (n INTEGER)"))
        assert db.reads.sqlite is not None
        held = await db.reads.sqlite.acquire()
        with pytest.raises(exc.TimeoutError):
            await db.reads.sqlite.acquire()
        held.release()
        again = await db.reads.sqlite.acquire()
        assert again is held  # kept open, not made anew
        again.release()
    finally:
        await db.dispose()


BUSY_TURNS = 40_000  # ~10 s of a busy loop here; the slow read needs a few hundred turns


@pytest.mark.parametrize("inline_read_ms", [50, 0])
async def test_a_read_on_a_reader_thread_finishes_while_the_loop_is_busy(tmp_path: Path, inline_read_ms: int) -> None:
    """CPython 3.11 hands the GIL to a waiting thread only after it waited a whole switch
    interval with no release in between, and a busy loop releases it at every turn: the
    reader thread starved for as long as the loop stayed busy. It gets its turns, and a read
    stopped over budget (50) leaves no progress handler taking the GIL on the thread."""
    db = await _database(tmp_path / "r.db", inline_read_ms)
    turns = 0
    finished = False

    async def busy() -> None:  # handlers' Python work, a poll for I/O at every turn
        nonlocal turns
        while not finished and turns < BUSY_TURNS:
            sum(range(20_000))
            turns += 1
            await asyncio.sleep(0)

    try:
        conn = await _connection(db)
        try:
            loop_busy = asyncio.create_task(busy())
            await asyncio.sleep(0)
            count, thread = await _one(conn, SLOW_READ)
            finished = True
            await loop_busy
        finally:
            conn.release()
    finally:
        await db.dispose()
    assert (count, thread != LOOP()) == (2_000_000, True)
    assert turns < BUSY_TURNS  # done while the loop was still busy


async def test_a_read_cancelled_while_it_waits_for_its_turn_never_runs(tmp_path: Path) -> None:
    """A read queued behind a statement still running on the connection's reader thread,
    whose request is then cancelled (a timeout, a client gone), does not start once its turn
    comes: nobody would read its rows. The one running is interrupted."""
    db = await _database(tmp_path / "r.db", 0)
    ran: list[str] = []
    try:
        conn = await _connection(db)
        conn.conn.create_function("ran", 1, lambda s: ran.append(s) or s)
        try:
            slow = asyncio.create_task(conn.fetch(SLOW_READ.replace("tid()", "ran('slow')"), ()))
            await asyncio.sleep(0.05)
            queued = asyncio.create_task(conn.fetch("SELECT ran('dropped')", ()))
            await asyncio.sleep(0.01)
            queued.cancel()
            slow.cancel()
            for task in (queued, slow):
                with pytest.raises(asyncio.CancelledError):
                    await task
            assert await _one(conn, "SELECT ran('next')") == ("next",)  # the connection reads on
        finally:
            conn.release()
    finally:
        await db.dispose()
    assert "dropped" not in ran and ran[-1] == "next"
