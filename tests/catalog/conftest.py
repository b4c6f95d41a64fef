"""Database fixtures: every catalog test runs on SQLite and on PostgreSQL.

Each database is created and migrated once per session (PostgreSQL: a fresh database named
after the process, dropped at the end); each test gets its own engine and the tables are
emptied after it. Tests that need a PostgreSQL skip with the reason when no server answers
at $REGISTRY_TEST_POSTGRES_URL (default postgresql+asyncpg://postgres@127.0.0.1:5432/postgres).
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

import pytest
from sqlalchemy import make_url, text
from sqlalchemy.engine import URL

from registry.catalog import migrate
from registry.catalog.db import Database, create_engine
from registry.catalog.models import Base

T = TypeVar("T")
DEFAULT_PG_URL = "postgresql+asyncpg://postgres@127.0.0.1:5432/postgres"
# Every table of the models, children first; derived so that a new table cannot be missed.
TABLES = tuple(t.name for t in reversed(Base.metadata.sorted_tables))


def run_sync(factory: Callable[[], Awaitable[T]]) -> T:
    """Run a coroutine to completion from sync code, even while a test's event loop runs."""

    async def _main() -> T:
        return await factory()

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, _main()).result()


def postgres_admin_url() -> URL:
    return make_url(os.environ.get("REGISTRY_TEST_POSTGRES_URL", DEFAULT_PG_URL))


async def _admin(sql: str) -> None:
    engine = create_engine(
        postgres_admin_url().render_as_string(hide_password=False), isolation_level="AUTOCOMMIT"
    )
    try:
        async with engine.connect() as conn:
            await conn.execute(text(sql))
    finally:
        await engine.dispose()


def postgres_unreachable() -> str | None:
    async def probe() -> None:
        await asyncio.wait_for(_admin("SELECT 1"), timeout=5)

    try:
        run_sync(probe)
    except Exception as exc:
        # Only "nothing answers" is a reason to skip; a server that refuses us is a failure.
        cause: BaseException | None = exc
        while cause is not None and not isinstance(cause, OSError | TimeoutError):
            cause = cause.__cause__
        if cause is None:
            raise
        return f"no PostgreSQL reachable at {postgres_admin_url().render_as_string()}: {type(exc).__name__}: {exc}"
    return None


class TempDatabases:
    """Creates empty databases for the session and drops them at its end."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.created: list[str] = []
        self.pg_skip: str | bool | None = False  # False: not probed yet

    def new_url(self, kind: str, pg_options: str = "") -> str:
        """A new empty database; `pg_options` follow PostgreSQL's CREATE DATABASE name."""
        name = f"registry_test_{os.getpid()}_{uuid.uuid4().hex[:8]}"
        if kind == "sqlite":
            return f"sqlite+aiosqlite:///{self.tmp / (name + '.db')}"
        if self.pg_skip is False:
            self.pg_skip = postgres_unreachable()
        if self.pg_skip:
            if os.environ.get("REGISTRY_REQUIRE_POSTGRES"):
                # CI sets this: there a missing server is a broken setup, not a reason to skip.
                pytest.fail(f"REGISTRY_REQUIRE_POSTGRES is set but {self.pg_skip}")
            pytest.skip(str(self.pg_skip))
        run_sync(lambda: _admin(f'CREATE DATABASE "{name}" {pg_options}'))
        self.created.append(name)
        return postgres_admin_url().set(database=name).render_as_string(hide_password=False)

    def drop_all(self) -> None:
        for name in self.created:
            run_sync(lambda name=name: _admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@pytest.fixture(scope="session")
def temp_databases(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TempDatabases]:
    dbs = TempDatabases(tmp_path_factory.mktemp("db"))
    yield dbs
    dbs.drop_all()


async def _migrate(url: str) -> None:
    engine = create_engine(url)
    try:
        await migrate.upgrade(engine)
    finally:
        await engine.dispose()


@pytest.fixture(scope="session")
def sqlite_url(temp_databases: TempDatabases) -> str:
    url = temp_databases.new_url("sqlite")
    run_sync(lambda: _migrate(url))
    return url


@pytest.fixture(scope="session")
def postgresql_url(temp_databases: TempDatabases) -> str:
    url = temp_databases.new_url("postgresql")
    run_sync(lambda: _migrate(url))
    return url


DIALECTS = ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]


@pytest.fixture(params=DIALECTS)
def db_url(request: pytest.FixtureRequest) -> str:
    """A migrated database URL: one per dialect, shared by the session."""
    return str(request.getfixturevalue(f"{request.param}_url"))


@pytest.fixture(params=DIALECTS)
def empty_db_url(request: pytest.FixtureRequest, temp_databases: TempDatabases) -> str:
    """A new, unmigrated database of each dialect."""
    return temp_databases.new_url(request.param)


async def empty_tables(database: Database) -> None:
    async with database.engine.begin() as conn:
        if database.dialect == "postgresql":
            await conn.execute(text(f"TRUNCATE {', '.join(TABLES)} RESTART IDENTITY CASCADE"))
        else:
            for table in TABLES:
                await conn.execute(text(f"DELETE FROM {table}"))


@pytest.fixture
async def db(db_url: str) -> AsyncIterator[Database]:
    database = Database.from_url(db_url)
    try:
        yield database
    finally:
        await empty_tables(database)
        await database.dispose()
