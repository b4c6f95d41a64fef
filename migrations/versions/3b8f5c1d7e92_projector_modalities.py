"""What each multimodal projector takes in (vision, audio), on artifacts for the filter.

One nullable SmallInteger bit mask (`registry.gguf.facts_model.MODALITIES`, bit i for
`MODALITIES[i]`), set on `mmproj` rows only. No index: the modality filter reaches it
through the (repo_pk, path) index of a repo's projectors.

This release derives more from headers: `snapshot.DERIVATION` goes from 1 to 2. Only
projectors gain anything, so repos at 1 that hold none are moved to 2 here, and just the
repos with a projector (and those from before the number) are read again by the next
crawl or index. The downgrade puts 2 back to 1, so an upgrade after it reads those
projectors again.

Plain ALTER TABLE on SQLite, not batch mode, as in c5e2a8f4d6b1: a batch copy of
`artifacts` would drop the FTS5 triggers on it.

Revision ID: 3b8f5c1d7e92
Revises: 7d2e9b4f1a68
Create Date: 2026-11-28 08:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "3b8f5c1d7e92"
down_revision: str | None = "7d2e9b4f1a68"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("artifacts", sa.Column("modalities", sa.SmallInteger(), nullable=True))
    op.execute(
        "UPDATE repos SET derivation = 2 WHERE derivation = 1 AND NOT EXISTS "
        "(SELECT 1 FROM artifacts a WHERE a.repo_pk = repos.id AND a.kind = 'mmproj')"
    )


def downgrade() -> None:
    op.execute("UPDATE repos SET derivation = 1 WHERE derivation = 2")
    op.drop_column("artifacts", "modalities")
