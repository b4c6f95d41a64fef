"""What each artifact is (model, mmproj, lora, imatrix, vocab), on artifacts for the filter.

One nullable column with an index, copied from `facts.kind` for the indexed rows (every
indexed row has facts; error rows have none and stay NULL). Values outside the known kinds
cannot come from the writer; a hand-edited one is copied as it is and simply matches no
filter value.

Plain ALTER TABLE on SQLite, not batch mode, as in c5e2a8f4d6b1: a batch copy of
`artifacts` would drop the FTS5 triggers on it.

Revision ID: b6d2f8a1c3e5
Revises: a4c7e2b9f1d3
Create Date: 2026-11-28 05:20:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "b6d2f8a1c3e5"
down_revision: str | None = "a4c7e2b9f1d3"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("artifacts", sa.Column("kind", sa.String(length=16), nullable=True))
    op.create_index(op.f("ix_artifacts_kind"), "artifacts", ["kind"], unique=False)
    op.execute(
        "UPDATE artifacts SET kind = (SELECT f.kind FROM facts f WHERE f.artifact_id = artifacts.id) "
        "WHERE status = 'indexed'"
    )


def downgrade() -> None:
    op.drop_index(op.f("ix_artifacts_kind"), table_name="artifacts")
    op.drop_column("artifacts", "kind")
