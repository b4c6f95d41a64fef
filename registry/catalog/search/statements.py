"""The search's statements, written from the planner's data: a `Where` becomes clauses with
every value a named bind parameter (`clauses`) and a parameter dictionary (`params`), and
each statement is a `shapes.Keyed` one whose key names its shape without its values
(`shape_of`), so that it is built and compiled once per shape and database.

The two walks over a `Where` (`params` on every request, `clauses` only for a new shape)
name the parameters alike: filter i is `f{i}` (a range's upper end `f{i}_hi`), term j `t{j}`.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from sqlalchemy import (
    BigInteger,
    ColumnElement,
    Float,
    Integer,
    Select,
    String,
    and_,
    any_,
    bindparam,
    column,
    exists,
    func,
    literal,
    literal_column,
    or_,
    select,
    table,
    text,
    true,
    tuple_,
    union_all,
)
from sqlalchemy.dialects import postgresql
from sqlalchemy.orm import aliased

from registry.catalog.lineage import MAX_DEPTH
from registry.catalog.models import Artifact, ArtifactFinding, LineageEdge, QuantMix, Repo, RepoMove
from registry.catalog.search.hits import HIT_COLUMNS
from registry.catalog.search.memory import memory_needed, no_estimate
from registry.catalog.search.planner import Plan, Where
from registry.catalog.search.query import holding
from registry.catalog.search_index import FTS_TABLE, MIN_TRIGRAM, fts_match, like_pattern
from registry.catalog.shapes import Keyed
from registry.gguf.facts_model import MODALITIES
from registry.gguf.vocab import MAX_SIZE_DIFFERENCE
from registry.safety.capabilities import CAPABILITIES

_A = Artifact.__table__.c
# Another artifact of the same repo: its projector (`_has_projector`).
_PROJECTOR = aliased(Artifact, name="projector")
CATALOG_SIZE = select(func.max(Artifact.id))
# PostgreSQL: the search's statements are planned with their parameters' values for the
# rest of the transaction. The driver prepares every statement, and from its sixth run the
# server may keep one generic plan made without the values; the catalog's are skewed (text
# patterns, a license that 40% or 0.01% of the files have), so a plan made for one value
# can be far from right for another. Not for the lineage walks, whose generic plan serves
# every start.
CUSTOM_PLANS = select(func.set_config("plan_cache_mode", "force_custom_plan", True))
DRAFT_TARGET = select(Artifact.vocab_sha256, Artifact.vocab_size, Artifact.parameter_count).where(
    Artifact.id == bindparam("artifact_id")
)


def unindexed(name: str) -> ColumnElement[Any]:
    """`+artifacts.name`: the same value, but SQLite will not use an index for it."""
    return literal_column(f"+{Artifact.__tablename__}.{name}", _A[name].type)


def _column(name: str, plain: bool = True) -> ColumnElement[Any]:
    return _A[name] if plain else unindexed(name)


def shape_of(where: Where) -> Hashable:
    """What makes two Wheres one statement: everything but the values."""
    family = where.family
    return (
        tuple((f.column, f.op, i in where.unindexed, f.value if f.op == "holding" else None)
              for i, f in enumerate(where.filters)),
        len(where.terms), bool(where.fts), where.tensor_type is not None, where.with_projector, where.modality,
        where.listed_projectors, None if family is None else family.form, where.family_walked,
        where.memory is not None, where.draft_vocab is not None, where.term_ids is not None, where.other_kinds,
    )  # fmt: skip


def params(where: Where) -> dict[str, Any]:
    """The values of a Where's parameters (see the module doc)."""
    out: dict[str, Any] = {}
    for i, f in enumerate(where.filters):
        if f.op == "prefix":
            out[f"f{i}"], out[f"f{i}_hi"] = f"{f.value}/", f"{f.value}0"
        elif f.op == "below":
            out[f"f{i}"] = int(f.value) - 1  # type: ignore[call-overload]
        elif f.op != "holding":
            out[f"f{i}"] = f.value
    for j, term in enumerate(where.terms):
        out[f"t{j}"] = like_pattern(term)
    if where.fts:
        out["fts"] = fts_match(where.fts)
    if where.tensor_type is not None:
        out["tensor_type"] = where.tensor_type
    if (family := where.family) is not None:
        if family.ids is None:
            out["family_root"] = family.root
        else:
            out["family"] = family.ids if isinstance(family.ids, str) else list(family.ids)
    if where.memory is not None:
        out["memory_context"], out["memory_budget"] = where.memory
    if where.draft_vocab is not None:
        low, high = where.draft_vocab - MAX_SIZE_DIFFERENCE, where.draft_vocab + MAX_SIZE_DIFFERENCE
        out["vocab_low"], out["vocab_high"] = low, high
    if where.term_ids is not None:
        out["term_ids"] = where.term_ids
    return out


def clauses(where: Where, *, sqlite: bool) -> list[ColumnElement[bool]]:
    """The Where's clauses, every value a bind parameter named as `params` names it."""
    out: list[ColumnElement[bool]] = []
    for i, f in enumerate(where.filters):
        c = _column(f.column, i not in where.unindexed)
        value = bindparam(f"f{i}", type_=_A[f.column].type)
        if f.op == "=":
            out.append(c == value)
        elif f.op == ">=":
            out.append(c >= value)
        elif f.op == "<=":
            out.append(c <= (bindparam(f"f{i}", type_=Float) if f.column == "memory_at_default" else value))
        elif f.op == "prefix":
            out.append(and_(c >= value, c < bindparam(f"f{i}_hi", type_=String)))
        elif f.op == "repo":
            out.append(c.in_(select(Repo.id).where(Repo.repo_key == bindparam(f"f{i}", type_=String))))
        elif f.op == "holding":
            # the masks are part of the shape (the key holds the mask asked for), bound with
            # the column's type, as the planner's statistics know it
            masks = holding(int(f.value), len(CAPABILITIES))  # type: ignore[call-overload]
            out.append(c.in_([literal(m, _A[f.column].type) for m in masks]))
        elif f.op == "below":
            out.append(c.between(literal(1, BigInteger), value))
        elif f.op == "finding":
            # a seek into (code, artifact_id) for each code asked for
            code = bindparam(f"f{i}", type_=String)
            out.append(c.in_(select(ArtifactFinding.artifact_id).where(ArtifactFinding.code == code)))
        else:
            raise ValueError(f"unknown filter op {f.op!r}")
    if where.memory is not None:
        needed = memory_needed(bindparam("memory_context", type_=BigInteger))
        out.append(needed <= bindparam("memory_budget", type_=Float))
    if where.draft_vocab is not None:
        out.append(Artifact.vocab_size.between(bindparam("vocab_low"), bindparam("vocab_high")))
    if where.tensor_type is not None:
        out.append(exists().where(QuantMix.artifact_id == Artifact.id,
                                  QuantMix.tensor_type == bindparam("tensor_type", type_=String)))  # fmt: skip
    if where.with_projector is not None:
        has = _has_projector(None, listed=where.listed_projectors)
        out.append(has if where.with_projector else ~has)
    if where.modality is not None:
        out.append(_has_projector(where.modality, listed=where.listed_projectors))
    if where.family is not None:
        out.append(_in_family(_column("repo_pk", not where.family_walked), where.family.form))
    if where.fts:
        out.append(Artifact.id.in_(_fts_rowids().scalar_subquery()))
    out += [term_like(j) for j in range(len(where.terms))]
    if where.term_ids is not None:
        out.append(Artifact.id.in_(_json_values("term_ids")))
    if where.other_kinds:
        out.append(_other_kinds(where, sqlite))
    return out


def _has_projector(modality: int | None, *, listed: bool) -> ColumnElement[bool]:
    """The artifact's repo holds an indexed projector (taking all of `modality`'s modalities):
    a seek per row, or (`listed`) against the list of such repos, made once per statement."""
    conditions = [_PROJECTOR.kind == "mmproj", _PROJECTOR.status == "indexed"]
    if modality is not None:
        masks = holding(modality, len(MODALITIES))
        conditions.append(_PROJECTOR.modalities.in_([literal(m, _A.modalities.type) for m in masks]))
    if listed:
        return Artifact.repo_pk.in_(select(_PROJECTOR.repo_pk).where(*conditions))
    return exists().where(_PROJECTOR.repo_pk == Artifact.repo_pk, *conditions)


def _in_family(repo_pk: ColumnElement[Any], form: str) -> ColumnElement[bool]:
    if form == "array":
        return repo_pk == any_(bindparam("family", type_=postgresql.ARRAY(BigInteger)))
    if form == "json":
        return repo_pk.in_(_json_values("family"))
    return repo_pk.in_(family_walk(bindparam("family_root", type_=String)))


def _json_values(name: str) -> Select[Any]:
    """SQLite: the values of the JSON array bound as `name`."""
    values = func.json_each(bindparam(name, type_=String)).table_valued("value")
    return select(values.c.value)


def family_walk(start: Any, max_depth: int = MAX_DEPTH) -> Select[Any]:
    """The primary keys of every repo below the repo keyed `start` in the lineage graph
    (depth-bounded: cycle-safe). An id the hub has moved starts at the repo it moved to,
    under whose key its children's edges are filed."""
    moved_to = (
        select(Repo.repo_key).join(RepoMove, RepoMove.repo_pk == Repo.id).where(RepoMove.old_key == start)
    ).scalar_subquery()
    base = (
        select(LineageEdge.child_pk.label("pk"), LineageEdge.child_key.label("name"), literal(1).label("depth"))
        .where(LineageEdge.parent_key == func.coalesce(moved_to, start))
        .cte("descendant_pks", recursive=True)
    )
    step = (
        select(LineageEdge.child_pk, LineageEdge.child_key, base.c.depth + 1)
        .join(base, LineageEdge.parent_key == base.c.name)
        .where(base.c.depth < max_depth)
    )
    walk = base.union(step)
    return select(walk.c.pk)


FAMILY_WALK = Keyed(("family walk", MAX_DEPTH), lambda: family_walk(bindparam("family_root", type_=String)))


def _other_kinds(where: Where, sqlite: bool) -> ColumnElement[bool]:
    """The artifacts of another kind than `model`, or of none (error rows): ranges of the
    kind's indexes, which `!=` would not use. On SQLite their ids come from seeks of the
    `(status, kind)` prefix of the more facets' covering index, one per side of `model`
    and one for NULL: left to choose, SQLite read every indexed artifact through the
    status's index for the few others, or scanned the table."""
    sides = (Artifact.kind < "model", Artifact.kind > "model", Artifact.kind.is_(None))
    if not sqlite:
        return or_(*sides)
    status = [
        Artifact.status == bindparam(f"f{i}", type_=String) for i, f in enumerate(where.filters)
        if f.column == "status" and f.op == "="
    ]  # fmt: skip
    return Artifact.id.in_(union_all(*(select(Artifact.id).where(*status, side) for side in sides)))


def term_like(j: int) -> ColumnElement[bool]:
    """Term j as a substring of the artifact's search text, checked row by row."""
    return Artifact.search_text.like(bindparam(f"t{j}", type_=String), escape="\\")


def _fts_rowids() -> Select[Any]:
    return (
        select(literal_column("rowid"))
        .select_from(text(FTS_TABLE))
        .where(text(f"{FTS_TABLE} MATCH :fts").bindparams(bindparam("fts", type_=String)))
    )


# Statements of the search itself.


def hits(sort_key: str) -> Select[Any]:
    """The hit columns and the sort value, joined to the repo."""
    stmt: Select[Any] = select(*HIT_COLUMNS, _A[sort_key].label("sort_value")).join(Repo, Repo.id == Artifact.repo_pk)
    return stmt


def page(plan: Plan, sort: str, descending: bool, *, after: bool, estimated: bool = False, sqlite: bool) -> Keyed:
    """A page by a column's order (parameters `limit`; with `after`, the cursor's
    `after_value` and `after_id`). `estimated`: the sort by memory at the default context,
    its artifacts with an estimate only."""

    def build() -> Select[Any]:
        where = clauses(plan.where, sqlite=sqlite)
        plain = not plan.sorted_matches
        key_col, id_col = _column(sort, plain), _column("id", plain)
        if estimated:
            where.append(_A.memory_at_default.is_not(None))
        if after:
            key = tuple_(key_col, id_col)
            bound = tuple_(bindparam("after_value", type_=_A[sort].type), bindparam("after_id", type_=BigInteger))
            where.append(key < bound if descending else key > bound)
        order = (key_col.desc(), id_col.desc()) if descending else (key_col.asc(), id_col.asc())
        return hits(sort).where(and_(true(), *where)).order_by(*order).limit(bindparam("limit", type_=Integer))

    return Keyed(("page", shape_of(plan.where), plan.sorted_matches, sort, descending, after, estimated), build)


def without_estimate(plan: Plan, descending: bool, *, after: bool, sqlite: bool) -> Keyed:
    """The matches without a memory estimate, by id (after `after_id`): the end of a sort by
    memory at the default context, in either direction. The index of `memory_at_default`
    holds them together, in id order."""

    def build() -> Select[Any]:
        id_col = _column("id", not plan.sorted_matches)
        where = [*clauses(plan.where, sqlite=sqlite), _A.memory_at_default.is_(None)]
        if after:
            bound = bindparam("after_id", type_=BigInteger)
            where.append(id_col < bound if descending else id_col > bound)
        order = id_col.desc() if descending else id_col.asc()
        return hits("memory_at_default").where(*where).order_by(order).limit(bindparam("limit", type_=Integer))

    return Keyed(("without estimate", shape_of(plan.where), plan.sorted_matches, descending, after), build)


def memory_page(plan: Plan, descending: bool, *, after: bool | None, sqlite: bool) -> Keyed:
    """A page of hits by the bytes they need at `memory_context` tokens (a double), then by
    id; artifacts without an estimate come last in either direction, by id. `after`: where
    the cursor is, among the estimates (True: `after_value` and `after_id`) or among those
    without one (False: `after_id`); None for a first page."""

    def build() -> Select[Any]:
        needed = memory_needed(bindparam("memory_context", type_=BigInteger))
        where = clauses(plan.where, sqlite=sqlite)
        if after is not None:
            bound_id = bindparam("after_id", type_=BigInteger)
            past_id = Artifact.id < bound_id if descending else Artifact.id > bound_id
            if not after:
                where += [no_estimate(), past_id]
            else:
                key, bound = tuple_(needed, Artifact.id), tuple_(bindparam("after_value", type_=Float), bound_id)
                # NULL never compares: the rows without an estimate are the OR's other side
                where.append(or_(key < bound if descending else key > bound, no_estimate()))
        direction = (lambda c: c.desc()) if descending else (lambda c: c.asc())
        # The page's ids first, from the artifacts alone, then their hits: sorting whole hits
        # (the repo joined and every hit column read for each match) took several times as
        # long. Ordered by the labels, so that the sum is computed once a row.
        last, value = no_estimate().label("no_estimate"), needed.label("sort_value")
        ids = (
            select(Artifact.id.label("id"), last, value)
            .where(and_(true(), *where))
            .order_by(last, direction(value), direction(Artifact.id))
            .limit(bindparam("limit", type_=Integer))
            .subquery("by_memory")
        )
        stmt: Select[Any] = (
            select(*HIT_COLUMNS, ids.c.sort_value)
            .select_from(ids)
            .join(Artifact, Artifact.id == ids.c.id)
            .join(Repo, Repo.id == Artifact.repo_pk)
            .order_by(ids.c.no_estimate, direction(ids.c.sort_value), direction(ids.c.id))
        )
        return stmt

    return Keyed(("memory page", shape_of(plan.where), descending, after), build)


def total(where: Where, *, sqlite: bool) -> Keyed:
    return Keyed(
        ("total", shape_of(where)),
        lambda: select(func.count()).select_from(Artifact).where(*clauses(where, sqlite=sqlite)),
    )


# Statements of the planner's probes.


def common(where: Where, *, sqlite: bool) -> Keyed:
    """How many artifacts match `where`, counted up to `probe_limit` index entries."""

    def build() -> Select[Any]:
        found = select(literal(1)).select_from(Artifact).where(and_(true(), *clauses(where, sqlite=sqlite)))
        return select(func.count()).select_from(found.limit(bindparam("probe_limit", type_=Integer)).subquery())

    return Keyed(("common", shape_of(where)), build)


COMMON_TEXT = Keyed(
    ("common text",),
    lambda: select(func.count()).select_from(_fts_rowids().limit(bindparam("probe_limit", type_=Integer)).subquery()),
)


def first_matching_ids(words: tuple[str, ...]) -> tuple[Keyed, dict[str, Any]]:
    """SQLite: the ids of the first `limit` artifacts, in id order, with ids from `id_from` up
    to but not including `id_to`, holding every term (some shorter than MIN_TRIGRAM); and
    the terms' parameters. With terms long enough for the FTS5 index, their rows are
    streamed from it in rowid order and each checked for every term (`id IN (MATCH ...)`
    would read every row of a common term first); with short terms only, a scan of the
    table's id range."""
    long = tuple(t for t in words if len(t) >= MIN_TRIGRAM)
    values: dict[str, Any] = {f"t{j}": like_pattern(t) for j, t in enumerate(words)}

    def build() -> Select[Any]:
        likes = [term_like(j) for j in range(len(words))]  # the FTS5 rows of long terms are only candidates
        if not long:
            ids = Artifact.id
            return select(ids).where(ids >= bindparam("id_from"), ids < bindparam("id_to"), *likes).limit(
                bindparam("limit", type_=Integer)
            )
        fts = table(FTS_TABLE, column("rowid"))
        rowid = fts.c.rowid
        match = text(f"{FTS_TABLE} MATCH :fts").bindparams(bindparam("fts", type_=String))
        return (
            select(Artifact.id)
            .join_from(fts, Artifact, Artifact.id == rowid)
            .where(match, rowid >= bindparam("id_from"), rowid < bindparam("id_to"), *likes)
            .limit(bindparam("limit", type_=Integer))
        )

    if long:
        values["fts"] = fts_match(long)
    return Keyed(("first matching ids", len(words), bool(long)), build), values


__all__ = [
    "CATALOG_SIZE", "COMMON_TEXT", "CUSTOM_PLANS", "DRAFT_TARGET", "FAMILY_WALK", "clauses", "common",
    "family_walk", "first_matching_ids", "hits", "memory_page", "page", "params", "shape_of", "term_like", "total",
    "unindexed", "without_estimate",
]  # fmt: skip
