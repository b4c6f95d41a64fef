"""The ids the hub moved to a repo join its artifacts' search text: the repos they moved to
are read again.

From this revision the writer puts the ids of `repo_moves` into the search text of their
repo's artifacts. Rows written before hold only the repo's own id; forgetting the revision
of each repo that ids were moved to has the next crawl read it in full and write them
again (a few repos: the hub moves few). The schema is unchanged, and so is a downgraded
catalog's behaviour: the older writer only ever adds to the text what it derives itself.

Revision ID: e9c4b2a7d5f1
Revises: 5c1e9b7d2a40
Create Date: 2026-11-27 05:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "e9c4b2a7d5f1"
down_revision: str | None = "5c1e9b7d2a40"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute("UPDATE repos SET revision = NULL WHERE id IN (SELECT repo_pk FROM repo_moves)")


def downgrade() -> None:
    """Nothing to undo: the older writer rewrites each re-read repo's text without the ids."""
