"""Free-text index DDL, per dialect, and the terms of a query (the search statements write
the WHERE: `search.statements`).

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

from collections.abc import Sequence

FTS_TABLE = "artifacts_fts"
TRGM_INDEX = "ix_artifacts_search_text_trgm"
MIN_TRIGRAM = 3  # shorter terms cannot use either index and fall back to a scan

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


def like_pattern(term: str) -> str:
    """The LIKE pattern (escape `\\`) of a term as a substring, its wildcards literal."""
    escaped = term.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def fts_match(terms: Sequence[str]) -> str:
    """An FTS5 query holding every term: each a quoted phrase (quotes doubled); space-
    separated phrases are ANDed."""
    return " ".join('"' + t.replace('"', '""') + '"' for t in terms)
