"""What an artifact needs to run, for the search: the memory filter (`max_memory`), the sort
by memory and each hit's `memory`, all in this one module so that the estimate can change
in one place.

The estimate is llama.cpp's on a CPU with an f16 KV cache (`registry.gguf.memory`: weights,
KV cache, compute and output buffers) at the query's context (`memory_context`,
MEMORY_CONTEXT when the query names none), or at the model's own context_length when that
is shorter; rows an older release wrote are sized as it did, the file plus its f16 KV
cache, until their next write (`catalog.memory_sql`); none without a KV cache estimate.
At the default context the artifacts' own `memory_at_default` column (computed by the
database, indexed) serves the filter and the sort; at any other every match is sized in SQL
(`memory_needed`) and sorted.
"""

from __future__ import annotations

from typing import Any, Protocol

from sqlalchemy import ColumnElement

from registry.catalog.memory_sql import LINE_COLUMNS, READ_COLUMNS, memory_expression
from registry.catalog.models import DEFAULT_MEMORY_CONTEXT, Artifact
from registry.gguf.kvcache import KVCache
from registry.gguf.memory import MemoryLine

# The context the memory filter sizes the KV cache for when the query names none: what local
# runners commonly start with.
MEMORY_CONTEXT = DEFAULT_MEMORY_CONTEXT
MAX_MEMORY_CONTEXT = 1 << 40
# The memory estimate's columns, read with each hit (`hit_memory`).
MEMORY_COLUMNS = tuple(c for c in READ_COLUMNS if c not in ("file_size", "context_length"))
# The index holding what the sort by memory at another context reads of each artifact
# (status, then every column of `memory_sql.READ_COLUMNS`), which SQLite scans
# instead of the table (created by the schema's migrations).
MEMORY_SORT_INDEX = "ix_artifacts_memory_sort"
# What a figure counts: llama.cpp's buffers, or (rows an older release wrote) the file and
# its f16 KV cache alone.
BASIS, BASIS_BEFORE = "llama.cpp", "file_and_kv_cache"


def at_default_context(memory_context: int | None) -> bool:
    """Whether a query sizes memory at MEMORY_CONTEXT, which `memory_at_default` holds."""
    return memory_context is None or memory_context == MEMORY_CONTEXT


class SizedByTokens(Protocol):
    """A KV cache estimate: `KVCache`, or the response model `KVCacheFacts`."""

    def bytes_at(self, tokens: int) -> int: ...


def memory_at(
    file_size: int, context_length: int | None, line: MemoryLine | None, kv: SizedByTokens | None, context: int
) -> dict[str, Any] | None:  # fmt: skip
    """`{"tokens", "bytes", "basis"}`: the bytes an artifact needs to run at `context`
    tokens, or at its own context_length when that is shorter (`tokens` says which), as
    `memory_needed` computes them in SQL but exact: from its memory line (`basis`
    "llama.cpp"), else (rows an older release wrote) its file and KV cache (BASIS_BEFORE);
    None without either."""
    tokens = context_length if context_length is not None and 0 < context_length < context else context
    if line is not None:
        return {"tokens": tokens, "bytes": line.bytes_at(tokens), "basis": BASIS}
    if kv is not None:
        return {"tokens": tokens, "bytes": file_size + kv.bytes_at(tokens), "basis": BASIS_BEFORE}
    return None


def row_line(row: Any) -> MemoryLine | None:
    """An artifact row's memory line (its `memory_*` columns), None where it has none."""
    if getattr(row, "memory_fixed", None) is None:
        return None
    return MemoryLine(*(int(getattr(row, name)) for name in LINE_COLUMNS))


def row_kv(row: Any) -> KVCache | None:
    """An artifact row's KV cache estimate (its `kv_*` columns), None where it has none."""
    if row.kv_bytes_per_token is None:
        return None
    return KVCache(0, row.kv_bytes_per_token, swa_bytes_per_token=row.kv_swa_bytes_per_token or 0,
                   sliding_window=row.kv_sliding_window)  # fmt: skip


def hit_memory(row: Any, context: int) -> dict[str, Any] | None:
    """A search hit's `memory` at the query's context, from the row's columns."""
    return memory_at(row.file_size, row.context_length, row_line(row), row_kv(row), context)


def memory_needed(context: Any) -> ColumnElement[Any]:
    """Bytes an artifact needs to run at `context` tokens (a number or a bound parameter),
    as `memory_at` computes them (`catalog.memory_sql`); NULL without an estimate."""
    return memory_expression(lambda name: Artifact.__table__.c[name], context)


def no_estimate() -> ColumnElement[bool]:
    """The artifacts `memory_needed` has no estimate for (it is NULL exactly there)."""
    return Artifact.memory_fixed.is_(None) & Artifact.kv_bytes_per_token.is_(None)


__all__ = [
    "BASIS", "BASIS_BEFORE", "MAX_MEMORY_CONTEXT", "MEMORY_COLUMNS", "MEMORY_CONTEXT", "MEMORY_SORT_INDEX", "at_default_context",
    "hit_memory", "memory_at", "memory_needed", "no_estimate", "row_kv", "row_line",
]  # fmt: skip
