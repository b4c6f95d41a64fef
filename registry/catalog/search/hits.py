"""A search hit's columns (`HIT_COLUMNS`, read by label) and a page of them (`SearchPage`).

Pages are plain rows, not ORM objects: building an instance per hit cost more than the
query. Rows read by label (`row.repo_id`, `row.path`); the one typed hit is the response
model built from them by name (`registry.api.present.search_hits`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from registry.catalog.models import Artifact, Repo
from registry.catalog.search.memory import MEMORY_COLUMNS, MEMORY_CONTEXT

_A, _R = Artifact.__table__.c, Repo.__table__.c
# The columns of a hit, each read by its label: the artifact's, its repo's id, the stored
# worst severity rank, the memory estimate (`memory`), the capabilities' and modalities'
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
class SearchPage:
    rows: Sequence[Any]  # rows of HIT_COLUMNS (and `sort_value`), read by label
    next_cursor: str | None
    total: int | None = None
    memory_context: int = MEMORY_CONTEXT  # the context the hits' memory is sized at


__all__ = ["HIT_COLUMNS", "SearchPage"]
