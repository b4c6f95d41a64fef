"""The model tree in bounded layers, for a page that draws it: the repos at each distance
from a focus repo, the first `width` of them by key, how many more there are, and the edges
between the repos drawn.

`lineage.ancestors`/`descendants` list edges, shallowest first, up to a total; on a base
model with thousands of descendants that total is spent on its first layer. Here each layer
costs a few statements bounded by `width` (its first repos, their edges, and a count only
when the layer is full), whatever the family's size, and the rest of a layer is paged by key
(`rest`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, NamedTuple

from sqlalchemy import Select, bindparam, func, select

from registry.catalog.models import LineageEdge, Repo, repo_key
from registry.catalog.readpath import CatalogSession

# Most repos a page of a layer's rest lists.
REST_PAGE = 100


class TreeRepo(NamedTuple):
    key: str
    repo_id: str  # as the catalog spells it; a repo outside the catalog as an edge spells it
    in_catalog: bool


class TreeEdge(NamedTuple):
    child: str  # keys
    parent: str
    relation: str
    source: str


@dataclass(frozen=True)
class TreeLayer:
    repos: list[TreeRepo]
    edges: list[TreeEdge]  # from the repos of the layer nearer the focus to these
    more: int  # repos of this layer beyond `repos`


def _columns(down: bool) -> tuple[Any, Any, Any]:
    """(the near end's key, the far end's key, the far end's spelling) of an edge."""
    e = LineageEdge
    return (
        (e.parent_key, e.child_key, e.child_repo_id)
        if down
        else (e.child_key, e.parent_key, e.parent_repo_id)
    )


@functools.cache
def _page_statement(down: bool) -> Select[Any]:
    """The far ends of the edges leaving `near` (keys) that are not in `seen`, by key, after
    `after`, at most `n`; each with the smallest spelling its edges use."""
    near, far, spelling = _columns(down)
    return (
        select(far, func.min(spelling))
        .where(
            near.in_(bindparam("near", expanding=True)),
            far.not_in(bindparam("seen", expanding=True)),
            far > bindparam("after"),
        )
        .group_by(far)
        .order_by(far)
        .limit(bindparam("n"))
    )


@functools.cache
def _count_statement(down: bool) -> Select[Any]:
    near, far, _ = _columns(down)
    return select(func.count(func.distinct(far))).where(
        near.in_(bindparam("near", expanding=True)), far.not_in(bindparam("seen", expanding=True))
    )


@functools.cache
def _edges_statement(down: bool) -> Select[str, str, str, str]:
    near, far, _ = _columns(down)
    e = LineageEdge
    return (
        select(e.child_key, e.parent_key, e.relation, e.source)
        .where(near.in_(bindparam("near", expanding=True)), far.in_(bindparam("far", expanding=True)))
        .order_by(e.child_key, e.parent_key, e.relation, e.source)
    )


@functools.cache
def _known_statement() -> Select[str, str]:
    return (
        select(Repo.repo_key, Repo.repo_id)
        .where(Repo.repo_key.in_(bindparam("keys", expanding=True)))
        .order_by(Repo.id)
    )


async def _spellings(session: CatalogSession, keys: list[str]) -> dict[str, str]:
    """The catalog's spelling of those of `keys` it has (the first indexed of a key twice)."""
    found: dict[str, str] = {}
    if keys:
        conn = await session.connection()
        for key, name in await conn.execute(_known_statement(), {"keys": keys}):
            found.setdefault(key, name)
    return found


async def _far_page(session: CatalogSession, down: bool, near: list[str], seen: set[str], after: str,
                    n: int) -> list[tuple[str, str]]:  # fmt: skip
    conn = await session.connection()
    params = {"near": near, "seen": sorted(seen), "after": after, "n": n}
    return [(str(k), str(s)) for k, s in await conn.execute(_page_statement(down), params)]


async def _repos(session: CatalogSession, down: bool, page: list[tuple[str, str]]) -> list[TreeRepo]:
    if down:  # a child is always a catalog row
        return [TreeRepo(key, name, True) for key, name in page]
    known = await _spellings(session, [key for key, _ in page])
    return [TreeRepo(key, known.get(key, name), key in known) for key, name in page]


async def walk(session: CatalogSession, repo_id: str, down: bool, depth: int, width: int) -> list[TreeLayer]:
    """Up to `depth` layers from `repo_id`, nearest first, each of at most `width` repos.
    A layer follows the edges of the repos drawn in the one before it; a repo is drawn once,
    in the layer nearest the focus. Stops at the first empty layer."""
    seen = {repo_key(repo_id)}
    frontier = [repo_key(repo_id)]
    layers: list[TreeLayer] = []
    conn = await session.connection()
    for _ in range(depth):
        page = await _far_page(session, down, frontier, seen, "", width)
        if not page:
            break
        more = 0
        if len(page) == width:
            total = (
                await conn.execute(_count_statement(down), {"near": frontier, "seen": sorted(seen)})
            ).scalar()
            more = int(total or 0) - width
        keys = [key for key, _ in page]
        rows = await conn.execute(_edges_statement(down), {"near": frontier, "far": keys})
        edges = [TreeEdge(*(str(v) for v in row)) for row in rows]
        layers.append(TreeLayer(await _repos(session, down, page), edges, more))
        seen.update(keys)
        frontier = keys
    return layers


async def rest(session: CatalogSession, repo_id: str, down: bool, level: int, width: int, after: str,
               limit: int = REST_PAGE) -> tuple[list[TreeRepo], str | None]:  # fmt: skip
    """Layer `level` (from 1) of the walk `walk(..., width)` draws, beyond the repos it draws:
    a page of at most `limit` repos by key after `after` (the last drawn one for the first
    page), and the key to ask the next page after (None on the last)."""
    seen = {repo_key(repo_id)}
    frontier = [repo_key(repo_id)]
    for _ in range(level - 1):
        page = await _far_page(session, down, frontier, seen, "", width)
        if not page:
            return [], None
        frontier = [key for key, _ in page]
        seen.update(frontier)
    page = await _far_page(session, down, frontier, seen, after, limit + 1)
    repos = await _repos(session, down, page[:limit])
    return repos, (repos[-1].key if len(page) > limit else None)


__all__ = ["REST_PAGE", "TreeEdge", "TreeLayer", "TreeRepo", "rest", "walk"]
