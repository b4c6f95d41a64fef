"""Repo ids match regardless of ASCII case: repos.repo_key, lineage_edges.child_key/parent_key.

Lineage walks, `descendant_of` and the repo routes follow the keys (registry.catalog.models
.repo_key: A-Z folded to a-z). Edges of one child that named one parent in two spellings
from the same source are merged into the first written (the new unique constraint); a
downgrade keeps the merged edges.

Revision ID: b7e4a2c9d8f1
Revises: f2c6e8a1d4b9
Create Date: 2026-11-26 16:50:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "b7e4a2c9d8f1"
down_revision: str | None = "f2c6e8a1d4b9"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

LENGTH = 300


def _fold(column: str) -> str:
    """SQL for repo_key(column): SQLite's lower() folds A-Z only; PostgreSQL's follows the
    database's locale, so it gets the 26 letters spelled out."""
    if op.get_bind().dialect.name == "sqlite":
        return f"lower({column})"
    return f"translate({column}, 'ABCDEFGHIJKLMNOPQRSTUVWXYZ', 'abcdefghijklmnopqrstuvwxyz')"


def upgrade() -> None:
    # Added in place, never by copying the table: on SQLite, with foreign keys enforced,
    # dropping the old copy of `repos` would cascade to every artifact and edge. The empty
    # default only fills the rows until the update below (rows written later get their key
    # from the model); PostgreSQL drops it again.
    op.add_column("repos", sa.Column("repo_key", sa.String(LENGTH), nullable=False, server_default=""))
    op.execute(f"UPDATE repos SET repo_key = {_fold('repo_id')}")
    op.create_index(op.f("ix_repos_repo_key"), "repos", ["repo_key"])
    if op.get_bind().dialect.name == "postgresql":
        op.alter_column("repos", "repo_key", server_default=None)
    # Copied on SQLite (its unique constraint changes): nothing refers to lineage_edges.
    with op.batch_alter_table("lineage_edges") as batch:
        batch.add_column(sa.Column("child_key", sa.String(LENGTH), nullable=True))
        batch.add_column(sa.Column("parent_key", sa.String(LENGTH), nullable=True))
    op.execute(
        f"UPDATE lineage_edges SET child_key = {_fold('child_repo_id')}, parent_key = {_fold('parent_repo_id')}"
    )
    op.execute(
        "DELETE FROM lineage_edges WHERE id NOT IN "
        "(SELECT min(id) FROM lineage_edges GROUP BY child_pk, parent_key, relation, source)"
    )
    with op.batch_alter_table("lineage_edges") as batch:
        batch.alter_column("child_key", existing_type=sa.String(LENGTH), nullable=False)
        batch.alter_column("parent_key", existing_type=sa.String(LENGTH), nullable=False)
        batch.drop_constraint("uq_lineage_edges_child_pk_parent_repo_id_relation_source", type_="unique")
        batch.drop_index("ix_lineage_edges_parent_repo_id_child_repo_id_child_pk")
        batch.drop_index("ix_lineage_edges_child_repo_id_parent_repo_id")
        batch.create_unique_constraint(
            batch.f("uq_lineage_edges_child_pk_parent_key_relation_source"),
            ["child_pk", "parent_key", "relation", "source"],
        )
        batch.create_index(batch.f("ix_lineage_edges_parent_key_child_key_child_pk"),
                           ["parent_key", "child_key", "child_pk"])  # fmt: skip
        batch.create_index(batch.f("ix_lineage_edges_child_key_parent_key"), ["child_key", "parent_key"])


def downgrade() -> None:
    with op.batch_alter_table("lineage_edges") as batch:
        batch.drop_index("ix_lineage_edges_child_key_parent_key")
        batch.drop_index("ix_lineage_edges_parent_key_child_key_child_pk")
        batch.drop_constraint("uq_lineage_edges_child_pk_parent_key_relation_source", type_="unique")
        batch.create_unique_constraint(
            batch.f("uq_lineage_edges_child_pk_parent_repo_id_relation_source"),
            ["child_pk", "parent_repo_id", "relation", "source"],
        )
        batch.create_index(batch.f("ix_lineage_edges_parent_repo_id_child_repo_id_child_pk"),
                           ["parent_repo_id", "child_repo_id", "child_pk"])  # fmt: skip
        batch.create_index(batch.f("ix_lineage_edges_child_repo_id_parent_repo_id"), ["child_repo_id", "parent_repo_id"])
        batch.drop_column("parent_key")
        batch.drop_column("child_key")
    op.drop_index("ix_repos_repo_key", "repos")
    op.drop_column("repos", "repo_key")  # in place (SQLite 3.35 and later), as above
