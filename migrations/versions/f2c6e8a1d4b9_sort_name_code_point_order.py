"""PostgreSQL: the name sort compares by code point (collation "C"), as SQLite does.

Revision ID: f2c6e8a1d4b9
Revises: d1f5a3c7e9b2
Create Date: 2026-11-26 14:40:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "f2c6e8a1d4b9"
down_revision: str | None = "d1f5a3c7e9b2"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

LENGTH = 1301


def _collate(collation: str | None) -> None:
    if op.get_bind().dialect.name != "postgresql":
        return  # SQLite compares text byte for byte (BINARY): code point order for UTF-8
    # Rewrites the column's index (ix_artifacts_sort_name_id) in the new order.
    op.alter_column("artifacts", "sort_name", type_=sa.String(LENGTH, collation=collation),
                    existing_type=sa.String(LENGTH), existing_nullable=False)  # fmt: skip


def upgrade() -> None:
    _collate("C")


def downgrade() -> None:
    _collate("default")
