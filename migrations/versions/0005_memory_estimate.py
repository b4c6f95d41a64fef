"""The llama.cpp memory estimate per artifact: the coefficients of its memory line
(`memory_*`, registry/gguf/memory.py's MemoryLine at the catalog's settings), and
`memory_at_default` computed from them.

Rows written before keep NULL coefficients; `memory_at_default` (and the search) size them
as before, the file plus its f16 KV cache, until `DERIVATION` 5 has the next crawl or index
rewrite them.

Revision ID: 0005_memory_estimate
Revises: 0004_header_reads
Create Date: 2026-12-05
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005_memory_estimate"
down_revision: str | None = "0004_header_reads"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

LINE_COLUMNS = (
    "memory_fixed",
    "memory_kv",
    "memory_swa_kv",
    "memory_swa_cells",
    "memory_logits",
    "memory_mask",
    "memory_swa_mask",
    "memory_blocks",
    "memory_attention",
    "memory_kq",
)
# The computed column at 4,096 tokens, as this revision's models declare it.
MEMORY_AT_DEFAULT = "CASE WHEN (memory_fixed IS NOT NULL) THEN CAST(memory_fixed AS FLOAT) + CAST(memory_kv AS FLOAT) * CAST(((CASE WHEN (context_length > 0 AND context_length < CAST(4096 AS BIGINT)) THEN context_length ELSE CAST(4096 AS BIGINT) END + 255) / 256) * 256 AS FLOAT) + CAST(memory_swa_kv AS FLOAT) * CAST(CASE WHEN (memory_swa_cells > 0 AND memory_swa_cells < ((CASE WHEN (context_length > 0 AND context_length < CAST(4096 AS BIGINT)) THEN context_length ELSE CAST(4096 AS BIGINT) END + 255) / 256) * 256) THEN memory_swa_cells ELSE ((CASE WHEN (context_length > 0 AND context_length < CAST(4096 AS BIGINT)) THEN context_length ELSE CAST(4096 AS BIGINT) END + 255) / 256) * 256 END AS FLOAT) + CASE WHEN (CAST(memory_logits AS FLOAT) >= CAST(memory_mask AS FLOAT) * CAST(((CASE WHEN (context_length > 0 AND context_length < CAST(4096 AS BIGINT)) THEN context_length ELSE CAST(4096 AS BIGINT) END + 255) / 256) * 256 AS FLOAT) + CAST(memory_swa_mask AS FLOAT) * CAST(CASE WHEN (memory_swa_cells > 0 AND memory_swa_cells < ((CASE WHEN (context_length > 0 AND context_length < CAST(4096 AS BIGINT)) THEN context_length ELSE CAST(4096 AS BIGINT) END + 255) / 256) * 256) THEN memory_swa_cells ELSE ((CASE WHEN (context_length > 0 AND context_length < CAST(4096 AS BIGINT)) THEN context_length ELSE CAST(4096 AS BIGINT) END + 255) / 256) * 256 END AS FLOAT) + CASE WHEN (CAST(memory_blocks AS FLOAT) >= CAST(memory_attention AS FLOAT) + CAST(memory_kq AS FLOAT) * CAST(((CASE WHEN (context_length > 0 AND context_length < CAST(4096 AS BIGINT)) THEN context_length ELSE CAST(4096 AS BIGINT) END + 255) / 256) * 256 AS FLOAT)) THEN CAST(memory_blocks AS FLOAT) ELSE CAST(memory_attention AS FLOAT) + CAST(memory_kq AS FLOAT) * CAST(((CASE WHEN (context_length > 0 AND context_length < CAST(4096 AS BIGINT)) THEN context_length ELSE CAST(4096 AS BIGINT) END + 255) / 256) * 256 AS FLOAT) END) THEN CAST(memory_logits AS FLOAT) ELSE CAST(memory_mask AS FLOAT) * CAST(((CASE WHEN (context_length > 0 AND context_length < CAST(4096 AS BIGINT)) THEN context_length ELSE CAST(4096 AS BIGINT) END + 255) / 256) * 256 AS FLOAT) + CAST(memory_swa_mask AS FLOAT) * CAST(CASE WHEN (memory_swa_cells > 0 AND memory_swa_cells < ((CASE WHEN (context_length > 0 AND context_length < CAST(4096 AS BIGINT)) THEN context_length ELSE CAST(4096 AS BIGINT) END + 255) / 256) * 256) THEN memory_swa_cells ELSE ((CASE WHEN (context_length > 0 AND context_length < CAST(4096 AS BIGINT)) THEN context_length ELSE CAST(4096 AS BIGINT) END + 255) / 256) * 256 END AS FLOAT) + CASE WHEN (CAST(memory_blocks AS FLOAT) >= CAST(memory_attention AS FLOAT) + CAST(memory_kq AS FLOAT) * CAST(((CASE WHEN (context_length > 0 AND context_length < CAST(4096 AS BIGINT)) THEN context_length ELSE CAST(4096 AS BIGINT) END + 255) / 256) * 256 AS FLOAT)) THEN CAST(memory_blocks AS FLOAT) ELSE CAST(memory_attention AS FLOAT) + CAST(memory_kq AS FLOAT) * CAST(((CASE WHEN (context_length > 0 AND context_length < CAST(4096 AS BIGINT)) THEN context_length ELSE CAST(4096 AS BIGINT) END + 255) / 256) * 256 AS FLOAT) END END ELSE CAST(file_size AS FLOAT) + CAST(kv_bytes_per_token AS FLOAT) * CAST(CASE WHEN (context_length > 0 AND context_length < CAST(4096 AS BIGINT)) THEN context_length ELSE CAST(4096 AS BIGINT) END AS FLOAT) + CAST(coalesce(kv_swa_bytes_per_token, 0) AS FLOAT) * CAST(CASE WHEN (kv_sliding_window IS NOT NULL AND kv_sliding_window < CASE WHEN (context_length > 0 AND context_length < CAST(4096 AS BIGINT)) THEN context_length ELSE CAST(4096 AS BIGINT) END) THEN kv_sliding_window ELSE CASE WHEN (context_length > 0 AND context_length < CAST(4096 AS BIGINT)) THEN context_length ELSE CAST(4096 AS BIGINT) END END AS FLOAT) END"
# As 0001_baseline made it: the file plus its f16 KV cache.
MEMORY_AT_DEFAULT_BEFORE = (
    "CAST(file_size AS FLOAT) + CAST(kv_bytes_per_token AS FLOAT) * CAST(CASE WHEN context_length > 0 AND "
    "context_length < 4096 THEN context_length ELSE 4096 END AS FLOAT) + CAST(COALESCE(kv_swa_bytes_per_token, 0) "
    "AS FLOAT) * CAST(CASE WHEN kv_sliding_window IS NOT NULL AND kv_sliding_window < (CASE WHEN context_length > 0 "
    "AND context_length < 4096 THEN context_length ELSE 4096 END) THEN kv_sliding_window ELSE (CASE WHEN "
    "context_length > 0 AND context_length < 4096 THEN context_length ELSE 4096 END) END AS FLOAT)"
)
# The sort by memory at any context reads these of each match (SQLite only, as 0001_baseline).
MEMORY_SORT_BEFORE = ("status", "kv_bytes_per_token", "file_size", "context_length", "kv_swa_bytes_per_token",
                      "kv_sliding_window")  # fmt: skip
MEMORY_SORT = (
    "status", "file_size", "context_length", "kv_bytes_per_token", "kv_swa_bytes_per_token", "kv_sliding_window",
    *LINE_COLUMNS,
)  # fmt: skip


def _memory_at_default(sql: str, sort_columns: Sequence[str]) -> None:
    """Make `memory_at_default` again from `sql`, with its index and the memory sort's."""
    sqlite = op.get_bind().dialect.name == "sqlite"
    op.drop_index("ix_artifacts_memory_at_default_id", table_name="artifacts")
    if sqlite:
        op.drop_index("ix_artifacts_memory_sort", table_name="artifacts")
    op.drop_column("artifacts", "memory_at_default")
    op.add_column("artifacts", sa.Column("memory_at_default", sa.Float(), sa.Computed(sql), nullable=True))
    op.create_index("ix_artifacts_memory_at_default_id", "artifacts", ["memory_at_default", "id"])
    if sqlite:
        op.create_index("ix_artifacts_memory_sort", "artifacts", list(sort_columns))


# Plain ADD/DROP COLUMN (SQLite 3.35+ has both): a batch copy of the table would drop the
# free-text triggers the baseline made on it.
def upgrade() -> None:
    op.add_column("artifacts", sa.Column("memory_fixed", sa.BigInteger(), nullable=True))
    op.add_column("artifacts", sa.Column("memory_kv", sa.BigInteger(), nullable=True))
    op.add_column("artifacts", sa.Column("memory_swa_kv", sa.BigInteger(), nullable=True))
    op.add_column("artifacts", sa.Column("memory_swa_cells", sa.BigInteger(), nullable=True))
    op.add_column("artifacts", sa.Column("memory_logits", sa.BigInteger(), nullable=True))
    op.add_column("artifacts", sa.Column("memory_mask", sa.BigInteger(), nullable=True))
    op.add_column("artifacts", sa.Column("memory_swa_mask", sa.BigInteger(), nullable=True))
    op.add_column("artifacts", sa.Column("memory_blocks", sa.BigInteger(), nullable=True))
    op.add_column("artifacts", sa.Column("memory_attention", sa.BigInteger(), nullable=True))
    op.add_column("artifacts", sa.Column("memory_kq", sa.BigInteger(), nullable=True))
    _memory_at_default(MEMORY_AT_DEFAULT, MEMORY_SORT)


def downgrade() -> None:
    _memory_at_default(MEMORY_AT_DEFAULT_BEFORE, MEMORY_SORT_BEFORE)
    for column in reversed(LINE_COLUMNS):
        op.drop_column("artifacts", column)
