"""Chat templates gain a fifth capability, parallel_tool_calls: derivation 2 -> 3.

The capability is bit 4 of `artifacts.chat_template_capabilities`, after the four of
before, so stored masks keep their meaning and the schema does not change. Rows written
before lack the bit; only a template that renders one tool call can render two, so the
repos at 2 none of whose artifacts has `tool_calls` (bit 2) are moved to 3 here, and just
the others are read again by the next crawl or index (`snapshot.DERIVATION`). The
downgrade puts 3 back to 2, so an upgrade after it reads those again.

Revision ID: 9e4a2c6b8d15
Revises: 3b8f5c1d7e92
Create Date: 2026-11-28 08:10:00
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "9e4a2c6b8d15"
down_revision: str | None = "3b8f5c1d7e92"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TOOL_CALLS_BIT = 4  # 1 << CAPABILITIES.index("tool_calls"), as this revision stores it


def upgrade() -> None:
    op.execute(
        "UPDATE repos SET derivation = 3 WHERE derivation = 2 AND NOT EXISTS "
        "(SELECT 1 FROM artifacts a WHERE a.repo_pk = repos.id "
        f"AND (a.chat_template_capabilities & {TOOL_CALLS_BIT}) <> 0)"
    )


def downgrade() -> None:
    op.execute("UPDATE repos SET derivation = 2 WHERE derivation = 3")
