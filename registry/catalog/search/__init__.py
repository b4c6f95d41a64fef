"""Artifact search: a page of hits for a query, with filters and keyset pagination (facet
counts: `registry.catalog.facets`).

The modules, in the order a search goes through them:

* `query.py`: the query, its validation and normal form, sorts, cursors, and its filters on
  indexed columns as data (`Filter`);
* `planner.py`: the pure planner: a query and the answers of row-count probes in, a plan
  out (`Where`: each part of the WHERE as data), tested without a database;
* `settings.py`: the planner's thresholds, one frozen object (`PlannerSettings`);
* `run.py`: `search()`: the probes answered (and kept in the database's caches), the
  statements run;
* `statements.py`: a plan written as SQLAlchemy statements, each keyed by its shape;
* `memory.py`: the memory estimate: the filter, the sort and each hit's `memory`;
* `hits.py`: the hit columns, read by label, and a page of rows (`SearchPage`); the typed
  hit is the response model built from them (`registry.api.present.search_hits`).
"""

from __future__ import annotations

from registry.catalog.search.hits import HIT_COLUMNS, SearchPage
from registry.catalog.search.memory import (
    MAX_MEMORY_CONTEXT,
    MEMORY_CONTEXT,
    MEMORY_SORT_INDEX,
    memory_at,
    memory_needed,
)
from registry.catalog.search.query import (
    FACET_NAMES,
    FACETS,
    MAX_LIMIT,
    MORE_FACETS,
    SORT_ALIASES,
    SORTS,
    STATUSES,
    DraftTarget,
    SearchQuery,
    capability_bits,
    decode_cursor,
    encode_cursor,
    modality_bits,
    parse_sort,
    template_severity_rank,
)
from registry.catalog.search.run import search
from registry.catalog.search.settings import PlannerSettings

__all__ = [
    "FACETS", "FACET_NAMES", "HIT_COLUMNS", "MAX_LIMIT", "MAX_MEMORY_CONTEXT", "MEMORY_CONTEXT",
    "MEMORY_SORT_INDEX", "MORE_FACETS", "SORTS", "SORT_ALIASES", "STATUSES", "DraftTarget", "PlannerSettings",
    "SearchPage", "SearchQuery", "capability_bits", "decode_cursor", "encode_cursor", "memory_at",
    "memory_needed", "modality_bits", "parse_sort", "search", "template_severity_rank",
]  # fmt: skip
