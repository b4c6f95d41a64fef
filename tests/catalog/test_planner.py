"""The search planner (registry.catalog.search.planner), pure: a query and the answers of its
probes in, a plan out, without a database. Each test answers the probes as a catalog of the
described shape would and checks the plan's choices."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from registry.catalog.errors import InvalidQuery
from registry.catalog.search import PlannerSettings, SearchQuery
from registry.catalog.search.planner import (
    CatalogSize,
    Common,
    CommonText,
    Family,
    Needs,
    Plan,
    Probe,
    TermIds,
    Where,
    plan_every_match,
    plan_page,
    plan_scan,
)
from registry.catalog.search.query import DraftTarget, Filter, column_filters

SETTINGS = PlannerSettings()
Answer = Callable[[Probe], object]


def answered(plan: Callable[[dict[Probe, object]], Plan | Needs], answer: Answer) -> tuple[Plan, list[Probe]]:
    """Run the planner as `search` does: answer what it needs until it gives a plan; the plan
    and the probes it asked, in order."""
    answers: dict[Probe, object] = {}
    asked: list[Probe] = []
    for _ in range(20):
        out = plan(answers)
        if isinstance(out, Plan):
            return out, asked
        assert out.probes and not set(out.probes) & set(answers), out  # only new questions
        for probe in out.probes:
            asked.append(probe)
            answers[probe] = answer(probe)
    raise AssertionError("the planner kept asking")


def page(q: SearchQuery, answer: Answer, *, family: Family | None = None, memo: bool = True,
         settings: PlannerSettings = SETTINGS) -> tuple[Plan, list[Probe]]:  # fmt: skip
    return answered(lambda a: plan_page(q, family, a, settings, sqlite=True, memo=memo), answer)


def rows(counts: dict[str, int], together: int | None = None, text: dict[str, int] | None = None) -> Answer:
    """Probe answers of a catalog where a filter on `column` matches counts[column] rows (a
    probe of several filters or a family `together` rows), and each text term text[term]."""

    def answer(probe: Probe) -> object:
        if isinstance(probe, CatalogSize):
            return 10_000
        if isinstance(probe, CommonText):
            found = min((text or {}).get(t, 0) for t in probe.terms)
            return found > probe.threshold
        if isinstance(probe, TermIds):
            return "[1,2,3]"
        assert isinstance(probe, Common)
        where = probe.where
        if len(where.filters) == 1 and where.family is None and not where.terms:
            return counts[where.filters[0].column] > probe.threshold
        assert together is not None, probe
        return together > probe.threshold

    return answer


def unindexed(plan: Plan) -> set[str]:
    return {plan.where.filters[i].column for i in plan.where.unindexed}


def test_a_rare_filter_is_the_way_in_and_a_common_one_a_check_along_the_sort_index() -> None:
    rare, asked = page(SearchQuery(file_type="Q4_K_M", sort="likes"), rows({"status": 9000, "file_type": 50}))
    assert unindexed(rare) == {"status"} and rare.filter_way_in and rare.sorted_matches
    assert asked == [Common(Where((Filter("status", "=", "indexed"),)), 2000),
                     Common(Where((Filter("file_type", "=", "Q4_K_M"),)), 2000)]  # fmt: skip
    common, _ = page(SearchQuery(file_type="Q4_K_M", sort="likes"), rows({"status": 9000, "file_type": 5000},
                                                                           together=4000))  # fmt: skip
    assert unindexed(common) == {"status", "file_type"} and not common.sorted_matches


def test_the_default_sort_index_makes_its_own_columns_common_sooner() -> None:
    """Along the downloads index a filter on a column it holds is tested in the index entry:
    past `walk_index_common_rows` walking beats the filter's own index; other sorts read a
    row per entry and keep `common_rows`."""
    answer = rows({"status": 9000, "architecture": 500}, together=400)
    by_downloads, asked = page(SearchQuery(architecture="llama"), answer)
    by_likes, _ = page(SearchQuery(architecture="llama", sort="likes"), answer)
    assert Common(Where((Filter("architecture", "=", "llama"),)), 300) in asked
    assert unindexed(by_downloads) == {"status", "architecture"} and not by_downloads.filter_way_in
    # rare there: the way in, with the status (a leading run of the facet index's columns)
    assert unindexed(by_likes) == set() and by_likes.filter_way_in


def test_common_filters_rare_together_sort_their_few_matches() -> None:
    q = SearchQuery(license="llama3", file_type="Q4_K_M")
    plan, asked = page(q, rows({"status": 9000, "license": 3000, "file_type": 3000}, together=10))
    assert plan.sort_matches and not plan.where.unindexed  # every index usable
    assert asked[-1] == Common(Where(tuple(column_filters(q))), 600)  # the conjunction, probed like one
    many, _ = page(q, rows({"status": 9000, "license": 3000, "file_type": 3000}, together=1000))
    assert not many.sort_matches and unindexed(many) == {"status", "license", "file_type"}


def test_a_rare_equality_on_the_facet_index_prefix_keeps_the_prefix_indexed() -> None:
    """A rare file type among a common status, architecture and license: all four stay
    indexed, so SQLite seeks the four-column prefix of the covering index."""
    q = SearchQuery(architecture="llama", license="llama3", file_type="Q4_K_M", sort="likes")
    plan, _ = page(q, rows({"status": 9000, "architecture": 4000, "license": 3000, "file_type": 20}))
    assert not plan.where.unindexed and plan.filter_way_in


def test_a_common_range_of_the_sort_column_bounds_the_walk_of_its_index() -> None:
    """Sorted by size, a common size range stays indexed (SQLite seeks to one end and stops
    past the other); sorted by name it is checked row by row; beside a rare filter (the way
    in) it is checked row by row too."""
    answer = rows({"status": 9000, "file_size": 5000, "architecture": 40}, together=4000)
    by_size, _ = page(SearchQuery(min_size=1000, max_size=16_000, sort="file_size"), answer)
    by_name, _ = page(SearchQuery(min_size=1000, max_size=16_000, sort="name"), answer)
    assert unindexed(by_size) == {"status"} and not by_size.filter_way_in
    assert unindexed(by_name) == {"status", "file_size"}
    rare, _ = page(SearchQuery(architecture="qwen2", min_size=1000, sort="file_size"), answer)
    assert unindexed(rare) == {"file_size"} and rare.filter_way_in  # status and architecture: one seek


def test_a_big_lineage_family_is_checked_along_the_sort_index() -> None:
    family = Family("meta-llama/llama-3-8b", "[1,2,3]")
    q = SearchQuery(descendant_of="meta-llama/Llama-3-8B")
    big, asked = page(q, rows({"status": 9000}, together=5000), family=family)
    assert big.where.family_walked and not big.filter_way_in
    assert Common(Where(family=family), 2000) in asked
    small, _ = page(q, rows({"status": 9000}, together=50), family=family)
    assert not small.where.family_walked and small.filter_way_in  # the family's repos are the way in
    # A common file type rare within the big family is the way in, the family a check; common
    # within it too, both are checks along the sort index.
    typed = SearchQuery(descendant_of="meta-llama/Llama-3-8B", file_type="Q4_K_M")

    def within(count: int) -> Answer:
        plain = rows({"status": 9000, "file_type": 3000})

        def answer(probe: Probe) -> object:
            if isinstance(probe, Common) and probe.where.family is not None:
                return (5000 if not probe.where.filters else count) > probe.threshold
            return plain(probe)

        return answer

    rare_within, asked = page(typed, within(5), family=family)
    assert rare_within.where.family_walked and unindexed(rare_within) == {"status"} and rare_within.filter_way_in
    assert asked[-1].threshold == 20  # type: ignore[union-attr]  # the downloads index holds the repo
    common_within, _ = page(typed, within(500), family=family)
    assert unindexed(common_within) == {"status", "file_type"} and not common_within.filter_way_in


def test_short_terms_with_no_other_way_in_are_found_once_and_are_the_way_in() -> None:
    answer = rows({"status": 9000})
    plan, asked = page(SearchQuery(text="3 8b"), answer)
    assert asked[-1] == TermIds(("3", "8b"), 600) and plan.where.term_ids == "[1,2,3]" and plan.filter_way_in

    def common(probe: Probe) -> object:
        return None if isinstance(probe, TermIds) else answer(probe)  # too many hold them

    many, _ = page(SearchQuery(text="3 8b"), common)
    assert many.where.term_ids is None and not many.filter_way_in and many.where.terms == ("3", "8b")
    without_memo, asked = page(SearchQuery(text="3 8b"), answer, memo=False)  # nowhere to keep them
    assert not any(isinstance(p, TermIds) for p in asked) and without_memo.where.term_ids is None


def test_a_rare_term_is_sought_in_the_text_index_and_a_common_one_checked_along_the_sort_index() -> None:
    answer = rows({"status": 9000}, together=1000, text={"instruct": 9000, "exaone": 12})
    rare, _ = page(SearchQuery(text="exaone"), answer)
    assert rare.where.fts == ("exaone",) and rare.filter_way_in
    common, asked = page(SearchQuery(text="instruct"), answer)
    assert common.where.fts == () and not common.filter_way_in
    assert CommonText(("instruct",), 2000) in asked


def test_sorting_every_match_checks_big_filters_on_a_scan() -> None:
    """The sort by memory at another context reads every match: a filter matching more than
    1 / scan_share of the catalog is checked on the scan, a rarer one is the way in, and
    filters each big but not together stay indexed."""
    settings = PlannerSettings(common_rows=0, scan_share=2)  # a catalog of 10,000: over 5,000 is big
    q = SearchQuery(architecture="llama", file_type="Q4_K_M", sort="memory", memory_context=8192)

    def scan(answer: Answer) -> Plan:
        return answered(lambda a: plan_scan(q, None, a, settings, sqlite=True), answer)[0]

    assert unindexed(scan(rows({"status": 9800, "architecture": 6000, "file_type": 2500}))) == {"status", "architecture"}
    assert unindexed(scan(rows({"status": 9800, "architecture": 6000, "file_type": 6000}, together=5500))) == {
        "status", "architecture", "file_type"}  # fmt: skip
    assert unindexed(scan(rows({"status": 9800, "architecture": 6000, "file_type": 6000}, together=3000))) == set()


def test_postgresql_plans_with_its_statistics() -> None:
    q = SearchQuery(architecture="llama", text="instruct", descendant_of="a/b")
    family = Family("a/b", (1, 2))
    plan = plan_page(q, family, {}, SETTINGS, sqlite=False, memo=True)
    assert isinstance(plan, Plan) and not plan.where.unindexed and plan.where.fts == ()
    assert plan.where.family == family and not plan.where.family_walked
    assert plan_scan(q, family, {}, SETTINGS, sqlite=False) == plan_every_match(q, family, sqlite=False)


def test_reading_every_match_needs_no_probe() -> None:
    q = SearchQuery(text="llama 8b", with_projector=True, modality="vision", tensor_type="iq2_xs")
    plan = plan_every_match(q, None, sqlite=True)
    assert plan.where.fts == ("llama",) and plan.where.terms == ("llama", "8b")  # "8b": too short for the index
    assert plan.where.listed_projectors and plan.where.tensor_type == "IQ2_XS" and plan.where.modality == 1


def test_the_memory_filter_is_a_column_at_the_default_context_and_sized_at_any_other() -> None:
    at_default = plan_every_match(SearchQuery(max_memory=8 << 30), None, sqlite=True)
    assert Filter("memory_at_default", "<=", float(8 << 30)) in at_default.where.filters
    assert at_default.where.memory is None
    other = plan_every_match(SearchQuery(max_memory=8 << 30, memory_context=32768), None, sqlite=True)
    assert Filter("file_size", "<=", 8 << 30) in other.where.filters  # implied, and an indexed way in
    assert other.where.memory == (32768, float(8 << 30))


def test_drafts_are_filters_on_the_vocabulary_and_the_size() -> None:
    q = SearchQuery(draft_for=7, draft=DraftTarget("abc", 32_000, 8_000_000_000))
    plan = plan_every_match(q, None, sqlite=True)
    assert {Filter("vocab_sha256", "=", "abc"), Filter("parameter_count", "below", 8_000_000_000)} <= set(
        plan.where.filters
    )
    assert plan.where.draft_vocab == 32_000
    with pytest.raises(RuntimeError):  # looked up before planning
        plan_every_match(SearchQuery(draft_for=7), None, sqlite=True)


@pytest.mark.parametrize(
    "q",
    [SearchQuery(status="nope"), SearchQuery(kind="nope"), SearchQuery(capability="flying"),
     SearchQuery(memory_context=0),
     SearchQuery(template_severity="awful"), SearchQuery(modality="smell")],
)
def test_an_invalid_query_is_refused_before_any_probe(q: SearchQuery) -> None:
    with pytest.raises(InvalidQuery):
        plan_page(q, None, {}, SETTINGS, sqlite=True, memo=True)


def test_every_probe_is_asked_once_and_plans_are_stable() -> None:
    """The same answers give the same plan, and a plan's Where is a value: equal for equal
    queries (what the statement shapes and the kept answers are keyed by)."""
    q = SearchQuery(architecture="llama", license="mit", text="coder instruct", sort="likes")
    answer = rows({"status": 9000, "architecture": 4000, "license": 3000}, together=100,
                  text={"coder": 3000, "instruct": 5000})  # fmt: skip
    first, asked = page(q, answer)
    second, _ = page(q, answer)
    assert first == second and hash(first.where) == hash(second.where)
    assert len(asked) == len(set(asked))
