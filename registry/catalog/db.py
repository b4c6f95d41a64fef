"""Engine and session factory from the settings.

SQLite gets WAL (readers never block the writer), enforced foreign keys (off by default in
SQLite) and a busy timeout so concurrent writers wait instead of failing at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker, create_async_engine

from registry.config import Settings

SQLITE_BUSY_TIMEOUT_MS = 30_000


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
    cursor.execute("PRAGMA synchronous=NORMAL")  # safe with WAL; a crash loses no committed-and-synced page
    cursor.close()


def create_engine(url: str, *, echo: bool = False, **kwargs: Any) -> AsyncEngine:
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:"):
        Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
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
