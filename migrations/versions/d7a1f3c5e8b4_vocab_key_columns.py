"""The vocabulary key on artifacts, for the draft-model search filter.

Two nullable columns copy what facts keep: the key (`extra.vocab_sha256`) and the token
count (`vocab_size`), with an index on the key. Rows indexed before the key existed have
none in their facts and stay NULL until a forced re-index (`crawl --full`, `index --full`)
writes them; the copy only serves rows written by this release before an upgrade.

Plain ALTER TABLE on SQLite, not batch mode, as in c5e2a8f4d6b1: a batch copy of
`artifacts` would drop the FTS5 triggers on it.

Revision ID: d7a1f3c5e8b4
Revises: c5e2a8f4d6b1
Create Date: 2026-11-28 02:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "d7a1f3c5e8b4"
down_revision: str | None = "c5e2a8f4d6b1"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("artifacts", sa.Column("vocab_sha256", sa.String(length=64), nullable=True))
    op.add_column("artifacts", sa.Column("vocab_size", sa.Integer(), nullable=True))
    op.create_index(op.f("ix_artifacts_vocab_sha256"), "artifacts", ["vocab_sha256"], unique=False)
    # Only a string of 64 lower-case hex digits is copied: the writer stores nothing else
    # there, and a hand-edited value stays NULL rather than failing the migration.
    if op.get_bind().dialect.name == "postgresql":
        key = (
            "(SELECT f.extra->>'vocab_sha256' FROM facts f WHERE f.artifact_id = artifacts.id "
            "AND jsonb_typeof(f.extra->'vocab_sha256') = 'string' AND (f.extra->>'vocab_sha256') ~ '^[0-9a-f]{64}$')"
        )
    else:
        key = (
            "(SELECT json_extract(f.extra, '$.vocab_sha256') FROM facts f WHERE f.artifact_id = artifacts.id "
            "AND json_type(f.extra, '$.vocab_sha256') = 'text' AND length(json_extract(f.extra, '$.vocab_sha256')) = 64 "
            "AND NOT json_extract(f.extra, '$.vocab_sha256') GLOB '*[^0-9a-f]*')"
        )
    size = "(SELECT f.vocab_size FROM facts f WHERE f.artifact_id = artifacts.id)"
    op.execute(f"UPDATE artifacts SET vocab_sha256 = {key} WHERE status = 'indexed'")
    op.execute(f"UPDATE artifacts SET vocab_size = {size} WHERE vocab_sha256 IS NOT NULL")


def downgrade() -> None:
    op.drop_index(op.f("ix_artifacts_vocab_sha256"), table_name="artifacts")
    op.drop_column("artifacts", "vocab_size")
    op.drop_column("artifacts", "vocab_sha256")
