"""The read path of the API's requests: the catalog's SELECTs straight on the driver.

A request that reads through an AsyncSession pays SQLAlchemy for far more than the query:
the session, its connection and transaction, an execution context and a result object per
statement. On the bench catalog a page of one indexed SELECT cost 262 us through a
session, and the same statement 5 us in sqlite3; with SQLAlchemy's execution path at a
quarter of the API's CPU, it set how many requests two cores could serve. On PostgreSQL a
request of one SELECT cost 560-660 us of the API process's CPU through a session, 210-250
us here (asyncpg itself: 75-105 us).

`ReadSession` stands in for the AsyncSession of a read-only request. Its `connection()` is a
`ReadConnection` on a pooled connection of the engine, whose `execute()` runs a Core SELECT
the way SQLAlchemy's execution does, minus the machinery: the statement's shape is compiled
once per engine (keyed by SQLAlchemy's own cache key, so equal shapes with different
values share it), the values are bound with the shape's bind processors in its positional
order, the statement runs on the driver, and the rows come back through the shape's result
processors (dates, JSON, booleans; on PostgreSQL chosen by the column types it describes, as
SQLAlchemy chooses them) as tuples that read like SQLAlchemy's rows (`row.path`,
`row._mapping["path"]`, `row[0]`). How a statement runs depends on the driver:

- SQLite, through the catalog's aiosqlite adapter (`db.create_engine`): `db.run_statement`,
  inline on the event loop within the read budget, else on the connection's thread, as
  every SQLite statement here.
- PostgreSQL, through asyncpg: as SQLAlchemy's asyncpg cursor runs it, on the adapter's
  prepared statements (shared with SQLAlchemy's use of the same connection) under its lock.

The SELECTs of one ReadSession read one snapshot of the catalog. On SQLite its connection
opens a read transaction before the first (`db.begin_read`) and ends it at close, so a page
put together from several statements (an artifact and its shards, a lineage walk) never
mixes rows from before and after a commit made meanwhile. The file memo's generation
(`memo.FileMemo`) is read just before, and the session's memo lookups use it: counts
found in this snapshot are kept under a generation no newer than the snapshot. On
PostgreSQL the connection begins a `REPEATABLE READ READ ONLY` transaction (one BEGIN, as
SQLAlchemy's would be) and rolls it back at close; a write in it is refused. A connection
whose state is unknown after a request (cancelled mid-statement, lost, a ROLLBACK that
failed) is closed and dropped from the pool, as SQLAlchemy does with one.

Anything else goes to SQLAlchemy, so nothing behaves differently: a statement that is not a
cacheable SELECT runs on a real AsyncConnection, and every other session method (ORM `get`,
`scalars`, ...) is a real AsyncSession's, opened on first use (on PostgreSQL read-only and
at REPEATABLE READ too, in a transaction of its own). The driver's errors are wrapped in
SQLAlchemy's exception classes and handled as its execution handles them: on PostgreSQL a
lost connection retires the pool's older connections, and a schema change under a prepared
statement has the statements prepared anew.
"""


from __future__ import annotations

import functools
import inspect
import sqlite3
import weakref
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from operator import itemgetter
from typing import Any, cast

from sqlalchemy import exc
from sqlalchemy.engine import Engine
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, AsyncSession, async_sessionmaker
from sqlalchemy.pool import Pool
from sqlalchemy.pool.base import _ConnectionFairy
from sqlalchemy.sql.cache_key import CacheKey
from sqlalchemy.util.concurrency import greenlet_spawn

from registry.catalog.db import (
    OneTripConnection,
    begin_read,
    end_read,
    has_one_trip_connections,
    run_statement,
)
from registry.catalog.memo import FileMemo

# Compiled shapes kept per engine (least recently used dropped first): as SQLAlchemy's own
# compiled cache, which holds 500. The catalog's reads have a few hundred shapes.
SHAPES_PER_ENGINE = 1024
_UNREAD = object()  # a shape's column types before its first rows


class _Shape:
    """One compiled SELECT: its SQL, how to bind values, how to read rows."""

    __slots__ = ("binds", "coltypes", "compiled", "described", "expands", "positions", "processed", "row_type", "sql")

    def __init__(self, compiled: Any) -> None:
        self.compiled = compiled
        self.sql: str = compiled.string
        self.positions: Sequence[str] = compiled.positiontup or ()
        self.binds: Mapping[str, Any] = compiled._bind_processors
        # IN lists and literal values are rendered per execution (SQLAlchemy's "post compile")
        self.expands = bool(compiled.literal_execute_params or compiled.post_compile_params)
        self.row_type = _row_type(tuple(c.keyname for c in compiled._result_columns))
        # computed at the first rows: PostgreSQL's processors depend on the types it describes
        self.coltypes: object = _UNREAD
        self.described: object = _UNREAD  # the driver's description the processors were chosen for
        self.processed: list[tuple[int, Any]] = []

    def _processors(self, coltypes: tuple[Any, ...] | None) -> list[tuple[int, Any]]:
        """(column index, result processor) of the columns that have one, for the driver's
        column types (PostgreSQL's type oids; SQLite's driver names none): a search hit has
        one among its 22 (its date), and the other values are taken as they are. As
        SQLAlchemy's result metadata, which asks each type for the processor of the type
        the driver described."""
        dialect = self.compiled.dialect
        columns = self.compiled._result_columns
        described = coltypes if coltypes is not None and len(coltypes) == len(columns) else (None,) * len(columns)
        processors = [c.type._cached_result_processor(dialect, t) for c, t in zip(columns, described, strict=True)]
        return [(i, p) for i, p in enumerate(processors) if p is not None]

    def bind(self, values: Mapping[str, Any] | None, key: Any) -> tuple[str, tuple[Any, ...]]:
        """The SQL and the positional arguments for these values and this statement's cache
        key, as SQLAlchemy's execution binds them: the key carries the statement's bound
        values, and (SQLAlchemy 2.1) the values given to its `.params()` and its parts'."""
        collected = getattr(key, "params", None)
        extra = {"_collected_params": collected} if collected else {}  # only 2.1 takes it
        params = self.compiled.construct_params(
            values, extracted_parameters=key.bindparams, escape_names=False, **extra
        )
        sql, positions, binds = self.sql, self.positions, self.binds
        if self.expands:
            expanded = self.compiled._process_parameters_for_postcompile(params)
            sql, positions = expanded.statement, expanded.positiontup
            binds = {**binds, **expanded.processors}
        return sql, tuple(binds[k](params[k]) if k in binds else params[k] for k in positions)

    def read(self, raw: Sequence[Sequence[Any]], described: Sequence[Any] | None = None) -> list[Any]:
        """Rows from the driver's. `described`: the driver's description of the columns, if it
        gives one (asyncpg's attributes, kept with its prepared statement: the same object
        for every run of it), whose types' oids choose PostgreSQL's processors."""
        if described is not self.described:  # the first rows of this SQL, or it was prepared anew
            coltypes = None if described is None else tuple(a.type.oid for a in described)
            if coltypes != self.coltypes:
                self.processed, self.coltypes = self._processors(coltypes), coltypes
            self.described = described
        make, processed = self.row_type, self.processed
        if not processed:
            return [make(r) for r in raw]
        rows = []
        for r in raw:
            values = list(r)
            for i, process in processed:
                values[i] = process(values[i])
            rows.append(make(values))
        return rows


def _row_type(keys: tuple[str, ...]) -> type:
    """A tuple class whose items also read by name, like SQLAlchemy's Row: as attributes
    (class properties, so a column named `count` is not tuple.count) and through
    `_mapping` (the first column of a repeated name, as SQLAlchemy resolves it)."""
    index: dict[str, int] = {}
    for i, key in enumerate(keys):
        index.setdefault(key, i)
    attrs: dict[str, Any] = {k: property(itemgetter(i)) for k, i in index.items()}

    def _mapping(self: tuple[Any, ...]) -> dict[str, Any]:
        return {k: self[i] for k, i in index.items()}

    attrs.update(__slots__=(), _fields=keys, _mapping=property(_mapping))
    return type("Row", (tuple,), attrs)


class _Shapes:
    """The compiled shapes of one engine, by cache key; None for a statement SQLAlchemy runs."""

    def __init__(self) -> None:
        self._entries: OrderedDict[Any, _Shape | None] = OrderedDict()

    def get(self, statement: Any, dialect: Any) -> tuple[_Shape, Any] | None:
        if not getattr(statement, "is_select", False):
            return None
        key = statement._generate_cache_key()
        if key is None:  # a construct SQLAlchemy does not cache either
            return None
        entries = self._entries
        try:
            shape = entries[key.key]
        except KeyError:
            shape = entries[key.key] = _compile(statement, key, dialect)
            if len(entries) > SHAPES_PER_ENGINE:
                entries.popitem(last=False)
        else:
            entries.move_to_end(key.key)
        return None if shape is None else (shape, key)


def _compile(statement: Any, key: Any, dialect: Any) -> _Shape | None:
    compiled = statement._compiler(
        dialect, cache_key=key, column_keys=None, for_executemany=False, schema_translate_map=None
    )
    # Rows map to the compiled columns by position, and values bind by position (qmark).
    if not compiled.positional or not compiled._result_columns or not compiled._ordered_columns:
        return None
    if compiled._textual_ordered_columns or compiled._loose_column_name_matching:
        return None
    return _Shape(compiled)


_SHAPES: weakref.WeakKeyDictionary[Engine, _Shapes] = weakref.WeakKeyDictionary()


def _shapes(engine: Engine) -> _Shapes:
    shapes = _SHAPES.get(engine)
    if shapes is None:
        shapes = _SHAPES[engine] = _Shapes()
    return shapes


class Rows:
    """The rows of one SELECT, with the part of SQLAlchemy's Result the catalog uses."""

    __slots__ = ("_rows",)

    def __init__(self, rows: list[Any]) -> None:
        self._rows = rows

    def __iter__(self) -> Iterator[Any]:
        return iter(self._rows)

    def all(self) -> list[Any]:
        return list(self._rows)

    def first(self) -> Any:
        return self._rows[0] if self._rows else None

    def one_or_none(self) -> Any:
        if len(self._rows) > 1:
            raise exc.MultipleResultsFound("Multiple rows were found when one or none was required")
        return self.first()

    def one(self) -> Any:
        if not self._rows:
            raise exc.NoResultFound("No row was found when one was required")
        return self.one_or_none()

    def scalar(self) -> Any:
        return self._rows[0][0] if self._rows else None

    def scalar_one(self) -> Any:
        return self.one()[0]

    def scalar_one_or_none(self) -> Any:
        row = self.one_or_none()
        return None if row is None else row[0]

    def scalars(self) -> Scalars:
        return Scalars([r[0] for r in self._rows])


class Scalars(Rows):
    """The first column of each row, as SQLAlchemy's ScalarResult gives them."""

    __slots__ = ()

    def scalar(self) -> Any:
        return self.first()

    def scalar_one(self) -> Any:
        return self.one()

    def scalar_one_or_none(self) -> Any:
        return self.one_or_none()

    def scalars(self) -> Scalars:
        return self


class ReadConnection:
    """The connection of a `ReadSession`: SELECTs on the driver, the rest on SQLAlchemy.
    One subclass per driver: how a snapshot begins and ends, how a statement runs."""

    def __init__(self, session: ReadSession, raw: Any) -> None:
        self._session = session
        self._raw = raw  # the pool's proxy of the driver's connection (SQLAlchemy's adapter)
        self._shapes = _shapes(session.bind.sync_engine)
        self.dialect: Any = session.bind.dialect

    @classmethod
    async def open(cls, session: ReadSession, raw: Any) -> ReadConnection:
        """A connection on `raw` with its snapshot begun; if that fails, `raw` goes back to
        the pool (SQLite) or is closed and dropped from it (PostgreSQL)."""
        raise NotImplementedError

    async def execute(self, statement: Any, parameters: Mapping[str, Any] | None = None) -> Any:
        found = self._shapes.get(statement, self.dialect)
        if found is None:
            conn = await self._session.sqlalchemy_connection()
            return await conn.execute(statement, parameters)
        shape, key = found
        sql, args = shape.bind(parameters, key)
        return Rows(await self._run(shape, sql, args))

    async def _run(self, shape: _Shape, sql: str, args: tuple[Any, ...]) -> list[Any]:
        raise NotImplementedError

    async def close(self) -> None:
        raise NotImplementedError


class _SQLiteConnection(ReadConnection):
    """SQLite through the catalog's aiosqlite adapter (`db.create_engine`): statements inline
    on the event loop within the read budget, else on the connection's thread
    (`db.run_statement`); the snapshot is a read transaction, begun and ended without a trip
    to the thread when it is free."""

    @classmethod
    async def open(cls, session: ReadSession, raw: Any) -> ReadConnection:
        try:
            memo = FileMemo.of(session)  # type: ignore[arg-type]
            session.snapshot_generation = None if memo is None else memo.generation()
            await begin_read(cast(OneTripConnection, raw.dbapi_connection))  # see uses_read_path
        except BaseException:
            await greenlet_spawn(raw.close)
            raise
        return cls(session, raw)

    async def _run(self, shape: _Shape, sql: str, args: tuple[Any, ...]) -> list[Any]:
        try:
            _description, raw, _count, _rowid = await run_statement(self._raw.dbapi_connection, sql, args, False)
        except sqlite3.Error as error:
            raise exc.DBAPIError.instance(sql, args, error, sqlite3.Error) from error
        return shape.read(raw)

    async def close(self) -> None:
        raw, self._raw = self._raw, None
        if raw is None:
            return
        adapt = raw.dbapi_connection
        if adapt is not None:
            await end_read(adapt)
        if adapt is not None and adapt._in_transaction():  # not a read transaction; never on the loop
            await greenlet_spawn(raw.close)
        else:
            raw.close()  # back to the pool: nothing to roll back, no trip to the thread


class _PostgresConnection(ReadConnection):
    """PostgreSQL through asyncpg: the snapshot is a `REPEATABLE READ READ ONLY` transaction
    begun on the driver's connection (one BEGIN, as SQLAlchemy's would be), statements run
    as SQLAlchemy's asyncpg cursor runs them (the adapter's prepared statements, under its
    lock), and close rolls back on the driver, so the pool's own reset has nothing to do.
    A connection whose state is unknown (cut off mid-statement by a cancellation, lost, or
    a ROLLBACK that failed) is not given back: it is closed and the pool forgets it."""

    def __init__(self, session: ReadSession, raw: Any, transaction: Any) -> None:
        super().__init__(session, raw)
        self._adapt = raw.dbapi_connection  # SQLAlchemy's asyncpg adapter
        self._transaction = transaction
        self._broken = False
        self._lost: BaseException | None = None  # the error that found the connection gone

    @classmethod
    async def open(cls, session: ReadSession, raw: Any) -> ReadConnection:
        adapt = raw.dbapi_connection
        try:
            transaction = adapt._connection.transaction(isolation="repeatable_read", readonly=True)
            await transaction.start()
        except BaseException as error:
            failure = await _discarded(raw, session.bind.dialect, "BEGIN", error)
            if failure is error:
                raise
            raise failure from error
        return cls(session, raw, transaction)

    async def _run(self, shape: _Shape, sql: str, args: tuple[Any, ...]) -> list[Any]:
        adapt = self._adapt
        try:
            async with adapt._execute_mutex:
                prepared, attributes = await adapt._prepare(sql, self.dialect._invalidate_schema_cache_asof)
                raw = await prepared.fetch(*args)
        except Exception as error:
            translated, lost = _translated(adapt, self.dialect, sql, args, error)
            if lost:
                self._broken, self._lost = True, translated
            raise translated from error
        except BaseException:
            self._broken = True  # cancelled mid-statement: what the connection is doing is unknown
            raise
        return shape.read(raw, attributes or None)

    async def close(self) -> None:
        raw, self._raw = self._raw, None
        if raw is None:
            return
        if self._broken:
            await _discard(raw, self._lost)
            return
        try:
            await self._transaction.rollback()
        except BaseException as error:
            failure = await _discarded(raw, self.dialect, "ROLLBACK", error)
            if failure is error:
                raise
            raise failure from error
        raw.close()  # back to the pool; its reset finds no transaction of the adapter's to end


async def _discard(raw: Any, lost: BaseException | None = None) -> None:
    """Close the connection and have the pool forget it, as SQLAlchemy does with one it
    finds broken: a graceful close, which first lets asyncpg send the server the cancel of a
    statement cut off (else it runs on, to its end, on the server). A connection found
    gone (`lost`: the server restarted, say) also retires every connection the pool made
    before it, which are likely gone too: they reconnect at their next checkout instead of
    failing a request each."""
    if lost is None:
        await greenlet_spawn(raw.invalidate)
    else:
        await greenlet_spawn(raw._pool._invalidate, raw, lost)


async def _discarded(raw: Any, dialect: Any, sql: str, error: BaseException) -> BaseException:
    """After `error` at `sql` (a BEGIN or ROLLBACK of the connection's own), the connection
    is in no known state: discard it, and answer what to raise (SQLAlchemy's error for a
    driver's; a cancellation as it is)."""
    if not isinstance(error, Exception):
        await _discard(raw)
        return error
    translated, lost = _translated(raw.dbapi_connection, dialect, sql, (), error)
    await _discard(raw, translated if lost else None)
    return translated


def _translated(adapt: Any, dialect: Any, sql: str, args: tuple[Any, ...], error: Exception) -> tuple[Exception, bool]:
    """asyncpg's error as SQLAlchemy's execution raises it (the adapter's DB-API error,
    wrapped in SQLAlchemy's class for it), and whether the connection was lost."""
    try:
        adapt._handle_exception(error)  # raises the DB-API error for a PostgreSQL one
    except Exception as dbapi_error:
        error = dbapi_error
    if isinstance(error, adapt.dbapi.InvalidCachedStatementError | adapt.dbapi.InternalServerError):
        # the schema changed under a prepared statement: prepare anew from now on (as
        # SQLAlchemy's execution context does on these errors)
        dialect._invalidate_schema_cache()
    lost = isinstance(error, adapt.dbapi.Error) and bool(dialect.is_disconnect(error, adapt, None))
    translated = exc.DBAPIError.instance(sql, args, error, adapt.dbapi.Error, connection_invalidated=lost)
    return translated, lost


class ReadSession:
    """The session of a read-only request (see the module doc). It offers what the
    catalog's reads use of an AsyncSession: `connection()`, `get_bind()`, `bind`, `info` and
    `get_transaction()`; any other attribute is a real AsyncSession's, opened on first use."""

    def __init__(self, engine: AsyncEngine, sessions: async_sessionmaker[AsyncSession]) -> None:
        self.bind = engine
        self._sessions = sessions
        self._conn: ReadConnection | None = None
        self._real: AsyncSession | None = None
        self.info: dict[str, Any] = {}
        # The file memo's generation read just before the snapshot began (None: no memo,
        # or no snapshot yet): what `FileMemo.generation_for` answers for this session.
        self.snapshot_generation: int | None = None

    def get_bind(self) -> Engine:
        return self.bind.sync_engine

    def get_transaction(self) -> ReadConnection | None:
        """What stands for the session's transaction: its connection, one snapshot."""
        return self._conn

    async def connection(self) -> ReadConnection:
        if self._conn is None:
            raw = await self.bind.raw_connection()
            kind = _SQLiteConnection if self.bind.dialect.name == "sqlite" else _PostgresConnection
            self._conn = await kind.open(self, raw)
        return self._conn

    def real_session(self) -> AsyncSession:
        if self._real is None:
            if self.bind.dialect.name == "postgresql":
                # read-only there too, though in a transaction (and a snapshot) of its own
                self._real = self._sessions(bind=_snapshot_engine(self.bind))
            else:
                self._real = self._sessions()
        return self._real

    async def sqlalchemy_connection(self) -> AsyncConnection:
        return await self.real_session().connection()

    def __getattr__(self, name: str) -> Any:
        # Only called for what this class lacks: the real session's method.
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.real_session(), name)

    async def close(self) -> None:
        try:
            if self._conn is not None:
                await self._conn.close()
        finally:
            self._conn = None
            if self._real is not None:
                real, self._real = self._real, None
                await real.close()


# The execution options of a read-only request's connection on PostgreSQL when SQLAlchemy
# runs it: the same snapshot isolation, sent with the BEGIN.
SNAPSHOT_READ = {"isolation_level": "REPEATABLE READ", "postgresql_readonly": True}
_SNAPSHOT_ENGINES: weakref.WeakKeyDictionary[AsyncEngine, AsyncEngine] = weakref.WeakKeyDictionary()


def _snapshot_engine(engine: AsyncEngine) -> AsyncEngine:
    found = _SNAPSHOT_ENGINES.get(engine)
    if found is None:
        found = _SNAPSHOT_ENGINES[engine] = engine.execution_options(**SNAPSHOT_READ)
    return found


@functools.cache
def _sqlalchemy_has_what_this_needs() -> bool:
    """The parts of SQLAlchemy's compiler this module drives, as SQLAlchemy 2.0 and 2.1 have
    them; without one of them the requests read through SQLAlchemy as before."""
    from sqlalchemy.sql.compiler import SQLCompiler

    wanted = ("construct_params", "_process_parameters_for_postcompile", "_bind_processors")
    if not all(hasattr(SQLCompiler, name) for name in wanted):
        return False
    accepts = inspect.signature(SQLCompiler.construct_params).parameters
    if "extracted_parameters" not in accepts or "escape_names" not in accepts:
        return False
    return "params" not in CacheKey._fields or "_collected_params" in accepts


@functools.cache
def _asyncpg_adapter_has_what_this_needs() -> bool:
    """The parts of SQLAlchemy's asyncpg adapter `_PostgresConnection` drives."""
    try:
        from sqlalchemy.dialects.postgresql.asyncpg import (
            AsyncAdapt_asyncpg_connection,
            AsyncAdapt_asyncpg_dbapi,
            PGDialect_asyncpg,
        )
    except ImportError:  # pragma: no cover - asyncpg is a dependency
        return False
    adapter = AsyncAdapt_asyncpg_connection
    if not all(hasattr(adapter, name) for name in ("_prepare", "_handle_exception", "_execute_mutex", "_connection")):
        return False
    if list(inspect.signature(adapter._prepare).parameters) != ["self", "operation", "invalidate_timestamp"]:
        return False
    if not hasattr(Pool, "_invalidate") or not hasattr(_ConnectionFairy, "_pool"):
        return False
    if not all(hasattr(PGDialect_asyncpg, name) for name in ("_invalidate_schema_cache_asof", "_invalidate_schema_cache")):
        return False
    return all(hasattr(AsyncAdapt_asyncpg_dbapi, name) for name in ("InvalidCachedStatementError", "InternalServerError"))


def uses_read_path(engine: AsyncEngine) -> bool:
    """Whether requests on this engine read through `ReadSession`: SQLite through the
    catalog's aiosqlite adapter (`db.create_engine`) or PostgreSQL through asyncpg, without
    echo (statements run here are not logged), with a SQLAlchemy whose compiler (and asyncpg
    adapter) offer what this module uses."""
    sync = engine.sync_engine
    if sync.echo or not _sqlalchemy_has_what_this_needs():
        return False
    if sync.dialect.name == "sqlite" and sync.dialect.driver == "aiosqlite":
        return has_one_trip_connections(engine)
    if sync.dialect.name == "postgresql" and sync.dialect.driver == "asyncpg":
        return _asyncpg_adapter_has_what_this_needs()
    return False


__all__ = ["SHAPES_PER_ENGINE", "SNAPSHOT_READ", "ReadConnection", "ReadSession", "Rows", "Scalars", "uses_read_path"]
