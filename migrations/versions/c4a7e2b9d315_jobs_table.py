"""Jobs of the embedded runner: crawl, index-repo and verify jobs persisted so a restart resumes them.

Revision ID: c4a7e2b9d315
Revises: 8b2f4c6d1e07
Create Date: 2026-11-22 02:30:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "c4a7e2b9d315"
down_revision: str | None = "8b2f4c6d1e07"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "jobs",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("queue", sa.String(length=32), nullable=False),
        sa.Column("status", sa.String(length=8), nullable=False),
        sa.Column(
            "args",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column("lock", sa.String(length=400), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("run_after", sa.DateTime(timezone=True), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint("kind IN ('crawl', 'index_repo', 'verify')", name=op.f("ck_jobs_kind")),
        sa.CheckConstraint("status IN ('queued', 'running', 'failed', 'done')", name=op.f("ck_jobs_status")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_jobs")),
    )
    op.create_index(op.f("ix_jobs_status_run_after"), "jobs", ["status", "run_after"], unique=False)
    op.create_index(op.f("ix_jobs_lock"), "jobs", ["lock"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_jobs_lock"), table_name="jobs")
    op.drop_index(op.f("ix_jobs_status_run_after"), table_name="jobs")
    op.drop_table("jobs")
