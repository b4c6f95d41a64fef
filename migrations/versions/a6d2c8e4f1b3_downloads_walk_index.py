"""The downloads sort index also holds the columns filters check while walking it.

Revision ID: a6d2c8e4f1b3
Revises: 7f1c9a2e4b60
Create Date: 2026-11-22 06:20:00
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "a6d2c8e4f1b3"
down_revision: str | None = "7f1c9a2e4b60"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

WALK_COLUMNS = ["downloads", "id", "status", "architecture", "license", "file_type", "context_length", "repo_pk"]


def upgrade() -> None:
    op.create_index("ix_artifacts_downloads_walk", "artifacts", WALK_COLUMNS)
    op.drop_index("ix_artifacts_downloads_id", table_name="artifacts")


def downgrade() -> None:
    op.create_index("ix_artifacts_downloads_id", "artifacts", ["downloads", "id"])
    op.drop_index("ix_artifacts_downloads_walk", table_name="artifacts")
