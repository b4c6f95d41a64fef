"""Lineage: where edges come from, and walks to ancestors / descendants, one query a step.

Edges point from a child repo (a row) to a parent repo id (a string: the parent may not be
in the catalog yet). Walks are bounded by a depth limit and by a number of edges, and
expand each repo once, which makes them safe on cycles.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable
from typing import Any, NamedTuple

from sqlalchemy import BindParameter, Select, String, any_, bindparam, func, or_, select
from sqlalchemy.dialects import postgresql

from registry.catalog.models import LINEAGE_RELATIONS, LINEAGE_SOURCES, LineageEdge, Repo, RepoMove, repo_key
from registry.catalog.readpath import CatalogSession
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


def _in_keys(column: Any, dialect: str) -> Any:
    """`column` is one of the bound `keys` (`_keys`), bound as one parameter so that every
    call is the same statement: on PostgreSQL an array, prepared once per connection (an
    expanding IN list is a new statement text for every number of keys, and asyncpg
    prepared each one anew); on SQLite a JSON array read by `json_each` (rendering an
    expanding list costs more than reading the array, and SQLite plans both alike)."""
    if dialect == "postgresql":
        return column == any_(bindparam("keys", type_=postgresql.ARRAY(String)))
    keys = func.json_each(bindparam("keys", type_=String)).table_valued("value")
    return column.in_(select(keys.c.value))


def _keys(keys: list[str], dialect: str) -> list[str] | str:
    """The value of the `keys` parameter of `_in_keys`."""
    return keys if dialect == "postgresql" else json.dumps(keys, separators=(",", ":"))


@functools.cache
def _level_statement(down: bool, dialect: str) -> Select[str, str, str, str, str, str]:
    """The edges of one step of a walk: those leaving the frontier's repos (their keys,
    bound as `keys`), in the order a walk reports them, at most `n`.

    A step a level, each capped, rather than one recursive CTE: a walk stops once it has
    the edges it reports instead of reading the whole family (figures in
    docs/performance.md). The parents' spellings are looked up apart
    (`_spellings_statement`)."""
    e = LineageEdge
    start_col = e.parent_key if down else e.child_key
    # The child of an edge is always a catalog row; the parent may be a repo never indexed.
    return (
        select(e.child_repo_id, e.parent_repo_id, e.relation, e.source, e.child_key, e.parent_key)
        .where(_in_keys(start_col, dialect))
        .order_by(e.child_key, e.parent_key, e.relation, e.source)
        .limit(bindparam("n"))
    )


@functools.cache
def _spellings_statement(dialect: str) -> Select[str, str]:
    """(key, spelling) of the catalog's repos of the bound `keys`, the first indexed first.

    Once per walk, for the parents of all its edges (the steps follow keys only): as a
    subquery of each step's statement it was one index search per edge, most of a large
    step's time, and looked up once a step it would be a round trip a step (figures in
    docs/performance.md)."""
    return select(Repo.repo_key, Repo.repo_id).where(_in_keys(Repo.repo_key, dialect)).order_by(Repo.id)


class Walk(NamedTuple):
    """The edges of a walk, shallowest first, and whether MAX_EDGES cut it short."""

    edges: list[EdgeView]
    truncated: bool


async def _walk(session: CatalogSession, repo_id: str, max_depth: int, down: bool, max_edges: int) -> Walk:
    """Breadth first, one query per depth, each repo expanded once.

    An edge's depth is one more than the distance of the repo it leaves from repo_id, so a
    cycle or a diamond reports each edge once, at its shallowest. A recursive CTE over
    edges did the same but joined every edge reached at a depth with every edge of its
    repo, keeping duplicates until the end: on a densely linked family of 150 repos its
    work grew with edges x degree x depth. Here each edge is read at most once and the
    walk stops as soon as `max_edges` are found, so the database reads at most the edges
    of the repos it reached, whatever the graph."""
    conn = await session.connection()  # Core: rows, not ORM results
    dialect = conn.dialect.name
    start = repo_key(repo_id)
    seen = {start}
    frontier = [start]
    # (depth, plain tuple (child, parent, relation, source, child key, parent key)): a Row's
    # attributes cost more than the rest of a step's Python
    found: list[tuple[int, tuple[Any, ...]]] = []
    truncated = False
    for depth in range(1, max(1, min(max_depth, MAX_DEPTH)) + 1):
        room = max_edges - len(found)
        params = {"keys": _keys(frontier, dialect), "n": room + 1}
        rows = [tuple(row) for row in await conn.execute(_level_statement(down, dialect), params)]
        found.extend((depth, row) for row in rows[:room])
        if len(rows) > room:
            truncated = True
            break
        reached = sorted({row[4] if down else row[5] for row in rows} - seen)
        if not reached:
            break
        seen.update(reached)
        frontier = reached
    # The parents' spellings, once for the whole walk: the steps need keys only.
    spellings: dict[str, str] = {}  # parent key -> the catalog's spelling
    if parents := sorted({row[5] for _, row in found}):
        for key, name in await conn.execute(_spellings_statement(dialect), {"keys": _keys(parents, dialect)}):
            spellings.setdefault(key, name)
    return Walk([_view(row, depth, spellings.get(row[5])) for depth, row in found], truncated)


def _view(row: Any, depth: int, catalog_spelling: str | None) -> EdgeView:
    """An edge row; its parent as the catalog spells it when the catalog has it."""
    child, parent, relation, source = row[:4]
    known = catalog_spelling is not None
    return EdgeView(child, parent if catalog_spelling is None else catalog_spelling, relation, source, depth, True,
                    known)  # fmt: skip


async def descendants(
    session: CatalogSession, repo_id: str, max_depth: int = MAX_DEPTH, max_edges: int = MAX_EDGES
) -> Walk:
    return await _walk(session, repo_id, max_depth, True, max_edges)


async def ancestors(
    session: CatalogSession, repo_id: str, max_depth: int = MAX_DEPTH, max_edges: int = MAX_EDGES
) -> Walk:
    return await _walk(session, repo_id, max_depth, False, max_edges)


@functools.cache
def _neighbours_statement() -> Select[Any]:
    e = LineageEdge
    repo: BindParameter[str] = bindparam("repo")
    return select(e.child_repo_id, e.parent_repo_id, e.relation, e.source, e.child_key, e.parent_key,
                  _parent_spelling()).where(or_(e.child_key == repo, e.parent_key == repo))  # fmt: skip


async def neighbours(session: CatalogSession, repo_id: str) -> tuple[list[EdgeView], list[EdgeView]]:
    """(parents, children): what `ancestors` and `descendants` return at depth 1, in one
    query and without recursion (a repo page shows both)."""
    parents: list[EdgeView] = []
    children: list[EdgeView] = []
    key = repo_key(repo_id)
    rows = await (await session.connection()).execute(_neighbours_statement(), {"repo": key})
    for row in rows:
        view = _view(row, 1, row[6])
        if row.child_key == key:
            parents.append(view)
        if row.parent_key == key:
            children.append(view)
    parents.sort(key=_order)
    children.sort(key=_order)
    return parents, children


def _order(v: EdgeView) -> tuple[int, str, str, str, str]:
    return (v.depth, repo_key(v.child), repo_key(v.parent), v.relation, v.source)  # as walks order them


@functools.cache
def _moved_to_statement() -> Select[str]:
    return (
        select(Repo.repo_id)
        .join(RepoMove, RepoMove.repo_pk == Repo.id)
        .where(RepoMove.old_key == bindparam("key", type_=String))
    )


async def moved_to(session: CatalogSession, repo_id: str) -> str | None:
    """The id, as the catalog spells it, of the repo that the hub answers for `repo_id` as
    (a move a crawl saw: `RepoMove`); None when the hub has not moved `repo_id`."""
    conn = await session.connection()
    return (await conn.execute(_moved_to_statement(), {"key": repo_key(repo_id)})).scalar_one_or_none()


@functools.cache
def _repo_by_key_statement() -> Select[int, str]:
    return select(Repo.id, Repo.repo_id).where(Repo.repo_key == bindparam("key", type_=String)).order_by(Repo.id).limit(1)


async def catalog_repo(session: CatalogSession, repo_id: str) -> tuple[int, str] | None:
    """(primary key, id as the catalog spells it) of the repo `repo_id` names in any ASCII
    case (the first indexed row of a key a hub's rename left twice); None when the catalog
    has no such repo."""
    conn = await session.connection()
    row = (await conn.execute(_repo_by_key_statement(), {"key": repo_key(repo_id)})).first()
    return None if row is None else (int(row[0]), str(row[1]))


def tree_lines(root: str, edges: Iterable[EdgeView], down: bool) -> list[str]:
    """A walk's edges drawn as an indented tree under `root` (`tree`-style, ASCII): each repo
    with its relations to the line above, "relation (source, ...)" (several when sources
    disagree); a repo met again is marked "(above)" and not expanded twice; a parent the
    catalog does not have is marked "(not in catalog)"."""
    below: dict[str, dict[str, list[EdgeView]]] = {}  # key -> next key -> edges between them
    names: dict[str, str] = {repo_key(root): root}
    for e in edges:
        near, far = (e.parent, e.child) if down else (e.child, e.parent)
        names.setdefault(repo_key(far), far)
        below.setdefault(repo_key(near), {}).setdefault(repo_key(far), []).append(e)
    lines = [root]
    expanded = {repo_key(root)}

    def draw(key: str, indent: str) -> None:
        nexts = sorted(below.get(key, {}).items())
        for i, (far, between) in enumerate(nexts):
            last = i == len(nexts) - 1
            relations: dict[str, list[str]] = {}
            for e in between:
                relations.setdefault(e.relation, []).append(e.source)
            label = ", ".join(f"{r} ({', '.join(sorted(s))})" for r, s in sorted(relations.items()))
            marks = "" if down or all(e.parent_in_catalog for e in between) else "  (not in catalog)"
            again = far in expanded
            lines.append(f"{indent}{'`-- ' if last else '|-- '}{names[far]}  {label}{marks}"
                         f"{'  (above)' if again else ''}")  # fmt: skip
            if not again:
                expanded.add(far)
                draw(far, indent + ("    " if last else "|   "))

    draw(repo_key(root), "")
    return lines


@functools.cache
def _moved_from_statement() -> Select[str]:
    return (
        select(RepoMove.old_repo_id)
        .where(RepoMove.repo_pk == bindparam("repo_pk"))
        .order_by(RepoMove.moved_at, RepoMove.old_key)
    )


async def moved_from(session: CatalogSession, repo_pk: int) -> list[str]:
    """The ids the hub has moved to the repo `repo_pk`, as the catalog spelled them, oldest
    move first."""
    conn = await session.connection()
    return list((await conn.execute(_moved_from_statement(), {"repo_pk": repo_pk})).scalars())
