"""Hub ids that the hub now answers under another catalog repo's id: repo_moves.

A crawl that asks the hub for a repo by an id it renamed or transferred records the old
id here. Lineage edges that name the old id are filed under the repo's key from then on,
and the API redirects the old id's routes to the repo. No existing row changes.

Revision ID: 5c1e9b7d2a40
Revises: 9a3d5f7b1c28
Create Date: 2026-11-27 02:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "5c1e9b7d2a40"
down_revision: str | None = "9a3d5f7b1c28"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "repo_moves",
        sa.Column("old_key", sa.String(length=300), nullable=False),
        sa.Column("old_repo_id", sa.String(length=300), nullable=False),
        sa.Column("repo_pk", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("moved_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["repo_pk"], ["repos.id"], name=op.f("fk_repo_moves_repo_pk_repos"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("old_key", name=op.f("pk_repo_moves")),
    )
    op.create_index(op.f("ix_repo_moves_repo_pk"), "repo_moves", ["repo_pk"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_repo_moves_repo_pk"), table_name="repo_moves")
    op.drop_table("repo_moves")
