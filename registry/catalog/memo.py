"""What the catalog's reads keep between requests: facet counts, term and lineage-family
ids, each valid for one generation of the database (SQLite: a commit to the file,
`FileMemo`; PostgreSQL: a committed snapshot, `SnapshotMemo`)."""

from __future__ import annotations

import asyncio
import sqlite3
import weakref
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import String, cast, func, select
from sqlalchemy.engine import Engine
from sqlalchemy.ext.asyncio import AsyncSession

if TYPE_CHECKING:
    from registry.catalog.search import SearchQuery


async def memo_generation(session: AsyncSession) -> tuple[_MemoEntries | None, object]:
    """The memo of the session's database and its generation now (FileMemo, SnapshotMemo);
    (None, None) for a database without one (in-memory SQLite)."""
    if (file_memo := FileMemo.of(session)) is not None:
        return file_memo, file_memo.generation_for(session)
    if (snapshots := SnapshotMemo.of(session)) is not None:
        return snapshots, await SnapshotMemo.generation(session)
    return None, None


class _MemoEntries:
    """Facet counts per (normalised) filter set and the repos of lineage families, each
    under the generation it was found in; least recently used first out."""

    FACET_ENTRIES = 512
    FAMILY_ENTRIES = 256
    FAMILY_SIZE = 8 << 20  # all memoised families together: JSON characters, or 8 per repo

    def __init__(self) -> None:
        self._stats: tuple[object, object] | None = None  # (generation, the catalog's counts: stats.py)
        self._facets: OrderedDict[SearchQuery, tuple[object, dict[str, dict[str, int]]]] = OrderedDict()
        # Counts under way: (generation, the facets counted, their answer to come). A memo
        # serves one event loop's sessions (an engine's connections belong to one loop).
        self._counting: dict[SearchQuery, list[tuple[object, frozenset[str], asyncio.Future[Any]]]] = {}
        self._families: OrderedDict[tuple[str, int], tuple[object, str | list[int]]] = OrderedDict()
        self._family_size = 0

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


class SnapshotMemo(_MemoEntries):
    """PostgreSQL: facet counts per filter set and the repos of lineage families, valid
    while no transaction that wrote has ended anywhere in the database server since they
    were found.

    The generation is the text of `txid_current_snapshot()` (xmin:xmax:in-progress xids).
    xmax is one past the latest transaction id to end; a transaction that wrote has an id,
    and its end (commit or abort) either raises xmax or takes its id out of the in-progress
    list. So an unchanged snapshot means no commit since, and a write still in flight,
    invisible to a count, changes nothing until it commits. The generation is read before
    counting, so a commit during the count leaves the entry under an older snapshot, never
    read again. Conservative: a write to any table (jobs, crawls) also starts a new one.
    One round trip (~0.2 ms) against counts that read a large share of the catalog (35-50
    ms for the whole of 100,000 artifacts or a common word, bench.search). One memo per
    engine, held weakly."""

    @classmethod
    def of(cls, session: AsyncSession) -> SnapshotMemo | None:
        engine = session.get_bind()
        if not isinstance(engine, Engine) or engine.dialect.name != "postgresql":
            return None
        memo = _SNAPSHOT_MEMOS.get(engine)
        if memo is None:
            memo = _SNAPSHOT_MEMOS[engine] = cls()
        return memo

    @staticmethod
    async def generation(session: AsyncSession) -> str:
        """The generation, read once per transaction of `session`: a request that both
        counts facets and walks a family reads it once (still before either count)."""
        connection = await session.connection()
        transaction = session.get_transaction()
        known = session.info.get(_GENERATION_KEY)
        if known is not None and known[0] is transaction:
            return str(known[1])
        generation = str((await connection.execute(_SNAPSHOT)).scalar_one())
        session.info[_GENERATION_KEY] = (transaction, generation)
        return generation


class FileMemo(_MemoEntries):
    """What the search derives from one SQLite file, valid until anything commits to it:
    facet counts per filter set, the repos of big lineage families, and the few artifacts
    holding text terms that are too short for the FTS5 index.

    The generation is `PRAGMA data_version` on a read-only connection of the memo's own:
    SQLite changes it whenever another connection (of this process or any other: workers,
    `registry index`, the other `serve --workers`) commits, and this connection never
    writes. Reading it costs microseconds and no disk I/O. PostgreSQL and in-memory
    databases get no memo. One memo per engine, held weakly. Entries are of committed
    rows: a session's own uncommitted writes may not show in them (the API only reads).
    """

    TERM_SCAN_ENTRIES = 1024  # each at most TERM_SCAN_ROWS ids

    def __init__(self, path: str) -> None:
        uri = Path(path).resolve().as_uri() + "?mode=ro"
        super().__init__()
        self._watch = sqlite3.connect(uri, uri=True, check_same_thread=False, isolation_level=None)
        self._term_ids: OrderedDict[tuple[str, ...], tuple[int, str | None]] = OrderedDict()

    @classmethod
    def of(cls, session: AsyncSession) -> FileMemo | None:
        engine = session.get_bind()
        if not isinstance(engine, Engine) or engine.dialect.name != "sqlite":
            return None
        if engine not in _FILE_MEMOS:
            path = engine.url.database
            memo = None
            try:
                if path and path != ":memory:" and Path(path).is_file():
                    memo = cls(path)
                    weakref.finalize(engine, memo._watch.close)  # closed with its engine, not at GC
            except sqlite3.Error:
                memo = None
            _FILE_MEMOS[engine] = memo
        return _FILE_MEMOS[engine]

    def generation(self) -> int:
        # fetchall: the statement runs to its end, so no read transaction stays open.
        return int(self._watch.execute("PRAGMA data_version").fetchall()[0][0])

    def generation_for(self, session: AsyncSession) -> int:
        """The generation to keep what `session` reads under: for a session reading one
        snapshot (`readpath.ReadSession`), the generation read before its snapshot began,
        never a newer one (what a commit after the snapshot changed is not in its rows);
        else the generation now, read before the caller's statements."""
        pinned = getattr(session, "snapshot_generation", None)
        return pinned if isinstance(pinned, int) else self.generation()

    def term_ids(self, terms: tuple[str, ...], generation: int) -> tuple[bool, str | None]:
        """(known, the matching ids as a JSON array or None: more than TERM_SCAN_ROWS)."""
        found = self._term_ids.get(terms)
        if found is None or found[0] != generation:
            return False, None
        self._term_ids.move_to_end(terms)
        return True, found[1]

    def put_term_ids(self, terms: tuple[str, ...], generation: int, ids: str | None) -> None:
        self._term_ids[terms] = (generation, ids)
        self._term_ids.move_to_end(terms)
        while len(self._term_ids) > self.TERM_SCAN_ENTRIES:
            self._term_ids.popitem(last=False)


# Engine -> its memo (None: not memoised); weak, so a disposed engine takes its memo along.
_FILE_MEMOS: weakref.WeakKeyDictionary[Engine, FileMemo | None] = weakref.WeakKeyDictionary()
_SNAPSHOT_MEMOS: weakref.WeakKeyDictionary[Engine, SnapshotMemo] = weakref.WeakKeyDictionary()
_SNAPSHOT = select(cast(func.txid_current_snapshot(), String))  # a SELECT: `readpath` runs it too
_GENERATION_KEY = "registry.snapshot_generation"  # session.info: (transaction, generation)


__all__ = ["FileMemo", "SnapshotMemo", "memo_generation"]
