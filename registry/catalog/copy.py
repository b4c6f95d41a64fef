"""Copy a whole catalog into another database: the embedded SQLite file into PostgreSQL when
a deployment outgrows one machine (no crawl of the hub again), or PostgreSQL into a SQLite
file for a local copy.

Every table of the catalog is copied row for row with its ids, so links, cursors and
`/v1/artifacts/ID` pages stay valid. The source is read in one transaction, a snapshot even
while a server goes on writing to it; the target is migrated to the schema head first,
must hold no catalog rows, and is written in one transaction, so a copy that fails leaves
it empty again. Rows go `BATCH` at a time, by primary key order, so memory stays flat
whatever the catalog's size. The search index follows the rows (SQLite's FTS5 triggers,
PostgreSQL's trigram index); PostgreSQL's id sequences are moved past the copied ids.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Table, func, select, text, tuple_
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection

from registry.catalog import migrate
from registry.catalog.db import Database
from registry.catalog.errors import CatalogError
from registry.catalog.models import Base

BATCH = 1000  # rows per SELECT and per INSERT


class CopyRefused(CatalogError):
    """A copy that would lose or mix rows: the source not at the schema head, the target not
    empty, or a row the target refuses."""

    code = "copy_refused"
    status = 409


@dataclass
class CopyReport:
    rows: dict[str, int] = field(default_factory=dict)  # table -> rows copied, in copy order
    unfinished_jobs: int = 0  # the source's embedded jobs still queued or running


def tables() -> list[Table]:
    """The catalog's tables, each after those its foreign keys name."""
    return list(Base.metadata.sorted_tables)


async def copy_catalog(
    source: Database,
    target: Database,
    *,
    on_table: Callable[[str, int], None] | None = None,
    batch: int = BATCH,
) -> CopyReport:
    """Copy every catalog row of `source` into `target` (see the module doc), `batch` rows at
    a time; `on_table(name, rows)` as each table is done. CopyRefused when it cannot be done
    without loss."""
    if batch < 1:
        raise ValueError("batch must be at least 1")
    head = migrate.head_revision()
    if (at := await migrate.current_revision(source.engine)) != head:
        raise CopyRefused(
            f"the source catalog is at schema revision {at or 'base (empty)'}, not {head}: run `registry db "
            "upgrade` on it first", revision=at, head=head,
        )  # fmt: skip
    await migrate.upgrade(target.engine)
    report = CopyReport()
    async with source.engine.connect() as src_conn:
        if source.dialect == "postgresql":  # one snapshot for every table
            src_conn = await src_conn.execution_options(isolation_level="REPEATABLE READ")
        async with src_conn.begin(), target.engine.begin() as dst:
            if source.dialect == "sqlite":
                # The driver starts no transaction for SELECTs, so each would read the file as it
                # is then: this one makes them one snapshot (WAL: writers go on meanwhile).
                await src_conn.exec_driver_sql("BEGIN")
            for table in tables():
                if (held := await dst.scalar(select(func.count()).select_from(table))) != 0:
                    raise CopyRefused(
                        f"the target already holds catalog rows ({held} in {table.name}): copy into an empty "
                        "database", table=table.name, rows=held,
                    )  # fmt: skip
            for table in tables():
                report.rows[table.name] = await _copy_table(src_conn, dst, table, batch)
                if on_table is not None:
                    on_table(table.name, report.rows[table.name])
            if target.dialect == "postgresql":
                await _move_sequences(dst)
            jobs = Base.metadata.tables["jobs"]
            report.unfinished_jobs = await src_conn.scalar(
                select(func.count()).select_from(jobs).where(jobs.c.status.in_(("queued", "running")))
            ) or 0  # fmt: skip
    return report


async def _copy_table(src: AsyncConnection, dst: AsyncConnection, table: Table, batch: int) -> int:
    key = list(table.primary_key.columns)
    position = tuple_(*key) if len(key) > 1 else key[0]
    last: tuple[Any, ...] | None = None
    copied = 0
    # The columns the database computes (artifacts.memory_at_default) the target computes again.
    given = [c for c in table.c if c.computed is None]
    while True:
        stmt = select(*given).order_by(*key).limit(batch)
        if last is not None:
            stmt = stmt.where(position > (tuple_(*last) if len(key) > 1 else last[0]))
        rows = [dict(r._mapping) for r in (await src.execute(stmt)).all()]
        if not rows:
            return copied
        try:
            await dst.execute(table.insert(), rows)
        except SQLAlchemyError as exc:
            first = {c.name: rows[0][c.name] for c in key}
            cause = getattr(exc, "orig", None) or exc  # the driver's own error, when there is one
            raise CopyRefused(
                f"the target refused a row of {table.name} (the batch from {first}): {type(cause).__name__}: "
                f"{cause}".splitlines()[0], table=table.name,
            ) from None  # fmt: skip
        copied += len(rows)
        last = tuple(rows[-1][c.name] for c in key)


async def _move_sequences(dst: AsyncConnection) -> None:
    """Each id sequence past the largest id copied, so the next row written gets a new one."""
    for table in tables():
        key = list(table.primary_key.columns)
        if len(key) != 1 or key[0].foreign_keys or key[0].type.python_type is not int:
            continue  # a key no sequence numbers
        name = key[0].name
        await dst.execute(
            text(
                f"SELECT setval(seq, (SELECT COALESCE(MAX({name}), 1) FROM {table.name}), "
                f"(SELECT COUNT(*) > 0 FROM {table.name})) "
                f"FROM pg_get_serial_sequence('{table.name}', '{name}') AS seq WHERE seq IS NOT NULL"
            )
        )
