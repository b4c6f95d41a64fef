"""Free-text index DDL, per dialect, and the matching WHERE clause.

A query matches an artifact when each of its words, lower-cased (Python's `str.lower`), is
a substring of the artifact's lower-cased search text (`LIKE '%word%'`, wildcards literal).
The indexes only find candidates: FTS5's trigram tokenizer folds case its own way and takes
letters for the same that `lower()` keeps apart (`ſ` and `s`, final `ς` and `σ`), so its
matches are checked with the same LIKE, and a word matches the same rows whichever way in
the plan takes and on either database.

SQLAlchemy cannot declare either index, so migrations create them from here and alembic's
autogenerate is told to leave them alone (`is_search_index_object`).

* PostgreSQL: a pg_trgm GIN index on `artifacts.search_text`; `LIKE '%term%'` uses it.
* SQLite: an external-content FTS5 table with the trigram tokenizer, kept in sync with
  `artifacts` by triggers. A migration that rebuilds `artifacts` in batch mode (copy and
  rename) drops the triggers and must recreate them with `create_sqlite()`.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Select,
    and_,
    bindparam,
    column,
    func,
    literal_column,
    select,
    table,
    text,
    true,
)
from sqlalchemy.ext.asyncio import AsyncSession

from registry.catalog.models import Artifact

FTS_TABLE = "artifacts_fts"
TRGM_INDEX = "ix_artifacts_search_text_trgm"
MIN_TRIGRAM = 3  # shorter terms cannot use either index and fall back to a scan
COMMON_TERM = 2000  # SQLite: a term in more rows than this is checked by LIKE, not FTS5

SQLITE_CREATE = [
    f"CREATE VIRTUAL TABLE {FTS_TABLE} USING fts5("
    "search_text, content='artifacts', content_rowid='id', tokenize='trigram')",
    f"CREATE TRIGGER {FTS_TABLE}_ai AFTER INSERT ON artifacts BEGIN "
    f"INSERT INTO {FTS_TABLE}(rowid, search_text) VALUES (new.id, new.search_text); END",
    f"CREATE TRIGGER {FTS_TABLE}_ad AFTER DELETE ON artifacts BEGIN "
    f"INSERT INTO {FTS_TABLE}({FTS_TABLE}, rowid, search_text) VALUES ('delete', old.id, old.search_text); END",
    f"CREATE TRIGGER {FTS_TABLE}_au AFTER UPDATE OF search_text ON artifacts BEGIN "
    f"INSERT INTO {FTS_TABLE}({FTS_TABLE}, rowid, search_text) VALUES ('delete', old.id, old.search_text); "
    f"INSERT INTO {FTS_TABLE}(rowid, search_text) VALUES (new.id, new.search_text); END",
    f"INSERT INTO {FTS_TABLE}({FTS_TABLE}) VALUES ('rebuild')",
]
SQLITE_DROP = [
    f"DROP TRIGGER IF EXISTS {FTS_TABLE}_ai",
    f"DROP TRIGGER IF EXISTS {FTS_TABLE}_ad",
    f"DROP TRIGGER IF EXISTS {FTS_TABLE}_au",
    f"DROP TABLE IF EXISTS {FTS_TABLE}",
]
POSTGRES_CREATE = [
    "CREATE EXTENSION IF NOT EXISTS pg_trgm",
    f"CREATE INDEX IF NOT EXISTS {TRGM_INDEX} ON artifacts USING gin (search_text gin_trgm_ops)",
]
POSTGRES_DROP = [f"DROP INDEX IF EXISTS {TRGM_INDEX}"]


def create_statements(dialect: str) -> list[str]:
    return SQLITE_CREATE if dialect == "sqlite" else POSTGRES_CREATE


def drop_statements(dialect: str) -> list[str]:
    return SQLITE_DROP if dialect == "sqlite" else POSTGRES_DROP


def is_search_index_object(name: str | None) -> bool:
    return name is not None and (name.startswith(FTS_TABLE) or name == TRGM_INDEX)


def search_terms(query: str) -> list[str]:
    return [t for t in query.lower().split() if t]


def _like_pattern(term: str) -> str:
    escaped = term.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def term_like(term: str) -> ColumnElement[bool]:
    """The term as a substring of the artifact's search text, checked row by row."""
    return Artifact.search_text.like(_like_pattern(term), escape="\\")


def _fts_match(terms: Sequence[str]) -> str:
    # Each term a quoted FTS5 phrase (quotes doubled); space-separated phrases are ANDed.
    return " ".join('"' + t.replace('"', '""') + '"' for t in terms)


def _fts_rowids(terms: Sequence[str]) -> Select[Any]:
    return (
        select(literal_column("rowid"))
        .select_from(text(FTS_TABLE))
        .where(text(f"{FTS_TABLE} MATCH :fts_query").bindparams(fts_query=_fts_match(terms)))
    )


def first_matching_ids(terms: Sequence[str], limit: int) -> Select[Any]:
    """SQLite: the ids of the first `limit` artifacts, in id order, with ids from the bound
    `id_from` up to but not including `id_to`, holding every term (some shorter than
    MIN_TRIGRAM). With terms long enough for the FTS5 index, their rows are streamed from it
    in rowid order and each checked for every term: `id IN (MATCH ...)` would read every row
    of a common term first. With short terms only, a scan of the table's id range."""
    long = [t for t in terms if len(t) >= MIN_TRIGRAM]
    likes = [term_like(t) for t in terms]  # the FTS5 rows of long terms are only candidates
    if not long:
        ids = Artifact.id
        return select(ids).where(ids >= bindparam("id_from"), ids < bindparam("id_to"), *likes).limit(limit)
    fts = table(FTS_TABLE, column("rowid"))
    match = text(f"{FTS_TABLE} MATCH :fts_query").bindparams(fts_query=_fts_match(long))
    rowid = fts.c.rowid
    return (
        select(Artifact.id)
        .join_from(fts, Artifact, Artifact.id == rowid)
        .where(match, rowid >= bindparam("id_from"), rowid < bindparam("id_to"), *likes)
        .limit(limit)
    )


async def is_common_term(session: AsyncSession, term: str) -> bool:
    """Whether more than COMMON_TERM rows contain the term (reads at most that many rowids)."""
    return await are_common_together(session, [term])


async def are_common_together(session: AsyncSession, terms: Sequence[str], threshold: int | None = None) -> bool:
    """Whether more than `threshold` (default COMMON_TERM) rows contain every one of the
    terms (each at least MIN_TRIGRAM long), counted in the FTS5 index: reads at most that
    many rowids of their intersection, where counting LIKE matches row by row read the table
    up to its end when the terms are common apart but rare together."""
    threshold = COMMON_TERM if threshold is None else threshold
    probe = _fts_rowids(terms).limit(threshold + 1).subquery()
    conn = await session.connection()
    found = (await conn.execute(select(func.count()).select_from(probe))).scalar_one()
    return bool(found > threshold)


async def text_filter(
    session: AsyncSession, terms: Sequence[str], *, all_matches: bool = False, common: Collection[str] | None = None
) -> ColumnElement[bool]:
    """Every term must occur somewhere in the artifact's search text (substring match).

    On SQLite a common term is cheaper as a LIKE checked row by row along the sort index
    (a page needs few rows) than as an FTS5 lookup that materializes every match first, so
    each term is probed; `all_matches` (facets, counts: every match is read anyway) skips that.
    A caller that has probed already passes the `common` terms.
    """
    if not terms:
        return true()
    dialect = session.get_bind().dialect.name
    indexed: list[str] = []
    scanned = [t for t in terms if len(t) < MIN_TRIGRAM]
    for term in (t for t in terms if len(t) >= MIN_TRIGRAM):
        if dialect != "sqlite" or (
            not all_matches and (term in common if common is not None else await is_common_term(session, term))
        ):
            scanned.append(term)
        else:
            indexed.append(term)
    clauses: list[ColumnElement[bool]] = []
    if indexed:
        clauses.append(Artifact.id.in_(_fts_rowids(indexed).scalar_subquery()))
    # On PostgreSQL the trigram GIN index serves these LIKEs when the planner finds it cheaper;
    # on SQLite they are checked on each FTS5 candidate too (see the module doc).
    clauses.extend(term_like(t) for t in (*scanned, *indexed))
    return and_(*clauses)
