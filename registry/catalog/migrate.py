"""Run alembic from code: `registry db ...`, `registry index` (upgrade on first use) and tests.

The alembic scripts live in the top-level `migrations/` folder of the source tree, next to
the `registry` package (the project is installed in editable mode). Commands run on a
connection the caller opened, inside its event loop, through `config.attributes`.

Every command runs in one transaction that first takes the database's migration lock, so
processes that start together on an empty or old database (workers, `registry index`,
`registry db upgrade`) migrate one after another: the others wait, then find the schema at
head. PostgreSQL: the transaction-level advisory lock `MIGRATION_LOCK_KEY`. SQLite: the
write lock, taken at `BEGIN IMMEDIATE` (its driver runs DDL outside any transaction
otherwise, so two processes both created the first tables).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util.exc import CommandError
from sqlalchemy import text
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine

from registry.catalog.db import SQLITE_BUSY_TIMEOUT_MS
from registry.catalog.errors import CatalogError, SchemaMismatch

MIGRATIONS_DIR = Path(__file__).resolve().parents[2] / "migrations"
# The revisions that brought development databases to the schema of release 0.1.0, whose
# baseline (0001) replaced them: a database at the last of them holds the baseline's schema
# and is stamped, not migrated; one at an earlier one is refused with what to do.
LEGACY_HEAD = "b7d2e4f6a9c1"
BASELINE = "0001_baseline"
LEGACY_REVISIONS = frozenset({
    "0001", "0002", "5d3e1f7a9c20", "8b2f4c6d1e07", "c4a7e2b9d315", "e3b8d1f4a602", "7f1c9a2e4b60", "a6d2c8e4f1b3",
    "d1f5a3c7e9b2", "f2c6e8a1d4b9", "b7e4a2c9d8f1", "c8d3f5a1e6b2", "4e8b1d6f3a07", "9a3d5f7b1c28", "5c1e9b7d2a40",
    "e9c4b2a7d5f1", "f4a8c1e6b3d7", "a1c7e5b3d9f2", "b3e9d4f1a7c5", "c5e2a8f4d6b1", "d7a1f3c5e8b4", "a4c7e2b9f1d3",
    "b6d2f8a1c3e5", "7d2e9b4f1a68", "3b8f5c1d7e92", "9e4a2c6b8d15", "b5d9e2f7a1c3", "c1e7a9d3f5b2", "a8e3f1c9d2b6",
    LEGACY_HEAD,
})  # fmt: skip
# A migration can take minutes on a large catalog; processes that start meanwhile wait this
# long for it (SQLite's busy timeout while taking the lock) before giving up.
MIGRATION_WAIT_MS = 600_000
# pg_advisory_xact_lock key held while alembic runs: the bytes of "registry" as a bigint.
# Anything else taking this key waits for a migration to end (and blocks it meanwhile).
MIGRATION_LOCK_KEY = 0x7265_6769_7374_7279


def alembic_config(migrations_dir: Path = MIGRATIONS_DIR) -> Config:
    if not (migrations_dir / "env.py").is_file():
        raise CatalogError(
            f"alembic migrations not found at {migrations_dir}; install the project from its source tree "
            "(pip install -e .)"
        )
    cfg = Config(migrations_dir / "alembic.ini")
    cfg.set_main_option("script_location", str(migrations_dir))
    return cfg


def _take_migration_lock(connection: Connection) -> None:
    """Wait for the migration lock; held until the connection's transaction ends."""
    if connection.dialect.name == "postgresql":
        connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK_KEY})
    elif connection.dialect.name == "sqlite":
        connection.exec_driver_sql(f"PRAGMA busy_timeout={MIGRATION_WAIT_MS}")
        try:
            connection.exec_driver_sql("BEGIN IMMEDIATE")  # waits up to the busy timeout
        finally:
            connection.exec_driver_sql(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")


def _stamp_legacy_head(cfg: Config) -> None:
    """A development database at the last revision before the baseline holds the baseline's
    schema: record it as the baseline, so alembic carries on from there."""
    current = MigrationContext.configure(cfg.attributes["connection"]).get_current_revision()
    if current == LEGACY_HEAD:
        command.stamp(cfg, BASELINE, purge=True)
    elif current in LEGACY_REVISIONS:
        raise _legacy(current)


async def _run(engine: AsyncEngine, fn: Callable[[Config], None]) -> None:
    """`fn` on one connection, in one transaction under the migration lock."""
    cfg = alembic_config()

    def _sync(connection: Connection) -> None:
        _take_migration_lock(connection)
        cfg.attributes["connection"] = connection
        _stamp_legacy_head(cfg)
        fn(cfg)

    async with engine.connect() as conn:
        await conn.run_sync(_sync)
        await conn.commit()


async def upgrade(engine: AsyncEngine, revision: str = "head") -> None:
    await _run(engine, lambda cfg: command.upgrade(cfg, revision))


async def downgrade(engine: AsyncEngine, revision: str) -> None:
    await _run(engine, lambda cfg: command.downgrade(cfg, revision))


async def check(engine: AsyncEngine) -> None:
    """Raise alembic's AutogenerateDiffsDetected when the models and the migrations differ."""
    await _run(engine, command.check)


def head_revision() -> str | None:
    return ScriptDirectory.from_config(alembic_config()).get_current_head()


async def current_revision(engine: AsyncEngine) -> str | None:
    async with engine.connect() as conn:
        return await conn.run_sync(lambda c: MigrationContext.configure(c).get_current_revision())


def _unknown(revision: str) -> SchemaMismatch:
    return SchemaMismatch(
        f"the database is at schema revision {revision}, which this version of registry does not know "
        "(a newer release migrated it): run that release, or point registry at another database",
        revision=revision,
        head=head_revision(),
    )


def _legacy(revision: str) -> SchemaMismatch:
    return SchemaMismatch(
        f"the database is at schema revision {revision}, a development revision from before release 0.1.0: "
        f"upgrade it to {LEGACY_HEAD} with the registry of that time (`registry db upgrade` at commit d633628), "
        "then run `registry db upgrade` with this one",
        revision=revision,
        head=head_revision(),
    )


def _is_known(revision: str) -> bool:
    try:
        return ScriptDirectory.from_config(alembic_config()).get_revision(revision) is not None
    except CommandError:  # alembic's word for an id none of its scripts has
        return False


async def ensure_schema(engine: AsyncEngine) -> bool:
    """Upgrade to head unless already there; True when a migration ran. A database that a
    newer release migrated is refused (SchemaMismatch) instead of failing inside alembic.
    Safe to call from several processes at once: one migrates, the others wait and return
    False."""
    head = head_revision()
    if await current_revision(engine) == head:
        return False  # the usual case: no lock taken
    migrated = False

    def _upgrade(cfg: Config) -> None:
        nonlocal migrated
        # Read again under the lock: another process may have migrated while this one waited.
        current = MigrationContext.configure(cfg.attributes["connection"]).get_current_revision()
        if current == head:
            return
        if current is not None and not _is_known(current):
            raise _unknown(current)
        command.upgrade(cfg, "head")
        migrated = True

    await _run(engine, _upgrade)
    return migrated


async def require_schema(engine: AsyncEngine) -> None:
    """Raise SchemaMismatch unless the database is at head: for processes that do not
    migrate (PostgreSQL deployments migrate with `registry db upgrade` as a separate step),
    so that they refuse to start rather than fail on every request."""
    current, head = await current_revision(engine), head_revision()
    if current == head:
        return
    if current in LEGACY_REVISIONS and current != LEGACY_HEAD:
        raise _legacy(current)
    if current is not None and current != LEGACY_HEAD and not _is_known(current):
        raise _unknown(current)
    state = "has no catalog schema" if current is None else f"is at schema revision {current}"
    raise SchemaMismatch(
        f"the database {state}, this registry needs {head}: run `registry db upgrade`",
        revision=current,
        head=head,
    )
