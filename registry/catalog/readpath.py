"""The read path of the API's requests: the catalog's SELECTs straight on a driver
connection, one snapshot per request, through public APIs only.

A request that reads through an AsyncSession pays SQLAlchemy for far more than the query:
the session, its connection and transaction, an execution context and a result object per
statement. A `ReadSession` runs each SELECT the way SQLAlchemy's execution does, minus that
machinery: the statement's shape is compiled once per database (`shapes.Shapes`), its values
are bound by position with the shape's bind processors, it runs on the driver, and its rows
come back through the shape's result processors as tuples that read like SQLAlchemy's rows
(`row.path`, `row._mapping["path"]`, `row[0]`). Where a statement runs:

- SQLite: on a read-only `sqlite3` connection of the catalog's own (`sqlite_reads`), inline
  on the event loop within the read budget, else on a reader thread. The request's reads
  are one read transaction: one snapshot of the file.
- PostgreSQL: on the asyncpg connection the engine's pool hands out (`pg_reads`), in one
  `REPEATABLE READ READ ONLY` transaction rolled back at the end.

The file memo's generation is read just before a SQLite snapshot begins and pinned in the
session's `info` (`memo.PINNED_GENERATION`): counts found in this snapshot are kept under a
generation no newer than the snapshot.

What the path does not run (a statement that is not a SELECT with result columns; the ORM's
`get` and `scalars`; every statement of an engine whose statements must be logged, `echo`,
or of an in-memory SQLite database) goes to a real AsyncSession, opened on first use (on
PostgreSQL read-only and at REPEATABLE READ too, in a transaction of its own). `ReadCounts`
counts the statements each way.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from sqlalchemy.engine import Dialect, Result
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker
from sqlalchemy.sql import Executable

from registry.catalog.caches import Caches
from registry.catalog.memo import PINNED_GENERATION, FileGeneration
from registry.catalog.shapes import Keyed, Rows, Shape, Statement

if TYPE_CHECKING:
    from registry.catalog.pg_reads import PostgresReadConnection, PostgresReads
    from registry.catalog.search.settings import PlannerSettings
    from registry.catalog.sqlite_reads import ReadOnlyConnection, SQLiteReads

_O = TypeVar("_O")
CATALOG_READS = "registry.catalog_reads"  # session.info: the CatalogReads of the session's database
# The execution options of a read-only request's SQLAlchemy session on PostgreSQL: the same
# snapshot isolation, sent with the BEGIN.
SNAPSHOT_READ = {"isolation_level": "REPEATABLE READ", "postgresql_readonly": True}


class ScalarRows(Protocol):
    def __iter__(self) -> Iterator[Any]: ...
    def all(self) -> Sequence[Any]: ...
    def first(self) -> Any: ...
    def one(self) -> Any: ...
    def one_or_none(self) -> Any: ...


class ResultRows(Protocol):
    """What the catalog's reads use of a statement's result (SQLAlchemy's Result or `Rows`)."""

    def __iter__(self) -> Iterator[Any]: ...
    def all(self) -> Sequence[Any]: ...
    def first(self) -> Any: ...
    def one(self) -> Any: ...
    def one_or_none(self) -> Any: ...
    def scalar(self) -> Any: ...
    def scalar_one(self) -> Any: ...
    def scalar_one_or_none(self) -> Any: ...
    def scalars(self) -> ScalarRows: ...


class CatalogConnection(Protocol):
    """What the catalog's reads use of a connection: SQLAlchemy's AsyncConnection or a
    `ReadConnection`."""

    @property
    def dialect(self) -> Dialect: ...

    async def execute(self, statement: Executable, parameters: Mapping[str, Any] | None = None, /) -> ResultRows: ...


class CatalogSession(Protocol):
    """What the catalog's reads use of a session: SQLAlchemy's AsyncSession or a `ReadSession`."""

    @property
    def info(self) -> dict[Any, Any]: ...

    async def connection(self) -> CatalogConnection: ...


@dataclass
class ReadCounts:
    """Statements of read-only sessions: on the read path, and handed to SQLAlchemy."""

    fast: int = 0
    session: int = 0


class CatalogReads:
    """What one `Database` keeps for its read-only sessions: the caches, the read-only SQLite
    connections or the PostgreSQL read state, and the counts. Closed with its database."""

    def __init__(
        self, engine: AsyncEngine, sessions: async_sessionmaker[AsyncSession], *, inline_read_ms: float = 0.0,
        pool_size: int = 5, pool_timeout_s: float = 30.0, busy_timeout_ms: int = 30_000, mmap_bytes: int = 0,
        planner: PlannerSettings | None = None, read_path: bool = True,
    ) -> None:  # fmt: skip
        self.engine = engine
        self.sessions = sessions
        dialect = engine.dialect
        database = engine.url.database if dialect.name == "sqlite" else None
        self.caches = Caches(dialect, database, memo=read_path)
        # The search planner's thresholds for this database (None: its defaults), unless a
        # call passes its own.
        self.planner = planner
        self.counts = ReadCounts()
        self.sqlite: SQLiteReads | None = None
        self.postgres: PostgresReads | None = None
        self._snapshot_engine: AsyncEngine | None = None
        if engine.sync_engine.echo or not read_path:
            return  # every statement through SQLAlchemy (which logs it)
        if dialect.name == "sqlite" and database not in (None, "", ":memory:") and "mode=memory" not in str(engine.url):
            from registry.catalog.sqlite_reads import SQLiteReads

            self.sqlite = SQLiteReads(
                str(database), inline_read_ms=inline_read_ms, size=pool_size, timeout_s=pool_timeout_s,
                busy_timeout_ms=busy_timeout_ms, mmap_bytes=mmap_bytes,
            )  # fmt: skip
        elif dialect.name == "postgresql" and dialect.driver == "asyncpg":
            from registry.catalog.pg_reads import PostgresReads

            self.postgres = PostgresReads(engine)

    @property
    def fast(self) -> bool:
        """Whether read-only sessions run their SELECTs on the read path."""
        return self.sqlite is not None or self.postgres is not None

    def snapshot_engine(self) -> AsyncEngine:
        """The engine SQLAlchemy's sessions of read-only requests use: on PostgreSQL read-only
        at REPEATABLE READ, as the read path's transactions."""
        if self.engine.dialect.name != "postgresql":
            return self.engine
        if self._snapshot_engine is None:
            self._snapshot_engine = self.engine.execution_options(**SNAPSHOT_READ)
        return self._snapshot_engine

    def close(self) -> None:
        if self.sqlite is not None:
            self.sqlite.close()
        self.caches.close()


def catalog_reads(session: CatalogSession) -> CatalogReads | None:
    """The CatalogReads of the session's database (`Database` puts it in its sessions' info)."""
    found = session.info.get(CATALOG_READS)
    return found if isinstance(found, CatalogReads) else None


def caches_of(session: CatalogSession) -> Caches | None:
    reads = catalog_reads(session)
    return None if reads is None else reads.caches


async def run(session: CatalogSession, statement: Statement, parameters: Mapping[str, Any] | None = None) -> ResultRows:
    """Run a statement (a `Keyed` one too) on the session's connection: on the read path for
    a ReadSession, else through SQLAlchemy, the keyed statement built once per database."""
    conn = await session.connection()
    if isinstance(conn, ReadConnection):
        return await conn.execute(statement, parameters)
    if isinstance(statement, Keyed):
        reads = catalog_reads(session)
        statement = reads.caches.shapes.statement(statement) if reads is not None else statement.build()
    return await conn.execute(statement, parameters)


class ReadConnection:
    """The connection of a `ReadSession`: SELECTs on the read path, the rest on SQLAlchemy."""

    def __init__(self, session: ReadSession) -> None:
        self._session = session
        self._reads = session.reads
        self.dialect: Dialect = session.reads.engine.dialect
        self._sqlite: ReadOnlyConnection | None = None
        self._postgres: PostgresReadConnection | None = None
        self.budget_ms: float | None = None  # the inline budget of SQLite reads (None: the file's)

    async def open(self) -> None:
        """Begin the snapshot (SQLite: after reading the memo's generation, pinned for it)."""
        reads = self._reads
        if reads.sqlite is not None:
            memo = reads.caches.memo
            if memo is not None and isinstance(memo.generations, FileGeneration):
                self._session.info[PINNED_GENERATION] = memo.generations.now()
            conn = await reads.sqlite.acquire()
            try:
                await conn.begin()
            except BaseException:
                conn.release()
                raise
            self._sqlite = conn
        elif reads.postgres is not None:
            self._postgres = await reads.postgres.open()

    async def execute(self, statement: Statement, parameters: Mapping[str, Any] | None = None, /) -> ResultRows:
        shape = self._reads.caches.shapes.get(statement) if self._reads.fast else None
        if shape is None:
            self._reads.counts.session += 1
            real = await self._session.sqlalchemy().connection()
            built = self._reads.caches.shapes.statement(statement)
            return await real.execute(built, parameters)
        self._reads.counts.fast += 1
        sql, args = shape.bind(parameters)
        return Rows(await self._fetch(shape, sql, args))

    async def _fetch(self, shape: Shape, sql: str, args: tuple[Any, ...]) -> list[Any]:
        if self._sqlite is not None:
            return shape.rows(await self._sqlite.fetch(sql, args, self.budget_ms))
        assert self._postgres is not None
        return await self._postgres.fetch(shape, sql, args)

    async def close(self) -> None:
        sqlite, self._sqlite = self._sqlite, None
        postgres, self._postgres = self._postgres, None
        if sqlite is not None:
            try:
                await sqlite.end()
            finally:
                sqlite.release()
        if postgres is not None:
            await postgres.close()


class ReadSession:
    """The session of a read-only request (see the module doc): `connection()` for the
    catalog's reads, and the few AsyncSession methods the read routes use (`get`, `scalars`,
    `scalar`, `execute`), which a real AsyncSession answers, opened on first use."""

    def __init__(self, reads: CatalogReads) -> None:
        self.reads = reads
        self.info: dict[Any, Any] = {CATALOG_READS: reads}
        self._conn: ReadConnection | None = None
        self._real: AsyncSession | None = None

    async def connection(self) -> ReadConnection:
        if self._conn is None:
            conn = ReadConnection(self)
            await conn.open()
            self._conn = conn
        return self._conn

    def sqlalchemy(self) -> AsyncSession:
        """The real session behind this one, made on first use."""
        if self._real is None:
            self._real = self.reads.sessions(bind=self.reads.snapshot_engine(), info=dict(self.info))
        return self._real

    async def get(self, entity: type[_O], ident: Any) -> _O | None:
        self.reads.counts.session += 1
        return await self.sqlalchemy().get(entity, ident)

    async def scalars(self, statement: Executable) -> Any:
        self.reads.counts.session += 1
        return await self.sqlalchemy().scalars(statement)

    async def scalar(self, statement: Executable) -> Any:
        self.reads.counts.session += 1
        return await self.sqlalchemy().scalar(statement)

    async def execute(self, statement: Executable, parameters: Mapping[str, Any] | None = None) -> Result[Any]:
        self.reads.counts.session += 1
        return await self.sqlalchemy().execute(statement, parameters)

    async def close(self) -> None:
        try:
            if self._conn is not None:
                await self._conn.close()
        finally:
            self._conn = None
            if self._real is not None:
                real, self._real = self._real, None
                await real.close()


__all__ = [
    "CATALOG_READS", "SNAPSHOT_READ", "CatalogConnection", "CatalogReads", "CatalogSession", "ReadConnection",
    "ReadCounts", "ReadSession", "ResultRows", "ScalarRows", "caches_of", "catalog_reads", "run",
]  # fmt: skip
