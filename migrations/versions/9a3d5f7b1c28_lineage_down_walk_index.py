"""The index that lineage walks follow downwards holds every column a step reads.

A step down reads the edges of the repos it reached: their parent key, child key, relation
and source (the order it reports them in) and both repo ids. The index it searched held
the keys and the child's primary key only, so each edge was one more read of the table;
this index answers the step alone, and also serves the walks of `descendant_of` (parent
key -> child key and primary key) as before. The schema is otherwise unchanged.

Revision ID: 9a3d5f7b1c28
Revises: 4e8b1d6f3a07
Create Date: 2026-11-26 23:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "9a3d5f7b1c28"
down_revision: str | None = "4e8b1d6f3a07"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

DOWN_WALK = ["parent_key", "child_key", "relation", "source", "child_pk", "child_repo_id", "parent_repo_id"]
OLD_COLUMNS = ["parent_key", "child_key", "child_pk"]


def upgrade() -> None:
    op.create_index("ix_lineage_edges_down_walk", "lineage_edges", DOWN_WALK)
    op.drop_index("ix_lineage_edges_parent_key_child_key_child_pk", table_name="lineage_edges")


def downgrade() -> None:
    op.create_index("ix_lineage_edges_parent_key_child_key_child_pk", "lineage_edges", OLD_COLUMNS)
    op.drop_index("ix_lineage_edges_down_walk", table_name="lineage_edges")
