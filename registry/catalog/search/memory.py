"""What an artifact needs to run, for the search: the memory filter (`max_memory`), the sort
by memory and each hit's `memory`, all in this one module so that the estimate can change
in one place.

The estimate is the file (all shards) plus its f16 KV cache at the query's context
(`memory_context`, MEMORY_CONTEXT when the query names none), or at the model's own
context_length when that is shorter (`KVCache.bytes_at`); none without a KV cache estimate.
At the default context the artifacts' own `memory_at_default` column (computed by the
database, indexed) serves the filter and the sort; at any other every match is sized in SQL
(`memory_needed`) and sorted.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import BigInteger, ColumnElement, Float, and_, case, cast, func

from registry.catalog.models import DEFAULT_MEMORY_CONTEXT, Artifact
from registry.gguf.kvcache import KVCache

# The context the memory filter sizes the KV cache for when the query names none: what local
# runners commonly start with.
MEMORY_CONTEXT = DEFAULT_MEMORY_CONTEXT
MAX_MEMORY_CONTEXT = 1 << 40
# The KV cache estimate's columns, read with each hit (`memory_at`).
MEMORY_COLUMNS = ("kv_bytes_per_token", "kv_swa_bytes_per_token", "kv_sliding_window")
# The index holding what the sort by memory at another context reads of each artifact
# (status, then the KV cache estimate, the file size and the context), which SQLite scans
# instead of the table (created by the schema's migrations).
MEMORY_SORT_INDEX = "ix_artifacts_memory_sort"


def at_default_context(memory_context: int | None) -> bool:
    """Whether a query sizes memory at MEMORY_CONTEXT, which `memory_at_default` holds."""
    return memory_context is None or memory_context == MEMORY_CONTEXT


def memory_at(
    file_size: int, context_length: int | None, kv_bytes_per_token: int | None,
    kv_swa_bytes_per_token: int | None, kv_sliding_window: int | None, context: int,
) -> dict[str, int] | None:  # fmt: skip
    """`{"tokens", "bytes"}`: the bytes an artifact needs to run at `context` tokens, or at
    its own context_length when that is shorter (`tokens` says which), as `memory_needed`
    computes them in SQL but exact; None without a KV cache estimate."""
    if kv_bytes_per_token is None:
        return None
    tokens = context_length if context_length is not None and 0 < context_length < context else context
    kv = KVCache(0, kv_bytes_per_token, swa_bytes_per_token=kv_swa_bytes_per_token or 0,
                 sliding_window=kv_sliding_window)  # fmt: skip
    return {"tokens": tokens, "bytes": file_size + kv.bytes_at(tokens)}


def hit_memory(row: Any, context: int) -> dict[str, int] | None:
    """A search hit's `memory` at the query's context, from the row's columns."""
    return memory_at(row.file_size, row.context_length, row.kv_bytes_per_token, row.kv_swa_bytes_per_token,
                     row.kv_sliding_window, context)  # fmt: skip


def memory_needed(context: Any) -> ColumnElement[Any]:
    """Bytes an artifact needs to run at `context` tokens (a number or a bound parameter):
    its file size plus its KV cache at that context, or at the model's own context_length
    when that is shorter; NULL without an estimate. In double precision: exact below 2**53
    bytes (8 PiB), and a product of hostile values cannot overflow an integer (which fails
    the query on PostgreSQL)."""
    as_float = lambda column: cast(column, Float)  # noqa: E731
    tokens = cast(context, BigInteger)
    own = Artifact.context_length
    used = case((and_(own > 0, own < tokens), own), else_=tokens)
    window = Artifact.kv_sliding_window
    in_window = case((and_(window.is_not(None), window < used), window), else_=used)
    return (
        as_float(Artifact.file_size)
        + as_float(Artifact.kv_bytes_per_token) * as_float(used)
        + as_float(func.coalesce(Artifact.kv_swa_bytes_per_token, 0)) * as_float(in_window)
    )


def no_estimate() -> ColumnElement[bool]:
    """The artifacts `memory_needed` has no estimate for (it is NULL exactly there)."""
    return Artifact.kv_bytes_per_token.is_(None)


__all__ = [
    "MAX_MEMORY_CONTEXT", "MEMORY_COLUMNS", "MEMORY_CONTEXT", "MEMORY_SORT_INDEX", "at_default_context",
    "hit_memory", "memory_at", "memory_needed", "no_estimate",
]  # fmt: skip
