"""Lineage edges keep the other ids of their parent that the child's sources named.

Ids the hub moved to one repo are one parent: a child whose sources name two of them has
one edge under the repo, spelled as the first source wrote it. `also_spelled` keeps the
others (one per id, letter case aside), so that when the hub answers for one of them as a
repo of its own again the edge is split and neither parent loses the child. Rows written
before hold `[]`: what they merged is not known, and each is read again only when its
child changes.

Revision ID: f4a8c1e6b3d7
Revises: e9c4b2a7d5f1
Create Date: 2026-11-27 06:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "f4a8c1e6b3d7"
down_revision: str | None = "e9c4b2a7d5f1"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    json_type = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")
    op.add_column("lineage_edges", sa.Column("also_spelled", json_type, server_default=sa.text("'[]'"), nullable=False))


def downgrade() -> None:
    with op.batch_alter_table("lineage_edges") as batch:
        batch.drop_column("also_spelled")
