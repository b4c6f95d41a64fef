"""The search's planner: a query and the answers of row-count probes in, a plan out. Pure:
no database, no clock, no cache; `run.planned` asks the probes it names and calls it again.

SQLite keeps no per-value statistics, so for `architecture = 'llama' ORDER BY downloads` it
may fetch all 40,000 llama rows through the architecture index and sort them, where walking
the downloads index needs ~50 rows for a page. A bounded probe (at most `common_rows` index
entries) tells a common value from a rare one; a common one is written `+column = value`,
which SQLite will not serve from an index. Several common filters (or text terms) can still
match few rows together (llama + BF16 + cc-by-nc-4.0): then walking the sort index reads the
whole table, so their conjunction is probed too and, when rare, served from the indexes and
sorted. PostgreSQL has statistics: its plans are the plain WHERE.

Sorting every match (the sort by memory at another context, facet counts), the question is
only how to find the matches: fetching rows through an index costs about twice what a scan
of the table costs per row, so a filter matching more than 1 / `scan_share` of the catalog is
checked on the scan, and a rarer one is the way in.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from registry.catalog.search.memory import at_default_context
from registry.catalog.search.query import (
    Filter,
    SearchQuery,
    column_filters,
    modality_bits,
    sort_column,
    terms,
)
from registry.catalog.search.settings import PlannerSettings
from registry.catalog.search_index import MIN_TRIGRAM

# The columns of the default sort's index (`ix_artifacts_downloads_walk`) besides its key:
# walking it tests a filter on them in the index entry, reading a row only for a match.
WALK_INDEX_COLUMNS = frozenset({"status", "architecture", "license", "file_type", "context_length", "repo_pk"})
# The leading columns of the covering facet index: equality filters on a prefix of them
# are one seek into it.
FACET_INDEX = ("status", "architecture", "license", "file_type", "size_bucket")


@dataclass(frozen=True, slots=True)
class Family:
    """The repos below `root` in the lineage graph: walked in the statement (`ids` None), or
    the primary keys a walk found, as a JSON array (SQLite) or a tuple (PostgreSQL)."""

    root: str  # the repo's key (`repo_key`)
    ids: str | tuple[int, ...] | None = field(default=None, compare=False)

    @property
    def form(self) -> str:
        return "walk" if self.ids is None else ("json" if isinstance(self.ids, str) else "array")


@dataclass(frozen=True, slots=True)
class Where:
    """The WHERE of a search statement as data: each part's form and its values."""

    filters: tuple[Filter, ...] = ()
    unindexed: frozenset[int] = frozenset()  # filters written `+column`: no index for them
    terms: tuple[str, ...] = ()  # each a substring of the search text (LIKE)
    fts: tuple[str, ...] = ()  # terms also sought in the FTS5 index (SQLite)
    tensor_type: str | None = None
    with_projector: bool | None = None
    modality: int | None = None  # a projector taking all of these (mask)
    listed_projectors: bool = False  # projector filters against a list of repos made once
    family: Family | None = None
    family_walked: bool = False  # the family checked along the sort index, not the way in
    memory: tuple[int, float] | None = None  # (context, budget) at a context no column holds
    draft_vocab: int | None = None  # the vocabulary size a draft must be near
    term_ids: str | None = field(default=None, compare=False)  # the few artifacts holding short terms
    other_kinds: bool = False  # only the artifacts of another kind than `model` (facets)


@dataclass(frozen=True, slots=True)
class Plan:
    where: Where
    # Few rows match: fetch them through the filters' indexes and sort them, instead of
    # walking the sort key's index (which would read the table end to end to fill a page).
    sort_matches: bool = False
    # A filter's own index (or the text index, or the family's repos) is the way in, not
    # the sort index, and the matches are sorted.
    filter_way_in: bool = False

    @property
    def sorted_matches(self) -> bool:
        """The matches are sorted, not walked in order: the order and a next page's cursor
        range are written on `+column`, which keeps SQLite off the sort index (on the bare
        column they lured it there, checking row by row for a rare filter's few matches)."""
        return self.sort_matches or self.filter_way_in


# Probes: questions for the database, hashable (their answers are kept by the caller).
@dataclass(frozen=True, slots=True)
class Common:
    """More than `threshold` artifacts match `where`?"""

    where: Where
    threshold: int


@dataclass(frozen=True, slots=True)
class CommonText:
    """More than `threshold` artifacts hold every one of the terms (each long enough for
    the FTS5 index), counted in that index?"""

    terms: tuple[str, ...]
    threshold: int


@dataclass(frozen=True, slots=True)
class CatalogSize:
    """About how many artifacts the catalog holds (the highest id)."""


@dataclass(frozen=True, slots=True)
class TermIds:
    """The artifacts holding every term (some too short for the FTS5 index), when at most
    `limit` do: a JSON array of ids, or None (more)."""

    terms: tuple[str, ...]
    limit: int


Probe = Common | CommonText | CatalogSize | TermIds


@dataclass(frozen=True, slots=True)
class Needs:
    """The probes to answer before the planner can go on."""

    probes: tuple[Probe, ...]


Answers = Mapping[Probe, object]


class _Asked:
    """The answers so far; what is asked and not known is collected for one `Needs`."""

    def __init__(self, answers: Answers) -> None:
        self.answers = answers
        self.missing: list[Probe] = []

    def __call__(self, probe: Probe) -> object:
        if probe in self.answers:
            return self.answers[probe]
        if probe not in self.missing:
            self.missing.append(probe)
        return None

    def needs(self) -> Needs | None:
        return Needs(tuple(self.missing)) if self.missing else None


def extras(q: SearchQuery, family: Family | None) -> Where:
    """The query's filters besides those on indexed columns, as a Where without them."""
    memory = None
    if q.max_memory is not None and not at_default_context(q.memory_context):
        memory = (int(q.memory_context or 0), float(q.max_memory))
    draft_vocab = q.draft.vocab_size if q.draft is not None else None
    return Where(
        terms=terms(q), tensor_type=q.tensor_type.upper() if q.tensor_type else None,
        with_projector=q.with_projector, modality=modality_bits(q.modality) if q.modality is not None else None,
        family=family, memory=memory, draft_vocab=draft_vocab,
    )  # fmt: skip


def _long(words: Sequence[str]) -> tuple[str, ...]:
    return tuple(t for t in words if len(t) >= MIN_TRIGRAM)


def plan_every_match(q: SearchQuery, family: Family | None, *, sqlite: bool) -> Plan:
    """The plain WHERE, for reads of every match where no probe pays (facet counts without
    a scan, totals): on SQLite every long term through the FTS5 index."""
    base = extras(q, family)
    fts = _long(base.terms) if sqlite else ()
    return Plan(replace(base, filters=tuple(column_filters(q)), fts=fts, listed_projectors=sqlite))


def plan_scan(
    q: SearchQuery, family: Family | None, answers: Answers, settings: PlannerSettings, *, sqlite: bool
) -> Plan | Needs:
    """For reads of every match that sort them all (SQLite: the sort by memory at another
    context, facet counts under filters outside the covering indexes): a filter matching a
    big share of the catalog is checked on a scan, a rarer one is the way in."""
    if not sqlite:
        return plan_every_match(q, family, sqlite=False)
    filters = tuple(column_filters(q))
    ask = _Asked(answers)
    size = ask(CatalogSize())
    if (needs := ask.needs()) is not None:
        return needs
    share = max(settings.common_rows, (size if isinstance(size, int) else 0) // settings.scan_share)
    big = [bool(ask(Common(Where((f,)), share))) for f in filters]
    if (needs := ask.needs()) is not None:
        return needs
    if len(filters) >= 2 and all(big):
        # Each matches a big share, together they may not (llama and Q4_K_M: 40% and 25% of
        # a catalog, 10% together, faster through an index than on a scan).
        together = ask(Common(Where(filters), share))
        if (needs := ask.needs()) is not None:
            return needs
        if not together:
            big = [False] * len(filters)
    base = extras(q, family)
    unindexed = frozenset(i for i, b in enumerate(big) if b)
    return Plan(replace(base, filters=filters, unindexed=unindexed, fts=_long(base.terms), listed_projectors=True))


def plan_page(
    q: SearchQuery, family: Family | None, answers: Answers, settings: PlannerSettings, *, sqlite: bool,
    memo: bool,
) -> Plan | Needs:  # fmt: skip
    """A page along the sort's index (see the module doc). `memo`: the database keeps the
    few artifacts holding short terms (`TermIds`), so that they can be the way in."""
    filters = tuple(column_filters(q))
    base = extras(q, family)
    words = base.terms
    if not sqlite:
        return Plan(replace(base, filters=filters))
    ask = _Asked(answers)
    order = sort_column(q)
    walked = WALK_INDEX_COLUMNS if order == "downloads" else frozenset()
    near = min(settings.walk_index_common_rows, settings.common_rows)
    many = [bool(ask(Common(Where((f,)), near if f.column in walked else settings.common_rows))) for f in filters]
    long = _long(words)
    common = {t for t in long if ask(CommonText((t,), settings.common_term_rows))}
    if (needs := ask.needs()) is not None:
        return needs
    # Short terms have no index: with no other way in, their matches are counted first.
    short = [t for t in words if len(t) < MIN_TRIGRAM]
    no_way_in = all(many) and family is None and len(common) + len(short) == len(words)
    short_ids: str | None = None
    if short and no_way_in and memo:
        found = ask(TermIds(tuple(sorted(set(words))), settings.term_scan_rows))
        if (needs := ask.needs()) is not None:
            return needs
        if found is None:  # the terms are common together
            common |= set(short)
        else:
            short_ids = str(found)
    # Every filter is common on its own; together they may not be (probed like one).
    if all(many) and len(filters) - 1 + len(common) >= 2 and len(common) == len(words):
        together = _common_together(ask, q, filters, base, settings, bool(short))
        if (needs := ask.needs()) is not None:
            return needs
        if not together:
            return Plan(replace(base, filters=filters, fts=long), sort_matches=True)
    many = seek_prefix(filters, many)
    # A big lineage family (a popular base model's thousands of descendants) is a check
    # along the sort index, not the way in, when the other filters are rare (their indexes
    # are the way in) or absent, or common and common within the family too. Common
    # filters that are rare within the family become the way in themselves.
    walk_family = False
    if family is not None:
        big_family = ask(Common(Where(family=family), settings.common_rows))
        if (needs := ask.needs()) is not None:
            return needs
        if big_family and not words:
            walk_family = True
            others = [i for i, f in enumerate(filters) if f.column != "status"]
            if others and all(many[i] for i in others):
                threshold = settings.family_common_rows
                if order == "downloads":  # its index holds the filtered columns and the repo
                    threshold = min(settings.family_common_rows_walk_index, threshold)
                within = ask(Common(Where(filters, family=family), threshold))
                if (needs := ask.needs()) is not None:
                    return needs
                if not within:
                    many = [m and i not in others for i, m in enumerate(many)]
    filter_way_in = (
        not all(many)
        or any(t not in common for t in long)  # the FTS5 index
        or (family is not None and not walk_family)
        or short_ids is not None  # the few artifacts holding the terms
    )
    # Along the sort index, a common range of the sort column itself bounds the walk: SQLite
    # seeks to one end and stops past the other (checked row by row, sizes of 4-6 GB sorted
    # by size walked down from the biggest file).
    unindexed = frozenset(
        i for i, (f, m) in enumerate(zip(filters, many, strict=True)) if m and (filter_way_in or f.column != order)
    )
    where = replace(
        base, filters=filters, unindexed=unindexed, fts=tuple(t for t in long if t not in common),
        family_walked=walk_family, term_ids=short_ids,
    )  # fmt: skip
    return Plan(where, filter_way_in=filter_way_in)


def _common_together(
    ask: _Asked, q: SearchQuery, filters: tuple[Filter, ...], base: Where, settings: PlannerSettings, short: bool
) -> bool:
    """Whether the filters and terms, each common, match more than `common_together_rows`
    together. Text alone (besides a common status) is counted in the FTS5 index, which
    intersects the terms' row lists: several times cheaper than checking the terms row by
    row. A status is common when it gets here, and the answer only steers the plan."""
    threshold = min(settings.common_together_rows, settings.common_rows)
    alone = (
        len(filters) <= 1 and q.tensor_type is None and q.descendant_of is None and q.max_memory is None
        and q.draft_for is None and q.with_projector is None and q.modality is None
    )  # fmt: skip
    if alone:
        if short:
            return True  # counted by the TermIds probe, which found them common together
        return bool(ask(CommonText(tuple(sorted(base.terms)), threshold)))
    return bool(ask(Common(replace(base, filters=filters, fts=_long(base.terms)), threshold)))


def seek_prefix(filters: Sequence[Filter], many: list[bool]) -> list[bool]:
    """`many` with the equality filters on a leading run of the facet index's columns left
    indexed when one of them is rare: with all of them indexed SQLite seeks the prefix and
    reads only the matches, instead of reading the rare one's index and the table for each
    of its rows to check the others."""
    equal = {f.column: i for i, f in enumerate(filters) if f.op == "="}
    prefix = []
    for name in FACET_INDEX:
        if name not in equal:
            break
        prefix.append(equal[name])
    if len(prefix) < 2 or all(many[i] for i in prefix):
        return many
    return [False if i in prefix else m for i, m in enumerate(many)]


__all__ = [
    "FACET_INDEX", "WALK_INDEX_COLUMNS", "Answers", "CatalogSize", "Common", "CommonText", "Family", "Needs", "Plan",
    "Probe", "TermIds", "Where", "extras", "plan_every_match", "plan_page", "plan_scan", "seek_prefix",
]  # fmt: skip
