"""Facet counts: how many artifacts under the search filters have each architecture,
license, file type, size bucket (the default four) or kind, latest verification and
capability, counted once per generation of the catalog (`memo`) and served from the
covering facet indexes where the filters allow."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import ColumnElement, and_, func, literal, or_, select, tuple_, union_all
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

from registry.catalog import search
from registry.catalog.errors import InvalidQuery
from registry.catalog.memo import memo_generation
from registry.catalog.models import Artifact
from registry.catalog.search import (
    _CUSTOM_PLANS,
    FACET_NAMES,
    FACETS,
    MORE_FACETS,
    SearchQuery,
    _as_built,
    _catalog_rows,
    _clause,
    _column_predicates,
    _filters,
    _matches_many,
    _normalised,
    _resolved,
    _unindexed,
)
from registry.safety.capabilities import from_mask

# SearchQuery filters on columns outside the covering facet index.
_NON_FACET_FILTERS = ("author", "repo", "text", "tensor_type", "min_params", "max_params", "min_size", "max_size",
                      "size_label", "min_context", "expert_count", "verification", "descendant_of", "template_severity",
                      "max_memory", "draft_for", "capability", "kind", "with_projector", "modality")  # fmt: skip
# SearchQuery filters on columns outside the covering index of MORE_FACETS.
_OUTSIDE_MORE_FACETS_INDEX = (
    *(name for name in _NON_FACET_FILTERS if name not in ("kind", "verification", "capability")),
    "architecture", "license", "file_type",
)  # fmt: skip


async def facets(
    session: AsyncSession, q: SearchQuery, names: Sequence[str] = FACETS
) -> dict[str, dict[str, int]]:
    """Counts per value of each facet named (`FACET_NAMES`; by default architecture, license,
    file type and size bucket) under the query's filters, each value in its folded spelling
    (case variants of one value count together), the facets in the order named.

    PostgreSQL: one scan with GROUPING SETS; SQLite has none (see `_sqlite_facet_rows`).
    NULL counts as "unknown", together with a value so named (the hub's license list has
    `unknown`); except capabilities, where an artifact counts under each one it has and
    nowhere when it has none or was not probed. The counts are kept per filter set until
    the next commit to a SQLite file (see `FileMemo`), or on PostgreSQL until a transaction
    that wrote ends (see `SnapshotMemo`): a browsing UI asks for the same few facet sets on
    every page, and the unfiltered ones read the whole catalog.
    """
    names = facet_names(names)
    q = await _resolved(session, _normalised(q))
    # The generation is read before counting: a commit meanwhile makes the entry stale.
    memo, generation = await memo_generation(session)
    if memo is None:
        counts = await _count_facets(session, q, names)
        return {name: counts[name] for name in names}
    if (hit := memo.facets(q, generation, names)) is not None:
        return hit
    # After a commit, every request for the same counts would count them at once (a browsing
    # UI's clients, each page): those arriving while one counts wait for its answer instead.
    if (counting := memo.counting(q, generation, names)) is not None:
        shared = await asyncio.shield(counting)
        if shared is not None:
            return {name: dict(shared[name]) for name in names}
        # it failed or was cancelled: count here
    key = memo.start_counting(q, generation, _counted(names))
    try:
        counts = await _count_facets(session, q, names)
    except BaseException:
        memo.end_counting(q, key, None)
        raise
    memo.put_facets(q, generation, counts)
    memo.end_counting(q, key, counts)
    return {name: counts[name] for name in names}


async def count_facets(
    session: AsyncSession, q: SearchQuery, names: Sequence[str] = FACETS
) -> dict[str, dict[str, int]]:
    """`facets` counted afresh, past the memo: what a request pays once after each commit."""
    names = facet_names(names)
    counts = await _count_facets(session, await _resolved(session, _normalised(q)), names, memoised=False)
    return {name: counts[name] for name in names}


def facet_names(names: Sequence[str]) -> tuple[str, ...]:
    """The facets named, each once, in order; an unknown or no name: InvalidQuery."""
    unknown = [n for n in names if n not in FACET_NAMES]
    if unknown or not names:
        what = f"unknown facet {unknown[0]!r}" if unknown else "no facet named"
        raise InvalidQuery(what, parameter="facets", allowed=list(FACET_NAMES))
    return tuple(dict.fromkeys(names))


async def _count_facets(
    session: AsyncSession, q: SearchQuery, names: tuple[str, ...], *, memoised: bool = True
) -> dict[str, dict[str, int]]:
    """The facets named, counted; `memoised`: counts of another filter set that these are
    made from (`_other_kinds_are_few`) may come from the memo."""
    postgres = session.get_bind().dialect.name == "postgresql"
    # SQLite, filters outside the index that covers the facets counted: every match is read,
    # as the sort by memory reads them, so a filter matching a big share of the catalog is
    # checked on a scan of the table instead of being the way in (kind=model: 88,000
    # matches fetched through the kind index took twice a scan's time).
    built: dict[bool, list[ColumnElement[bool]]] = {}  # each WHERE built once, when first needed

    async def where(uncovered: tuple[str, ...]) -> list[ColumnElement[bool]]:
        scan = not postgres and any(getattr(q, name) is not None for name in uncovered)
        if scan not in built:
            built[scan] = (await _filters(session, q, all_matches=not scan, sort_all=scan)).where
        return built[scan]

    out: dict[str, dict[str, int]] = {name: {} for name in FACET_NAMES}
    connection = await session.connection()
    if postgres:
        await connection.execute(_CUSTOM_PLANS)
    columns = [getattr(Artifact, name) for name in FACETS]
    if not any(name in FACETS for name in names):
        pass
    elif (few := await _other_kinds_are_few(session, q)) is not None:
        # All kinds less the few others: the counts without the kind filter come from the
        # covering indexes (or the memo), the others' from the kind's own index.
        others, other_kinds = few
        every = await (facets(session, others) if memoised else count_facets(session, others))
        # Shaped as under the kind filter: the few matches read once, grouped four times.
        other = _rows_counts(await _facet_rows(session, q, other_kinds, columns))
        for facet in FACETS:
            less = other.get(facet, {})
            out[facet] = {key: n - less.get(key, 0) for key, n in every[facet].items() if n > less.get(key, 0)}
    else:
        for facet, key, n in await _facet_rows(session, q, await where(_NON_FACET_FILTERS), columns):
            counts = out[facet]
            counts[key] = counts.get(key, 0) + n  # NULL and a value named "unknown" together
    if more := [name for name in MORE_FACETS if name in names]:
        await _count_more_facets(connection, await where(_OUTSIDE_MORE_FACETS_INDEX), more, out)
    return {name: dict(sorted(out[name].items(), key=lambda kv: (-kv[1], kv[0]))) for name in _counted(names)}


async def _facet_rows(
    session: AsyncSession, q: SearchQuery, where: list[ColumnElement[bool]], columns: list[Any]
) -> list[tuple[str, str, int]]:
    """(facet, value, count) rows of the four facets under `where` (the query's filters as
    `_filters` built them), NULL as "unknown"; a value possibly in several rows to be summed."""
    connection = await session.connection()
    if session.get_bind().dialect.name != "postgresql":
        return [(facet, _facet_key(value), n) for facet, value, n in await _sqlite_facet_rows(session, q, where, columns)]
    flags = [func.grouping(c) for c in columns]
    stmt = select(*flags, *columns, func.count()).where(*where)
    stmt = stmt.group_by(func.grouping_sets(*(tuple_(c) for c in columns)))
    out = []
    for row in (await connection.execute(stmt)).all():
        i = list(row[: len(FACETS)]).index(0)  # the facet this row groups by
        out.append((FACETS[i], _facet_key(row[len(FACETS) + i]), row[-1]))
    return out


def _rows_counts(rows: Iterable[tuple[str, str, int]]) -> dict[str, dict[str, int]]:
    """{facet: {value: count}} of (facet, value, count) rows, a value's rows summed."""
    out: dict[str, dict[str, int]] = {}
    for facet, key, n in rows:
        counts = out.setdefault(facet, {})
        counts[key] = counts.get(key, 0) + n
    return out


# The artifacts of every kind but `model`, and those without one (error rows): ranges of
# the kind's indexes, which `!=` would not use.
_OTHER_KINDS = or_(Artifact.kind < "model", Artifact.kind > "model", Artifact.kind.is_(None))


async def _other_kinds_are_few(
    session: AsyncSession, q: SearchQuery
) -> tuple[SearchQuery, list[ColumnElement[bool]]] | None:
    """For a query whose only filter outside the facets' covering indexes is `kind=model`
    (what a UI that lists models asks for), the query without it when the artifacts of
    other kinds that it matches are few (at most search.COMMON_ROWS, or 1 / search.SCAN_SHARE of the
    catalog): then the facets are those counts less the others'. Counted directly, all of
    a catalog's models were read from the table: bench.search's 88,000 took 161 ms on SQLite
    and 85 ms on PostgreSQL. With the query, the WHERE of those others (`_other_kinds`);
    None when that does not hold."""
    if q.kind != "model" or any(getattr(q, name) is not None for name in _NON_FACET_FILTERS if name != "kind"):
        return None
    others = dataclasses.replace(q, kind=None)
    share = max(search.COMMON_ROWS, await _catalog_rows(session) // search.SCAN_SHARE)
    where = await _other_kinds(session, others)
    if await _matches_many(session, ("other kinds", others), lambda: and_(*where), share):
        return None
    return others, where


async def _other_kinds(session: AsyncSession, others: SearchQuery) -> list[ColumnElement[bool]]:
    """The WHERE of the artifacts of other kinds than `model` that `others` matches.

    On SQLite their ids come from seeks of the `(status, kind)` prefix of the more facets'
    covering index, one per side of `model` and one for NULL, and the other filters are
    checked on each (`+column` when common). Left to choose, SQLite read all 98,000 indexed
    artifacts of bench.search through the status's index for their 10,000 others (107-122
    ms), or scanned the table (45 ms); through the ids, 18 ms."""
    where = (await _filters(session, others, sort_all=True)).where
    if session.get_bind().dialect.name != "sqlite":
        return [*where, _OTHER_KINDS]
    status = [] if others.status == "all" else [Artifact.status == others.status]
    sides = (Artifact.kind < "model", Artifact.kind > "model", Artifact.kind.is_(None))
    return [*where, Artifact.id.in_(union_all(*(select(Artifact.id).where(*status, side) for side in sides)))]


def _counted(names: Sequence[str]) -> tuple[str, ...]:
    """The facets `_count_facets` counts for these: the four of the covering indexes together
    even when fewer were asked for."""
    base = any(name in FACETS for name in names)
    return tuple(name for name in FACET_NAMES if (name in FACETS and base) or name in names)


async def _count_more_facets(
    connection: AsyncConnection, where: list[ColumnElement[bool]], names: list[str], out: dict[str, dict[str, int]]
) -> None:
    """The `MORE_FACETS` named, from one GROUP BY over their columns together: kinds,
    capability masks and verification statuses are few, so their combinations are too."""
    columns = [MORE_FACETS[name] for name in names]
    stmt = select(*columns, func.count()).select_from(Artifact).where(*where).group_by(*columns)
    for *values, n in await connection.execute(stmt):
        for name, value in zip(names, values, strict=True):
            counts = out[name]
            if name == "capability":
                for capability in from_mask(value) if value is not None else ():
                    counts[capability] = counts.get(capability, 0) + n
            else:
                key = _facet_key(value)
                counts[key] = counts.get(key, 0) + n


async def _sqlite_facet_rows(
    session: AsyncSession, q: SearchQuery, where: list[ColumnElement[bool]], columns: list[Any]
) -> list[tuple[str, Any, int]]:
    """(facet, value, count) rows, a value possibly in several rows to be summed. Each shape
    is chosen so SQLite reads as little as possible:

    * status only: each facet walks its own `(status, facet)` covering index, in order;
    * filters on facet columns only: a rare license or file type is sought through its own
      index (few table reads); otherwise SQLite reads a five-column covering index (status,
      then architecture, license or file type, whichever is filtered first, then the other
      facets), seeking its prefix, and nothing else.
      Left alone it would walk a `(status, facet)` index for the GROUP BY order or seek a
      one-column index, reading the table for every row; `+column` takes those choices away.
      The matches are read once, grouped by all four facets together (the filters keep
      those groups few), and each facet's counts summed from the groups;
    * anything else: the matching rows' facet columns are materialized once, grouped four times.
    """
    if any(getattr(q, name) is not None for name in _NON_FACET_FILTERS):
        matched = select(*columns).where(*where).cte("matched").prefix_with("MATERIALIZED")
        parts = [
            select(literal(n).label("facet"), matched.c[n].label("value"), func.count().label("n")).group_by(
                matched.c[n]
            )
            for n in FACETS
        ]
    elif len(where) <= 1:
        parts = [
            select(literal(name).label("facet"), column.label("value"), func.count().label("n"))
            .select_from(Artifact)
            .where(*where)
            .group_by(column)
            for name, column in zip(FACETS, columns, strict=True)
        ]
    else:
        return await _sqlite_facet_cube(session, q)
    union = parts[0].union_all(*parts[1:]).subquery()
    rows = await (await session.connection()).execute(select(union.c.facet, union.c.value, union.c.n))
    return [(facet, value, n) for facet, value, n in rows]


async def _sqlite_facet_cube(session: AsyncSession, q: SearchQuery) -> list[tuple[str, Any, int]]:
    preds = _column_predicates(q)
    rare = [not await _matches_many(session, p.key, _as_built(p)) for p in preds]
    # The seekable prefix of a covering index: one leads with each of these after status.
    filtered = {p.column.key for p in preds}
    lead = next((name for name in ("architecture", "license", "file_type") if name in filtered), "architecture")
    prefix = ("status", lead)
    seek_prefix = not any(r for p, r in zip(preds, rare, strict=True) if p.column.key not in prefix)
    if seek_prefix:
        rare = [p.column.key in prefix for p in preds]
    where = [_clause(p, unindexed=not r) for p, r in zip(preds, rare, strict=True)]
    # Seeking a covering index's prefix, the groups come in its order: grouped on the bare
    # columns, SQLite reads them in that order instead of sorting them (2-3x faster). Else
    # `+column` keeps SQLite from walking another index for the order.
    keys = [getattr(Artifact, name) if seek_prefix else _unindexed(getattr(Artifact, name)) for name in FACETS]
    stmt = select(*keys, func.count()).select_from(Artifact).where(*where).group_by(*keys)
    out: list[tuple[str, Any, int]] = []
    for *values, n in await (await session.connection()).execute(stmt):
        out.extend((name, value, n) for name, value in zip(FACETS, values, strict=True))
    return out


def _facet_key(value: str | None) -> str:
    return value if value is not None else "unknown"


__all__ = ["count_facets", "facet_names", "facets"]
