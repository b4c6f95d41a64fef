"""Facet counts: how many artifacts under the search filters have each architecture,
license, file type, size bucket (the default four) or kind, latest verification and
capability, counted once per generation of the catalog (`memo`) and served from the
covering facet indexes where the filters allow. Planned by the search's planner
(`search.planner`), written here.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import ColumnElement, Select, func, literal, select, tuple_

from registry.catalog.errors import InvalidQuery
from registry.catalog.models import Artifact
from registry.catalog.readpath import CatalogSession, caches_of, run
from registry.catalog.search import statements
from registry.catalog.search.planner import CatalogSize, Common, Plan, Where
from registry.catalog.search.query import FACET_NAMES, FACETS, MORE_FACETS, SearchQuery, column_filters
from registry.catalog.search.run import EVERY, SCAN, answer, family_of, planned, prepared, settings_of
from registry.catalog.search.settings import PlannerSettings
from registry.catalog.shapes import Keyed
from registry.safety.capabilities import from_mask

_A = Artifact.__table__.c
# SearchQuery filters on columns outside the covering facet index.
_NON_FACET_FILTERS = ("author", "repo", "text", "tensor_type", "min_params", "max_params", "min_size", "max_size",
                      "size_label", "min_context", "expert_count", "verification", "descendant_of", "template_severity",
                      "max_memory", "draft_for", "capability", "kind", "with_projector", "modality",
                      "finding", "runs_in")  # fmt: skip
# SearchQuery filters on columns outside the covering index of MORE_FACETS.
_OUTSIDE_MORE_FACETS_INDEX = (
    *(name for name in _NON_FACET_FILTERS if name not in ("kind", "verification", "capability")),
    "architecture", "license", "file_type",
)  # fmt: skip


async def facets(
    session: CatalogSession, q: SearchQuery, names: Sequence[str] = FACETS, *, settings: PlannerSettings | None = None
) -> dict[str, dict[str, int]]:
    """Counts per value of each facet named (`FACET_NAMES`; by default architecture, license,
    file type and size bucket) under the query's filters, each value in its folded spelling
    (case variants of one value count together), the facets in the order named.

    NULL counts as "unknown", together with a value so named (the hub's license list has
    `unknown`); except capabilities, where an artifact counts under each one it has and
    nowhere when it has none or was not probed. The counts are kept per filter set until
    the next commit (`memo`): a browsing UI asks for the same few facet sets on every page,
    and the unfiltered ones read the whole catalog.
    """
    names = facet_names(names)
    settings = settings_of(session, settings)
    q = await prepared(session, q)
    found = caches_of(session)
    memo = found.memo if found is not None else None
    if memo is None:
        counts = await _count_facets(session, q, names, settings)
        return {name: counts[name] for name in names}
    generation = await memo.generation(session)  # before counting: a commit meanwhile makes the entry stale
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
        counts = await _count_facets(session, q, names, settings)
    except BaseException:
        memo.end_counting(q, key, None)
        raise
    memo.put_facets(q, generation, counts)
    memo.end_counting(q, key, counts)
    return {name: counts[name] for name in names}


async def count_facets(
    session: CatalogSession, q: SearchQuery, names: Sequence[str] = FACETS, *, settings: PlannerSettings | None = None
) -> dict[str, dict[str, int]]:
    """`facets` counted afresh, past the memo: what a request pays once after each commit."""
    names = facet_names(names)
    counts = await _count_facets(session, await prepared(session, q), names, settings_of(session, settings),
                                 memoised=False)  # fmt: skip
    return {name: counts[name] for name in names}


def facet_names(names: Sequence[str]) -> tuple[str, ...]:
    """The facets named, each once, in order; an unknown or no name: InvalidQuery."""
    unknown = [n for n in names if n not in FACET_NAMES]
    if unknown or not names:
        what = f"unknown facet {unknown[0]!r}" if unknown else "no facet named"
        raise InvalidQuery(what, parameter="facets", allowed=list(FACET_NAMES))
    return tuple(dict.fromkeys(names))


async def _count_facets(
    session: CatalogSession, q: SearchQuery, names: tuple[str, ...], settings: PlannerSettings, *,
    memoised: bool = True,
) -> dict[str, dict[str, int]]:  # fmt: skip
    """The facets named, counted; `memoised`: counts of another filter set that these are
    made from (`_other_kinds_are_few`) may come from the memo."""
    sqlite = (await session.connection()).dialect.name == "sqlite"
    family = await family_of(session, q, settings)
    # SQLite, filters outside the index that covers the facets counted: every match is read,
    # as the sort by memory reads them, so a filter matching a big share of the catalog is
    # checked on a scan of the table instead of being the way in.
    plans: dict[bool, Plan] = {}  # each plan made once, when first needed

    async def plan(uncovered: tuple[str, ...]) -> Plan:
        scan = sqlite and any(getattr(q, name) is not None for name in uncovered)
        if scan not in plans:
            plans[scan] = await planned(session, q, SCAN if scan else EVERY, settings, family)
        return plans[scan]

    out: dict[str, dict[str, int]] = {name: {} for name in FACET_NAMES}
    if not sqlite:
        await run(session, statements.CUSTOM_PLANS)
    if not any(name in FACETS for name in names):
        pass
    elif (few := await _other_kinds_are_few(session, q, settings)) is not None:
        # All kinds less the few others: the counts without the kind filter come from the
        # covering indexes (or the memo), the others' from the kind's own index.
        others, other_kinds = few
        every = await (facets if memoised else count_facets)(session, others, settings=settings)
        # Shaped as under the kind filter: the few matches read once, grouped four times.
        other = _rows_counts(await _facet_rows(session, q, other_kinds, settings, sqlite))
        for facet in FACETS:
            less = other.get(facet, {})
            out[facet] = {key: n - less.get(key, 0) for key, n in every[facet].items() if n > less.get(key, 0)}
    else:
        where = (await plan(_NON_FACET_FILTERS)).where
        for facet, key, n in await _facet_rows(session, q, where, settings, sqlite):
            counts = out[facet]
            counts[key] = counts.get(key, 0) + n  # NULL and a value named "unknown" together
    if more := [name for name in MORE_FACETS if name in names]:
        await _count_more_facets(session, (await plan(_OUTSIDE_MORE_FACETS_INDEX)).where, more, out, sqlite)
    return {name: dict(sorted(out[name].items(), key=lambda kv: (-kv[1], kv[0]))) for name in _counted(names)}


async def _facet_rows(
    session: CatalogSession, q: SearchQuery, where: Where, settings: PlannerSettings, sqlite: bool
) -> list[tuple[str, str, int]]:
    """(facet, value, count) rows of the four facets under `where` (the query's filters as
    planned), NULL as "unknown"; a value possibly in several rows to be summed."""
    if sqlite:
        rows = await _sqlite_facet_rows(session, q, where, settings)
        return [(facet, _facet_key(value), n) for facet, value, n in rows]
    columns = [_A[name] for name in FACETS]

    def build() -> Select[Any]:
        flags = [func.grouping(c) for c in columns]
        stmt = select(*flags, *columns, func.count()).where(*statements.clauses(where, sqlite=False))
        return stmt.group_by(func.grouping_sets(*(tuple_(c) for c in columns)))

    out = []
    statement = Keyed(("facets", statements.shape_of(where)), build)
    for row in (await run(session, statement, statements.params(where))).all():
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


async def _other_kinds_are_few(
    session: CatalogSession, q: SearchQuery, settings: PlannerSettings
) -> tuple[SearchQuery, Where] | None:
    """For a query whose only filter outside the facets' covering indexes is `kind=model`
    (what a UI that lists models asks for), the query without it when the artifacts of
    other kinds that it matches are few (at most `common_rows`, or 1 / `scan_share` of the
    catalog): then the facets are those counts less the others'. Counted directly, all of a
    catalog's models were read from the table. With the query, the Where of those others;
    None when that does not hold."""
    if q.kind != "model" or any(getattr(q, name) is not None for name in _NON_FACET_FILTERS if name != "kind"):
        return None
    others = dataclasses.replace(q, kind=None)
    size = int(await answer(session, CatalogSize(), settings))  # type: ignore[call-overload]
    share = max(settings.common_rows, size // settings.scan_share)
    where = dataclasses.replace((await planned(session, others, SCAN, settings)).where, other_kinds=True)
    if await answer(session, Common(where, share), settings):
        return None
    return others, where


def _counted(names: Sequence[str]) -> tuple[str, ...]:
    """The facets `_count_facets` counts for these: the four of the covering indexes together
    even when fewer were asked for."""
    base = any(name in FACETS for name in names)
    return tuple(name for name in FACET_NAMES if (name in FACETS and base) or name in names)


async def _count_more_facets(
    session: CatalogSession, where: Where, names: list[str], out: dict[str, dict[str, int]], sqlite: bool
) -> None:
    """The `MORE_FACETS` named, from one GROUP BY over their columns together: kinds,
    capability masks and verification statuses are few, so their combinations are too."""
    columns = [_A[MORE_FACETS[name]] for name in names]

    def build() -> Select[Any]:
        where_clauses = statements.clauses(where, sqlite=sqlite)
        return select(*columns, func.count()).select_from(Artifact).where(*where_clauses).group_by(*columns)

    statement = Keyed(("more facets", tuple(names), statements.shape_of(where)), build)
    for *values, n in await run(session, statement, statements.params(where)):
        for name, value in zip(names, values, strict=True):
            counts = out[name]
            if name == "capability":
                for capability in from_mask(value) if value is not None else ():
                    counts[capability] = counts.get(capability, 0) + n
            else:
                key = _facet_key(value)
                counts[key] = counts.get(key, 0) + n


async def _sqlite_facet_rows(
    session: CatalogSession, q: SearchQuery, where: Where, settings: PlannerSettings
) -> list[tuple[str, Any, int]]:
    """(facet, value, count) rows, a value possibly in several rows to be summed. Each shape
    is chosen so SQLite reads as little as possible:

    * status only: each facet walks its own `(status, facet)` covering index, in order;
    * filters on facet columns only: see `_sqlite_facet_cube`;
    * anything else: the matching rows' facet columns are materialized once, grouped four times.
    """
    if any(getattr(q, name) is not None for name in _NON_FACET_FILTERS) or where.other_kinds:

        def build() -> Select[Any]:
            clauses = statements.clauses(where, sqlite=True)
            matched = select(*(_A[n] for n in FACETS)).where(*clauses).cte("matched").prefix_with("MATERIALIZED")
            parts = [
                select(literal(n).label("facet"), matched.c[n].label("value"), func.count().label("n")).group_by(
                    matched.c[n]
                )
                for n in FACETS
            ]
            union = parts[0].union_all(*parts[1:]).subquery()
            return select(union.c.facet, union.c.value, union.c.n)

        statement = Keyed(("facet rows, matched", statements.shape_of(where)), build)
    elif len(where.filters) <= 1:

        def build() -> Select[Any]:
            clauses = statements.clauses(where, sqlite=True)
            parts = [
                select(literal(name).label("facet"), _A[name].label("value"), func.count().label("n"))
                .select_from(Artifact)
                .where(*clauses)
                .group_by(_A[name])
                for name in FACETS
            ]
            union = parts[0].union_all(*parts[1:]).subquery()
            return select(union.c.facet, union.c.value, union.c.n)

        statement = Keyed(("facet rows, each", statements.shape_of(where)), build)
    else:
        return await _sqlite_facet_cube(session, q, settings)
    return [(facet, value, n) for facet, value, n in await run(session, statement, statements.params(where))]


async def _sqlite_facet_cube(
    session: CatalogSession, q: SearchQuery, settings: PlannerSettings
) -> list[tuple[str, Any, int]]:
    """Filters on facet columns only: a rare license or file type is sought through its own
    index (few table reads); otherwise SQLite reads a five-column covering index (status,
    then architecture, license or file type, whichever is filtered first, then the other
    facets), seeking its prefix, and nothing else. Left alone it would walk a `(status,
    facet)` index for the GROUP BY order or seek a one-column index, reading the table for
    every row; `+column` takes those choices away. The matches are read once, grouped by all
    four facets together (the filters keep those groups few)."""
    filters = tuple(column_filters(q))
    rare = [not await answer(session, Common(Where((f,)), settings.common_rows), settings) for f in filters]
    # The seekable prefix of a covering index: one leads with each of these after status.
    filtered = {f.column for f in filters}
    lead = next((name for name in ("architecture", "license", "file_type") if name in filtered), "architecture")
    prefix = ("status", lead)
    seek_prefix = not any(r for f, r in zip(filters, rare, strict=True) if f.column not in prefix)
    if seek_prefix:
        rare = [f.column in prefix for f in filters]
    where = Where(filters, unindexed=frozenset(i for i, r in enumerate(rare) if not r))

    def build() -> Select[Any]:
        # Seeking a covering index's prefix, the groups come in its order: grouped on the bare
        # columns, SQLite reads them in that order instead of sorting them. Else `+column`
        # keeps SQLite from walking another index for the order.
        keys: list[ColumnElement[Any]] = [
            _A[name] if seek_prefix else statements.unindexed(name) for name in FACETS
        ]
        return select(*keys, func.count()).select_from(Artifact).where(*statements.clauses(where, sqlite=True)).group_by(*keys)

    statement = Keyed(("facet cube", statements.shape_of(where), seek_prefix), build)
    out: list[tuple[str, Any, int]] = []
    for *values, n in await run(session, statement, statements.params(where)):
        out.extend((name, value, n) for name, value in zip(FACETS, values, strict=True))
    return out


def _facet_key(value: str | None) -> str:
    return value if value is not None else "unknown"


__all__ = ["count_facets", "facet_names", "facets"]
