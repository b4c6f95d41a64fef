"""Lineage: where edges come from, and ancestors / descendants through a recursive CTE.

Edges point from a child repo (a row) to a parent repo id (a string: the parent may not be
in the catalog yet). Walks are bounded by a depth limit, which also makes them safe on
cycles (a -> b -> a simply stops at the limit; rows are deduplicated afterwards).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import Any, NamedTuple

from sqlalchemy import BindParameter, Select, bindparam, exists, literal, or_, select
from sqlalchemy.ext.asyncio import AsyncSession

from registry.catalog.models import LINEAGE_RELATIONS, LINEAGE_SOURCES, LineageEdge, Repo
from registry.catalog.snapshot import LineageRecord, RepoSnapshot

MAX_DEPTH = 10
__all__ = [
    "LINEAGE_RELATIONS",
    "LINEAGE_SOURCES",
    "MAX_DEPTH",
    "EdgeView",
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
    for e in edges:
        if e.parent_repo_id != snapshot.repo_id and e not in seen:
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


def _walk_cte(repo_id: str | BindParameter[Any], max_depth: int | BindParameter[Any], down: bool) -> Select[Any]:
    """(edge id, child, parent, relation, source, depth) of every edge reachable from repo_id.

    Walks down (towards children) or up, one index lookup per step thanks to the edge's copy
    of the child's repo id. UNION drops repeated rows and the depth bound ends cycles.
    """
    e = LineageEdge
    start_col = e.parent_repo_id if down else e.child_repo_id
    columns = (e.id.label("edge_id"), e.child_repo_id.label("child"), e.parent_repo_id.label("parent"),
               e.relation.label("relation"), e.source.label("source"))  # fmt: skip
    base = (
        select(*columns, literal(1).label("depth"))
        .where(start_col == repo_id)
        .cte("descendants" if down else "ancestors", recursive=True)
    )
    follow = base.c.child if down else base.c.parent
    step = select(*columns, base.c.depth + 1).join(base, start_col == follow).where(base.c.depth < max_depth)
    cte = base.union(step)
    return select(cte.c.edge_id, cte.c.child, cte.c.parent, cte.c.relation, cte.c.source, cte.c.depth)


def descendants_cte(repo_id: str, max_depth: int = MAX_DEPTH) -> Select[Any]:
    return _walk_cte(repo_id, max_depth, down=True)


def ancestors_cte(repo_id: str, max_depth: int = MAX_DEPTH) -> Select[Any]:
    return _walk_cte(repo_id, max_depth, down=False)


@functools.cache
def _walk_statement(down: bool) -> Select[Any]:
    """The walk with its start and depth as bound parameters: built (and its cache key
    computed) once per direction instead of on every request."""
    edges = _walk_cte(bindparam("start"), bindparam("max_depth"), down).subquery()
    # The child of an edge is always a catalog row; the parent may be a repo never indexed.
    parent_known = exists().where(Repo.repo_id == edges.c.parent)
    return select(edges, parent_known)


async def _walk(session: AsyncSession, repo_id: str, max_depth: int, down: bool) -> list[EdgeView]:
    params = {"start": repo_id, "max_depth": max(1, min(max_depth, MAX_DEPTH))}
    conn = await session.connection()  # Core: rows, not ORM results
    best: dict[int, EdgeView] = {}
    # A cycle or a diamond reaches an edge at several depths: keep the shallowest.
    for edge_id, child, parent_id, relation, source, depth, known in await conn.execute(_walk_statement(down), params):
        if edge_id not in best or depth < best[edge_id].depth:
            best[edge_id] = EdgeView(child, parent_id, relation, source, depth, True, bool(known))
    return sorted(best.values(), key=lambda v: (v.depth, v.child, v.parent, v.relation, v.source))


async def descendants(session: AsyncSession, repo_id: str, max_depth: int = MAX_DEPTH) -> list[EdgeView]:
    return await _walk(session, repo_id, max_depth, down=True)


async def ancestors(session: AsyncSession, repo_id: str, max_depth: int = MAX_DEPTH) -> list[EdgeView]:
    return await _walk(session, repo_id, max_depth, down=False)


@functools.cache
def _neighbours_statement() -> Select[str, str, str, str, bool]:
    e = LineageEdge
    parent_known = exists().where(Repo.repo_id == e.parent_repo_id)
    repo: BindParameter[str] = bindparam("repo")
    stmt = select(e.child_repo_id, e.parent_repo_id, e.relation, e.source, parent_known).where(
        or_(e.child_repo_id == repo, e.parent_repo_id == repo)
    )
    return stmt


async def neighbours(session: AsyncSession, repo_id: str) -> tuple[list[EdgeView], list[EdgeView]]:
    """(parents, children): what `ancestors` and `descendants` return at depth 1, in one
    query and without recursion (a repo page shows both)."""
    parents: list[EdgeView] = []
    children: list[EdgeView] = []
    rows = await (await session.connection()).execute(_neighbours_statement(), {"repo": repo_id})
    for child, parent, relation, source, known in rows:
        view = EdgeView(child, parent, relation, source, 1, True, bool(known))
        if child == repo_id:
            parents.append(view)
        if parent == repo_id:
            children.append(view)
    parents.sort(key=_order)
    children.sort(key=_order)
    return parents, children


def _order(v: EdgeView) -> tuple[int, str, str, str, str]:
    return (v.depth, v.child, v.parent, v.relation, v.source)
