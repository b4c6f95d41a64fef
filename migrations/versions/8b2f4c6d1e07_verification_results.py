"""Verification results: generated token ids, bytes downloaded and peak memory.

Revision ID: 8b2f4c6d1e07
Revises: 5d3e1f7a9c20
Create Date: 2026-11-22 02:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "8b2f4c6d1e07"
down_revision: str | None = "5d3e1f7a9c20"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Nullable: rows written before this revision have none of these.
    json = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")
    op.add_column("verifications", sa.Column("generated_tokens", json, nullable=True))
    op.add_column("verifications", sa.Column("bytes_downloaded", sa.BigInteger(), nullable=True))
    op.add_column("verifications", sa.Column("peak_rss_bytes", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    # SQLite has dropped columns natively since 3.35; no table rebuild is needed.
    for column in ("peak_rss_bytes", "bytes_downloaded", "generated_tokens"):
        op.drop_column("verifications", column)
