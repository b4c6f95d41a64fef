"""The read path of the API's requests on SQLite: the catalog's SELECTs straight on the driver.

A request that reads through an AsyncSession pays SQLAlchemy for far more than the query:
the session, its connection and transaction, an execution context and a result object per
statement. On the bench catalog a page of one indexed SELECT cost 262 us through a
session, and the same statement 5 us in sqlite3; with SQLAlchemy's execution path at a
quarter of the API's CPU, it set how many requests two cores could serve.

`ReadSession` stands in for the AsyncSession of a read-only request. Its `connection()` is a
`ReadConnection` on a pooled connection of the engine, whose `execute()` runs a Core SELECT
the way SQLAlchemy's execution does, minus the machinery: the statement's shape is compiled
once per engine (keyed by SQLAlchemy's own cache key, so equal shapes with different
values share it), the values are bound with the shape's bind processors in its positional
order, the statement runs through `db.run_statement` (inline on the event loop within the
read budget, else on the connection's thread, as every SQLite statement here), and the rows
come back through the shape's result processors (dates, JSON, booleans) as tuples that
read like SQLAlchemy's rows (`row.path`, `row._mapping["path"]`, `row[0]`).

The SELECTs of one ReadSession read one snapshot of the file: its connection opens a read
transaction before the first (`db.begin_read`) and ends it at close, so a page put together
from several statements (an artifact and its shards, a lineage walk) never mixes rows from
before and after a commit made meanwhile. The file memo's generation (`search.FileMemo`) is
read just before, and the session's memo lookups use it: counts found in this snapshot are
kept under a generation no newer than the snapshot. (On PostgreSQL `api.sessions` reads in a
REPEATABLE READ transaction, to the same end.)

Anything else goes to SQLAlchemy, so nothing behaves differently: a statement that is not a
cacheable SELECT runs on a real AsyncConnection, and every other session method (ORM `get`,
`scalars`, ...) is a real AsyncSession's, opened on first use. sqlite3's errors are wrapped
in SQLAlchemy's exception classes as its execution wraps them.
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
from sqlalchemy.sql.cache_key import CacheKey
from sqlalchemy.util.concurrency import greenlet_spawn

from registry.catalog.db import (
    OneTripConnection,
    begin_read,
    end_read,
    has_one_trip_connections,
    run_statement,
)
from registry.catalog.search import FileMemo

# Compiled shapes kept per engine (least recently used dropped first): as SQLAlchemy's own
# compiled cache, which holds 500. The catalog's reads have a few hundred shapes.
SHAPES_PER_ENGINE = 1024


class _Shape:
    """One compiled SELECT: its SQL, how to bind values, how to read rows."""

    __slots__ = ("binds", "compiled", "expands", "positions", "processed", "row_type", "sql")

    def __init__(self, compiled: Any) -> None:
        self.compiled = compiled
        self.sql: str = compiled.string
        self.positions: Sequence[str] = compiled.positiontup or ()
        self.binds: Mapping[str, Any] = compiled._bind_processors
        # IN lists and literal values are rendered per execution (SQLAlchemy's "post compile")
        self.expands = bool(compiled.literal_execute_params or compiled.post_compile_params)
        dialect = compiled.dialect
        columns = compiled._result_columns
        # (column index, result processor) of the columns that have one: a search hit has
        # one among its 22 (its date), and the other values are taken as they are.
        processors = [c.type._cached_result_processor(dialect, None) for c in columns]
        self.processed = [(i, p) for i, p in enumerate(processors) if p is not None]
        self.row_type = _row_type(tuple(c.keyname for c in columns))

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

    def read(self, raw: list[tuple[Any, ...]]) -> list[Any]:
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
    """The connection of a `ReadSession`: SELECTs on the driver, the rest on SQLAlchemy."""

    def __init__(self, session: ReadSession, raw: Any) -> None:
        self._session = session
        self._raw = raw  # the pool's proxy; its dbapi_connection is db's aiosqlite adapter
        self._shapes = _shapes(session.bind.sync_engine)
        self.dialect = session.bind.dialect

    async def execute(self, statement: Any, parameters: Mapping[str, Any] | None = None) -> Any:
        found = self._shapes.get(statement, self.dialect)
        if found is None:
            conn = await self._session.sqlalchemy_connection()
            return await conn.execute(statement, parameters)
        shape, key = found
        sql, args = shape.bind(parameters, key)
        try:
            _description, raw, _count, _rowid = await run_statement(self._raw.dbapi_connection, sql, args, False)
        except sqlite3.Error as error:
            raise exc.DBAPIError.instance(sql, args, error, sqlite3.Error) from error
        return Rows(shape.read(raw))

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


class ReadSession:
    """The session of a read-only request on SQLite (see the module doc). It offers what
    the catalog's reads use of an AsyncSession: `connection()`, `get_bind()` and `bind`;
    any other attribute is a real AsyncSession's, opened on first use."""

    def __init__(self, engine: AsyncEngine, sessions: async_sessionmaker[AsyncSession]) -> None:
        self.bind = engine
        self._sessions = sessions
        self._conn: ReadConnection | None = None
        self._real: AsyncSession | None = None
        # The file memo's generation read just before the snapshot began (None: no memo,
        # or no snapshot yet): what `FileMemo.generation_for` answers for this session.
        self.snapshot_generation: int | None = None

    def get_bind(self) -> Engine:
        return self.bind.sync_engine

    async def connection(self) -> ReadConnection:
        if self._conn is None:
            raw = await self.bind.raw_connection()
            try:
                memo = FileMemo.of(self)  # type: ignore[arg-type]
                self.snapshot_generation = None if memo is None else memo.generation()
                await begin_read(cast(OneTripConnection, raw.dbapi_connection))  # see uses_read_path
            except BaseException:
                await greenlet_spawn(raw.close)
                raise
            self._conn = ReadConnection(self, raw)
        return self._conn

    def real_session(self) -> AsyncSession:
        if self._real is None:
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


def uses_read_path(engine: AsyncEngine) -> bool:
    """Whether requests on this engine read through `ReadSession`: SQLite through the
    catalog's aiosqlite adapter (`db.create_engine`), without echo (statements run here are
    not logged), with a SQLAlchemy whose compiler offers what this module uses."""
    sync = engine.sync_engine
    if sync.dialect.name != "sqlite" or sync.dialect.driver != "aiosqlite" or sync.echo:
        return False
    return has_one_trip_connections(engine) and _sqlalchemy_has_what_this_needs()


__all__ = ["SHAPES_PER_ENGINE", "ReadConnection", "ReadSession", "Rows", "Scalars", "uses_read_path"]
