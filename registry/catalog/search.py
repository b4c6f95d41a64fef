"""Reads: artifact search with filters, keyset pagination and facets.

Every page is `ORDER BY <key>, id LIMIT n+1` from the position the cursor names, over the
`(status, key, id)` index of that sort: no OFFSET, so page 500 costs what page 1 costs.
The cursor is opaque to clients: base64url JSON of the sort, its value and the id.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Select,
    and_,
    exists,
    func,
    literal,
    literal_column,
    select,
    true,
    tuple_,
)
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import InstrumentedAttribute

from registry.catalog import search_index
from registry.catalog.errors import InvalidCursor, InvalidQuery
from registry.catalog.lineage import MAX_DEPTH
from registry.catalog.models import ARTIFACT_STATUSES, Artifact, LineageEdge, QuantMix, Repo
from registry.safety.findings import SEVERITIES, severity_rank

MAX_LIMIT = 200
COMMON_ROWS = 2000  # SQLite: a filter matching more rows than this is not served from its index
# sort key -> (column, descending by default)
SORTS: dict[str, tuple[InstrumentedAttribute[Any], bool]] = {
    "downloads": (Artifact.downloads, True),
    "likes": (Artifact.likes, True),
    "last_modified": (Artifact.last_modified, True),
    "parameter_count": (Artifact.parameter_count, True),
    "file_size": (Artifact.file_size, True),
    "name": (Artifact.sort_name, False),
}
SORT_ALIASES = {"modified": "last_modified", "params": "parameter_count", "size": "file_size"}
FACETS = ("architecture", "license", "file_type", "size_bucket")
# SearchQuery filters on columns outside the covering facet index.
_NON_FACET_FILTERS = ("text", "tensor_type", "min_params", "max_params", "size_label", "min_context",
                      "expert_count", "verification", "descendant_of", "template_severity")  # fmt: skip
STATUSES = (*ARTIFACT_STATUSES, "all")


@dataclass(frozen=True, slots=True)
class SearchQuery:
    text: str | None = None
    architecture: str | None = None
    license: str | None = None
    file_type: str | None = None
    tensor_type: str | None = None  # artifact has at least one tensor of this ggml type
    min_params: int | None = None
    max_params: int | None = None
    size_label: str | None = None
    min_context: int | None = None
    expert_count: int | None = None
    verification: str | None = None  # latest verification status
    descendant_of: str | None = None  # repo id; through lineage edges, up to MAX_DEPTH
    # Chat template has a safety finding at least this severe (a SEVERITIES name). Clean and
    # not-scanned artifacts never match.
    template_severity: str | None = None
    status: str = "indexed"  # indexed | error | gone | all
    sort: str = "downloads"  # a SORTS key, optionally ":asc" / ":desc"
    limit: int = 20
    cursor: str | None = None


@dataclass(frozen=True, slots=True)
class SearchItem:
    id: int
    repo: str
    path: str
    revision: str | None
    status: str
    error_code: str | None
    error: str | None
    architecture: str | None
    parameter_count: int
    file_type: str | None
    size_label: str | None
    license: str | None
    context_length: int | None
    expert_count: int | None
    shards: int
    file_size: int
    downloads: int
    likes: int
    last_modified: datetime
    verification: str | None
    chat_template_severity: str | None  # worst finding; None: clean or not scanned

    def to_dict(self) -> dict[str, Any]:
        data = {name: getattr(self, name) for name in self.__slots__}
        data["last_modified"] = self.last_modified.isoformat()
        return data


@dataclass(frozen=True, slots=True)
class SearchPage:
    items: list[SearchItem]
    next_cursor: str | None
    total: int | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"items": [i.to_dict() for i in self.items], "next": self.next_cursor}
        if self.total is not None:
            out["total"] = self.total
        return out


def parse_sort(sort: str) -> tuple[str, InstrumentedAttribute[Any], bool]:
    key, _, direction = sort.partition(":")
    key = SORT_ALIASES.get(key, key)
    if key not in SORTS or direction not in ("", "asc", "desc"):
        raise InvalidQuery(f"unknown sort {sort!r}", allowed=sorted(SORTS))
    column, descending = SORTS[key]
    if direction:
        descending = direction == "desc"
    return f"{key}:{'desc' if descending else 'asc'}", column, descending


def encode_cursor(sort: str, value: Any, id_: int) -> str:
    if isinstance(value, datetime):
        value = value.isoformat()
    raw = json.dumps({"s": sort, "v": value, "i": id_}, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _is_int64(value: Any) -> bool:
    # Out of range, the database would fail the query instead of us rejecting the cursor.
    return isinstance(value, int) and not isinstance(value, bool) and -(2**63) <= value < 2**63


def decode_cursor(cursor: str, sort: str) -> tuple[Any, int]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        data = json.loads(raw)
        value, id_ = data["v"], data["i"]
        if data["s"] != sort:
            raise ValueError("cursor made for another sort")
        if not _is_int64(id_):
            raise ValueError("bad id")
        key = sort.partition(":")[0]
        if key == "last_modified":
            value = datetime.fromisoformat(value)
        elif key == "name":
            if not isinstance(value, str) or "\x00" in value:
                raise ValueError("bad value")
        elif not _is_int64(value):
            raise ValueError("bad value")
    except (ValueError, TypeError, KeyError, binascii.Error, UnicodeDecodeError) as exc:
        raise InvalidCursor("malformed pagination cursor", reason=str(exc)) from None
    return value, id_


def descendant_repo_pks(repo_id: str, max_depth: int = MAX_DEPTH) -> Select[Any]:
    """Primary keys of every repo below repo_id in the lineage graph (depth-bounded: cycle-safe)."""
    base = (
        select(
            LineageEdge.child_pk.label("pk"),
            LineageEdge.child_repo_id.label("name"),
            literal(1).label("depth"),
        )
        .where(LineageEdge.parent_repo_id == repo_id)
        .cte("descendant_pks", recursive=True)
    )
    step = (
        select(LineageEdge.child_pk, LineageEdge.child_repo_id, base.c.depth + 1)
        .join(base, LineageEdge.parent_repo_id == base.c.name)
        .where(base.c.depth < max_depth)
    )
    cte = base.union(step)
    return select(cte.c.pk)


# A column predicate: (indexed column, build the predicate over a column expression).
_Predicate = tuple[InstrumentedAttribute[Any], Callable[[Any], ColumnElement[bool]]]


def _equal_to(value: Any) -> Callable[[Any], ColumnElement[bool]]:
    return lambda column: column == value


def _without_nul(q: SearchQuery) -> SearchQuery:
    """No stored text holds NUL (writes strip it) and PostgreSQL rejects it in a parameter."""
    changes: dict[str, Any] = {
        f: v.replace("\x00", "") for f in q.__slots__ if isinstance(v := getattr(q, f), str) and "\x00" in v
    }
    return dataclasses.replace(q, **changes) if changes else q


def _column_predicates(q: SearchQuery) -> list[_Predicate]:
    if q.status not in STATUSES:
        raise InvalidQuery(f"unknown status {q.status!r}", allowed=list(STATUSES))
    preds: list[_Predicate] = []
    equals = {
        Artifact.status: None if q.status == "all" else q.status,
        Artifact.architecture: q.architecture,
        Artifact.license: q.license,
        Artifact.file_type: q.file_type,
        Artifact.size_label: q.size_label,
        Artifact.expert_count: q.expert_count,
        Artifact.verification_status: q.verification,
    }
    preds += [(column, _equal_to(value)) for column, value in equals.items() if value is not None]
    if q.min_params is not None:
        preds.append((Artifact.parameter_count, lambda c: c >= q.min_params))
    if q.max_params is not None:
        preds.append((Artifact.parameter_count, lambda c: c <= q.max_params))
    if q.min_context is not None:
        preds.append((Artifact.context_length, lambda c: c >= q.min_context))
    if q.template_severity is not None:
        rank = template_severity_rank(q.template_severity)
        preds.append((Artifact.chat_template_max_severity, lambda c: c >= rank))
    return preds


def template_severity_rank(name: str) -> int:
    try:
        return severity_rank(name)
    except ValueError:
        raise InvalidQuery(
            f"unknown template severity {name!r}", parameter="template_severity", allowed=list(SEVERITIES)
        ) from None


def severity_name(rank: int | None) -> str | None:
    """The stored worst-severity rank back as its name (None stays None)."""
    return SEVERITIES[rank] if rank is not None and 0 <= rank < len(SEVERITIES) else None


async def _matches_many(session: AsyncSession, predicate: ColumnElement[bool]) -> bool:
    probe = select(literal(1)).select_from(Artifact).where(predicate).limit(COMMON_ROWS + 1).subquery()
    return bool((await session.execute(select(func.count()).select_from(probe))).scalar_one() > COMMON_ROWS)


async def _steered(
    session: AsyncSession, preds: list[_Predicate], all_matches: bool
) -> list[ColumnElement[bool]]:
    """The predicates, with SQLite kept off the index of any that matches many rows.

    SQLite keeps no per-value statistics, so for `architecture = 'llama' ORDER BY downloads`
    it may fetch all 40,000 llama rows through the architecture index and sort them, where
    walking the downloads index needs ~50 rows for a page. A bounded probe (at most
    COMMON_ROWS index entries) tells a common value from a rare one; a common one is written
    `+column = value`, which SQLite will not serve from an index. PostgreSQL has statistics.
    """
    if all_matches or session.get_bind().dialect.name != "sqlite":
        return [make(column) for column, make in preds]
    out = []
    for column, make in preds:
        if await _matches_many(session, make(column)):
            out.append(make(_unindexed(column)))
        else:
            out.append(make(column))
    return out


async def _filters(
    session: AsyncSession, q: SearchQuery, *, all_matches: bool = False
) -> list[ColumnElement[bool]]:
    where = await _steered(session, _column_predicates(q), all_matches)
    if q.tensor_type:
        where.append(
            exists().where(QuantMix.artifact_id == Artifact.id, QuantMix.tensor_type == q.tensor_type.upper())
        )
    if q.descendant_of:
        where.append(Artifact.repo_pk.in_(descendant_repo_pks(q.descendant_of)))
    if q.text and (terms := search_index.search_terms(q.text)):
        where.append(await search_index.text_filter(session, terms, all_matches=all_matches))
    return where


async def search(session: AsyncSession, q: SearchQuery, *, with_total: bool = False) -> SearchPage:
    q = _without_nul(q)
    if not 1 <= q.limit <= MAX_LIMIT:
        raise InvalidQuery(f"limit must be between 1 and {MAX_LIMIT}")
    sort, column, descending = parse_sort(q.sort)
    where = await _filters(session, q)
    page_where = list(where)
    if q.cursor:
        value, id_ = decode_cursor(q.cursor, sort)
        key = tuple_(column, Artifact.id)
        page_where.append(key < tuple_(literal(value, column.type), literal(id_, Artifact.id.type))
                          if descending else key > tuple_(literal(value, column.type), literal(id_, Artifact.id.type)))  # fmt: skip
    order = (column.desc(), Artifact.id.desc()) if descending else (column.asc(), Artifact.id.asc())
    stmt = (
        select(Artifact, Repo.repo_id)
        .join(Repo, Repo.id == Artifact.repo_pk)
        .where(and_(true(), *page_where))
        .order_by(*order)
        .limit(q.limit + 1)
    )
    rows = (await session.execute(stmt)).all()
    items = [_item(artifact, repo_id) for artifact, repo_id in rows[: q.limit]]
    next_cursor = None
    if len(rows) > q.limit:
        last = rows[q.limit - 1][0]
        next_cursor = encode_cursor(sort, getattr(last, column.key), last.id)
    total = None
    if with_total:
        total = (await session.execute(select(func.count()).select_from(Artifact).where(*where))).scalar_one()
    return SearchPage(items, next_cursor, total)


def _item(a: Artifact, repo_id: str) -> SearchItem:
    return SearchItem(
        id=a.id, repo=repo_id, path=a.path, revision=a.revision, status=a.status, error_code=a.error_code,
        error=a.error_message, architecture=a.architecture, parameter_count=a.parameter_count,
        file_type=a.file_type, size_label=a.size_label, license=a.license, context_length=a.context_length,
        expert_count=a.expert_count, shards=a.shard_count, file_size=a.file_size, downloads=a.downloads,
        likes=a.likes, last_modified=a.last_modified, verification=a.verification_status,
        chat_template_severity=severity_name(a.chat_template_max_severity),
    )  # fmt: skip


async def facets(session: AsyncSession, q: SearchQuery) -> dict[str, dict[str, int]]:
    """Counts per architecture, license, file type and size bucket under the query's filters.

    PostgreSQL: one scan with GROUPING SETS; SQLite has none (see `_sqlite_facet_parts`).
    NULL counts as "unknown".
    """
    q = _without_nul(q)
    where = await _filters(session, q, all_matches=True)
    out: dict[str, dict[str, int]] = {name: {} for name in FACETS}
    columns = [getattr(Artifact, name) for name in FACETS]
    if session.get_bind().dialect.name == "postgresql":
        flags = [func.grouping(c) for c in columns]
        stmt = select(*flags, *columns, func.count()).where(*where)
        stmt = stmt.group_by(func.grouping_sets(*(tuple_(c) for c in columns)))
        for row in (await session.execute(stmt)).all():
            i = list(row[: len(FACETS)]).index(0)  # the facet this row groups by
            out[FACETS[i]][_facet_key(row[len(FACETS) + i])] = row[-1]
    else:
        parts = await _sqlite_facet_parts(session, q, where, columns)
        union = parts[0].union_all(*parts[1:]).subquery()
        for facet, value, n in (await session.execute(select(union.c.facet, union.c.value, union.c.n))).all():
            out[facet][_facet_key(value)] = n
    return {
        name: dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))) for name, counts in out.items()
    }


def _unindexed(column: InstrumentedAttribute[Any]) -> ColumnElement[Any]:
    """`+artifacts.column`: the same value, but SQLite will not use an index for it."""
    return literal_column(f"+{Artifact.__tablename__}.{column.key}", column.type)


async def _sqlite_facet_parts(
    session: AsyncSession, q: SearchQuery, where: list[ColumnElement[bool]], columns: list[Any]
) -> list[Select[Any]]:
    """One GROUP BY per facet, each shaped so SQLite reads as little as possible.

    * status only: each facet walks its own `(status, facet)` covering index, in order;
    * filters on facet columns only: a rare license or file type is sought through its own
      index (few table reads); otherwise SQLite reads the five-column covering index (status,
      architecture, license, file_type, size_bucket), seeking its prefix, and nothing else.
      Left alone it would walk a `(status, facet)` index for the GROUP BY order or seek a
      one-column index, reading the table for every row; `+column` takes those choices away;
    * anything else: the matching rows' facet columns are materialized once, grouped four times.
    """
    if any(getattr(q, name) is not None for name in _NON_FACET_FILTERS):
        matched = select(*columns).where(*where).cte("matched").prefix_with("MATERIALIZED")
        return [
            select(literal(n).label("facet"), matched.c[n].label("value"), func.count().label("n")).group_by(
                matched.c[n]
            )
            for n in FACETS
        ]
    status_only = len(where) <= 1
    if not status_only:
        preds = _column_predicates(q)
        rare = [not await _matches_many(session, make(column)) for column, make in preds]
        prefix = ("status", "architecture")  # seekable prefix of the covering index
        if not any(r for (column, _), r in zip(preds, rare, strict=True) if column.key not in prefix):
            rare = [column.key in prefix for column, _ in preds]
        where = [make(c if r else _unindexed(c)) for (c, make), r in zip(preds, rare, strict=True)]
    parts = []
    for name in FACETS:
        key = getattr(Artifact, name) if status_only else _unindexed(getattr(Artifact, name))
        parts.append(
            select(literal(name).label("facet"), key.label("value"), func.count().label("n"))
            .select_from(Artifact)
            .where(*where)
            .group_by(key)
        )
    return parts


def _facet_key(value: str | None) -> str:
    return value if value is not None else "unknown"


__all__ = ["SearchItem", "SearchPage", "SearchQuery", "decode_cursor", "encode_cursor", "facets", "search"]
