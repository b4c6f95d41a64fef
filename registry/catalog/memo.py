"""What the catalog's reads keep between requests: facet counts, the catalog's counts, term
and lineage-family ids, each valid for one generation of the database.

A generation is what tells that nothing has committed since an entry was found:

* SQLite (`FileGeneration`): `PRAGMA data_version` on a read-only connection of the memo's
  own. SQLite changes it whenever another connection (of this process or any other: workers,
  `registry index`, the other `serve --workers`) commits, and this connection never writes.
  Reading it costs microseconds and no disk I/O. A session reading one snapshot (the API's
  read path) keeps what it reads under the generation read just before its snapshot began,
  never a newer one: what a commit after the snapshot changed is not in its rows.
* PostgreSQL (`SnapshotGeneration`): the text of `txid_current_snapshot()` (xmin:xmax:in-
  progress xids), read once per transaction. xmax is one past the latest transaction id to
  end; a transaction that wrote has an id, and its end either raises xmax or takes its id
  out of the in-progress list, so an unchanged snapshot means no commit since. Conservative:
  a write to any table (jobs, crawls) also starts a new one.

Generations are read before counting, so a commit during a count leaves its entry under an
older generation, never read again. In-memory SQLite databases get no memo. One memo per
`Database` (`caches.Caches`).
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from sqlalchemy import String, cast, func, select

if TYPE_CHECKING:
    from registry.catalog.readpath import CatalogSession
    from registry.catalog.search.query import SearchQuery

# session.info keys: the generation a read-only session's snapshot was pinned at (SQLite), and
# (transaction, generation) of a session's transaction (PostgreSQL).
PINNED_GENERATION = "registry.pinned_generation"
_SNAPSHOT_OF = "registry.snapshot_generation"
_SNAPSHOT = select(cast(func.txid_current_snapshot(), String))


class Generation(Protocol):
    async def of(self, session: CatalogSession) -> object:
        """The generation to keep what `session` reads under."""

    def close(self) -> None: ...


class FileGeneration:
    """SQLite: `PRAGMA data_version` of the file (see the module doc)."""

    def __init__(self, path: str) -> None:
        uri = Path(path).resolve().as_uri() + "?mode=ro"
        self._watch = sqlite3.connect(uri, uri=True, check_same_thread=False, isolation_level=None)

    def now(self) -> int:
        # fetchall: the statement runs to its end, so no read transaction stays open.
        return int(self._watch.execute("PRAGMA data_version").fetchall()[0][0])

    async def of(self, session: CatalogSession) -> object:
        pinned = session.info.get(PINNED_GENERATION)
        return pinned if isinstance(pinned, int) else self.now()

    def close(self) -> None:
        self._watch.close()


class SnapshotGeneration:
    """PostgreSQL: the snapshot of the session's transaction (see the module doc)."""

    async def of(self, session: CatalogSession) -> object:
        connection = await session.connection()
        transaction = getattr(session, "get_transaction", lambda: connection)()
        known = session.info.get(_SNAPSHOT_OF)
        if known is not None and known[0] is transaction:
            return known[1]
        generation = str((await connection.execute(_SNAPSHOT)).scalar_one())
        session.info[_SNAPSHOT_OF] = (transaction, generation)
        return generation

    def close(self) -> None:
        return None


class Memo:
    """Entries under the generation they were found in, least recently used first out."""

    FACET_ENTRIES = 512
    FAMILY_ENTRIES = 256
    FAMILY_SIZE = 8 << 20  # all memoised families together: JSON characters, or 8 per repo
    TERM_SCAN_ENTRIES = 1024

    def __init__(self, generations: Generation) -> None:
        self.generations = generations
        self._stats: tuple[object, object] | None = None  # (generation, the catalog's counts: stats.py)
        self._facets: OrderedDict[SearchQuery, tuple[object, dict[str, dict[str, int]]]] = OrderedDict()
        # Counts under way: (generation, the facets counted, their answer to come). A memo
        # serves one event loop's sessions (an engine's connections belong to one loop).
        self._counting: dict[SearchQuery, list[tuple[object, frozenset[str], asyncio.Future[Any]]]] = {}
        self._families: OrderedDict[tuple[str, int], tuple[object, str | list[int]]] = OrderedDict()
        self._family_size = 0
        self._term_ids: OrderedDict[tuple[str, ...], tuple[object, str | None]] = OrderedDict()

    async def generation(self, session: CatalogSession) -> object:
        return await self.generations.of(session)

    def close(self) -> None:
        self.generations.close()

    def facets(self, q: SearchQuery, generation: object, names: Sequence[str]) -> dict[str, dict[str, int]] | None:
        """The counts of the facets named, if all were found in this generation."""
        found = self._facets.get(q)
        if found is None or found[0] != generation or any(name not in found[1] for name in names):
            return None
        self._facets.move_to_end(q)
        return {name: dict(found[1][name]) for name in names}  # callers may change theirs

    def counting(
        self, q: SearchQuery, generation: object, names: Sequence[str]
    ) -> asyncio.Future[dict[str, dict[str, int]] | None] | None:
        """The answer of a count of these facets under way in this generation, if any:
        the counts, or None when that count failed."""
        loop = asyncio.get_running_loop()
        for found, counted, future in self._counting.get(q, ()):
            if found == generation and all(name in counted for name in names) and future.get_loop() is loop:
                return future
        return None

    def start_counting(self, q: SearchQuery, generation: object, names: Sequence[str]) -> object:
        """Say that these facets are being counted; the key to `end_counting` with."""
        future: asyncio.Future[dict[str, dict[str, int]] | None] = asyncio.get_running_loop().create_future()
        entry = (generation, frozenset(names), future)
        self._counting.setdefault(q, []).append(entry)
        return entry

    def end_counting(self, q: SearchQuery, key: object, counts: dict[str, dict[str, int]] | None) -> None:
        """Hand the counts (None: the count failed) to whoever waits for them."""
        assert isinstance(key, tuple)
        key[2].set_result(counts)
        under_way = self._counting[q]
        under_way.remove(key)
        if not under_way:
            del self._counting[q]

    def put_facets(self, q: SearchQuery, generation: object, counts: dict[str, dict[str, int]]) -> None:
        """Keep these counts, with those of other facets found in the same generation."""
        kept = self._facets.get(q)
        merged = dict(kept[1]) if kept is not None and kept[0] == generation else {}
        merged.update({name: dict(c) for name, c in counts.items()})
        self._facets[q] = (generation, merged)
        self._facets.move_to_end(q)
        while len(self._facets) > self.FACET_ENTRIES:
            self._facets.popitem(last=False)

    def stats(self, generation: object) -> object | None:
        """The catalog's counts (`stats.CatalogStats`) if found in this generation."""
        return self._stats[1] if self._stats is not None and self._stats[0] == generation else None

    def put_stats(self, generation: object, stats: object) -> None:
        self._stats = (generation, stats)

    def family(self, key: tuple[str, int], generation: object) -> str | list[int] | None:
        """The primary keys of the family's repos, if memoised in this generation: as a
        JSON array (SQLite) or a list (PostgreSQL); the caller must not change the list."""
        found = self._families.get(key)
        if found is None or found[0] != generation:
            return None
        self._families.move_to_end(key)
        return found[1]

    def put_family(self, key: tuple[str, int], generation: object, pks: str | list[int]) -> None:
        if (old := self._families.pop(key, None)) is not None:
            self._family_size -= self._size(old[1])
        if self._size(pks) > self.FAMILY_SIZE:
            return
        self._families[key] = (generation, pks)
        self._family_size += self._size(pks)
        while len(self._families) > self.FAMILY_ENTRIES or self._family_size > self.FAMILY_SIZE:
            self._family_size -= self._size(self._families.popitem(last=False)[1][1])

    @staticmethod
    def _size(pks: str | list[int]) -> int:
        return len(pks) if isinstance(pks, str) else 8 * len(pks)

    def term_ids(self, terms: tuple[str, ...], generation: object) -> tuple[bool, str | None]:
        """(known, the ids of the artifacts holding every term as a JSON array, or None: too
        many to keep), for terms too short for the text index (SQLite)."""
        found = self._term_ids.get(terms)
        if found is None or found[0] != generation:
            return False, None
        self._term_ids.move_to_end(terms)
        return True, found[1]

    def put_term_ids(self, terms: tuple[str, ...], generation: object, ids: str | None) -> None:
        self._term_ids[terms] = (generation, ids)
        self._term_ids.move_to_end(terms)
        while len(self._term_ids) > self.TERM_SCAN_ENTRIES:
            self._term_ids.popitem(last=False)


def memo_for(url_database: str | None, dialect: str) -> Memo | None:
    """The memo of a database: a SQLite file's or PostgreSQL's; None for in-memory SQLite."""
    if dialect == "postgresql":
        return Memo(SnapshotGeneration())
    if dialect == "sqlite" and url_database and url_database != ":memory:" and Path(url_database).is_file():
        try:
            return Memo(FileGeneration(url_database))
        except sqlite3.Error:
            return None
    return None


__all__ = ["PINNED_GENERATION", "FileGeneration", "Memo", "SnapshotGeneration", "memo_for"]
