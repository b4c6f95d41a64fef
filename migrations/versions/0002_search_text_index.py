"""Free-text index on artifacts.search_text: pg_trgm GIN on PostgreSQL, FTS5 trigram on SQLite.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22 01:20:00
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

from registry.catalog import search_index

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    for statement in search_index.create_statements(op.get_bind().dialect.name):
        op.execute(statement)


def downgrade() -> None:
    for statement in search_index.drop_statements(op.get_bind().dialect.name):
        op.execute(statement)
