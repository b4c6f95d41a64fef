"""Chat template safety findings on artifacts: the findings JSON and the worst severity's rank.

Revision ID: 5d3e1f7a9c20
Revises: 0002
Create Date: 2026-11-22 01:45:00

Rows that exist before this revision were indexed without the scanner: they get NULL
("not scanned"), not the server default `[]`, which would claim they are clean. A forced
re-index (`RepoSnapshot.force`) or a new revision of the repo scans them.

Plain ALTER TABLE on SQLite, not batch mode: a batch copy of `artifacts` would drop the
FTS5 triggers that the free-text index (0002) hangs on it.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "5d3e1f7a9c20"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_INDEX = "ix_artifacts_chat_template_max_severity"


def upgrade() -> None:
    json_type = sa.JSON(none_as_null=True).with_variant(postgresql.JSONB(none_as_null=True), "postgresql")
    op.add_column(
        "artifacts",
        sa.Column("chat_template_findings", json_type, server_default=sa.text("'[]'"), nullable=True),
    )
    op.add_column("artifacts", sa.Column("chat_template_max_severity", sa.SmallInteger(), nullable=True))
    op.execute("UPDATE artifacts SET chat_template_findings = NULL")
    op.create_index(_INDEX, "artifacts", ["chat_template_max_severity"], unique=False)


def downgrade() -> None:
    op.drop_index(_INDEX, table_name="artifacts")
    op.drop_column("artifacts", "chat_template_max_severity")
    op.drop_column("artifacts", "chat_template_findings")
