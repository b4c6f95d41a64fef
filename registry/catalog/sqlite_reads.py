"""The API's reads of a SQLite catalog: read-only `sqlite3` connections of the catalog's own,
as datasette keeps them, through the standard library's public API only.

A read runs on the event loop's thread when it can: in WAL mode a reader never waits for a
lock, and the catalog's reads are index seeks that take a fraction of a millisecond, less
than a trip to another thread and back (the hand-over, the wake-up of the loop, the two
threads taking turns at the GIL). A read that runs longer than the inline budget is stopped
by SQLite's progress handler and run again on a reader thread, so one slow query never holds
the loop longer than that. A read whose caller is cancelled (a timeout, a client gone) is
interrupted: SQLite stops it at its next step instead of scanning on for nobody.

A statement on a reader thread needs the GIL a few times (to start, after each call into
SQLite, to hand back its result). CPython 3.11 asks the holder to drop the GIL only after a
waiter has waited a whole switch interval with no release in between, and a busy event loop
releases and retakes it at every turn (each poll for I/O): the waiter wakes too late every
time and starves until the loop goes idle. `ThreadTurns` gives such statements their turns.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import exc

_T = TypeVar("_T")
# SQLite's virtual-machine steps between two calls of the progress handler: a few tens of
# microseconds of work, so the handler costs little and notices the budget spent in time.
PROGRESS_STEPS = 2000
# While a statement runs on a reader thread, the loop pauses this long every period (see
# `ThreadTurns`): the thread's share of the loop's thread.
THREAD_TURN_PERIOD_S = 0.001
THREAD_TURN_PAUSE_S = 0.0002
READER_THREADS = 4  # threads for the reads over the inline budget, shared by a file's connections


class ThreadTurns:
    """One event loop's fairness to the threads its statements wait on.

    While any statement of this loop runs on a thread, the loop sleeps THREAD_TURN_PAUSE_S
    (releasing the GIL) every THREAD_TURN_PERIOD_S, so the thread takes the GIL within a
    period instead of starving (see the module doc). With nothing on a thread it costs
    nothing: no timer runs."""

    __slots__ = ("_pending", "_timer", "loop")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._pending = 0
        self._timer: asyncio.TimerHandle | None = None

    async def wait(self, work: Awaitable[_T]) -> _T:
        """`work`'s result, with turns for threads while it runs."""
        self._pending += 1
        if self._timer is None:
            self._timer = self.loop.call_later(THREAD_TURN_PERIOD_S, self._turn)
        try:
            return await work
        finally:
            self._pending -= 1

    def _turn(self) -> None:
        if not self._pending:
            self._timer = None
            return
        time.sleep(THREAD_TURN_PAUSE_S)
        self._timer = self.loop.call_later(THREAD_TURN_PERIOD_S, self._turn)


class ReadOnlyConnection:
    """One read-only connection of the file: statements inline within a budget, else on a
    reader thread; a read transaction (one snapshot of the file) around a request's reads."""

    def __init__(self, owner: SQLiteReads, conn: sqlite3.Connection, inline: bool) -> None:
        self._owner = owner
        self.conn = conn
        self.inline = inline  # reads may run on the loop's thread (WAL, a budget above 0)
        self._deadline = 0.0  # 0: no budget running (the statement is on a thread)
        self._tripped = False
        self._thread_done = threading.Event()  # the last statement sent to a thread has ended
        self._thread_done.set()

    def _over_budget(self) -> int:
        if self._deadline and time.perf_counter() > self._deadline:
            self._tripped = True
            return 1  # SQLite stops the statement: "interrupted"
        return 0

    def _run_inline(self, sql: str, args: tuple[Any, ...], budget_s: float) -> list[Any] | None:
        """The statement's rows, or None: it ran out of budget and was stopped, nothing read."""
        self._tripped = False
        self._deadline = time.perf_counter() + budget_s
        # Only while the loop's thread runs the statement: the handler is Python, and each
        # call takes the GIL; left on for a statement on a thread, that thread and the busy
        # loop took turns at the GIL thousands of times a scan.
        self.conn.set_progress_handler(self._over_budget, PROGRESS_STEPS)
        try:
            return self.conn.execute(sql, args).fetchall()
        except sqlite3.OperationalError:
            if self._tripped:
                return None
            raise
        finally:
            self.conn.set_progress_handler(None, 0)
            self._deadline = 0.0

    async def fetch(self, sql: str, args: tuple[Any, ...], budget_ms: float | None = None) -> list[Any]:
        """The rows of one read: inline within the budget (`budget_ms`, else the file's), else
        on a reader thread. sqlite3's errors are wrapped in SQLAlchemy's classes for them."""
        try:
            if self.inline and self._thread_done.is_set():
                budget = self._owner.inline_budget_s if budget_ms is None else budget_ms / 1000
                rows = self._run_inline(sql, args, budget)
                if rows is not None:
                    return rows
            return await self._on_thread(lambda: self.conn.execute(sql, args).fetchall(), interrupt=True)
        except sqlite3.Error as error:
            raise exc.DBAPIError.instance(sql, args, error, sqlite3.Error) from error

    async def _on_thread(self, call: Callable[[], _T], *, interrupt: bool = False) -> _T:
        """`call` on a reader thread, after what this connection sent there before. Cancelled,
        a read is interrupted (`interrupt`) and, still waiting for a thread, never starts."""
        before, done = self._thread_done, threading.Event()
        self._thread_done = done
        dropped = threading.Event()

        def run() -> _T:
            try:
                before.wait()
                if dropped.is_set():  # cancelled while still queued
                    raise sqlite3.OperationalError("interrupted")
                return call()
            finally:
                done.set()

        work = asyncio.get_running_loop().run_in_executor(self._owner.executor, run)
        try:
            return await self._owner.turns().wait(work)
        except asyncio.CancelledError:
            if interrupt:
                dropped.set()
                self.conn.interrupt()
            raise

    async def begin(self) -> None:
        """Begin the read transaction: the reads until `end` see one snapshot of the file,
        the one of the first of them (WAL), and run inline as other reads do."""
        if self.inline and self._thread_done.is_set():
            self.conn.execute("BEGIN")  # no I/O: SQLite takes the snapshot at the first read
        else:
            await self._on_thread(lambda: self.conn.execute("BEGIN"))

    async def end(self) -> None:
        """End the read transaction: inline when the thread is idle, else on a thread after
        the statement it may still run (one of a cancelled request, interrupted): inline,
        the call would wait on the loop's thread for SQLite's lock until that one ends."""
        if self.inline and self._thread_done.is_set():
            self._rollback()
        else:
            await self._on_thread(self._rollback)

    def _rollback(self) -> None:
        if self.conn.in_transaction:
            self.conn.rollback()  # a read transaction: nothing to keep

    def release(self) -> None:
        self._owner.release(self)


class SQLiteReads:
    """The read-only connections of one SQLite file: at most `size` at once; a request that
    finds none free for `timeout_s` fails with SQLAlchemy's pool TimeoutError (the API's 503)."""

    def __init__(
        self, path: str, *, inline_read_ms: float, size: int, timeout_s: float, busy_timeout_ms: int, mmap_bytes: int
    ) -> None:
        self.uri = Path(path).resolve().as_uri() + "?mode=ro"
        self.inline_budget_s = max(inline_read_ms, 0.0) / 1000
        self.size = size
        self.timeout_s = timeout_s
        self._pragmas = (f"PRAGMA busy_timeout={int(busy_timeout_ms)}", f"PRAGMA mmap_size={int(mmap_bytes)}")
        self._idle: list[ReadOnlyConnection] = []
        self._all: list[ReadOnlyConnection] = []
        self._free: asyncio.Semaphore | None = None
        self._free_loop: asyncio.AbstractEventLoop | None = None
        self._turns: ThreadTurns | None = None
        self.executor = ThreadPoolExecutor(READER_THREADS, thread_name_prefix="catalog-read")

    def turns(self) -> ThreadTurns:
        """The turns of the running loop (the engine's connections serve one loop at a time)."""
        loop = asyncio.get_running_loop()
        if self._turns is None or self._turns.loop is not loop:
            self._turns = ThreadTurns(loop)
        return self._turns

    def _connect(self) -> ReadOnlyConnection:
        conn = sqlite3.connect(self.uri, uri=True, check_same_thread=False, isolation_level=None)
        try:
            for pragma in self._pragmas:
                conn.execute(pragma)
            mode = conn.execute("PRAGMA journal_mode").fetchone()
        except sqlite3.Error:
            conn.close()
            raise
        # Without WAL a read can wait for a writer's lock: never on the loop's thread.
        wal = mode is not None and str(mode[0]).lower() == "wal"
        return ReadOnlyConnection(self, conn, inline=wal and self.inline_budget_s > 0)

    async def acquire(self) -> ReadOnlyConnection:
        loop = asyncio.get_running_loop()
        if self._free is None or self._free_loop is not loop:  # a semaphore serves one loop
            self._free, self._free_loop = asyncio.Semaphore(self.size - len(self._all) + len(self._idle)), loop
        try:
            await asyncio.wait_for(self._free.acquire(), self.timeout_s)
        except TimeoutError:
            raise exc.TimeoutError(
                f"no read-only connection of {self.size} came free within {self.timeout_s} s"
            ) from None
        try:
            if self._idle:
                return self._idle.pop()
            try:
                conn = self._connect()
            except sqlite3.Error as error:
                raise exc.DBAPIError.instance("connect", (), error, sqlite3.Error) from error
            self._all.append(conn)
            return conn
        except BaseException:
            self._free.release()
            raise

    def in_use(self) -> int:
        """How many connections are handed out."""
        return len(self._all) - len(self._idle)

    def release(self, conn: ReadOnlyConnection) -> None:
        if conn.conn.in_transaction:  # never handed on mid-transaction
            self._all.remove(conn)
            self.executor.submit(conn.conn.close)
        else:
            self._idle.append(conn)
        if self._free is not None:
            self._free.release()

    def close(self) -> None:
        """Close every connection (those in use when their statements end) and the threads."""
        for conn in self._all:
            self.executor.submit(conn.conn.close)
        self._all.clear()
        self._idle.clear()
        self.executor.shutdown(wait=False)


__all__ = ["ReadOnlyConnection", "SQLiteReads", "ThreadTurns"]
