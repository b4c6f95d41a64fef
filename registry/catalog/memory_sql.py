"""The memory an artifact needs at a context, as SQL: one expression over an artifact's
columns, from which both the database's own `memory_at_default` column and the search's
sizing at any other context are made, so the two cannot disagree.

For rows written with the llama.cpp estimate, the columns `memory_*` hold the
coefficients of `registry.gguf.memory.MemoryLine` (llama.cpp on a CPU, f16 KV cache, no
flash attention, micro-batch 512: weights, KV cache, compute and output buffers) and the
expression is `MemoryLine.bytes_at`. Rows an older release wrote (`memory_fixed` NULL)
fall back to what it estimated, the file plus its f16 KV cache, until their next write
(`snapshot.DERIVATION`). In both the context is the one asked for, or the model's own
context_length when that is shorter. In double precision: exact below 2**53 bytes, and a
product of hostile values cannot overflow an integer (which fails a PostgreSQL query).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import BigInteger, ColumnElement, Float, and_, case, cast, column, func, literal
from sqlalchemy.dialects import sqlite

from registry.gguf.memory import CELL_PAD, MemoryLine

# The coefficient columns, named after MemoryLine's fields.
LINE_COLUMNS = tuple(f"memory_{name}" for name in MemoryLine.__dataclass_fields__)
# Every column the expression reads (the sort by memory's covering index holds them).
READ_COLUMNS = (
    "file_size", "context_length", "kv_bytes_per_token", "kv_swa_bytes_per_token", "kv_sliding_window",
    *LINE_COLUMNS,
)  # fmt: skip


def _greatest(a: ColumnElement[Any], b: ColumnElement[Any]) -> ColumnElement[Any]:
    # CASE rather than GREATEST / MAX(a, b): one spelling on SQLite and PostgreSQL.
    return case((a >= b, a), else_=b)


def memory_expression(col: Callable[[str], Any], tokens: Any) -> ColumnElement[Any]:
    """Bytes an artifact needs at `tokens` tokens (a number or a bound parameter), reading
    each column through `col(name)`; NULL without an estimate."""
    f = lambda x: cast(x, Float)  # noqa: E731
    tokens = cast(tokens, BigInteger)
    own = col("context_length")
    used = case((and_(own > 0, own < tokens), own), else_=tokens)
    cells = ((used + (CELL_PAD - 1)) // CELL_PAD) * CELL_PAD
    swa_cells = col("memory_swa_cells")
    window_cells = case((and_(swa_cells > 0, swa_cells < cells), swa_cells), else_=cells)
    c, w = f(cells), f(window_cells)
    attention = f(col("memory_attention")) + f(col("memory_kq")) * c
    layers = f(col("memory_mask")) * c + f(col("memory_swa_mask")) * w + _greatest(f(col("memory_blocks")), attention)
    line = (
        f(col("memory_fixed")) + f(col("memory_kv")) * c + f(col("memory_swa_kv")) * w
        + _greatest(f(col("memory_logits")), layers)
    )  # fmt: skip
    window = col("kv_sliding_window")
    in_window = case((and_(window.is_not(None), window < used), window), else_=used)
    file_and_kv = (
        f(col("file_size")) + f(col("kv_bytes_per_token")) * f(used)
        + f(func.coalesce(col("kv_swa_bytes_per_token"), 0)) * f(in_window)
    )  # fmt: skip
    return case((col("memory_fixed").is_not(None), line), else_=file_and_kv)


def memory_at_sql(context: int) -> str:
    """The expression at a fixed context as SQL text, for a computed column (the same text
    on SQLite and PostgreSQL: CAST, CASE and integer arithmetic only)."""
    expression = memory_expression(lambda name: column(name), literal(context, BigInteger))
    return str(expression.compile(dialect=sqlite.dialect(), compile_kwargs={"literal_binds": True}))


__all__ = ["LINE_COLUMNS", "READ_COLUMNS", "memory_at_sql", "memory_expression"]
