"""The KV cache estimate on artifacts, for the "fits in memory" search filter.

Three nullable columns copy the estimate that facts already keep in `extra.kv_cache`:
bytes per token of the layers that grow with the context, of the sliding-window layers,
and the window. Rows indexed with the estimate are filled from it here; older rows and
those without one (encoders, purely recurrent models, error rows) stay NULL until a
forced re-index (`crawl --full`, `index --full`) writes them.

Plain ALTER TABLE on SQLite, not batch mode: a batch copy of `artifacts` would drop the
FTS5 triggers that the free-text index (0002) hangs on it. The UPDATE leaves `search_text`
alone, so its trigger does not fire.

Revision ID: c5e2a8f4d6b1
Revises: b3e9d4f1a7c5
Create Date: 2026-11-27 23:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "c5e2a8f4d6b1"
down_revision: str | None = "b3e9d4f1a7c5"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_COLUMNS = {
    "kv_bytes_per_token": "bytes_per_token",
    "kv_swa_bytes_per_token": "swa_bytes_per_token",
    "kv_sliding_window": "sliding_window",
}


def upgrade() -> None:
    for column in _COLUMNS:
        op.add_column("artifacts", sa.Column(column, sa.BigInteger(), nullable=True))
    postgres = op.get_bind().dialect.name == "postgresql"
    # Only integers of 0 up to 18 digits are copied: the writer stores nothing else there,
    # and a hand-edited value of another kind stays NULL rather than failing the migration.
    if postgres:
        read = (
            "(SELECT (f.extra->'kv_cache'->>'{key}')::bigint FROM facts f WHERE f.artifact_id = artifacts.id "
            "AND jsonb_typeof(f.extra->'kv_cache'->'{key}') = 'number' "
            "AND (f.extra->'kv_cache'->>'{key}') ~ '^[0-9]{{1,18}}$')"
        )
    else:
        read = (
            "(SELECT json_extract(f.extra, '$.kv_cache.{key}') FROM facts f WHERE f.artifact_id = artifacts.id "
            "AND json_type(f.extra, '$.kv_cache.{key}') = 'integer' AND json_extract(f.extra, '$.kv_cache.{key}') >= 0)"
        )
    assignments = ", ".join(f"{column} = {read.format(key=key)}" for column, key in _COLUMNS.items())
    op.execute(f"UPDATE artifacts SET {assignments} WHERE status = 'indexed'")


def downgrade() -> None:
    for column in reversed(_COLUMNS):
        op.drop_column("artifacts", column)
