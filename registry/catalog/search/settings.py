"""The search planner's thresholds, in one frozen object: `DEFAULT` unless a caller passes
another (tests pass small ones, so that every way in is taken on a catalog of a few rows).

Each steers SQLite's plans only (PostgreSQL plans with its statistics); a stale or odd value
costs speed, never a wrong result. Measured on bench.search's catalog of 100,000 artifacts
(the figures: docs/performance.md).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class PlannerSettings:
    # A filter matching more rows than this is not served from its own index: the page
    # walks the sort index and checks it row by row.
    common_rows: int = 2000
    # The same for a filter on a column the default sort's index holds (its walk tests the
    # filter in the index entry and reads a row only for a match): walking beats fetching
    # the matches through the filter's index and sorting them sooner.
    walk_index_common_rows: int = 300
    # Within a big lineage family: common filters matching more rows than this are checked
    # along the sort index, fewer are fetched through their indexes and sorted.
    family_common_rows: int = 200
    # The same along the default sort's index, which holds the filtered columns and the repo.
    family_common_rows_walk_index: int = 20
    # Filters or text terms, each common, that match more rows than this together are
    # checked along the sort index; fewer are fetched through their indexes and sorted.
    common_together_rows: int = 600
    # A text term in more rows than this is checked by LIKE along the sort index, not
    # sought in the FTS5 index (which materializes every match first).
    common_term_rows: int = 2000
    # Sorting every match: a filter matching more than 1 / scan_share of the catalog is
    # checked on a scan of the table rather than being the way in.
    scan_share: int = 4
    # Terms too short for the FTS5 index, with no other way in: when at most this many
    # artifacts hold them all, their ids are found once per commit and are the way in.
    term_scan_rows: int = 600
    # Ids per slice of that scan, each one statement, with a turn of the event loop between two.
    term_scan_slice: int = 8192
    # How long a lineage family's walk (done once per commit) may hold the event loop.
    family_walk_inline_ms: float = 30.0


DEFAULT = PlannerSettings()

__all__ = ["DEFAULT", "PlannerSettings"]
