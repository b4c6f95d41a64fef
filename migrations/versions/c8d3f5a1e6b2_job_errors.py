"""Distributed mode: why a job failed (procrastinate keeps no error text), job_errors.

Revision ID: c8d3f5a1e6b2
Revises: b7e4a2c9d8f1
Create Date: 2026-11-26 17:05:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "c8d3f5a1e6b2"
down_revision: str | None = "b7e4a2c9d8f1"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "job_errors",
        sa.Column("job_id", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("error", sa.Text(), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("job_id", name=op.f("pk_job_errors")),
    )


def downgrade() -> None:
    op.drop_table("job_errors")
