"""Each artifact's tensor table, compressed (registry/gguf/tensor_index.py), for the
artifact page's paged tensor list and `GET /v1/artifacts/{id}/tensors`.

Rows written before this revision have none until their next write (`DERIVATION` 5).

Revision ID: 0006_artifact_tensors
Revises: 0005_memory_estimate
Create Date: 2026-12-05
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006_artifact_tensors"
down_revision: str | None = "0005_memory_estimate"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "artifact_tensors",
        sa.Column("artifact_id", ID, nullable=False),
        sa.Column("tensor_count", sa.Integer(), nullable=False),
        sa.Column("stored", sa.Integer(), nullable=False),
        sa.Column("data", sa.LargeBinary(), nullable=False),
        sa.ForeignKeyConstraint(
            ["artifact_id"],
            ["artifacts.id"],
            name=op.f("fk_artifact_tensors_artifact_id_artifacts"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("artifact_id", name=op.f("pk_artifact_tensors")),
    )


def downgrade() -> None:
    op.drop_table("artifact_tensors")
