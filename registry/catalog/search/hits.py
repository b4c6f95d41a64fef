"""A search hit: the columns a page reads (`HIT_COLUMNS`, by label), and `SearchItem`, the
hit built from a row by those labels.

Pages are plain rows, not ORM objects: building an instance per hit cost more than the
query. Rows read by label (`row.repo_id`, `row.path`); callers that want the hit as data
take `SearchPage.items`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from registry.catalog.models import Artifact, Repo
from registry.catalog.search.memory import MEMORY_COLUMNS, MEMORY_CONTEXT, hit_memory
from registry.gguf.facts_model import modality_names
from registry.safety.capabilities import from_mask
from registry.safety.findings import SEVERITIES

_A, _R = Artifact.__table__.c, Repo.__table__.c
# The columns of a hit, each read by its label: the artifact's, its repo's id, the stored
# worst severity rank, the KV cache estimate (`memory`), the capabilities' and modalities'
# masks. Table columns, not the ORM attributes: matching ORM-annotated result columns cost
# more than the query.
HIT_COLUMNS = (
    _A.id, _R.repo_id, _A.path, _A.revision, _A.status, _A.error_code, _A.error_message, _A.architecture,
    _A.parameter_count, _A.file_type, _A.size_label, _A.license, _A.context_length, _A.expert_count,
    _A.shard_count, _A.file_size, _A.downloads, _A.likes, _A.last_modified, _A.verification_status,
    _A.chat_template_max_severity, *(_A[name] for name in MEMORY_COLUMNS), _A.chat_template_capabilities, _A.kind,
    _A.modalities,
)  # fmt: skip


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
    # {"tokens", "bytes"}: what it needs to run at the query's memory_context (`memory`)
    memory: dict[str, int] | None = None
    chat_template_capabilities: list[str] | None = None  # CAPABILITIES names; None: not probed
    kind: str | None = None  # a KINDS name; None for error rows
    modalities: list[str] | None = None  # a projector's MODALITIES names; None on other kinds

    def to_dict(self) -> dict[str, Any]:
        data = {name: getattr(self, name) for name in self.__slots__}
        data["last_modified"] = self.last_modified.isoformat()
        return data


def item(row: Any, memory_context: int) -> SearchItem:
    """The hit of a row of `HIT_COLUMNS`, by label."""
    return SearchItem(
        id=row.id, repo=row.repo_id, path=row.path, revision=row.revision, status=row.status,
        error_code=row.error_code, error=row.error_message, architecture=row.architecture,
        parameter_count=row.parameter_count, file_type=row.file_type, size_label=row.size_label,
        license=row.license, context_length=row.context_length, expert_count=row.expert_count,
        shards=row.shard_count, file_size=row.file_size, downloads=row.downloads, likes=row.likes,
        last_modified=row.last_modified, verification=row.verification_status,
        chat_template_severity=severity_name(row.chat_template_max_severity),
        memory=hit_memory(row, memory_context),
        chat_template_capabilities=capability_names(row.chat_template_capabilities), kind=row.kind,
        modalities=modality_names(row.modalities),
    )  # fmt: skip


@dataclass(frozen=True, slots=True)
class SearchPage:
    rows: Sequence[Any]  # rows of HIT_COLUMNS (and `sort_value`), read by label
    next_cursor: str | None
    total: int | None = None
    memory_context: int = MEMORY_CONTEXT  # the context the hits' memory is sized at

    @property
    def items(self) -> list[SearchItem]:
        return [item(row, self.memory_context) for row in self.rows]

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"items": [i.to_dict() for i in self.items], "next": self.next_cursor}
        if self.total is not None:
            out["total"] = self.total
        return out


def capability_names(bits: int | None) -> list[str] | None:
    """A stored capability mask as names (None stays None: not probed)."""
    return None if bits is None else from_mask(bits)


def severity_name(rank: int | None) -> str | None:
    """The stored worst-severity rank back as its name (None stays None)."""
    return SEVERITIES[rank] if rank is not None and 0 <= rank < len(SEVERITIES) else None


__all__ = ["HIT_COLUMNS", "SearchItem", "SearchPage", "capability_names", "item", "severity_name"]
