"""What an artifact's chat templates can do: system, tools, tool_calls, thinking.

One nullable SmallInteger bit mask (`registry.safety.capabilities`, bit i for
`CAPABILITIES[i]`) with an index: a capability filter asks for the masks that hold its
bits, a short IN list the index answers. NULL is "not probed": error rows, rows whose
templates could not be rendered, and rows indexed before this release, until a forced
re-index (`crawl --full`, `index --full`) writes them. Nothing can be copied: the probes
render the templates in the sandbox.

Plain ALTER TABLE on SQLite, not batch mode, as in c5e2a8f4d6b1: a batch copy of
`artifacts` would drop the FTS5 triggers on it.

Revision ID: a4c7e2b9f1d3
Revises: d7a1f3c5e8b4
Create Date: 2026-11-28 05:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "a4c7e2b9f1d3"
down_revision: str | None = "d7a1f3c5e8b4"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("artifacts", sa.Column("chat_template_capabilities", sa.SmallInteger(), nullable=True))
    op.create_index(
        op.f("ix_artifacts_chat_template_capabilities"), "artifacts", ["chat_template_capabilities"], unique=False
    )


def downgrade() -> None:
    op.drop_index(op.f("ix_artifacts_chat_template_capabilities"), table_name="artifacts")
    op.drop_column("artifacts", "chat_template_capabilities")
