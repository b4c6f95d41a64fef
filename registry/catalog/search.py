"""Reads: artifact search with filters and keyset pagination (facet counts: `facets`).

Every page is `ORDER BY <key>, id LIMIT n+1` from the position the cursor names, over the
`(key, id)` index of that sort (the status is checked on each row it walks): no OFFSET,
so page 500 costs what page 1 costs.
The cursor is opaque to clients: base64url JSON of the sort, its value and the id.
Architecture, license, file type and size label are stored folded (`folding`) and a
query's values are folded alike, so these filters are plain equalities that ignore case.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import dataclasses
import functools
import json
import math
import re
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Collection, Hashable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, NamedTuple

from sqlalchemy import (
    BigInteger,
    BindParameter,
    ColumnElement,
    Float,
    Select,
    String,
    and_,
    any_,
    bindparam,
    case,
    cast,
    exists,
    func,
    literal,
    literal_column,
    or_,
    select,
    true,
    tuple_,
)
from sqlalchemy.dialects import postgresql
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import InstrumentedAttribute, aliased

from registry.catalog import search_index
from registry.catalog.db import longer_inline_reads
from registry.catalog.errors import ArtifactNotFound, InvalidCursor, InvalidQuery
from registry.catalog.folding import FOLDS, ascii_lower, fold
from registry.catalog.lineage import MAX_DEPTH
from registry.catalog.memo import FileMemo, memo_generation
from registry.catalog.models import (
    ARTIFACT_STATUSES,
    DEFAULT_MEMORY_CONTEXT,
    REPO_ID_LENGTH,
    REPO_PART,
    Artifact,
    LineageEdge,
    QuantMix,
    Repo,
    RepoMove,
    repo_key,
)
from registry.gguf.facts_model import KINDS, MODALITIES, modality_mask, modality_names
from registry.gguf.kvcache import KVCache
from registry.gguf.vocab import MAX_SIZE_DIFFERENCE
from registry.safety.capabilities import CAPABILITIES, from_mask
from registry.safety.capabilities import mask as capability_mask
from registry.safety.findings import SEVERITIES, severity_rank

MAX_LIMIT = 200
COMMON_ROWS = 2000  # SQLite: a filter matching more rows than this is not served from its index
# SQLite: common filters matching more rows than this within a big lineage family are checked
# along the sort index (a page reads about limit x catalog / matches rows, at most ~10,000
# here), fewer are fetched through the filters' indexes and sorted.
FAMILY_COMMON_ROWS = 200
# The same for the default sort: its index holds the filtered columns and the repo, so a
# walk checks them without reading a row; past the 20th match within the family it beats
# fetching a common filter's thousands of rows (a family with 198 Q6_K rows: 1 ms walked,
# 13 ms fetched through the file type's index).
FAMILY_COMMON_ROWS_WALK_INDEX = 20
# SQLite: the same for a filter on a column the default sort's index holds (its walk tests
# the filter in the index entry, ~45 ns an entry, and reads a row only for a match): past
# this many rows walking beats fetching them through the filter's index and sorting them
# (~0.9 us a row). An architecture with 1,992 rows: 0.04 ms walked, 1.9 ms fetched; with 91:
# 1.0 ms walked, 0.04 ms fetched.
WALK_INDEX_COMMON_ROWS = 300
# SQLite, sorting every match (by memory): a filter matching more than 1 / SCAN_SHARE of the
# catalog is checked on a scan of the table, not served from its index. On bench.search's
# 100,000 artifacts, sorting by memory: status=indexed (98% of rows) 111 ms through its
# index, 74 ms on a scan; file sizes up to 8 GiB (52%) 100 vs 61 ms, up to 24 GiB (84%)
# 148 vs 79 ms; up to 2 GiB (19%) 33 ms through the index, 38 ms on a scan.
SCAN_SHARE = 4
# SQLite: the index holding what the sort by memory reads of each artifact (status, then
# the KV cache estimate, the file size and the context), created by its migration
# (c1e7a9d3f5b2). A scan of it instead of the table: every match of bench.search's catalog
# sorted by memory in 41 / 45 ms (p50 / p99) instead of 64 / 76.
MEMORY_SORT_INDEX = "ix_artifacts_memory_sort"
# The columns of the default sort's index (`ix_artifacts_downloads_walk`) besides its key.
_WALK_INDEX_COLUMNS = frozenset({"status", "architecture", "license", "file_type", "context_length", "repo_pk"})
# SQLite: filters or text terms, each common, that match more rows than this together are
# checked along the sort index; fewer are fetched through their indexes and sorted. Walking
# reads about limit x catalog / matches rows; fetching reads every match, and intersecting
# two common terms' FTS5 row lists alone took ~4 ms: at 2,000 matches, fetching and sorting
# them took 12-15 ms a page where the walk reads ~1,000 rows in 1-2 ms.
COMMON_TOGETHER_ROWS = 600
# SQLite: text terms shorter than search_index.MIN_TRIGRAM have no index. With no other way
# in (every other term and filter common), the artifacts holding every term are counted
# first, up to past this many: by one scan of the table, or of the FTS5 rows of the long
# terms. Fewer are memoised (per commit to the file, see `FileMemo`), fetched by id and
# sorted. Walking the sort index checking them row by row read the whole table when they
# were rare together: "7b 8b" (6 matches) took 70 ms in SQLite alone and 150-200 ms under
# load, every time; the scan takes ~25 ms once per commit.
TERM_SCAN_ROWS = 600
# SQLite: ids per slice of that count when it scans the table (short terms only), each one
# statement, with a turn of the event loop between two. Scanned whole, 100,000 rows took
# ~25 ms: held on the loop, every request behind it waited as long (p99 over 50 ms in
# bench.api); moved to the connection's thread, it took a third thread's worth of CPU from
# two cores and requests waited 60-100 ms. A slice of 8,192 ids takes ~2 ms; the request
# that scans waits its turn between slices instead (50-160 ms, once per commit).
TERM_SCAN_SLICE = 8192
# SQLite: how long a lineage family's walk may hold the event loop (see
# `db.longer_inline_reads`): the biggest family took 5-11 ms, done once per commit to the file.
FAMILY_WALK_INLINE_MS = 30.0
# sort key -> (column, descending by default). `memory` has no column: it sorts by what
# `memory_needed` computes at the query's memory_context (`_memory_page`).
SORTS: dict[str, tuple[InstrumentedAttribute[Any] | None, bool]] = {
    "downloads": (Artifact.downloads, True),
    "likes": (Artifact.likes, True),
    "last_modified": (Artifact.last_modified, True),
    "parameter_count": (Artifact.parameter_count, True),
    "file_size": (Artifact.file_size, True),
    "name": (Artifact.sort_name, False),
    "memory": (None, False),
}
SORT_ALIASES = {"modified": "last_modified", "params": "parameter_count", "size": "file_size"}
FACETS = ("architecture", "license", "file_type", "size_bucket")  # what facets() counts unless asked otherwise
# Counted only when asked for: columns outside the covering facet indexes. A capability is
# a bit of a mask, so an artifact counts once under each capability its templates have.
# In the order of their covering index's columns, the order they are grouped in.
MORE_FACETS = {
    "kind": Artifact.kind,
    "verification": Artifact.verification_status,
    "capability": Artifact.chat_template_capabilities,
}
FACET_NAMES = (*FACETS, *MORE_FACETS)
# An author: the owner part of repo ids, a user or organisation name as the hub allows it
# (the one crawl requests take too); `local` for the catalog's local folders.
AUTHOR_PATTERN = REPO_PART
_AUTHOR = re.compile(AUTHOR_PATTERN)
STATUSES = (*ARTIFACT_STATUSES, "all")
# The context the memory filter sizes the KV cache for when the query names none: what local
# runners commonly start with. At this context the artifacts' own `memory_at_default`
# column (computed by the database, indexed) serves the sort by memory and the filter.
MEMORY_CONTEXT = DEFAULT_MEMORY_CONTEXT
MAX_MEMORY_CONTEXT = 1 << 40
HINT_TTL_S = 60.0  # how long a probe's "common or rare" answer steers plans
HINT_ENTRIES = 4096


@dataclass(frozen=True, slots=True)
class SearchQuery:
    text: str | None = None
    # Only artifacts of repos this user or organisation owns (the part of the repo id before
    # the `/`, in any ASCII case): an AUTHOR_PATTERN name, else InvalidQuery.
    author: str | None = None
    # Only the artifacts of this repo (`org/name`, any ASCII case of the id, as repo pages
    # find it): one id with one `/`, else InvalidQuery.
    repo: str | None = None
    # Architecture, license, file type and size label match in any ASCII case (`folding`).
    architecture: str | None = None
    license: str | None = None
    file_type: str | None = None
    tensor_type: str | None = None  # artifact has at least one tensor of this ggml type
    min_params: int | None = None
    max_params: int | None = None
    min_size: int | None = None  # bytes, all shards together
    max_size: int | None = None
    size_label: str | None = None
    min_context: int | None = None
    expert_count: int | None = None
    verification: str | None = None  # latest verification status
    descendant_of: str | None = None  # repo id; through lineage edges, up to MAX_DEPTH
    # Chat template has a safety finding at least this severe (a SEVERITIES name). Clean and
    # not-scanned artifacts never match.
    template_severity: str | None = None
    # Chat templates that can do all of these: comma-separated CAPABILITIES names (system,
    # tools, tool_calls, thinking, parallel_tool_calls). Artifacts whose templates were not
    # probed never match.
    capability: str | None = None
    kind: str | None = None  # what the file is: a KINDS name (model, mmproj, lora, imatrix, vocab)
    # True: only artifacts whose repo also holds an indexed multimodal projector (an `mmproj`
    # artifact: llama.cpp's --mmproj, images or audio in); False: only those whose repo holds
    # none; None: either.
    with_projector: bool | None = None
    # Comma-separated MODALITIES names (vision, audio): only artifacts whose repo holds an
    # indexed projector that takes all of them (implies a projector; the projector matches too).
    modality: str | None = None
    # Needs at most this many bytes to run: the file (all shards) plus its f16 KV cache at
    # `memory_context` tokens (MEMORY_CONTEXT when None), or at the model's own context_length
    # when that is shorter (`memory_needed`). Artifacts without a KV cache estimate never match.
    # The context also sizes each hit's `memory`, with or without the filter.
    max_memory: int | None = None
    memory_context: int | None = None
    # Artifacts that can draft for this artifact (id) in speculative decoding: the same
    # vocabulary key, at most MAX_SIZE_DIFFERENCE tokens more or fewer, and fewer parameters
    # (at least one). None without a key. An unknown id is an ArtifactNotFound.
    draft_for: int | None = None
    # What `draft_for` names, looked up by `_resolved`: (vocabulary key, token count,
    # parameter count). Not a filter of its own.
    draft: DraftTarget | None = None
    status: str = "indexed"  # indexed | error | gone | all
    sort: str = "downloads"  # a SORTS key, optionally ":asc" / ":desc"
    limit: int = 20
    cursor: str | None = None


class DraftTarget(NamedTuple):
    """The model a draft is sought for; `key` None: it has no vocabulary key."""

    key: str | None
    vocab_size: int | None
    parameter_count: int


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
    # {"tokens", "bytes"}: what it needs to run at the query's memory_context (`memory_at`)
    memory: dict[str, int] | None = None
    chat_template_capabilities: list[str] | None = None  # CAPABILITIES names; None: not probed
    kind: str | None = None  # a KINDS name; None for error rows
    modalities: list[str] | None = None  # a projector's MODALITIES names; None on other kinds

    def to_dict(self) -> dict[str, Any]:
        data = {name: getattr(self, name) for name in self.__slots__}
        data["last_modified"] = self.last_modified.isoformat()
        return data


@dataclass(frozen=True, slots=True)
class SearchPage:
    # The hits as rows: SearchItem's fields in order, the last the stored severity rank, then
    # the KV cache columns (`MEMORY_COLUMNS`), then the capabilities' mask, the kind and the
    # modalities' mask. A page of 100
    # built SearchItems that the API turned into dicts at once (see `items`).
    rows: Sequence[Sequence[Any]]
    next_cursor: str | None
    total: int | None = None
    memory_context: int = MEMORY_CONTEXT  # the context the hits' memory is sized at

    @property
    def items(self) -> list[SearchItem]:
        return [_item(row, self.memory_context) for row in self.rows]

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"items": [i.to_dict() for i in self.items], "next": self.next_cursor}
        if self.total is not None:
            out["total"] = self.total
        return out


def parse_sort(sort: str) -> tuple[str, InstrumentedAttribute[Any] | None, bool]:
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
            # Bound in UTC: an offset that moves the time past year 1 or 9999 cannot be.
            value = datetime.fromisoformat(value)
            value = value.astimezone(UTC) if value.tzinfo is not None else value.replace(tzinfo=UTC)
        elif key == "name":
            if not isinstance(value, str) or "\x00" in value:
                raise ValueError("bad value")
            value.encode("utf-8")  # a lone surrogate has no UTF-8 form to bind
        elif key == "memory":
            # memory_needed's double (JSON reads one written without a point as an int), or
            # None past the last estimate, among the artifacts that have none
            if value is not None:
                if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                    raise ValueError("bad value")
                value = float(value)
        elif not _is_int64(value):
            raise ValueError("bad value")
    except (ValueError, TypeError, KeyError, OverflowError, binascii.Error, UnicodeDecodeError) as exc:
        raise InvalidCursor("malformed pagination cursor", reason=str(exc)) from None
    return value, id_


def descendant_repo_pks(repo_id: str, max_depth: int = MAX_DEPTH) -> Select[Any]:
    """Primary keys of every repo below repo_id (any spelling of it: `repo_key`) in the
    lineage graph (depth-bounded: cycle-safe)."""
    return _descendant_pks(max_depth).params(descendant_of=repo_key(repo_id))


@functools.cache
def _descendant_pks(max_depth: int) -> Select[Any]:
    """The walk with its start as a bound parameter, built once: building the recursive CTE
    took about a millisecond, more than running it for most repos. An id the hub has moved
    starts at the repo it moved to, under whose key its children's edges are filed."""
    start: BindParameter[str] = bindparam("descendant_of", type_=String)
    moved_to = (
        select(Repo.repo_key).join(RepoMove, RepoMove.repo_pk == Repo.id).where(RepoMove.old_key == start)
    ).scalar_subquery()
    base = (
        select(
            LineageEdge.child_pk.label("pk"),
            LineageEdge.child_key.label("name"),
            literal(1).label("depth"),
        )
        .where(LineageEdge.parent_key == func.coalesce(moved_to, start))
        .cte("descendant_pks", recursive=True)
    )
    step = (
        select(LineageEdge.child_pk, LineageEdge.child_key, base.c.depth + 1)
        .join(base, LineageEdge.parent_key == base.c.name)
        .where(base.c.depth < max_depth)
    )
    cte = base.union(step)
    return select(cte.c.pk)


class _Predicate(NamedTuple):
    """A filter on one indexed column, built over a column expression (the column itself or
    its unindexed `+column` form); `key` names it for the memo of row-count probes."""

    column: InstrumentedAttribute[Any]
    key: Hashable
    make: Callable[[Any], ColumnElement[bool]]


def _equal_to(value: Any) -> Callable[[Any], ColumnElement[bool]]:
    return lambda column: column == value


def _author_predicate(author: str) -> _Predicate:
    """The artifacts of the author's repos: a range of the name sort's column.

    `sort_name` is the lower-cased `repo id/path`, so an owner's artifacts are the names from
    `owner/` up to, not including, `owner0` (`0` follows `/`): one seek into the name sort's
    index (code point order on PostgreSQL too, whatever the database's collation), and
    `owner-x/...` or `owners/...` fall outside. The owner is an AUTHOR_PATTERN name, ASCII
    only, so its lower case is the one the column holds."""
    if _AUTHOR.fullmatch(author) is None:
        raise InvalidQuery(
            f"author must be a user or organisation name ({AUTHOR_PATTERN}), got {author!r}",
            parameter="author", pattern=AUTHOR_PATTERN,
        )  # fmt: skip
    owner = author.lower()
    low, high = owner + "/", owner + "0"
    return _Predicate(Artifact.sort_name, ("sort_name", "owner", owner), lambda c: and_(c >= low, c < high))


def _repo_predicate(repo_id: str) -> _Predicate:
    """The artifacts of the repo this id names in any ASCII case (`repo_key`; a hub rename
    that left two spellings: both): the repo's primary keys looked up by its key, then the
    artifacts through `(repo_pk, path)`, or a check in the download sort's index."""
    owner, slash, name = repo_id.partition("/")
    if not owner or not slash or not name or "/" in name or len(repo_id) > REPO_ID_LENGTH:
        raise InvalidQuery(f"repo must be one repo id, org/name, got {repo_id!r}", parameter="repo")
    key = repo_key(repo_id)
    pks = select(Repo.id).where(Repo.repo_key == key)
    return _Predicate(Artifact.repo_pk, ("repo_pk", "repo", key), lambda c: c.in_(pks))


def _normalised(q: SearchQuery) -> SearchQuery:
    """The query as the catalog compares it: without NUL (no stored text holds it, writes
    strip it, and PostgreSQL rejects it in a parameter), and the architecture, license,
    file type and size label folded as their columns are (`folding`), so that these match
    in any ASCII case. Everything keyed by a query's values (probe hints, shared clauses and
    first pages, memoised facets) sees one spelling per value."""
    changes: dict[str, Any] = {
        f: v.replace("\x00", "") for f in q.__slots__ if isinstance(v := getattr(q, f), str) and "\x00" in v
    }
    for name in FOLDS:
        value = changes.get(name, getattr(q, name))
        if value is not None and (folded := fold(name, value)) != value:
            changes[name] = folded
    author = changes.get("author", q.author)
    if author is not None and (lower := ascii_lower(author)) != author:
        changes["author"] = lower
    return dataclasses.replace(q, **changes) if changes else q


def _column_predicates(q: SearchQuery) -> list[_Predicate]:
    if q.status not in STATUSES:
        raise InvalidQuery(f"unknown status {q.status!r}", allowed=list(STATUSES))
    preds: list[_Predicate] = []
    equals: dict[InstrumentedAttribute[Any], Any] = {
        Artifact.status: None if q.status == "all" else q.status,
        Artifact.architecture: q.architecture,
        Artifact.license: q.license,
        Artifact.file_type: q.file_type,
        Artifact.size_label: q.size_label,
        Artifact.expert_count: q.expert_count,
        Artifact.verification_status: q.verification,
    }
    preds += [_Predicate(c, (c.key, "=", v), _equal_to(v)) for c, v in equals.items() if v is not None]
    if q.author is not None:
        preds.append(_author_predicate(q.author))
    if q.repo is not None:
        preds.append(_repo_predicate(q.repo))
    if (low := q.min_params) is not None:
        preds.append(_Predicate(Artifact.parameter_count, ("parameter_count", ">=", low), lambda c: c >= low))
    if (high := q.max_params) is not None:
        preds.append(_Predicate(Artifact.parameter_count, ("parameter_count", "<=", high), lambda c: c <= high))
    if (small := q.min_size) is not None:
        preds.append(_Predicate(Artifact.file_size, ("file_size", ">=", small), lambda c: c >= small))
    if (big := q.max_size) is not None:
        preds.append(_Predicate(Artifact.file_size, ("file_size", "<=", big), lambda c: c <= big))
    if (context := q.min_context) is not None:
        preds.append(_Predicate(Artifact.context_length, ("context_length", ">=", context), lambda c: c >= context))
    if q.template_severity is not None:
        rank = template_severity_rank(q.template_severity)
        preds.append(_Predicate(Artifact.chat_template_max_severity, ("severity", ">=", rank), lambda c: c >= rank))
    if q.kind is not None:
        if q.kind not in KINDS:
            raise InvalidQuery(f"unknown kind {q.kind!r}", parameter="kind", allowed=list(KINDS))
        preds.append(_Predicate(Artifact.kind, ("kind", "=", q.kind), _equal_to(q.kind)))
    if q.capability is not None:
        # The masks that hold every asked-for bit: a short IN list the column's index answers.
        need = capability_bits(q.capability)
        holding = _holding(need, len(CAPABILITIES))
        column = Artifact.chat_template_capabilities
        preds.append(_Predicate(column, ("capabilities", "all", need), lambda c: c.in_(holding)))
    if q.memory_context is not None and not 1 <= q.memory_context <= MAX_MEMORY_CONTEXT:
        raise InvalidQuery(f"memory_context must be between 1 and {MAX_MEMORY_CONTEXT} tokens")
    if (budget := q.max_memory) is not None:
        if _at_default_memory_context(q):
            # The filter itself, on the indexed column that holds it (a double, as in SQL).
            bound = literal(float(budget), Float)
            preds.append(
                _Predicate(Artifact.memory_at_default, ("memory_at_default", "<=", budget), lambda c: c <= bound)
            )
        else:
            # Implied by the memory filter (the file alone must fit), and an indexed way in to it.
            preds.append(_Predicate(Artifact.file_size, ("file_size", "<=", budget), lambda c: c <= budget))
    if q.draft_for is not None:
        if q.draft is None:
            raise RuntimeError("draft_for is looked up by _resolved before a query is planned")
        # A target without a key matches nothing: no stored key is empty, so the index answers.
        key, below = q.draft.key or "", q.draft.parameter_count
        preds.append(_Predicate(Artifact.vocab_sha256, ("vocab_sha256", "=", key), _equal_to(key)))
        preds.append(
            _Predicate(Artifact.parameter_count, ("parameter_count", "draft", below), lambda c: c.between(1, below - 1))
        )
    return preds


async def _resolved(session: AsyncSession, q: SearchQuery) -> SearchQuery:
    """The query with `draft` looked up for `draft_for` (an unknown artifact id is an
    ArtifactNotFound)."""
    if q.draft_for is None:
        return q
    connection = await session.connection()
    target = (
        await connection.execute(
            select(Artifact.vocab_sha256, Artifact.vocab_size, Artifact.parameter_count).where(
                Artifact.id == q.draft_for
            )
        )
    ).one_or_none()
    if target is None:
        raise ArtifactNotFound(f"no artifact {q.draft_for}", parameter="draft_for")
    return dataclasses.replace(q, draft=DraftTarget(*target))


def _at_default_memory_context(q: SearchQuery) -> bool:
    """Whether the query sizes memory at MEMORY_CONTEXT, which `memory_at_default` holds."""
    return q.memory_context is None or q.memory_context == MEMORY_CONTEXT


def _sort_column(q: SearchQuery) -> InstrumentedAttribute[Any] | None:
    """The column whose index holds the query's order: the sort's own, or for the sort by
    memory at the default context `memory_at_default`; None for memory at any other."""
    column = parse_sort(q.sort)[1]
    if column is None and _at_default_memory_context(q):
        return Artifact.memory_at_default
    return column


def memory_at(
    file_size: int, context_length: int | None, kv_bytes_per_token: int | None,
    kv_swa_bytes_per_token: int | None, kv_sliding_window: int | None, context: int,
) -> dict[str, int] | None:
    """`{"tokens", "bytes"}`: the bytes an artifact needs to run at `context` tokens, or at
    its own context_length when that is shorter (`tokens` says which), as `memory_needed`
    computes them in SQL but exact; None without a KV cache estimate."""
    if kv_bytes_per_token is None:
        return None
    tokens = context_length if context_length is not None and 0 < context_length < context else context
    kv = KVCache(0, kv_bytes_per_token, swa_bytes_per_token=kv_swa_bytes_per_token or 0,
                 sliding_window=kv_sliding_window)  # fmt: skip
    return {"tokens": tokens, "bytes": file_size + kv.bytes_at(tokens)}


def memory_needed(context: int) -> ColumnElement[Any]:
    """Bytes an artifact needs to run at `context` tokens: its file size plus its KV cache
    (`KVCache.bytes_at`) at that context, or at the model's own context_length when that is
    shorter; NULL without an estimate. In double precision: exact below 2**53 bytes (8 PiB),
    and a product of hostile values cannot overflow an integer (which fails the query on
    PostgreSQL)."""
    as_float = lambda column: cast(column, Float)  # noqa: E731
    tokens = literal(context, BigInteger)
    own = Artifact.context_length
    used = case((and_(own > 0, own < tokens), own), else_=tokens)
    window = Artifact.kv_sliding_window
    in_window = case((and_(window.is_not(None), window < used), window), else_=used)
    return (
        as_float(Artifact.file_size)
        + as_float(Artifact.kv_bytes_per_token) * as_float(used)
        + as_float(func.coalesce(Artifact.kv_swa_bytes_per_token, 0)) * as_float(in_window)
    )


def template_severity_rank(name: str) -> int:
    try:
        return severity_rank(name)
    except ValueError:
        raise InvalidQuery(
            f"unknown template severity {name!r}", parameter="template_severity", allowed=list(SEVERITIES)
        ) from None


def capability_bits(names: str) -> int:
    """The bit mask of comma-separated capability names; unknown or no names: InvalidQuery."""
    return capability_mask(_names(names, CAPABILITIES, "capability"))


def modality_bits(names: str) -> int:
    """The bit mask of comma-separated modality names; unknown or no names: InvalidQuery."""
    return modality_mask(_names(names, MODALITIES, "modality"))


def _names(names: str, allowed: tuple[str, ...], parameter: str) -> list[str]:
    wanted = [n.strip() for n in names.split(",")]
    unknown = [n for n in wanted if n not in allowed]
    if unknown:
        raise InvalidQuery(f"unknown {parameter} {unknown[0]!r}", parameter=parameter, allowed=list(allowed))
    return wanted


def _holding(need: int, width: int) -> tuple[int, ...]:
    """The masks of `width` bits that hold every bit of `need`: a short IN list."""
    return tuple(v for v in range(1 << width) if v & need == need)


def capability_names(bits: int | None) -> list[str] | None:
    """A stored capability mask as names (None stays None: not probed)."""
    return None if bits is None else from_mask(bits)


def severity_name(rank: int | None) -> str | None:
    """The stored worst-severity rank back as its name (None stays None)."""
    return SEVERITIES[rank] if rank is not None and 0 <= rank < len(SEVERITIES) else None


class _Hints:
    """Memo of the row-count probes that steer SQLite's plans, one per engine.

    A probe answers "more than COMMON_ROWS rows?", which changes slowly as the catalog
    grows; a stale answer only costs speed, never a wrong result (the same predicates are
    applied either way), so answers are kept HINT_TTL_S instead of tracking writes.
    """

    def __init__(self) -> None:
        self._answers: dict[Hashable, tuple[float, bool]] = {}

    def get(self, key: Hashable) -> bool | None:
        found = self._answers.get(key)
        return found[1] if found is not None and time.monotonic() - found[0] < HINT_TTL_S else None

    def put(self, key: Hashable, value: bool) -> None:
        if len(self._answers) >= HINT_ENTRIES:
            self._answers.clear()  # a crude bound: probes are cheap to redo
        self._answers[key] = (time.monotonic(), value)


# Engine -> its probe memo; weak, so a disposed engine takes its memo along.
_HINTS: weakref.WeakKeyDictionary[Any, _Hints] = weakref.WeakKeyDictionary()


def _hints(session: AsyncSession) -> _Hints:
    engine = session.get_bind()
    hints = _HINTS.get(engine)
    if hints is None:
        hints = _HINTS[engine] = _Hints()
    return hints


async def _catalog_rows(session: AsyncSession) -> int:
    """About how many artifacts the catalog holds: the highest id (one index seek; ids
    freed by deletions count too)."""
    conn = await session.connection()
    return int((await conn.execute(select(func.max(Artifact.id)))).scalar_one() or 0)


async def _matches_many(
    session: AsyncSession, key: Hashable, predicate: Callable[[], ColumnElement[bool]], threshold: int | None = None
) -> bool:
    """Whether more than `threshold` (default COMMON_ROWS) rows match (the predicate is only
    built when probed)."""
    hints = _hints(session)
    threshold = COMMON_ROWS if threshold is None else threshold
    key = (threshold, key)  # an answer holds for the threshold it was probed with
    if (known := hints.get(key)) is not None:
        return known
    probe = select(literal(1)).select_from(Artifact).where(predicate()).limit(threshold + 1).subquery()
    conn = await session.connection()
    many = bool((await conn.execute(select(func.count()).select_from(probe))).scalar_one() > threshold)
    hints.put(key, many)
    return many


def _as_built(p: _Predicate) -> Callable[[], ColumnElement[bool]]:
    return lambda: _clause(p)


# (predicate key, unindexed) -> its clause. Clauses are immutable and any number of
# statements can share one; filter values repeat (a few dozen architectures, licenses and
# file types), and building `column == value` through the ORM attribute took more time
# than SQLite took to answer a page.
_CLAUSES: OrderedDict[tuple[Hashable, bool], ColumnElement[bool]] = OrderedDict()
_CLAUSE_ENTRIES = 4096


def _clause(p: _Predicate, unindexed: bool = False) -> ColumnElement[bool]:
    key = (p.key, unindexed)
    found = _CLAUSES.get(key)
    if found is None:
        found = _CLAUSES[key] = p.make(_unindexed(p.column) if unindexed else p.column)
        if len(_CLAUSES) > _CLAUSE_ENTRIES:
            _CLAUSES.popitem(last=False)
    return found


async def _common_terms(session: AsyncSession, terms: list[str]) -> set[str]:
    hints = _hints(session)
    out = set()
    for term in terms:
        if len(term) < search_index.MIN_TRIGRAM:
            continue
        key = ("text", search_index.COMMON_TERM, term)
        if (known := hints.get(key)) is None:
            known = await search_index.is_common_term(session, term)
            hints.put(key, known)
        if known:
            out.add(term)
    return out


@dataclass(frozen=True, slots=True)
class _Plan:
    where: list[ColumnElement[bool]]
    # Few rows match: fetch them through the filters' indexes and sort them, instead of
    # walking the sort key's index (which would read the table end to end to fill a page).
    sort_matches: bool = False
    # A filter's own index (or the text index, or the lineage family's repos) is the way in,
    # not the sort index, and the matches are sorted. The order and a next page's cursor
    # range are written on `+column`: on the bare sort column they lured SQLite onto the sort
    # index, checking row by row for a rare filter's few matches (20-40 ms a page instead of 1).
    filter_way_in: bool = False

    @property
    def sorted_matches(self) -> bool:
        """The matches are sorted, not walked in order: the order and a next page's cursor
        range are written on `+column`, which keeps SQLite off the sort index."""
        return self.sort_matches or self.filter_way_in


async def _filters(
    session: AsyncSession, q: SearchQuery, *, all_matches: bool = False, sort_all: bool = False
) -> _Plan:
    """The WHERE clause of a query, shaped for SQLite's planner.

    SQLite keeps no per-value statistics, so for `architecture = 'llama' ORDER BY downloads`
    it may fetch all 40,000 llama rows through the architecture index and sort them, where
    walking the downloads index needs ~50 rows for a page. A bounded probe (at most
    COMMON_ROWS index entries) tells a common value from a rare one; a common one is written
    `+column = value`, which SQLite will not serve from an index. Several common filters
    (or text terms) can still match few rows together (llama + BF16 + cc-by-nc-4.0): then
    walking the sort index reads the whole table, so their conjunction is probed too and,
    when rare, served from the indexes and sorted. PostgreSQL has statistics.

    `sort_all` (the sort by memory, which no index holds): every match is read and sorted,
    so the question is only how to find them. Fetching rows through an index costs about
    twice what a scan of the table costs per row, so a filter that matches more than
    1 / SCAN_SHARE of the catalog is written `+column` and checked on the scan, and a rarer
    one is the way in.
    """
    preds = _column_predicates(q)
    terms = search_index.search_terms(q.text) if q.text else []
    sqlite = session.get_bind().dialect.name == "sqlite"
    if all_matches or not sqlite:
        where = await _where(session, q, [_clause(p) for p in preds], terms, common=None, listed_projectors=sqlite)
        return _Plan(where)
    if sort_all:
        share = max(COMMON_ROWS, await _catalog_rows(session) // SCAN_SHARE)
        big = [await _matches_many(session, p.key, _as_built(p), share) for p in preds]
        if len(preds) >= 2 and all(big):
            # Each matches a big share, together they may not (llama and Q4_K_M: 40% and 25%
            # of bench.search's catalog, 10% together, 14 ms through an index, 39 on a scan).
            plain = [_clause(p) for p in preds]
            key = ("sort all, together", tuple(p.key for p in preds))
            if not await _matches_many(session, key, lambda: and_(true(), *plain), share):
                big = [False] * len(preds)
        steered = [_clause(p, unindexed=b) for p, b in zip(preds, big, strict=True)]
        return _Plan(await _where(session, q, steered, terms, common=None, listed_projectors=True))
    walked = _WALK_INDEX_COLUMNS if parse_sort(q.sort)[1] is Artifact.downloads else frozenset()
    many = [
        await _matches_many(
            session, p.key, _as_built(p), min(WALK_INDEX_COMMON_ROWS, COMMON_ROWS) if p.column.key in walked else None
        )
        for p in preds
    ]
    common = await _common_terms(session, terms)
    # Short terms have no index: with no other way in, their matches are counted first.
    short = [t for t in terms if len(t) < search_index.MIN_TRIGRAM]
    no_way_in = all(many) and q.descendant_of is None and len(common) + len(short) == len(terms)
    short_known, short_ids = await _term_ids(session, terms) if short and no_way_in else (False, None)
    if short_known and short_ids is None:  # the terms are common together
        common |= set(short)
    # Every filter is common on its own; together they may not be (probed like one).
    if (
        all(many)
        and len(preds) - 1 + len(common) >= 2
        and len(common) == len(terms)
        and not await _common_together(session, q, preds, terms)
    ):
        plain = await _where(session, q, [_clause(p) for p in preds], terms, common=())
        return _Plan(plain, sort_matches=True)
    many = _seek_prefix(preds, many)
    # A big lineage family (a popular base model's thousands of descendants) is a check
    # along the sort index, not the way in, when the other filters are rare (their indexes
    # are the way in) or absent, or common and common within the family too. Common
    # filters that are rare within the family become the way in themselves: fetching the
    # family's tens of thousands of artifacts to sort them took 15 ms a page.
    family = await _family_pks(session, q.descendant_of) if q.descendant_of is not None else None
    big_family = family is not None and await _matches_many(
        session, ("descendant_of", q.descendant_of), lambda: _in_family(Artifact.repo_pk, family)
    )
    walk_family = False
    if family is not None and big_family and not terms:
        walk_family = True
        others = [i for i, p in enumerate(preds) if p.column.key != "status"]
        if others and all(many[i] for i in others) and not await _common_in_family(session, q, preds, family):
            many = [m if i not in others else False for i, m in enumerate(many)]
    filter_way_in = (
        not all(many)
        or any(len(t) >= search_index.MIN_TRIGRAM and t not in common for t in terms)  # the FTS5 index
        or (q.descendant_of is not None and not walk_family)
        or short_ids is not None  # the few artifacts holding the terms
    )
    # Along the sort index, a common range of the sort column itself bounds the walk: SQLite
    # seeks to one end and stops past the other. Checked row by row (`+file_size`), sizes of
    # 4-6 GB sorted by size walked down from the biggest file: 16-17 ms a page, not ~1.
    sort_column = _sort_column(q)
    steered = [
        _clause(p, unindexed=m and (filter_way_in or p.column is not sort_column))
        for p, m in zip(preds, many, strict=True)
    ]
    where = await _where(session, q, steered, terms, common=common, walk_family=walk_family, family=family)
    if short_ids is not None:
        where.append(Artifact.id.in_(short_ids))
    return _Plan(where, filter_way_in=filter_way_in)


async def _term_ids(session: AsyncSession, terms: list[str]) -> tuple[bool, Select[Any] | None]:
    """(known, the artifacts holding every term when at most TERM_SCAN_ROWS do), for terms
    of which some are too short for the FTS5 index and the others common.

    Known only on a SQLite file (see `FileMemo`); elsewhere (False, None) and the terms are
    checked row by row along the sort index. The ids are found by a scan of the table (or
    of the long terms' FTS5 rows) in slices of TERM_SCAN_SLICE ids that stops past
    TERM_SCAN_ROWS matches (common terms: within a few thousand rows), and read back through
    `json_each` until the next commit."""
    memo = FileMemo.of(session)
    if memo is None:
        return False, None
    key = tuple(sorted(set(terms)))
    generation = memo.generation_for(session)  # before scanning: a commit meanwhile makes the entry stale
    known, ids = memo.term_ids(key, generation)
    if not known:
        conn = await session.connection()
        scan = search_index.first_matching_ids(key, TERM_SCAN_ROWS + 1)
        top = (await conn.execute(select(func.max(Artifact.id)))).scalar_one() or 0
        found: list[int] = []
        # The FTS5 rows of long terms are few enough to read at once; a scan of the table is sliced.
        step = TERM_SCAN_SLICE if all(len(t) < search_index.MIN_TRIGRAM for t in key) else top + 1
        for start in range(0, top + 1, step):
            if start:
                await asyncio.sleep(0)  # the requests waiting meanwhile go first
            found += (await conn.execute(scan, {"id_from": start, "id_to": start + step})).scalars()
            if len(found) > TERM_SCAN_ROWS:
                break
        ids = None if len(found) > TERM_SCAN_ROWS else json.dumps(sorted(found), separators=(",", ":"))
        memo.put_term_ids(key, generation, ids)
    return True, (None if ids is None else _memoised_ids().params(term_ids=ids))


# The artifact's repo holds an indexed projector: a seek on the (repo_pk, path) index per row.
_PROJECTOR = aliased(Artifact, name="projector")
_HAS_PROJECTOR = exists().where(
    _PROJECTOR.repo_pk == Artifact.repo_pk, _PROJECTOR.kind == "mmproj", _PROJECTOR.status == "indexed"
)


# The same as a list of the repos that hold one, made once per statement: for reads of every
# match on SQLite (facet counts, the sort by memory), where a seek per row cost more than the
# scan itself. Under `with_projector=1`, bench.search's catalog: 199 ms with a seek per row,
# 28-46 ms against the list (5,928 projectors).
_PROJECTOR_REPOS = select(_PROJECTOR.repo_pk).where(_PROJECTOR.kind == "mmproj", _PROJECTOR.status == "indexed")


def _has_projector_for(modality: str, *, listed: bool = False) -> ColumnElement[bool]:
    """The artifact's repo holds an indexed projector that takes all of these modalities."""
    holding = _PROJECTOR.modalities.in_(_holding(modality_bits(modality), len(MODALITIES)))
    if listed:
        return Artifact.repo_pk.in_(_PROJECTOR_REPOS.where(holding))
    return _HAS_PROJECTOR.where(holding)


def _only_columns(q: SearchQuery) -> bool:
    """Whether the query filters on indexed columns only: its clauses all come from `_clause`,
    shared per value, so its first pages can share their statement (`_first_page`)."""
    return (
        not q.text and not q.tensor_type and not q.descendant_of and q.max_memory is None and q.draft_for is None
        and q.with_projector is None and q.modality is None
    )  # fmt: skip


async def _common_in_family(
    session: AsyncSession, q: SearchQuery, preds: list[_Predicate], family: Family
) -> bool:
    """Whether common filters match more than FAMILY_COMMON_ROWS (_WALK_INDEX) rows of a big family too
    (a family of llama fine-tunes and a common quantization)."""
    key = ("family with", q.descendant_of, tuple(p.key for p in preds))
    predicate = lambda: and_(_in_family(Artifact.repo_pk, family), *(_clause(p) for p in preds))  # noqa: E731
    walk_index = parse_sort(q.sort)[1] is Artifact.downloads
    threshold = min(FAMILY_COMMON_ROWS_WALK_INDEX, FAMILY_COMMON_ROWS) if walk_index else FAMILY_COMMON_ROWS
    return await _matches_many(session, key, predicate, threshold)


# The leading columns of the covering facet index (status, architecture, license, file_type,
# size_bucket): equality filters on a prefix of them are one seek into it.
_FACET_INDEX = ("status", "architecture", "license", "file_type", "size_bucket")


def _seek_prefix(preds: list[_Predicate], many: list[bool]) -> list[bool]:
    """`many` with the equality filters on a leading run of the facet index's columns left
    indexed when one of them is rare.

    A rare architecture among a common status, license and file type was read through the
    architecture's own index, the table fetched for each of its rows to check the others;
    with all four indexed SQLite seeks the four-column prefix and reads only the matches."""
    equal = {p.column.key: i for i, p in enumerate(preds) if isinstance(p.key, tuple) and p.key[1:2] == ("=",)}
    prefix = []
    for name in _FACET_INDEX:
        if name not in equal:
            break
        prefix.append(equal[name])
    if len(prefix) < 2 or all(many[i] for i in prefix):
        return many
    return [False if i in prefix else m for i, m in enumerate(many)]


async def _common_together(session: AsyncSession, q: SearchQuery, preds: list[_Predicate], terms: list[str]) -> bool:
    """Whether the filters and terms, each common, match more than COMMON_TOGETHER_ROWS rows
    together (at most COMMON_ROWS).

    Text alone (besides a common status) is counted in the FTS5 index, which intersects the
    terms' row lists: several times cheaper than checking the terms row by row, which reads
    the whole table when they are rare together. A status is common when it gets here, and
    the answer only steers the plan, so leaving it out of that count costs no correctness."""
    if (
        len(preds) <= 1 and q.tensor_type is None and q.descendant_of is None and q.max_memory is None
        and q.draft_for is None and q.with_projector is None and q.modality is None
    ):  # fmt: skip
        if any(len(t) < search_index.MIN_TRIGRAM for t in terms):
            return True  # counted by `_term_ids`, which found them common together
        hints = _hints(session)
        threshold = min(COMMON_TOGETHER_ROWS, COMMON_ROWS)
        text_key = ("text together", threshold, tuple(sorted(terms)))
        if (known := hints.get(text_key)) is None:
            known = await search_index.are_common_together(session, terms, threshold)
            hints.put(text_key, known)
        return known
    memory = (q.max_memory, q.memory_context)
    key = (
        "all", tuple(p.key for p in preds), tuple(terms), q.tensor_type, q.descendant_of, memory, q.draft,
        q.with_projector, q.modality,
    )  # fmt: skip
    hints = _hints(session)
    threshold = min(COMMON_TOGETHER_ROWS, COMMON_ROWS)
    if (known := hints.get((threshold, key))) is not None:
        return known
    plain = await _where(session, q, [_clause(p) for p in preds], terms, common=())
    return await _matches_many(session, key, lambda: and_(true(), *plain), threshold)


async def _where(
    session: AsyncSession, q: SearchQuery, where: list[ColumnElement[bool]], terms: list[str],
    common: Collection[str] | None, walk_family: bool = False, family: Family | None = None,
    listed_projectors: bool = False,
) -> list[ColumnElement[bool]]:  # fmt: skip
    """The filters outside the probed columns added to `where`. `listed_projectors`: every
    match is read (SQLite), so the projector filters check a list of repos made once
    (`_PROJECTOR_REPOS`) instead of seeking per row. `walk_family`: the lineage
    family holds many artifacts (a popular base model's thousands of descendants), so its
    repos are a membership test along the sort index (`+repo_pk IN ...`) rather than the
    way in: fetching and sorting all of their artifacts for one page cost ~100 ms.
    `family`: the family's repos as `_family_pks` gave them (default: asked for here)."""
    where = list(where)
    if q.max_memory is not None and not _at_default_memory_context(q):  # else a column predicate
        where.append(memory_needed(q.memory_context or MEMORY_CONTEXT) <= literal(float(q.max_memory), Float))
    if q.draft is not None and q.draft.vocab_size is not None:
        size = q.draft.vocab_size
        where.append(Artifact.vocab_size.between(size - MAX_SIZE_DIFFERENCE, size + MAX_SIZE_DIFFERENCE))
    if q.tensor_type:
        where.append(
            exists().where(QuantMix.artifact_id == Artifact.id, QuantMix.tensor_type == q.tensor_type.upper())
        )
    if q.with_projector is not None:
        has = Artifact.repo_pk.in_(_PROJECTOR_REPOS) if listed_projectors else _HAS_PROJECTOR
        where.append(has if q.with_projector else ~has)
    if q.modality is not None:
        where.append(_has_projector_for(q.modality, listed=listed_projectors))
    if q.descendant_of:
        repo_pk = _unindexed(Artifact.repo_pk) if walk_family else Artifact.repo_pk
        where.append(_in_family(repo_pk, family if family is not None else await _family_pks(session, q.descendant_of)))
    if terms:
        where.append(
            await search_index.text_filter(session, terms, all_matches=common is None, common=common)
        )
    return where


# The repos of a lineage family: a walk to run in the statement, or the primary keys it found.
Family = Select[Any] | list[int]


async def _family_pks(session: AsyncSession, repo_id: str) -> Family:
    """The primary keys of a lineage family's repos: those its walk found last time while
    nothing has committed since (a SQLite file: as one JSON array parameter; PostgreSQL: as
    a list, bound as one array); else the walk itself.

    Walking the most popular base model's family (thousands of repos) took 15-25 ms, more
    than all the rest of a page, and the probes that choose the plan walked it again;
    reading its memoised repos back through `json_each` takes a fraction of that, and a
    commit anywhere makes the memo walk it again.

    On PostgreSQL the repos are the plan's, too: the planner cannot tell how many repos a
    recursive walk reaches (200, it guessed, of the 2,648 below bench.search's popular
    base), so it fetched and sorted all 8,472 of their artifacts for a page and hashed the
    whole repos table to name them: 60-88 ms a page on 2026-11-26. Bound as an array that
    the search plans with (`_CUSTOM_PLANS`), they let it walk the sort index and check
    each row against them instead: 14-16 ms a page, most of it planning with 2,648 values
    (4-8 ms; the statement itself runs in about 1 ms)."""
    key = (repo_key(repo_id), MAX_DEPTH)
    memo, generation = await memo_generation(session)  # before walking: a commit meanwhile makes it stale
    if memo is None:
        return descendant_repo_pks(repo_id)
    if (pks := memo.family(key, generation)) is None:
        if isinstance(memo, FileMemo):
            with longer_inline_reads(FAMILY_WALK_INLINE_MS):
                pks = json.dumps(await _walked_family(session, repo_id), separators=(",", ":"))
        else:
            pks = await _walked_family(session, repo_id)
        memo.put_family(key, generation, pks)
    return _memoised_family().params(family_pks=pks) if isinstance(pks, str) else pks


async def _walked_family(session: AsyncSession, repo_id: str) -> list[int]:
    """The family's repos as its walk finds them now, each once, in order."""
    rows = await (await session.connection()).execute(descendant_repo_pks(repo_id))
    return sorted(set(rows.scalars()))


def _in_family(repo_pk: ColumnElement[Any] | InstrumentedAttribute[Any], family: Family) -> ColumnElement[bool]:
    """`repo_pk` is one of the family's repos (`_family_pks`)."""
    if isinstance(family, list):
        return repo_pk == any_(bindparam(None, family, type_=postgresql.ARRAY(BigInteger)))
    return repo_pk.in_(family)


@functools.cache
def _memoised_ids() -> Select[Any]:
    ids = func.json_each(bindparam("term_ids", type_=String)).table_valued("value")
    return select(ids.c.value)


@functools.cache
def _memoised_family() -> Select[Any]:
    keys = func.json_each(bindparam("family_pks", type_=String)).table_valued("value")
    return select(keys.c.value)


# The search-hit columns, read as plain rows: building ORM objects for a page of hits cost
# more than the query itself. Table columns, not the ORM attributes: matching a cached
# compiled statement's result columns to ORM-annotated ones compares them with `==`, which
# builds an SQL expression per column and cost more than the query too.
_A, _R = Artifact.__table__.c, Repo.__table__.c
# The KV cache estimate's columns, after the hit columns of a search row (`memory_at`).
MEMORY_COLUMNS = (_A.kv_bytes_per_token, _A.kv_swa_bytes_per_token, _A.kv_sliding_window)
_HIT_COLUMNS = (
    _A.id, _R.repo_id, _A.path, _A.revision, _A.status, _A.error_code, _A.error_message, _A.architecture,
    _A.parameter_count, _A.file_type, _A.size_label, _A.license, _A.context_length, _A.expert_count,
    _A.shard_count, _A.file_size, _A.downloads, _A.likes, _A.last_modified, _A.verification_status,
    _A.chat_template_max_severity, *MEMORY_COLUMNS, _A.chat_template_capabilities, _A.kind, _A.modalities,
)  # fmt: skip


@functools.cache
def _hits(sort_key: str) -> Select[Any]:
    """The hit columns and the sort value, joined to the repo: built once per sort key."""
    stmt: Select[Any] = select(*_HIT_COLUMNS, _A[sort_key].label("sort_value")).join(Repo, Repo.id == Artifact.repo_pk)
    return stmt


# PostgreSQL: the search's statements are planned with their parameters' values for the
# rest of the transaction. The driver prepares every statement, and from its sixth run the
# server may keep one generic plan made without the values; the catalog's are skewed (text
# patterns, a license that 40% or 0.01% of the files have), and bench.search's
# `q=coder 7b q4_k_m` took 23-34 ms a page on the generic plan, 1.9-3.3 ms planned each
# time. Not for the lineage walks, whose generic plan serves every start (planning the
# recursive walk each time cost 5-7 ms more in bench.search's depth-5 line).
_CUSTOM_PLANS = select(func.set_config("plan_cache_mode", "force_custom_plan", True))


async def search(session: AsyncSession, q: SearchQuery, *, with_total: bool = False) -> SearchPage:
    q = await _resolved(session, _normalised(q))
    if not 1 <= q.limit <= MAX_LIMIT:
        raise InvalidQuery(f"limit must be between 1 and {MAX_LIMIT}")
    sort, column, descending = parse_sort(q.sort)
    memory_context = q.memory_context if q.memory_context is not None else MEMORY_CONTEXT
    stmt: Select[Any] | None
    tail: tuple[_Plan, int | None] | None = None  # by memory at the default context: see below
    after = None
    if column is None:
        sort = f"{sort}@{memory_context}"  # a cursor holds for the context it sorted at
        after = decode_cursor(q.cursor, sort) if q.cursor else None
    if column is not None:
        plan = await _filters(session, q)
        stmt = _sorted_page(column, descending, plan, q, sort)
    elif memory_context == MEMORY_CONTEXT:
        # The artifacts with an estimate along `memory_at_default`'s index like any sort, then
        # (when the page is not full) those without one, by id: last in either direction.
        plan = await _filters(session, q)
        estimated = dataclasses.replace(plan, where=[*plan.where, _HAS_MEMORY_AT_DEFAULT])
        past_estimates = after is not None and after[0] is None  # the cursor is among the rest
        stmt = None if past_estimates else _sorted_page(Artifact.memory_at_default, descending, estimated, q, sort)
        if q.max_memory is None:  # else none of the rest can match
            tail = (plan, after[1] if past_estimates and after is not None else None)
    else:  # by memory at another context: no index holds the order, every match is sorted
        plan = await _filters(session, q, sort_all=True)
        stmt = _memory_page(memory_context, descending, plan.where, after, q.limit)
    # Core execution on the session's connection: plain rows, no ORM result machinery.
    conn = await session.connection()
    if conn.dialect.name == "postgresql":
        await conn.execute(_CUSTOM_PLANS)
    rows = list((await conn.execute(stmt)).all()) if stmt is not None else []
    if tail is not None and len(rows) <= q.limit:
        rest_plan, after_id = tail
        rows += (await conn.execute(_without_estimate(descending, rest_plan, after_id, q.limit + 1 - len(rows)))).all()
    hits = rows[: q.limit]
    next_cursor = None
    if len(rows) > q.limit:
        last = rows[q.limit - 1]
        next_cursor = encode_cursor(sort, last.sort_value, last.id)
    total = None
    if with_total:
        stmt_total = select(func.count()).select_from(Artifact).where(*plan.where)
        total = (await conn.execute(stmt_total)).scalar_one()
    return SearchPage(hits, next_cursor, total, memory_context)


def _sorted_page(
    column: InstrumentedAttribute[Any], descending: bool, plan: _Plan, q: SearchQuery, sort: str
) -> Select[Any]:
    """A page by a column's order: the first, or the one after the query's cursor."""
    if not q.cursor:
        return _first_page(column, descending, plan, q)
    value, id_ = decode_cursor(q.cursor, sort)
    # Sorting the few matches (see `_page`): the cursor's range keeps off the sort index too.
    sorted_ = plan.sorted_matches
    key = tuple_(_unindexed(column), _unindexed(Artifact.id)) if sorted_ else tuple_(column, Artifact.id)
    after = tuple_(literal(value, column.type), literal(id_, Artifact.id.type))
    return _page(column, descending, plan, [*plan.where, key < after if descending else key > after], q.limit)


_HAS_MEMORY_AT_DEFAULT = Artifact.memory_at_default.is_not(None)


def _without_estimate(descending: bool, plan: _Plan, after_id: int | None, limit: int) -> Select[Any]:
    """The matches without a memory estimate, by id (after `after_id` when given): the end
    of a sort by memory at the default context, in either direction. The index of
    `memory_at_default` holds them together, in id order."""
    id_col = _unindexed(Artifact.id) if plan.sorted_matches else Artifact.id
    where = [*plan.where, Artifact.memory_at_default.is_(None)]
    if after_id is not None:
        bound = literal(after_id, Artifact.id.type)
        where.append(id_col < bound if descending else id_col > bound)
    stmt: Select[Any] = (
        _hits("memory_at_default").where(*where).order_by(id_col.desc() if descending else id_col.asc()).limit(limit)
    )
    return stmt


def _memory_page(
    context: int, descending: bool, where: list[ColumnElement[bool]], after: tuple[Any, int] | None, limit: int
) -> Select[Any]:
    """A page of hits by the bytes they need at `context` tokens (`memory_needed`, a double:
    exact below 2**53 bytes), then by id; artifacts without an estimate come last in either
    direction, by id. A cursor's value None is a place among those."""
    needed = memory_needed(context)
    no_estimate = Artifact.kv_bytes_per_token.is_(None)  # exactly where `needed` is NULL
    clauses = list(where)
    if after is not None:
        value, id_ = after
        bound_id = literal(id_, Artifact.id.type)
        past_id = Artifact.id < bound_id if descending else Artifact.id > bound_id
        if value is None:
            clauses += [no_estimate, past_id]
        else:
            key, bound = tuple_(needed, Artifact.id), tuple_(literal(value, Float), bound_id)
            # NULL never compares: the rows without an estimate are the OR's other side
            clauses.append(or_(key < bound if descending else key > bound, no_estimate))
    direction = (lambda c: c.desc()) if descending else (lambda c: c.asc())
    # The page's ids first, from the artifacts alone; then their hits. Sorting whole hits
    # (the repo joined and every hit column read for each match) took 4x as long on
    # PostgreSQL and 1.25x on SQLite (every match of bench.search's 100,000 artifacts).
    # Ordered by the labels, so that the sum is computed once a row: written out again in
    # the ORDER BY with its own parameters, SQLite computed it twice (111 -> 94 ms for every
    # match of bench.search's catalog).
    last, value = no_estimate.label("no_estimate"), needed.label("sort_value")
    page = (
        select(Artifact.id.label("id"), last, value)
        .where(and_(true(), *clauses))
        .order_by(last, direction(value), direction(Artifact.id))
        .limit(limit + 1)
        .subquery("by_memory")
    )
    stmt: Select[Any] = (
        select(*_HIT_COLUMNS, page.c.sort_value)
        .select_from(page)
        .join(Artifact, Artifact.id == page.c.id)
        .join(Repo, Repo.id == Artifact.repo_pk)
        .order_by(page.c.no_estimate, direction(page.c.sort_value), direction(page.c.id))
    )
    return stmt


def _page(
    column: InstrumentedAttribute[Any], descending: bool, plan: _Plan, where: list[ColumnElement[bool]], limit: int
) -> Select[Any]:
    sorted_ = plan.sorted_matches
    key_col, id_col = (_unindexed(column), _unindexed(Artifact.id)) if sorted_ else (column, Artifact.id)
    order = (key_col.desc(), id_col.desc()) if descending else (key_col.asc(), id_col.asc())
    stmt = (
        _hits(column.key)
        .where(and_(true(), *where))
        .order_by(*order)
        .limit(limit + 1)
    )
    return stmt


# First pages of column-only filters: (sort, direction, plan's flags, limit, the clauses' ids) ->
# (the clauses, the statement). The same statement object again skips building it and
# computing its cache key, which together cost as much as SQLite took for the page.
# Few: what repeats is the default listing in each sort and a UI's few popular filters,
# and each entry (the statement and its memoised cache key) is ~100 objects that every
# full garbage collection walks. 1,024 entries were 70% of a serving process's heap and
# made each full collection take ~35 ms instead of ~8.
_FIRST_PAGES: OrderedDict[tuple[Any, ...], tuple[tuple[ColumnElement[bool], ...], Select[Any]]] = OrderedDict()
_FIRST_PAGE_ENTRIES = 64


def _first_page(column: InstrumentedAttribute[Any], descending: bool, plan: _Plan, q: SearchQuery) -> Select[Any]:
    limit = q.limit
    if not _only_columns(q):  # text, tensor type and lineage clauses are built per query
        return _page(column, descending, plan, plan.where, limit)
    flags = tuple(getattr(plan, f.name) for f in dataclasses.fields(plan) if f.name != "where")
    key = (column.key, descending, limit, flags, *map(id, plan.where))
    found = _FIRST_PAGES.get(key)
    if found is not None and all(a is b for a, b in zip(found[0], plan.where, strict=True)):
        _FIRST_PAGES.move_to_end(key)
        return found[1]
    stmt = _page(column, descending, plan, plan.where, limit)
    _FIRST_PAGES[key] = (tuple(plan.where), stmt)  # the clauses held: their ids stay theirs
    if len(_FIRST_PAGES) > _FIRST_PAGE_ENTRIES:
        _FIRST_PAGES.popitem(last=False)
    return stmt


def _item(row: Sequence[Any], memory_context: int) -> SearchItem:
    # SearchItem's fields are in _HIT_COLUMNS order, then the severity's name, the memory, the
    # capabilities, the kind and the modalities.
    memory = memory_at(row[15], row[12], row[21], row[22], row[23], memory_context)
    fields: tuple[Any, ...] = (
        *row[:20], severity_name(row[20]), memory, capability_names(row[24]), row[25], modality_names(row[26]),
    )  # fmt: skip
    return SearchItem(*fields)


@functools.cache  # an immutable expression, the same for every statement; building it showed in profiles
def _unindexed(column: InstrumentedAttribute[Any]) -> ColumnElement[Any]:
    """`+artifacts.column`: the same value, but SQLite will not use an index for it."""
    return literal_column(f"+{Artifact.__tablename__}.{column.key}", column.type)


__all__ = [
    "FACETS", "FACET_NAMES", "MORE_FACETS", "SearchItem", "SearchPage", "SearchQuery", "decode_cursor", "encode_cursor",
    "search",
]  # fmt: skip
