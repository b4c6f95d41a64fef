"""llama.cpp compatibility findings per artifact, and whether llama.cpp loads it.

Rows written before this revision have no findings and a NULL `runs_in_llama_cpp` (not
checked) until their next read: `DERIVATION` 4 has the next crawl or index rewrite them.

Revision ID: 0002_artifact_findings
Revises: 0001_baseline
Create Date: 2026-12-05
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002_artifact_findings"
down_revision: str | None = "0001_baseline"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    # A plain ADD COLUMN, not a batch copy: the artifacts table carries triggers and
    # hand-made indexes (0001_baseline) a copy would drop.
    op.add_column("artifacts", sa.Column("runs_in_llama_cpp", sa.Boolean(), nullable=True))
    op.add_column("artifacts", sa.Column("chat_template_render_sha256", sa.String(length=64), nullable=True))
    op.create_index(op.f("ix_artifacts_runs_in_llama_cpp"), "artifacts", ["runs_in_llama_cpp"])
    op.create_table(
        "artifact_findings",
        sa.Column("artifact_id", ID, nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("code", sa.String(length=8), nullable=False),
        sa.Column("severity", sa.String(length=8), nullable=False),
        sa.Column("field", sa.String(length=200), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
        sa.CheckConstraint(
            "severity IN ('error', 'warning', 'info')", name=op.f("ck_artifact_findings_severity")
        ),
        sa.ForeignKeyConstraint(
            ["artifact_id"],
            ["artifacts.id"],
            name=op.f("fk_artifact_findings_artifact_id_artifacts"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("artifact_id", "position", name=op.f("pk_artifact_findings")),
    )
    op.create_index(
        op.f("ix_artifact_findings_code_artifact_id"), "artifact_findings", ["code", "artifact_id"]
    )


def downgrade() -> None:
    op.drop_index(op.f("ix_artifact_findings_code_artifact_id"), table_name="artifact_findings")
    op.drop_table("artifact_findings")
    op.drop_index(op.f("ix_artifacts_runs_in_llama_cpp"), table_name="artifacts")
    op.drop_column("artifacts", "chat_template_render_sha256")
    op.drop_column("artifacts", "runs_in_llama_cpp")
