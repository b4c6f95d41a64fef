"""Search copies of architecture, license, file type and size label in their folded spelling.

The filters on these columns now match in any ASCII case: the artifacts row stores each
value folded (`registry.catalog.folding`) and queries are folded alike. This folds the rows
written before, one UPDATE per spelling that changes (a catalog holds a few hundred
distinct values, not one per row). The schema is unchanged.

The downgrade restores each file's own spelling from `facts` (which always kept it), and
a license from the card where the file names none, as the writer before this revision did.

Revision ID: 4e8b1d6f3a07
Revises: c8d3f5a1e6b2
Create Date: 2026-11-26 17:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from registry.catalog.folding import FOLDS

revision: str = "4e8b1d6f3a07"
down_revision: str | None = "c8d3f5a1e6b2"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

COLUMNS = ("architecture", "license", "file_type", "size_label")
artifacts = sa.table("artifacts", sa.column("id", sa.BigInteger), sa.column("repo_pk", sa.BigInteger),
                     *(sa.column(name, sa.String) for name in COLUMNS))  # fmt: skip
facts = sa.table("facts", sa.column("artifact_id", sa.BigInteger), *(sa.column(name, sa.String) for name in COLUMNS))
repos = sa.table("repos", sa.column("id", sa.BigInteger), sa.column("card_license", sa.String))


def upgrade() -> None:
    conn = op.get_bind()
    for name in COLUMNS:
        column, fold = artifacts.c[name], FOLDS[name]
        # Each column has its own index: the distinct values are read from it.
        values = conn.execute(sa.select(column).where(column.is_not(None)).distinct()).scalars().all()
        changes = [{"old": v, "new": fold(v)} for v in values if fold(v) != v]
        if changes:
            stmt = sa.update(artifacts).where(column == sa.bindparam("old")).values({name: sa.bindparam("new")})
            conn.execute(stmt, changes)


def _own(name: str) -> sa.ScalarSelect[str]:
    return sa.select(facts.c[name]).where(facts.c.artifact_id == artifacts.c.id).scalar_subquery()


def downgrade() -> None:
    conn = op.get_bind()
    has_facts = sa.exists().where(facts.c.artifact_id == artifacts.c.id)
    conn.execute(
        sa.update(artifacts)
        .where(has_facts)
        .values({name: _own(name) for name in ("architecture", "file_type", "size_label")})
    )
    card = sa.select(repos.c.card_license).where(repos.c.id == artifacts.c.repo_pk).scalar_subquery()
    conn.execute(sa.update(artifacts).values(license=sa.func.coalesce(sa.func.nullif(_own("license"), ""), card)))
