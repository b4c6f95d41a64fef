"""Lineage: where edges come from, and ancestors / descendants through a recursive CTE.

Edges point from a child repo (a row) to a parent repo id (a string: the parent may not be
in the catalog yet). Walks are bounded by a depth limit and by a number of edges, and
expand each repo once, which makes them safe on cycles.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import Any, NamedTuple

from sqlalchemy import BindParameter, Select, String, any_, bindparam, or_, select
from sqlalchemy.dialects import postgresql
from sqlalchemy.ext.asyncio import AsyncSession

from registry.catalog.models import LINEAGE_RELATIONS, LINEAGE_SOURCES, LineageEdge, Repo, repo_key
from registry.catalog.snapshot import LineageRecord, RepoSnapshot

MAX_DEPTH = 10
# Most edges one walk returns: a densely linked family (a hostile hub can make thousands of
# repos claim each other as base models) would otherwise answer with every edge of it.
MAX_EDGES = 1000
__all__ = [
    "LINEAGE_RELATIONS",
    "LINEAGE_SOURCES",
    "MAX_DEPTH",
    "MAX_EDGES",
    "EdgeView",
    "Walk",
    "ancestors",
    "derive_edges",
    "descendants",
    "neighbours",
]
_TAG_PREFIX = "base_model:"


def _relation(value: str | None) -> str:
    value = (value or "").strip().lower()
    return value if value in LINEAGE_RELATIONS else "unknown"


def _valid_repo_id(value: str) -> bool:
    parts = value.split("/")
    return len(parts) == 2 and all(parts) and len(value) <= 300


def edges_from_tags(tags: Iterable[str]) -> list[LineageRecord]:
    """Hub tags `base_model:org/name` and `base_model:<relation>:org/name`."""
    out = []
    for tag in tags:
        if not tag.startswith(_TAG_PREFIX):
            continue
        rest = tag[len(_TAG_PREFIX) :]
        relation, _, parent = rest.rpartition(":")
        if _valid_repo_id(parent):
            out.append(LineageRecord(parent, _relation(relation), "tags"))
    return out


def derive_edges(snapshot: RepoSnapshot) -> list[LineageRecord]:
    edges = [
        LineageRecord(parent, _relation(snapshot.card_base_model_relation), "card")
        for parent in snapshot.card_base_model
        if _valid_repo_id(parent)
    ]
    edges += edges_from_tags(snapshot.tags)
    for artifact in snapshot.artifacts:
        if artifact.facts is None:
            continue
        # GGUF base_model keys name an ancestor but not how it relates to this repo.
        edges += [
            LineageRecord(b.repo_id, "unknown", "gguf")
            for b in artifact.facts.base_models
            if b.repo_id and _valid_repo_id(b.repo_id)
        ]
    seen: set[LineageRecord] = set()
    unique = []
    own = repo_key(snapshot.repo_id)
    for e in edges:
        if repo_key(e.parent_repo_id) != own and e not in seen:
            seen.add(e)
            unique.append(e)
    return unique


class EdgeView(NamedTuple):
    """One edge of a walk. A named tuple: a popular base model has thousands of them."""

    child: str
    parent: str
    relation: str
    source: str
    depth: int
    child_in_catalog: bool = True
    parent_in_catalog: bool = True


def _parent_spelling() -> Any:
    """The parent as the catalog spells it, NULL when it is not in the catalog (the first
    indexed spelling when a hub's rename left two)."""
    return (
        select(Repo.repo_id)
        .where(Repo.repo_key == LineageEdge.parent_key)
        .order_by(Repo.id)
        .limit(1)
        .scalar_subquery()
    )


@functools.cache
def _level_statement(down: bool, dialect: str) -> Select[Any]:
    """The edges of one step of a walk: those leaving the frontier's repos (their keys), in
    the order a walk reports them, at most `n` (the frontier and the limit are bound
    parameters).

    On PostgreSQL the frontier is one array parameter, so every step of every walk is the
    same statement, prepared once per connection; an expanding IN list is a new statement
    text for every frontier size, and asyncpg prepared each one anew. bench.search's depth-5
    walk of its popular family (30,000 repos; 1,000 of its 3,992 edges): 175 ms with the
    list, 6.2 with the array, where the recursive CTE this replaced took 29 for all 3,992
    (this walk, uncapped: 18.5). SQLite has no arrays and takes the list: 4.0 ms capped,
    19 uncapped, the CTE 28."""
    e = LineageEdge
    start_col = e.parent_key if down else e.child_key
    if dialect == "postgresql":
        in_frontier = start_col == any_(bindparam("frontier", type_=postgresql.ARRAY(String)))
    else:
        in_frontier = start_col.in_(bindparam("frontier", expanding=True))
    # The child of an edge is always a catalog row; the parent may be a repo never indexed.
    return (
        select(e.child_repo_id, e.parent_repo_id, e.relation, e.source, _parent_spelling(), e.child_key,
               e.parent_key)
        .where(in_frontier)
        .order_by(e.child_key, e.parent_key, e.relation, e.source)
        .limit(bindparam("n"))
    )  # fmt: skip


class Walk(NamedTuple):
    """The edges of a walk, shallowest first, and whether MAX_EDGES cut it short."""

    edges: list[EdgeView]
    truncated: bool


async def _walk(session: AsyncSession, repo_id: str, max_depth: int, down: bool, max_edges: int) -> Walk:
    """Breadth first, one query per depth, each repo expanded once.

    An edge's depth is one more than the distance of the repo it leaves from repo_id, so a
    cycle or a diamond reports each edge once, at its shallowest. A recursive CTE over
    edges did the same but joined every edge reached at a depth with every edge of its
    repo, keeping duplicates until the end: on a densely linked family of 150 repos its
    work grew with edges x degree x depth. Here each edge is read at most once and the
    walk stops as soon as `max_edges` are found, so the database reads at most the edges
    of the repos it reached, whatever the graph."""
    conn = await session.connection()  # Core: rows, not ORM results
    start = repo_key(repo_id)
    seen = {start}
    frontier = [start]
    edges: list[EdgeView] = []
    for depth in range(1, max(1, min(max_depth, MAX_DEPTH)) + 1):
        room = max_edges - len(edges)
        params = {"frontier": frontier, "n": room + 1}
        rows = (await conn.execute(_level_statement(down, conn.dialect.name), params)).all()
        edges += [_view(row, depth) for row in rows[:room]]
        if len(rows) > room:
            return Walk(edges, True)
        reached = sorted({(row.child_key if down else row.parent_key) for row in rows} - seen)
        if not reached:
            break
        seen.update(reached)
        frontier = reached
    return Walk(edges, False)


def _view(row: Any, depth: int) -> EdgeView:
    """An edge row of a walk; its parent as the catalog spells it when the catalog has it."""
    child, parent, relation, source, catalog_spelling = row[:5]
    known = catalog_spelling is not None
    return EdgeView(child, catalog_spelling if known else parent, relation, source, depth, True, known)


async def descendants(
    session: AsyncSession, repo_id: str, max_depth: int = MAX_DEPTH, max_edges: int = MAX_EDGES
) -> Walk:
    return await _walk(session, repo_id, max_depth, True, max_edges)


async def ancestors(
    session: AsyncSession, repo_id: str, max_depth: int = MAX_DEPTH, max_edges: int = MAX_EDGES
) -> Walk:
    return await _walk(session, repo_id, max_depth, False, max_edges)


@functools.cache
def _neighbours_statement() -> Select[Any]:
    e = LineageEdge
    repo: BindParameter[str] = bindparam("repo")
    return select(e.child_repo_id, e.parent_repo_id, e.relation, e.source, _parent_spelling(), e.child_key,
                  e.parent_key).where(or_(e.child_key == repo, e.parent_key == repo))  # fmt: skip


async def neighbours(session: AsyncSession, repo_id: str) -> tuple[list[EdgeView], list[EdgeView]]:
    """(parents, children): what `ancestors` and `descendants` return at depth 1, in one
    query and without recursion (a repo page shows both)."""
    parents: list[EdgeView] = []
    children: list[EdgeView] = []
    key = repo_key(repo_id)
    rows = await (await session.connection()).execute(_neighbours_statement(), {"repo": key})
    for row in rows:
        view = _view(row, 1)
        if row.child_key == key:
            parents.append(view)
        if row.parent_key == key:
            children.append(view)
    parents.sort(key=_order)
    children.sort(key=_order)
    return parents, children


def _order(v: EdgeView) -> tuple[int, str, str, str, str]:
    return (v.depth, repo_key(v.child), repo_key(v.parent), v.relation, v.source)  # as walks order them
