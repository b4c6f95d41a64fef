"""`search`: a page of hits for a query, and what it takes to plan one: the draft target
and the lineage family looked up, the planner's probes answered (and kept a while in the
database's caches), the page's statements run on the session's connection.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Callable
from typing import Any

from registry.catalog.errors import ArtifactNotFound, InvalidQuery
from registry.catalog.lineage import MAX_DEPTH
from registry.catalog.models import repo_key
from registry.catalog.readpath import CatalogSession, ReadConnection, caches_of, catalog_reads, run
from registry.catalog.search import statements
from registry.catalog.search.hits import SearchPage
from registry.catalog.search.memory import MEMORY_CONTEXT
from registry.catalog.search.planner import (
    CatalogSize,
    Common,
    CommonText,
    Family,
    Needs,
    Plan,
    Probe,
    TermIds,
    plan_every_match,
    plan_page,
    plan_scan,
)
from registry.catalog.search.query import (
    MAX_LIMIT,
    DraftTarget,
    SearchQuery,
    decode_cursor,
    encode_cursor,
    normalised,
    parse_sort,
)
from registry.catalog.search.settings import DEFAULT, PlannerSettings
from registry.catalog.search_index import MIN_TRIGRAM, fts_match
from registry.catalog.shapes import Keyed

PAGE, SCAN, EVERY = "page", "scan", "every"  # what a plan is for: `planned`'s modes


def settings_of(session: CatalogSession, settings: PlannerSettings | None) -> PlannerSettings:
    """The planner settings of a call: its own, else its database's, else the defaults."""
    if settings is not None:
        return settings
    reads = catalog_reads(session)
    found = reads.planner if reads is not None else None
    return found if found is not None else DEFAULT


async def prepared(session: CatalogSession, q: SearchQuery) -> SearchQuery:
    """The query in normal form, with `draft` looked up for `draft_for` (an unknown artifact
    id is an ArtifactNotFound)."""
    q = normalised(q)
    if q.draft_for is None:
        return q
    target = (await run(session, statements.DRAFT_TARGET, {"artifact_id": q.draft_for})).one_or_none()
    if target is None:
        raise ArtifactNotFound(f"no artifact {q.draft_for}", parameter="draft_for")
    return dataclasses.replace(q, draft=DraftTarget(*target))


async def _dialect(session: CatalogSession) -> str:
    return str((await session.connection()).dialect.name)


async def family_of(session: CatalogSession, q: SearchQuery, settings: PlannerSettings) -> Family | None:
    """The repos of the query's lineage family: those its walk found while nothing has
    committed since (a SQLite file: as one JSON array parameter; PostgreSQL: a list bound as
    one array); else walked in the statement itself.

    Walking a popular base model's family (thousands of repos) took longer than the rest of
    a page, and the probes that choose the plan walked it again. On PostgreSQL the repos are
    the plan's, too: the planner cannot tell how many repos a recursive walk reaches, so it
    fetched and sorted all of their artifacts for a page; bound as an array it walks the
    sort index and checks each row against them."""
    if q.descendant_of is None:
        return None
    root = repo_key(q.descendant_of)
    found = caches_of(session)
    memo = found.memo if found is not None else None
    if memo is None:
        return Family(root)
    key = (root, MAX_DEPTH)
    generation = await memo.generation(session)  # before walking: a commit meanwhile makes it stale
    if (ids := memo.family(key, generation)) is None:
        conn = await session.connection()
        read = conn if isinstance(conn, ReadConnection) else None
        if read is not None:  # done once per commit: it may hold the loop a while longer than a read
            read.budget_ms = settings.family_walk_inline_ms
        try:
            rows = await run(session, statements.FAMILY_WALK, {"family_root": root})
            walked = sorted(set(rows.scalars()))
        finally:
            if read is not None:
                read.budget_ms = None
        ids = json.dumps(walked, separators=(",", ":")) if conn.dialect.name == "sqlite" else walked
        memo.put_family(key, generation, ids)
    return Family(root, ids if isinstance(ids, str) else tuple(ids))


async def answer(session: CatalogSession, probe: Probe, settings: PlannerSettings) -> object:
    """A probe's answer from the database (`planner`): a yes/no kept in the hints a while,
    the catalog's size, or the ids of the few artifacts holding short terms (memoised per
    generation)."""
    found = caches_of(session)
    kept = isinstance(probe, Common | CommonText) and found is not None
    if kept and found is not None and (known := found.hints.get(probe)) is not None:
        return known
    sqlite = await _dialect(session) == "sqlite"
    result: object
    if isinstance(probe, CatalogSize):
        result = int((await run(session, statements.CATALOG_SIZE)).scalar() or 0)
    elif isinstance(probe, Common):
        values = {**statements.params(probe.where), "probe_limit": probe.threshold + 1}
        result = (await run(session, statements.common(probe.where, sqlite=sqlite), values)).scalar_one() > probe.threshold
    elif isinstance(probe, CommonText):
        values = {"fts": fts_match(probe.terms), "probe_limit": probe.threshold + 1}
        result = (await run(session, statements.COMMON_TEXT, values)).scalar_one() > probe.threshold
    else:
        result = await _term_ids(session, probe, settings)
    if kept and found is not None:
        found.hints.put(probe, result)
    return result


async def _term_ids(session: CatalogSession, probe: TermIds, settings: PlannerSettings) -> str | None:
    """The ids of the artifacts holding every term, as a JSON array, or None when more than
    `probe.limit` do: found by a scan of the table (or of the long terms' FTS5 rows) in slices
    of `term_scan_slice` ids, a turn of the event loop between two, stopped past the limit;
    kept until the next commit."""
    found = caches_of(session)
    memo = found.memo if found is not None else None
    generation = await memo.generation(session) if memo is not None else None  # before scanning
    if memo is not None:
        known, ids = memo.term_ids(probe.terms, generation)
        if known:
            return ids
    scan, values = statements.first_matching_ids(probe.terms)
    top = int((await run(session, statements.CATALOG_SIZE)).scalar() or 0)
    matched: list[int] = []
    # The FTS5 rows of long terms are few enough to read at once; a scan of the table is sliced.
    step = settings.term_scan_slice if all(len(t) < MIN_TRIGRAM for t in probe.terms) else top + 1
    for start in range(0, top + 1, step):
        if start:
            await asyncio.sleep(0)  # the requests waiting meanwhile go first
        bounds = {"id_from": start, "id_to": start + step, "limit": probe.limit + 1}
        matched += (await run(session, scan, {**values, **bounds})).scalars()
        if len(matched) > probe.limit:
            break
    ids = None if len(matched) > probe.limit else json.dumps(sorted(matched), separators=(",", ":"))
    if memo is not None:
        memo.put_term_ids(probe.terms, generation, ids)
    return ids


async def planned(
    session: CatalogSession, q: SearchQuery, mode: str = PAGE, settings: PlannerSettings = DEFAULT,
    family: Family | None = None,
) -> Plan:  # fmt: skip
    """The plan of a prepared query (`prepared`) for a page (PAGE), for reading every match
    sorted (SCAN) or plainly (EVERY), its probes answered."""
    sqlite = await _dialect(session) == "sqlite"
    if family is None:
        family = await family_of(session, q, settings)
    found = caches_of(session)
    memo = sqlite and found is not None and found.memo is not None
    step: Callable[[dict[Probe, object]], Plan | Needs]
    if mode == EVERY:
        return plan_every_match(q, family, sqlite=sqlite)
    if mode == SCAN:
        step = lambda answers: plan_scan(q, family, answers, settings, sqlite=sqlite)  # noqa: E731
    else:
        step = lambda answers: plan_page(q, family, answers, settings, sqlite=sqlite, memo=memo)  # noqa: E731
    answers: dict[Probe, object] = {}
    while isinstance(out := step(answers), Needs):
        for probe in out.probes:
            answers[probe] = await answer(session, probe, settings)
    return out


async def search(
    session: CatalogSession, q: SearchQuery, *, with_total: bool = False, settings: PlannerSettings | None = None
) -> SearchPage:
    """A page of hits (see `query` for the order and cursors, `planner` for how it is read)."""
    settings = settings_of(session, settings)
    q = await prepared(session, q)
    if not 1 <= q.limit <= MAX_LIMIT:
        raise InvalidQuery(f"limit must be between 1 and {MAX_LIMIT}")
    sort, column, descending = parse_sort(q.sort)
    memory_context = q.memory_context if q.memory_context is not None else MEMORY_CONTEXT
    sqlite = await _dialect(session) == "sqlite"
    if column is None:
        sort = f"{sort}@{memory_context}"  # a cursor holds for the context it sorted at
    after = decode_cursor(q.cursor, sort) if q.cursor else None
    limit = {"limit": q.limit + 1}
    statement: Keyed | None
    tail = False  # by memory at the default context: the artifacts without an estimate follow
    if column is not None or memory_context == MEMORY_CONTEXT:
        plan = await planned(session, q, PAGE, settings)
        values: dict[str, Any] = {**statements.params(plan.where), **limit}
        by = column or "memory_at_default"
        past_estimates = column is None and after is not None and after[0] is None
        statement = None
        if not past_estimates:
            statement = statements.page(plan, by, descending, after=after is not None, estimated=column is None,
                                        sqlite=sqlite)  # fmt: skip
            if after is not None:
                values.update(after_value=after[0], after_id=after[1])
        tail = column is None and q.max_memory is None  # with the filter none of the rest can match
    else:  # by memory at another context: no index holds the order, every match is sorted
        plan = await planned(session, q, SCAN, settings)
        values = {**statements.params(plan.where), **limit, "memory_context": memory_context}
        where = None if after is None else after[0] is not None
        statement = statements.memory_page(plan, descending, after=where, sqlite=sqlite)
        if after is not None:
            values.update(after_value=after[0], after_id=after[1])
    if not sqlite:
        await run(session, statements.CUSTOM_PLANS)
    rows = list((await run(session, statement, values)).all()) if statement is not None else []
    if tail and len(rows) <= q.limit:
        rest = {**statements.params(plan.where), "limit": q.limit + 1 - len(rows)}
        past = after is not None and after[0] is None
        if past and after is not None:
            rest["after_id"] = after[1]
        rows += (await run(session, statements.without_estimate(plan, descending, after=past, sqlite=sqlite), rest)).all()
    next_cursor = None
    if len(rows) > q.limit:
        last = rows[q.limit - 1]
        next_cursor = encode_cursor(sort, last.sort_value, last.id)
    total = None
    if with_total:
        total = (await run(session, statements.total(plan.where, sqlite=sqlite), statements.params(plan.where))).scalar_one()
    return SearchPage(rows[: q.limit], next_cursor, total, memory_context)


__all__ = ["EVERY", "PAGE", "SCAN", "answer", "family_of", "planned", "prepared", "search"]
