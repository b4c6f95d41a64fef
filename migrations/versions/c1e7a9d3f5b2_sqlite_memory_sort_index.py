"""SQLite: an index that holds everything the sort by memory reads of an artifact.

`sort=memory` sorts every match by its file size plus its KV cache at the asked context, an
order no index can hold. On SQLite most of that time was reading each artifact's row for
six numbers; with them in one narrow index (3 MB for 100,000 artifacts) the sort reads the
index instead: every match of bench.search's catalog sorted by memory, p50 / p99 64 / 76 ms
before, 41 / 45 ms after. PostgreSQL is left without it: there the same index made that
sort slower (35 -> 44 ms a call). The index is created by hand here, and alembic's
autogenerate leaves it alone (`registry.catalog.search.MEMORY_SORT_INDEX`, migrations/env.py).

Revision ID: c1e7a9d3f5b2
Revises: b5d9e2f7a1c3
Create Date: 2026-11-28 23:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "c1e7a9d3f5b2"
down_revision: str | None = "b5d9e2f7a1c3"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# registry.catalog.search.MEMORY_SORT_INDEX, as this revision made it
INDEX = "ix_artifacts_memory_sort"
COLUMNS = "status, kv_bytes_per_token, file_size, context_length, kv_swa_bytes_per_token, kv_sliding_window"


def upgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        op.execute(f"CREATE INDEX IF NOT EXISTS {INDEX} ON artifacts ({COLUMNS})")


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        op.execute(f"DROP INDEX IF EXISTS {INDEX}")
