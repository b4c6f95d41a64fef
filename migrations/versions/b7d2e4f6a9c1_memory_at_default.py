"""The memory an artifact needs at the default context, as a column the database computes.

`sort=memory` and `max_memory` size each artifact's KV cache at the query's context (4,096
tokens unless it names another), a value no index held: every match was read and sorted,
40-55 ms a page over bench.search's 100,000 artifacts. At the default context the value is
now a generated column (virtual on SQLite, where only its index stores it; stored on
PostgreSQL) with a `(memory_at_default, id)` index, so those pages walk the index like the
other sorts. Other contexts still compute it per match.

Revision ID: b7d2e4f6a9c1
Revises: a8e3f1c9d2b6
Create Date: 2026-11-29 09:10:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "b7d2e4f6a9c1"
down_revision: str | None = "a8e3f1c9d2b6"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

INDEX = "ix_artifacts_memory_at_default_id"
# registry.catalog.models.memory_at_sql(4096), as this revision made it
_USED = "CASE WHEN context_length > 0 AND context_length < 4096 THEN context_length ELSE 4096 END"
_WINDOW = (
    f"CASE WHEN kv_sliding_window IS NOT NULL AND kv_sliding_window < ({_USED})"
    f" THEN kv_sliding_window ELSE ({_USED}) END"
)
MEMORY_AT_DEFAULT = (
    f"CAST(file_size AS FLOAT) + CAST(kv_bytes_per_token AS FLOAT) * CAST({_USED} AS FLOAT)"
    f" + CAST(COALESCE(kv_swa_bytes_per_token, 0) AS FLOAT) * CAST({_WINDOW} AS FLOAT)"
)


def upgrade() -> None:
    # SQLite adds a virtual generated column in place (it cannot add a stored one);
    # PostgreSQL computes and stores it for every row (a rewrite of the table).
    stored = op.get_bind().dialect.name == "postgresql" or None
    column = sa.Column("memory_at_default", sa.Float(), sa.Computed(MEMORY_AT_DEFAULT, persisted=stored))
    op.add_column("artifacts", column)
    op.create_index(INDEX, "artifacts", ["memory_at_default", "id"])


def downgrade() -> None:
    op.drop_index(INDEX, table_name="artifacts")
    op.drop_column("artifacts", "memory_at_default")
