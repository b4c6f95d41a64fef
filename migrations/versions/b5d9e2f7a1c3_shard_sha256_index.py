"""Files by their bytes: an index on the shards' LFS oid, written in lower case.

`GET /v1/files/{sha256}` and `registry identify` look a file up by its sha256 to name the
repos, artifacts and shards that hold those bytes. Oids are lower-case hex as the hub lists
them; one written in another case before is lower-cased here, as every write does now.

Revision ID: b5d9e2f7a1c3
Revises: 9e4a2c6b8d15
Create Date: 2026-11-28 12:50:00
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "b5d9e2f7a1c3"
down_revision: str | None = "9e4a2c6b8d15"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute("UPDATE shards SET sha256 = lower(sha256) WHERE sha256 <> lower(sha256)")
    op.create_index(op.f("ix_shards_sha256"), "shards", ["sha256"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_shards_sha256"), table_name="shards")
