"""Crawls run as jobs record each queued repo once, so their accounting survives reruns.

Revision ID: 7f1c9a2e4b60
Revises: e3b8d1f4a602
Create Date: 2026-11-22 03:35:28
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "7f1c9a2e4b60"
down_revision: str | None = "e3b8d1f4a602"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "crawl_repos",
        sa.Column("crawl_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("repo_id", sa.String(length=300), nullable=False),
        sa.Column("state", sa.String(length=8), nullable=False),
        sa.Column("job_id", sa.BigInteger(), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint(
            "state IN ('reserved', 'queued', 'reported', 'skipped', 'lost')", name=op.f("ck_crawl_repos_state")
        ),
        sa.ForeignKeyConstraint(
            ["crawl_id"], ["crawls.id"], name=op.f("fk_crawl_repos_crawl_id_crawls"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("crawl_id", "repo_id", name=op.f("pk_crawl_repos")),
    )


def downgrade() -> None:
    op.drop_table("crawl_repos")
