"""How each artifact's header was read: in full, or from a sibling quantization's bytes.

`header_read` is "full" or "sibling"; a sibling read names its leader's path and the
number of ranges it sampled; a verification sets `header_confirmed`. Rows indexed before
this revision keep NULL in all four.

Revision ID: 0004_header_reads
Revises: 0002_artifact_findings
Create Date: 2026-12-04
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004_header_reads"
down_revision: str | None = "0002_artifact_findings"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


# Plain ADD/DROP COLUMN (SQLite 3.35+ has both): a batch copy of the table would drop the
# free-text triggers and the memory index the baseline made on it.
def upgrade() -> None:
    op.add_column("artifacts", sa.Column("header_read", sa.String(8), nullable=True))
    op.add_column("artifacts", sa.Column("header_leader", sa.String(1000), nullable=True))
    op.add_column("artifacts", sa.Column("header_samples", sa.Integer(), nullable=True))
    op.add_column("artifacts", sa.Column("header_confirmed", sa.Boolean(), nullable=True))


def downgrade() -> None:
    for column in ("header_confirmed", "header_samples", "header_leader", "header_read"):
        op.drop_column("artifacts", column)
