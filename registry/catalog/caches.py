"""Everything the catalog's reads keep between requests, in one object that a `Database`
owns (and closes): nothing of it is process-wide, so two databases in one process (a SQLite
and a PostgreSQL one in the same test run) never share an entry.

* `shapes`: compiled statement shapes, by key (`shapes.Shapes`);
* `hints`: the answers of the search planner's row-count probes, kept a while (`Hints`);
* `memo`: facet counts, the catalog's counts, term and lineage-family ids, valid for one
  generation of the database (`memo.Memo`).
"""

from __future__ import annotations

import time
from collections.abc import Hashable
from pathlib import Path

from sqlalchemy.engine import Dialect

from registry.catalog.memo import Memo, memo_for
from registry.catalog.shapes import Shapes

HINT_TTL_S = 60.0  # how long a probe's answer steers plans
HINT_ENTRIES = 4096


class Hints:
    """The answers of the search planner's probes ("more than N rows match?"), which change
    slowly as the catalog grows; a stale answer only costs speed, never a wrong result (the
    same filters are applied either way), so answers are kept `ttl_s` instead of tracking
    writes."""

    def __init__(self, ttl_s: float = HINT_TTL_S, entries: int = HINT_ENTRIES) -> None:
        self.ttl_s = ttl_s
        self.entries = entries
        self._answers: dict[Hashable, tuple[float, object]] = {}

    def __len__(self) -> int:
        return len(self._answers)

    def get(self, key: Hashable) -> object | None:
        found = self._answers.get(key)
        return found[1] if found is not None and time.monotonic() - found[0] < self.ttl_s else None

    def put(self, key: Hashable, value: object) -> None:
        if len(self._answers) >= self.entries:
            self._answers.clear()  # a crude bound: probes are cheap to redo
        self._answers[key] = (time.monotonic(), value)

    def clear(self) -> None:
        self._answers.clear()


class Caches:
    """The caches of one database (see the module doc)."""

    def __init__(self, dialect: Dialect, database: str | None = None, *, memo: bool = True) -> None:
        self.shapes = Shapes(dialect)
        self.hints = Hints()
        self._dialect = dialect.name
        self._database = database  # a SQLite file's path: its memo is made once the file exists
        self._memo: Memo | None = None
        self._closed = not memo  # no memo: nothing is kept past a generation

    @property
    def memo(self) -> Memo | None:
        if self._memo is None and not self._closed and (self._dialect != "sqlite" or self._file_exists()):
            self._memo = memo_for(self._database, self._dialect)
        return self._memo

    def _file_exists(self) -> bool:
        return bool(self._database) and self._database != ":memory:" and Path(str(self._database)).is_file()

    def close(self) -> None:
        self._closed = True
        if self._memo is not None:
            self._memo.close()
            self._memo = None


__all__ = ["HINT_ENTRIES", "HINT_TTL_S", "Caches", "Hints"]
