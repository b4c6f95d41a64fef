"""Crawls run as jobs count their pending index-repo jobs and finish when the last one ends.

Revision ID: e3b8d1f4a602
Revises: c4a7e2b9d315
Create Date: 2026-11-22 03:05:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "e3b8d1f4a602"
down_revision: str | None = "c4a7e2b9d315"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("crawls") as batch:
        batch.add_column(sa.Column("pending_jobs", sa.Integer(), server_default=sa.text("0"), nullable=False))


def downgrade() -> None:
    with op.batch_alter_table("crawls") as batch:
        batch.drop_column("pending_jobs")
