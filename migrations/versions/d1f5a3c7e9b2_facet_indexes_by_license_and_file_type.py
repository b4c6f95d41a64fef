"""Facet indexes led by license and by file type cover all four facets.

Revision ID: d1f5a3c7e9b2
Revises: a6d2c8e4f1b3
Create Date: 2026-11-22 06:45:00
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "d1f5a3c7e9b2"
down_revision: str | None = "a6d2c8e4f1b3"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

WIDE = {
    "ix_artifacts_status_license_architecture_file_type_size_bucket":
        ["status", "license", "architecture", "file_type", "size_bucket"],
    "ix_artifacts_status_file_type_architecture_license_size_bucket":
        ["status", "file_type", "architecture", "license", "size_bucket"],
}  # fmt: skip
NARROW = {"ix_artifacts_status_license": ["status", "license"], "ix_artifacts_status_file_type": ["status", "file_type"]}


def upgrade() -> None:
    for name, columns in WIDE.items():
        op.create_index(name, "artifacts", columns)
    for name in NARROW:
        op.drop_index(name, table_name="artifacts")


def downgrade() -> None:
    for name, columns in NARROW.items():
        op.create_index(name, "artifacts", columns)
    for name in WIDE:
        op.drop_index(name, table_name="artifacts")
