"""Engine, session factory and read path from the settings: the `Database` every part of
the product passes around.

SQLite gets WAL (readers never block the writer), enforced foreign keys (off by default in
SQLite), a busy timeout so concurrent writers wait instead of failing at once, and a memory
map of the file. Its statements run through SQLAlchemy's aiosqlite dialect as it is; the
API's reads run on read-only connections of the catalog's own (`readpath`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import event
from sqlalchemy.engine import make_url
from sqlalchemy.engine.interfaces import DBAPIConnection
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker, create_async_engine
from sqlalchemy.pool import ConnectionPoolEntry

from registry.catalog.readpath import CATALOG_READS, CatalogReads
from registry.config import Settings

if TYPE_CHECKING:
    from registry.catalog.search.settings import PlannerSettings

SQLITE_BUSY_TIMEOUT_MS = 30_000
SQLITE_POOL_SIZE = 32
SQLITE_POOL_OVERFLOW = 32
# Per engine (per process): within PostgreSQL's default max_connections of 100 for a few
# `serve --workers` processes and workers, each keeping only what it has needed at once.
POSTGRES_POOL_SIZE = 20
POSTGRES_POOL_OVERFLOW = 10
POOL_TIMEOUT_S = 30.0  # SQLAlchemy's default: how long a request waits for a free connection
SQLITE_MMAP_BYTES = 1 << 30  # the address space to map per connection; a larger file maps its first GiB
SQLITE_INLINE_READ_MS = 5.0  # the longest an API read runs on the event loop's thread (0: never)


def _sqlite_pragmas(dbapi_connection: DBAPIConnection, _record: ConnectionPoolEntry) -> None:
    cursor = dbapi_connection.cursor()
    # First: switching a new file to WAL takes its write lock, which processes opening it
    # together then wait for instead of failing with "database is locked".
    cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA synchronous=NORMAL")  # safe with WAL; a crash loses no committed-and-synced page
    # Reads straight from the OS page cache through a mapping of the file, instead of a
    # read() and a copy into each connection's own small page cache per page touched.
    cursor.execute(f"PRAGMA mmap_size={SQLITE_MMAP_BYTES}")
    cursor.close()


def _pool_options(url: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    """The engine's options with the pools sized for a busy server (what is not given)."""
    parsed = make_url(url)
    options = dict(kwargs)
    if parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:"):
        # Keep the connections a busy server uses open: past the default pool of 5, each
        # burst opened and closed "overflow" connections, and a SQLite connection costs
        # a thread, the file open, the pragmas and a schema parse. Idle ones cost little.
        options.setdefault("pool_size", SQLITE_POOL_SIZE)
        options.setdefault("max_overflow", SQLITE_POOL_OVERFLOW)
    if parsed.get_backend_name() == "postgresql":
        # The same for PostgreSQL, where a new connection is a new server process: with the
        # default pool of 5, 16 requests at once in one `serve` process opened and closed
        # overflow connections all the time.
        options.setdefault("pool_size", POSTGRES_POOL_SIZE)
        options.setdefault("max_overflow", POSTGRES_POOL_OVERFLOW)
    return options


def create_engine(url: str, *, echo: bool = False, **kwargs: Any) -> AsyncEngine:
    """An async engine; on SQLite with the pragmas, and on both with pools sized for a
    busy server."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:"):
        Path(str(parsed.database)).parent.mkdir(parents=True, exist_ok=True)
    engine = create_async_engine(parsed, echo=echo, **_pool_options(url, kwargs))
    if engine.dialect.name == "sqlite":
        event.listen(engine.sync_engine, "connect", _sqlite_pragmas)
    return engine


def session_factory(engine: AsyncEngine) -> async_sessionmaker[AsyncSession]:
    # expire_on_commit=False: rows read in a transaction stay usable after it, without lazy IO.
    return async_sessionmaker(engine, expire_on_commit=False)


@dataclass(frozen=True)
class Database:
    """An engine, its session factory and what its reads keep (`readpath.CatalogReads`:
    read-only connections, compiled statements, the search's caches): what the CLI, workers
    and API pass around. Its sessions carry the reads in their `info`."""

    engine: AsyncEngine
    sessions: async_sessionmaker[AsyncSession]
    reads: CatalogReads = field(repr=False)

    @classmethod
    def from_url(
        cls, url: str, *, echo: bool = False, inline_read_ms: float = SQLITE_INLINE_READ_MS,
        planner: PlannerSettings | None = None,
        **kwargs: Any,
    ) -> Database:
        """`planner`: the search planner's thresholds (`search.PlannerSettings`; default its own)."""
        engine = create_engine(url, echo=echo, **kwargs)
        sessions = session_factory(engine)
        # The read-only connections are bounded as the engine's pool is.
        options = _pool_options(url, kwargs)
        size = options.get("pool_size", 5) + max(options.get("max_overflow", 10), 0)
        reads = CatalogReads(
            engine, sessions, inline_read_ms=inline_read_ms, pool_size=max(size, 1),
            pool_timeout_s=float(options.get("pool_timeout", POOL_TIMEOUT_S)),
            busy_timeout_ms=SQLITE_BUSY_TIMEOUT_MS, mmap_bytes=SQLITE_MMAP_BYTES, planner=planner,
        )  # fmt: skip
        sessions.configure(info={CATALOG_READS: reads})
        return cls(engine, sessions, reads)

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
        self.reads.close()
        await self.engine.dispose()

    async def __aenter__(self) -> Database:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.dispose()
