"""A search as asked: the query, its validation and normal form, sorts and cursors, and its
filters on indexed columns as plain data (`Filter`), which the planner weighs and the
statements write.

Every page is `ORDER BY <key>, id LIMIT n+1` from the position the cursor names, over the
`(key, id)` index of that sort: no OFFSET, so page 500 costs what page 1 costs. The cursor is
opaque to clients: base64url JSON of the sort, its value and the id. Architecture, license,
file type and size label are stored folded (`folding`) and a query's values are folded
alike, so these filters are plain equalities that ignore case.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import json
import math
from collections.abc import Hashable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, NamedTuple

from registry.catalog.errors import InvalidCursor, InvalidQuery
from registry.catalog.folding import FOLDS, ascii_lower, fold
from registry.catalog.models import ARTIFACT_STATUSES, repo_key
from registry.catalog.search.memory import MAX_MEMORY_CONTEXT, at_default_context
from registry.catalog.search_index import search_terms
from registry.gguf.compat.codes import CODES
from registry.gguf.facts_model import KINDS, MODALITIES, modality_mask
from registry.safety.capabilities import CAPABILITIES
from registry.safety.capabilities import mask as capability_mask
from registry.safety.findings import SEVERITIES, severity_rank

FINDING_CODES = tuple(c.code for c in CODES)
RUNTIMES = ("llama.cpp",)  # what `runs_in` takes

MAX_LIMIT = 200
# sort key -> (the `artifacts` column it sorts by, descending by default). `memory` sorts by
# the bytes an artifact needs at the query's memory_context (`memory`), which the column
# `memory_at_default` holds at the default context.
SORTS: dict[str, tuple[str | None, bool]] = {
    "downloads": ("downloads", True),
    "likes": ("likes", True),
    "last_modified": ("last_modified", True),
    "parameter_count": ("parameter_count", True),
    "file_size": ("file_size", True),
    "name": ("sort_name", False),
    "memory": (None, False),
}
SORT_ALIASES = {"modified": "last_modified", "params": "parameter_count", "size": "file_size"}
FACETS = ("architecture", "license", "file_type", "size_bucket")  # what facets() counts unless asked otherwise
# Counted only when asked for: columns outside the covering facet indexes, in the order of
# their covering index's columns. A capability is a bit of a mask, so an artifact counts
# once under each capability its templates have.
MORE_FACETS = {"kind": "kind", "verification": "verification_status", "capability": "chat_template_capabilities"}
FACET_NAMES = (*FACETS, *MORE_FACETS)
STATUSES = (*ARTIFACT_STATUSES, "all")


class DraftTarget(NamedTuple):
    """The model a draft is sought for; `key` None: it has no vocabulary key."""

    key: str | None
    vocab_size: int | None
    parameter_count: int


@dataclass(frozen=True, slots=True)
class SearchQuery:
    text: str | None = None
    # Only artifacts of repos this user or organisation owns (the part of the repo id before
    # the `/`, in any ASCII case). Author and repo are validated where they are read, by
    # their parameters (`registry.responses.params`).
    author: str | None = None
    # Only the artifacts of this repo (`org/name`, any ASCII case of the id, as repo pages
    # find it).
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
    descendant_of: str | None = None  # repo id; through lineage edges, up to lineage.MAX_DEPTH
    # Chat template has a safety finding at least this severe (a SEVERITIES name). Clean and
    # not-scanned artifacts never match.
    template_severity: str | None = None
    # Chat templates that can do all of these: comma-separated CAPABILITIES names (system,
    # tools, tool_calls, thinking, parallel_tool_calls). Artifacts whose templates were not
    # probed never match.
    capability: str | None = None
    # Comma-separated llama.cpp finding codes (L001...): only artifacts with all of them.
    finding: str | None = None
    # "llama.cpp": only artifacts llama.cpp loads (no error-severity finding); artifacts not
    # checked yet (NULL) never match.
    runs_in: str | None = None
    kind: str | None = None  # what the file is: a KINDS name (model, mmproj, lora, imatrix, vocab)
    # True: only artifacts whose repo also holds an indexed multimodal projector (an `mmproj`
    # artifact: llama.cpp's --mmproj, images or audio in); False: only those whose repo holds
    # none; None: either.
    with_projector: bool | None = None
    # Comma-separated MODALITIES names (vision, audio): only artifacts whose repo holds an
    # indexed projector that takes all of them (implies a projector; the projector matches too).
    modality: str | None = None
    # Needs at most this many bytes to run at `memory_context` tokens (see `memory`).
    # Artifacts without a memory estimate never match. The context also sizes each hit's
    # `memory`, with or without the filter.
    max_memory: int | None = None
    memory_context: int | None = None
    # Artifacts that can draft for this artifact (id) in speculative decoding: the same
    # vocabulary key, at most vocab.MAX_SIZE_DIFFERENCE tokens more or fewer, and fewer
    # parameters (at least one). None without a key. An unknown id is an ArtifactNotFound.
    draft_for: int | None = None
    # What `draft_for` names, looked up before planning: (vocabulary key, token count,
    # parameter count). Not a filter of its own.
    draft: DraftTarget | None = None
    status: str = "indexed"  # indexed | error | gone | all
    sort: str = "downloads"  # a SORTS key, optionally ":asc" / ":desc"
    limit: int = 20
    cursor: str | None = None


@dataclass(frozen=True, slots=True)
class Filter:
    """A filter on one indexed column of `artifacts`, as data: what the planner probes (its
    own rows) and the statements write (`column op value`). Ops: `=`, `>=`, `<=`; `prefix`
    (the repo ids of an owner: a range of `sort_name`); `repo` (the repo's primary keys by
    its key); `holding` (masks holding every bit of `value`: a short IN list); `below` (from
    1 to value - 1)."""

    column: str
    op: str
    value: Hashable


def parse_sort(sort: str) -> tuple[str, str | None, bool]:
    """(the sort spelled `key:direction`, its column, descending) of a sort as asked."""
    key, _, direction = sort.partition(":")
    key = SORT_ALIASES.get(key, key)
    if key not in SORTS or direction not in ("", "asc", "desc"):
        raise InvalidQuery(f"unknown sort {sort!r}", allowed=sorted(SORTS))
    column, descending = SORTS[key]
    if direction:
        descending = direction == "desc"
    return f"{key}:{'desc' if descending else 'asc'}", column, descending


def sort_column(q: SearchQuery) -> str | None:
    """The column whose index holds the query's order: the sort's own, or for the sort by
    memory at the default context `memory_at_default`; None for memory at any other."""
    column = parse_sort(q.sort)[1]
    if column is None and at_default_context(q.memory_context):
        return "memory_at_default"
    return column


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
            # the needed bytes as a double (JSON reads one written without a point as an
            # int), or None past the last estimate, among the artifacts that have none
            if value is not None:
                if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                    raise ValueError("bad value")
                value = float(value)
        elif not _is_int64(value):
            raise ValueError("bad value")
    except (ValueError, TypeError, KeyError, OverflowError, binascii.Error, UnicodeDecodeError) as exc:
        raise InvalidCursor("malformed pagination cursor", reason=str(exc)) from None
    return value, id_


def normalised(q: SearchQuery) -> SearchQuery:
    """The query as the catalog compares it: without NUL (no stored text holds it, writes
    strip it, and PostgreSQL rejects it in a parameter), and the architecture, license,
    file type and size label folded as their columns are (`folding`), so that these match
    in any ASCII case. Everything keyed by a query's values (probe answers, statement
    shapes, memoised facets) sees one spelling per value."""
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


def terms(q: SearchQuery) -> tuple[str, ...]:
    return tuple(search_terms(q.text)) if q.text else ()


def column_filters(q: SearchQuery) -> list[Filter]:
    """The query's filters on indexed columns of `artifacts`, validated (InvalidQuery)."""
    if q.status not in STATUSES:
        raise InvalidQuery(f"unknown status {q.status!r}", allowed=list(STATUSES))
    equals = {
        "status": None if q.status == "all" else q.status, "architecture": q.architecture, "license": q.license,
        "file_type": q.file_type, "size_label": q.size_label, "expert_count": q.expert_count,
        "verification_status": q.verification,
    }  # fmt: skip
    out = [Filter(column, "=", value) for column, value in equals.items() if value is not None]
    if q.author is not None:
        # `sort_name` is the lower-cased `repo id/path`: an owner's artifacts are the names
        # from `owner/` up to, not including, `owner0` (`0` follows `/`), one seek into the
        # name sort's index; `owner-x/...` or `owners/...` fall outside.
        out.append(Filter("sort_name", "prefix", q.author.lower()))
    if q.repo is not None:
        out.append(Filter("repo_pk", "repo", repo_key(q.repo)))
    ranges = (
        ("parameter_count", ">=", q.min_params), ("parameter_count", "<=", q.max_params),
        ("file_size", ">=", q.min_size), ("file_size", "<=", q.max_size), ("context_length", ">=", q.min_context),
    )  # fmt: skip
    out += [Filter(column, op, value) for column, op, value in ranges if value is not None]
    if q.template_severity is not None:
        out.append(Filter("chat_template_max_severity", ">=", template_severity_rank(q.template_severity)))
    if q.kind is not None:
        if q.kind not in KINDS:
            raise InvalidQuery(f"unknown kind {q.kind!r}", parameter="kind", allowed=list(KINDS))
        out.append(Filter("kind", "=", q.kind))
    if q.capability is not None:
        out.append(Filter("chat_template_capabilities", "holding", capability_bits(q.capability)))
    if q.finding is not None:
        out += [Filter("id", "finding", code) for code in _names(q.finding, FINDING_CODES, "finding")]
    if q.runs_in is not None:
        if q.runs_in not in RUNTIMES:
            raise InvalidQuery(f"unknown runtime {q.runs_in!r}", parameter="runs_in", allowed=list(RUNTIMES))
        out.append(Filter("runs_in_llama_cpp", "=", True))
    if q.memory_context is not None and not 1 <= q.memory_context <= MAX_MEMORY_CONTEXT:
        raise InvalidQuery(f"memory_context must be between 1 and {MAX_MEMORY_CONTEXT} tokens")
    if q.max_memory is not None:
        if at_default_context(q.memory_context):
            out.append(Filter("memory_at_default", "<=", float(q.max_memory)))  # the filter, indexed
        else:
            # Implied by the memory filter (the file alone must fit), and an indexed way in to it.
            out.append(Filter("file_size", "<=", q.max_memory))
    if q.draft_for is not None:
        if q.draft is None:
            raise RuntimeError("draft_for is looked up before a query is planned")
        # A target without a key matches nothing: no stored key is empty, so the index answers.
        out.append(Filter("vocab_sha256", "=", q.draft.key or ""))
        out.append(Filter("parameter_count", "below", q.draft.parameter_count))
    return out


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


def holding(need: int, width: int) -> tuple[int, ...]:
    """The masks of `width` bits that hold every bit of `need`: a short IN list."""
    return tuple(v for v in range(1 << width) if v & need == need)


__all__ = [
    "FACETS", "FACET_NAMES", "MAX_LIMIT", "MORE_FACETS", "SORTS", "SORT_ALIASES", "STATUSES",
    "DraftTarget", "Filter", "SearchQuery", "capability_bits", "column_filters", "decode_cursor", "encode_cursor",
    "holding", "modality_bits", "normalised", "parse_sort", "sort_column", "template_severity_rank",
    "terms",
]  # fmt: skip
