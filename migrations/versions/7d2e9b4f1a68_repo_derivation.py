"""The derivation number of the release that last wrote each repo in full.

`repos.derivation` holds `registry.catalog.snapshot.DERIVATION` of the writer. Rows
written before it exist are NULL, which the writer and the crawl read as "an older
release": each such repo is read again by the next crawl or index that names it, even at
the revision indexed, and written in full once. That fills what the releases since it
was written derive (KV cache and vocabulary columns, template findings and capabilities)
without a `crawl --full` that re-reads every repo on every run. Indexed, for the count of
repos still to re-read (`GET /metrics`).

Revision ID: 7d2e9b4f1a68
Revises: b6d2f8a1c3e5
Create Date: 2026-11-28 07:40:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "7d2e9b4f1a68"
down_revision: str | None = "b6d2f8a1c3e5"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("repos", sa.Column("derivation", sa.Integer(), nullable=True))
    op.create_index(op.f("ix_repos_derivation"), "repos", ["derivation"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_repos_derivation"), table_name="repos")
    op.drop_column("repos", "derivation")
