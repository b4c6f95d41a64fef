"""Reads: free text, every filter, sorts, keyset pagination, cursors and facets."""

from __future__ import annotations

import base64
import dataclasses
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy import inspect

from registry.catalog import facets as facets_module
from registry.catalog import memo as memo_module
from registry.catalog import migrate
from registry.catalog.db import Database, create_engine
from registry.catalog.errors import InvalidCursor, InvalidQuery
from registry.catalog.facets import facets
from registry.catalog.models import Artifact
from registry.catalog.search import (
    FACET_NAMES,
    FACETS,
    SORTS,
    SearchPage,
    SearchQuery,
    decode_cursor,
    encode_cursor,
    search,
)
from registry.catalog.services import upsert_repo_snapshot
from registry.catalog.snapshot import ArtifactRecord, RepoSnapshot
from registry.gguf.facts_model import QuantMixEntry
from registry.gguf.kvcache import KVCache
from tests.catalog.conftest import TempDatabases
from tests.catalog.factories import artifact, error_artifact, make_facts, make_snapshot


def _catalog() -> list[RepoSnapshot]:
    iq2 = {"IQ2_XS": QuantMixEntry(100, 10**9, 3 * 10**8), "F32": QuantMixEntry(10, 10, 40)}
    return [
        make_snapshot(
            "meta-llama/Llama-3-8B", downloads=1000, likes=50, card_license="llama3",
            last_modified=datetime(2024, 5, 1, tzinfo=UTC),
            artifacts=(artifact("llama-3-8b-f16.gguf", make_facts(
                name="Llama 3 8B", parameter_count=8_000_000_000, size_label="8B", file_type="F16",
                license="llama3", context_length=8192, quant_mix={"F16": QuantMixEntry(200, 8 * 10**9, 16 * 10**9)},
            ), size=16_000),),
        ),
        make_snapshot(
            "bartowski/Llama-3-8B-GGUF", downloads=500, likes=20, card_base_model=("meta-llama/Llama-3-8B",),
            card_base_model_relation="quantized", card_license="llama3",
            artifacts=tuple(
                artifact(f"Llama-3-8B-{ft}.gguf", make_facts(
                    name="Llama 3 8B", parameter_count=8_000_000_000, size_label="8B", file_type=ft,
                    license="llama3", context_length=8192, quant_mix=iq2 if ft == "IQ2_XS" else {},
                ), size=size)
                for ft, size in (("Q4_K_M", 4800), ("IQ2_XS", 2500), ("Q8_0", 8500))
            ),
        ),
        make_snapshot(
            "someone/llama-3-8b-finetune-GGUF", downloads=5, card_base_model=("bartowski/Llama-3-8B-GGUF",),
            card_base_model_relation="finetune", card_license="mit",
            artifacts=(artifact("ft.gguf", make_facts(name="Funny Tune", parameter_count=8_000_000_000,
                                                         file_type="Q4_K_M", license=None)),),
        ),
        make_snapshot(
            "mistralai/Mixtral-8x7B-GGUF", downloads=800, likes=80, card_license="apache-2.0",
            description="A sparse mixture of experts",
            artifacts=(artifact("mixtral.gguf", make_facts(
                architecture="llama", name="Mixtral", parameter_count=46_700_000_000, size_label="8x7B",
                expert_count=8, context_length=32768, file_type="Q4_K_M",
            ), shards=2, size=13_000),),
        ),
        make_snapshot(
            "qwen/Qwen2-0.5B-GGUF", downloads=300, likes=30,
            artifacts=(
                artifact("qwen2-0_5b-q8_0.gguf", make_facts(architecture="qwen2", name="Qwen2 0.5B",
                                                           parameter_count=500_000_000, size_label="0.5B",
                                                           file_type="Q8_0", context_length=32768)),
                error_artifact("qwen2-broken.gguf", "truncated", "file ends inside the tensor infos"),
            ),
        ),
    ]  # fmt: skip


@pytest.fixture
async def catalog(db: Database) -> Database:
    for snap in _catalog():
        async with db.sessions() as session, session.begin():
            await upsert_repo_snapshot(session, snap)
    return db


async def run(db: Database, **kwargs: object) -> SearchPage:
    async with db.sessions() as session:
        return await search(session, SearchQuery(**kwargs), with_total=True)  # type: ignore[arg-type]


def paths(page: SearchPage) -> list[str]:
    return [i.path for i in page.items]


async def test_default_is_indexed_by_downloads(catalog: Database) -> None:
    page = await run(catalog)
    assert paths(page)[0] == "llama-3-8b-f16.gguf"
    assert page.total == 7
    downloads = [i.downloads for i in page.items]
    assert downloads == sorted(downloads, reverse=True)
    assert all(i.status == "indexed" for i in page.items)


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"architecture": "qwen2"}, {"qwen2-0_5b-q8_0.gguf"}),
        ({"license": "mit"}, {"ft.gguf"}),  # the card's license stands in for a file without one
        ({"file_type": "IQ2_XS"}, {"Llama-3-8B-IQ2_XS.gguf"}),
        ({"tensor_type": "iq2_xs"}, {"Llama-3-8B-IQ2_XS.gguf"}),
        ({"min_params": 10_000_000_000}, {"mixtral-00001-of-00002.gguf"}),
        ({"max_params": 1_000_000_000}, {"qwen2-0_5b-q8_0.gguf"}),
        ({"size_label": "8x7B"}, {"mixtral-00001-of-00002.gguf"}),
        ({"min_size": 16_000}, {"llama-3-8b-f16.gguf", "mixtral-00001-of-00002.gguf"}),  # 2 shards of 13,000
        ({"min_size": 2500, "max_size": 4800}, {"Llama-3-8B-Q4_K_M.gguf", "Llama-3-8B-IQ2_XS.gguf"}),
        ({"max_size": 4800, "descendant_of": "meta-llama/Llama-3-8B"}, {"Llama-3-8B-Q4_K_M.gguf",
                                                                         "Llama-3-8B-IQ2_XS.gguf", "ft.gguf"}),
        ({"max_size": 4799, "min_size": 4801}, set()),
        ({"min_context": 32768, "architecture": "llama"}, {"mixtral-00001-of-00002.gguf"}),
        ({"expert_count": 8}, {"mixtral-00001-of-00002.gguf"}),
        ({"text": "mixture experts"}, {"mixtral-00001-of-00002.gguf"}),
        ({"text": "funny"}, {"ft.gguf"}),
        ({"text": "0.5"}, {"qwen2-0_5b-q8_0.gguf"}),  # short terms fall back to a scan
        ({"text": "8b q8_0"}, {"Llama-3-8B-Q8_0.gguf"}),
        ({"text": "100%"}, set()),  # LIKE wildcards are literal
        ({"text": "_5"}, {"qwen2-0_5b-q8_0.gguf"}),  # in a short term too
        ({"text": "% 8b"}, set()),
        ({"text": "7b 8x"}, {"mixtral-00001-of-00002.gguf"}),  # short terms rare together
        ({"status": "error"}, {"qwen2-broken.gguf"}),
        ({"descendant_of": "meta-llama/Llama-3-8B"}, {"Llama-3-8B-Q4_K_M.gguf", "Llama-3-8B-IQ2_XS.gguf",
                                                      "Llama-3-8B-Q8_0.gguf", "ft.gguf"}),
        ({"descendant_of": "META-LLAMA/llama-3-8b"}, {"Llama-3-8B-Q4_K_M.gguf", "Llama-3-8B-IQ2_XS.gguf",
                                                      "Llama-3-8B-Q8_0.gguf", "ft.gguf"}),  # any case, as the hub
        ({"descendant_of": "nobody/none"}, set()),
        ({"verification": "passed"}, set()),
        ({"file_type": "Q4_K_M", "license": "llama3", "text": "llama"}, {"Llama-3-8B-Q4_K_M.gguf"}),
    ],
)  # fmt: skip
async def test_filters(catalog: Database, kwargs: dict[str, object], expected: set[str]) -> None:
    page = await run(catalog, **kwargs)
    assert set(paths(page)) == expected
    assert page.total == len(expected)


async def test_error_rows_carry_the_error(catalog: Database) -> None:
    [item] = (await run(catalog, status="error")).items
    assert (item.error_code, item.error) == ("truncated", "file ends inside the tensor infos")
    assert item.to_dict()["error"] == "file ends inside the tensor infos"
    assert len((await run(catalog, status="all")).items) == 8


@pytest.mark.parametrize("sort", [*SORTS, "name:desc", "downloads:asc", "params", "size"])
async def test_pagination_walks_every_row_once_in_order(catalog: Database, sort: str) -> None:
    seen: list[int] = []
    cursor = None
    for _ in range(10):
        page = await run(catalog, sort=sort, limit=2, cursor=cursor, status="all")
        seen += [i.id for i in page.items]
        cursor = page.next_cursor
        if cursor is None:
            break
    full = await run(catalog, sort=sort, limit=100, status="all")
    assert seen == [i.id for i in full.items]
    assert len(seen) == 8


async def test_sort_directions(catalog: Database) -> None:
    by_size = await run(catalog, sort="file_size")
    assert [i.file_size for i in by_size.items] == sorted((i.file_size for i in by_size.items), reverse=True)
    by_name = await run(catalog, sort="name")
    assert [i.repo for i in by_name.items] == sorted(i.repo for i in by_name.items)


@pytest.mark.parametrize(
    "cursor",
    [
        "not base64 at all!",
        base64.urlsafe_b64encode(b"[1,2]").decode(),
        base64.urlsafe_b64encode(b'{"s":"downloads:desc","v":"x","i":1}').decode(),
        base64.urlsafe_b64encode(b'{"s":"downloads:desc","v":1}').decode(),
        encode_cursor("likes:desc", 5, 1),  # made for another sort
        base64.urlsafe_b64encode(b"\xff\xfe").decode(),
    ],
)
async def test_malformed_cursor_is_a_typed_error(catalog: Database, cursor: str) -> None:
    with pytest.raises(InvalidCursor) as info:
        await run(catalog, cursor=cursor)
    assert info.value.to_dict()["code"] == "invalid_cursor"


@pytest.mark.parametrize(
    "kwargs", [{"sort": "bogus"}, {"status": "deleted"}, {"limit": 0}, {"limit": 10_000}]
)
async def test_invalid_query(catalog: Database, kwargs: dict[str, object]) -> None:
    with pytest.raises(InvalidQuery):
        await run(catalog, **kwargs)


async def test_facets_follow_filters(catalog: Database) -> None:
    async with catalog.sessions() as session:
        all_counts = await facets(session, SearchQuery())
        llama3 = await facets(session, SearchQuery(license="llama3"))
    assert all_counts["architecture"] == {"llama": 6, "qwen2": 1}
    assert all_counts["license"] == {"llama3": 4, "apache-2.0": 2, "mit": 1}
    assert all_counts["size_bucket"] == {"4-9B": 5, "35-80B": 1, "<1.5B": 1}
    assert sum(all_counts["file_type"].values()) == 7
    assert llama3["file_type"] == {"F16": 1, "IQ2_XS": 1, "Q4_K_M": 1, "Q8_0": 1}


async def test_a_license_named_unknown_and_no_license_count_together(db: Database) -> None:
    """The hub's license list has `unknown`; a file without any license counts under the
    same facet key. Both must be counted, not the one of them the database returned last."""
    def unlicensed(path: str) -> ArtifactRecord:
        return artifact(path, make_facts(license=None))

    snaps = [
        make_snapshot("a/none-GGUF", "r1", card_license=None, artifacts=(unlicensed("n.gguf"),)),
        make_snapshot("a/unknown-GGUF", "r1", card_license="unknown",
                      artifacts=(unlicensed("u1.gguf"), unlicensed("u2.gguf"))),
        make_snapshot("a/mit-GGUF", "r1", card_license="mit", artifacts=(unlicensed("m.gguf"),)),
    ]  # fmt: skip
    for snap in snaps:
        async with db.sessions() as session, session.begin():
            await upsert_repo_snapshot(session, snap)
    async with db.sessions() as session:
        counts = await facets(session, SearchQuery())
    assert counts["license"] == {"unknown": 3, "mit": 1}


async def test_search_item_json(catalog: Database) -> None:
    item = (await run(catalog, architecture="qwen2")).items[0]
    data = item.to_dict()
    for key in ("repo", "path", "architecture", "parameter_count", "file_type", "size_label", "license",
                "shards", "status", "error"):  # fmt: skip
        assert key in data
    assert data["repo"] == "qwen/Qwen2-0.5B-GGUF" and data["shards"] == 1


async def test_counters_refresh_moves_sort_order(catalog: Database) -> None:
    snap = next(s for s in _catalog() if s.repo_id == "qwen/Qwen2-0.5B-GGUF")
    async with catalog.sessions() as session, session.begin():
        await upsert_repo_snapshot(session, dataclasses.replace(snap, downloads=10**6))
    assert (await run(catalog, limit=1)).items[0].repo == "qwen/Qwen2-0.5B-GGUF"


@pytest.fixture
def everything_common(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make SQLite treat every filter and term as common: the `+column` and LIKE code paths."""
    from registry.catalog import search as search_module
    from registry.catalog import search_index

    monkeypatch.setattr(search_module, "COMMON_ROWS", 0)
    monkeypatch.setattr(search_index, "COMMON_TERM", 0)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"architecture": "qwen2"},
        {"license": "llama3", "file_type": "Q8_0"},
        {"min_params": 10**9, "min_context": 8192, "status": "indexed"},
        {"text": "llama 8b"},
        {"text": "mixture", "architecture": "llama"},
    ],
)
async def test_planner_steering_keeps_results(
    catalog: Database, everything_common: None, kwargs: dict[str, object]
) -> None:
    from registry.catalog import search as search_module
    from registry.catalog import search_index

    steered = set(paths(await run(catalog, **kwargs)))
    search_module.COMMON_ROWS, search_index.COMMON_TERM = 10**9, 10**9
    assert steered == set(paths(await run(catalog, **kwargs)))
    assert steered


@pytest.mark.parametrize(
    ("kwargs", "architectures"),
    [
        ({"text": "experts"}, {"llama": 1}),
        ({"tensor_type": "IQ2_XS"}, {"llama": 1}),
        ({"descendant_of": "meta-llama/Llama-3-8B", "file_type": "Q4_K_M"}, {"llama": 2}),
        ({"status": "all"}, {"llama": 6, "qwen2": 1, "unknown": 1}),
    ],
)
async def test_facets_under_costly_filters(
    catalog: Database, kwargs: dict[str, object], architectures: dict[str, int]
) -> None:
    async with catalog.sessions() as session:
        counts = await facets(session, SearchQuery(**kwargs))  # type: ignore[arg-type]
    assert counts["architecture"] == architectures
    assert sum(counts["license"].values()) == sum(architectures.values())


async def test_keyset_pages_with_many_ties(db: Database) -> None:
    import random

    rng = random.Random(5)
    for r in range(12):
        snap = make_snapshot(
            f"tie/repo-{r}",
            downloads=rng.choice([0, 10, 10, 20]),
            likes=rng.choice([1, 1, 2]),
            artifacts=tuple(
                artifact(
                    f"m{i}.gguf",
                    make_facts(parameter_count=rng.choice([10**9, 2 * 10**9])),
                    size=rng.choice([5, 7]),
                )
                for i in range(rng.randint(1, 4))
            ),
        )
        async with db.sessions() as session, session.begin():
            await upsert_repo_snapshot(session, snap)
    for sort in [*SORTS, "downloads:asc", "file_size:asc"]:
        full = [i.id for i in (await run(db, sort=sort, limit=200)).items]
        walked: list[int] = []
        cursor = None
        while True:
            page = await run(db, sort=sort, limit=3, cursor=cursor)
            walked += [i.id for i in page.items]
            if (cursor := page.next_cursor) is None:
                break
        assert walked == full and len(set(walked)) == len(walked), sort


@given(
    st.one_of(
        st.text(max_size=200), st.binary(max_size=200).map(lambda b: base64.urlsafe_b64encode(b).decode())
    )
)
def test_any_cursor_text_is_decoded_or_rejected_as_invalid(cursor: str) -> None:
    for sort in ("downloads:desc", "name:asc", "last_modified:desc"):
        try:
            _, id_ = decode_cursor(cursor, sort)
        except InvalidCursor:
            continue
        assert isinstance(id_, int)


@given(
    st.sampled_from(sorted(SORTS)),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.text(st.characters(exclude_characters="\x00"), max_size=50),
    st.datetimes(timezones=st.just(UTC)),
)
def test_cursor_round_trip(key: str, number: int, name: str, when: datetime) -> None:
    sort = f"{key}:desc"
    # memory: a double, as the sum its SQL computes
    value: object = {"name": name, "last_modified": when, "memory": float(number)}.get(key, number)
    decoded, id_ = decode_cursor(encode_cursor(sort, value, 42), sort)
    assert (decoded, id_) == (value, 42)


@pytest.mark.parametrize("value", [True, "1", float("inf"), float("nan"), [1.0]])
def test_memory_cursor_takes_a_finite_number_or_none(value: object) -> None:
    sort = "memory:asc@4096"
    with pytest.raises(InvalidCursor):
        decode_cursor(encode_cursor(sort, value, 1), sort)
    assert decode_cursor(encode_cursor(sort, None, 7), sort) == (None, 7)
    assert decode_cursor(encode_cursor(sort, 12, 7), sort) == (12.0, 7)


async def test_memory_cursor_is_for_its_context(catalog: Database) -> None:
    page = await run(catalog, sort="memory", limit=1, memory_context=512)
    assert page.next_cursor is not None
    with pytest.raises(InvalidCursor):
        await run(catalog, sort="memory", limit=1, memory_context=1024, cursor=page.next_cursor)
    again = await run(catalog, sort="memory", limit=1, memory_context=512, cursor=page.next_cursor)
    assert again.items[0].id != page.items[0].id


async def test_out_of_range_cursor_is_rejected_before_the_database(catalog: Database) -> None:
    for cursor in (encode_cursor("downloads:desc", 2**70, 1), encode_cursor("downloads:desc", 1, 2**64)):
        with pytest.raises(InvalidCursor):
            await run(catalog, cursor=cursor)


@pytest.mark.parametrize(
    ("sort", "value"),
    [
        ("last_modified:desc", "0001-01-01T00:00:00+01:00"),  # before year 1 once in UTC
        ("last_modified:asc", "9999-12-31T23:59:59-01:00"),  # after year 9999 once in UTC
        ("name:asc", "\ud800"),  # a lone surrogate: no UTF-8 form to bind
    ],
)
async def test_cursor_value_the_database_cannot_bind_is_invalid(catalog: Database, sort: str, value: str) -> None:
    with pytest.raises(InvalidCursor):
        await run(catalog, sort=sort, cursor=encode_cursor(sort, value, 1))


async def test_nul_in_query_text_is_harmless(catalog: Database) -> None:
    assert paths(await run(catalog, text="mix\x00ture", architecture="llama\x00")) == [
        "mixtral-00001-of-00002.gguf"
    ]
    async with catalog.sessions() as session:
        assert (await facets(session, SearchQuery(license="mit\x00")))["license"] == {"mit": 1}


async def _all_pages(db: Database, kwargs: dict[str, object]) -> list[int]:
    ids: list[int] = []
    cursor = None
    while True:
        page = await run(db, **kwargs, limit=1, cursor=cursor)
        ids += [i.id for i in page.items]
        if (cursor := page.next_cursor) is None:
            return ids


@pytest.mark.parametrize("threshold", [0, 1, 2, 3])
@pytest.mark.parametrize(
    "kwargs",
    [
        {"license": "llama3", "file_type": "Q4_K_M"},
        {"architecture": "llama", "license": "llama3", "sort": "name"},
        {"architecture": "llama", "file_type": "Q4_K_M", "sort": "size:asc"},
        {"text": "llama 8b", "architecture": "llama"},
        {"text": "llama gguf", "sort": "likes"},
        {"architecture": "llama", "license": "llama3", "file_type": "Q4_K_M"},
        {"descendant_of": "meta-llama/Llama-3-8B"},
        {"descendant_of": "meta-llama/Llama-3-8B", "file_type": "Q4_K_M", "sort": "name"},
    ],
)
async def test_every_plan_pages_like_the_plain_one(
    catalog: Database, monkeypatch: pytest.MonkeyPatch, threshold: int, kwargs: dict[str, object]
) -> None:
    """Whatever the probes decide (walk the sort index, or sort the few matches of common
    filters), every page holds the same rows in the same order."""
    from registry.catalog import search as search_module
    from registry.catalog import search_index

    reference = await _all_pages(catalog, kwargs)
    monkeypatch.setattr(search_module, "COMMON_ROWS", threshold)
    monkeypatch.setattr(search_index, "COMMON_TERM", threshold)
    assert await _all_pages(catalog, kwargs) == reference


async def test_rare_conjunction_of_common_filters_sorts_its_matches(
    catalog: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    from registry.catalog import search as search_module

    monkeypatch.setattr(search_module, "COMMON_ROWS", 1)  # llama3 (4 rows) and Q4_K_M (2) are common
    query = SearchQuery(license="llama3", file_type="Q4_K_M")
    async with catalog.sessions() as session:
        plan = await search_module._filters(session, query)
    assert plan.sort_matches == (catalog.dialect == "sqlite")  # together they match one row
    assert paths(await run(catalog, license="llama3", file_type="Q4_K_M")) == ["Llama-3-8B-Q4_K_M.gguf"]


async def test_a_filter_the_default_sort_index_holds_is_common_sooner(
    catalog: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On the default sort the walk tests an architecture in the index entry, so a filter is
    walked past WALK_INDEX_COMMON_ROWS; other sorts read a row per entry and keep COMMON_ROWS."""
    from registry.catalog import search as search_module

    monkeypatch.setattr(search_module, "WALK_INDEX_COMMON_ROWS", 3)  # llama: 6 rows
    async with catalog.sessions() as session:
        by_downloads = await search_module._filters(session, SearchQuery(architecture="llama"))
        by_likes = await search_module._filters(session, SearchQuery(architecture="llama", sort="likes"))
    sqlite = catalog.dialect == "sqlite"
    assert ("+artifacts.architecture" in _where_sql(catalog, by_downloads.where)) == sqlite
    assert "+artifacts.architecture" not in _where_sql(catalog, by_likes.where)
    assert (by_downloads.filter_way_in, by_likes.filter_way_in) == (False, sqlite)
    for sort in ("downloads", "likes"):
        page = await run(catalog, architecture="llama", sort=sort)
        assert len(page.items) == 6 and {i.architecture for i in page.items} == {"llama"}


@pytest.mark.parametrize(
    ("kwargs", "scanned", "indexed"),
    [
        ({}, {"status"}, set()),
        # llama: 6 rows, Q4_K_M: 3
        ({"architecture": "llama", "file_type": "Q4_K_M"}, {"status", "architecture"}, {"file_type"}),
        # llama: 6 rows, up to 8,500 bytes: 6, together 4
        ({"architecture": "llama", "max_size": 8500}, set(), {"status", "architecture", "file_size"}),
        ({"architecture": "llama", "min_size": 2500}, {"status", "architecture", "file_size"}, set()),  # 5 together
    ],
)
async def test_sorting_every_match_checks_big_filters_on_a_scan(
    catalog: Database, monkeypatch: pytest.MonkeyPatch, kwargs: dict[str, object], scanned: set[str], indexed: set[str]
) -> None:
    """By memory at a context other than the default every match is read and sorted: on
    SQLite a filter matching more than 1 / SCAN_SHARE of the catalog is checked on a scan of
    the table (`+column`), a rarer one is the way in, and filters that are each big but not
    together stay indexed. The pages are the same whichever way in."""
    from registry.catalog import search as search_module

    query = {**kwargs, "sort": "memory", "memory_context": 8192}
    reference = await _all_pages(catalog, query)
    assert reference
    monkeypatch.setattr(search_module, "COMMON_ROWS", 0)
    monkeypatch.setattr(search_module, "SCAN_SHARE", 2)  # 8 artifacts: more than 4 rows is big
    async with catalog.sessions() as session:
        plan = await search_module._filters(session, SearchQuery(**query), sort_all=True)  # type: ignore[arg-type]
    where = _where_sql(catalog, plan.where)
    if catalog.dialect == "sqlite":
        assert {c for c in ("status", "architecture", "file_type", "file_size") if f"+artifacts.{c}" in where} == scanned
        assert all(f"artifacts.{c}" in where for c in indexed)
    else:  # PostgreSQL plans with its statistics
        assert "+" not in where
    assert await _all_pages(catalog, query) == reference


async def test_sqlite_sorts_by_memory_on_its_narrow_index(catalog: Database) -> None:
    """At a context other than the default, SQLite reads what the sort by memory needs from
    MEMORY_SORT_INDEX, not from the table's rows; PostgreSQL has no such index (it was
    slower there)."""
    from registry.catalog import search as search_module

    async with catalog.sessions() as session:
        query = SearchQuery(sort="memory", memory_context=8192)
        plan = await search_module._filters(session, query, sort_all=True)
        stmt = search_module._memory_page(8192, False, plan.where, None, 5)
        conn = await session.connection()
        indexes = await conn.run_sync(lambda c: {i["name"] for i in inspect(c).get_indexes("artifacts")})
        if catalog.dialect == "sqlite":
            sql = str(stmt.compile(conn.sync_connection, compile_kwargs={"literal_binds": True}))
            steps = [row[-1] for row in await conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {sql}")]
            assert any(f"COVERING INDEX {search_module.MEMORY_SORT_INDEX}" in step for step in steps), steps
        else:
            assert search_module.MEMORY_SORT_INDEX not in indexes
    assert [i.id for i in (await run(catalog, sort="memory", limit=50, memory_context=8192)).items] == [
        1, 2, 3, 4, 5, 6, 7,
    ]  # fmt: skip


@pytest.mark.parametrize("descending", [False, True])
async def test_by_memory_at_the_default_context_walks_its_index(
    catalog: Database, descending: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At the default context the sort by memory reads the database's own
    `memory_at_default` (on SQLite, its status common as in a real catalog, by walking its
    index, no sort; the statement adds up nothing itself): the hits by their `memory`, then
    those without an estimate by id, in either direction, and cursors crossing from the one
    to the other."""
    from registry.catalog import search as search_module

    monkeypatch.setattr(search_module, "COMMON_ROWS", 0)

    async with catalog.sessions() as session, session.begin():
        # Sized at 4,096 tokens, or their own shorter context; two alike (then by id).
        await upsert_repo_snapshot(session, make_snapshot("x/sized", artifacts=tuple(
            artifact(f"{n}.gguf", make_facts(context_length=context, kv_cache=KVCache(
                layers=1, bytes_per_token=per_token, swa_layers=1, swa_bytes_per_token=swa, sliding_window=512,
            )), size=size)
            for n, (size, context, per_token, swa) in enumerate([
                (5000, 8192, 10, 0), (1000, 1024, 100, 7), (5000, 8192, 10, 0), (100, 4096, 1, 1000), (9, 2, 3, 4),
            ])
        )))  # fmt: skip
    sort = "memory:desc" if descending else "memory"
    async with catalog.sessions() as session:
        plan = await search_module._filters(session, SearchQuery(sort=sort))
        estimated = dataclasses.replace(plan, where=[*plan.where, search_module._HAS_MEMORY_AT_DEFAULT])
        stmt = search_module._sorted_page(Artifact.memory_at_default, descending, estimated, SearchQuery(sort=sort),
                                          f"{sort}@4096")  # fmt: skip
        conn = await session.connection()
        sql = str(stmt.compile(conn.sync_connection, compile_kwargs={"literal_binds": True}))
        assert "kv_bytes_per_token" not in sql.split("FROM")[1] and "memory_at_default" in sql
        if catalog.dialect == "sqlite":
            steps = [row[-1] for row in await conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {sql}")]
            assert any("ix_artifacts_memory_at_default_id" in step for step in steps), steps
            assert not any("TEMP B-TREE" in step for step in steps), steps  # walked in order, not sorted
    items = (await run(catalog, limit=50)).items
    with_memory = sorted((i for i in items if i.memory is not None), key=lambda i: (i.memory["bytes"], i.id),
                         reverse=descending)  # fmt: skip
    without = sorted((i.id for i in items if i.memory is None), reverse=descending)
    expected = [i.id for i in with_memory] + without
    assert len(with_memory) == 5 and len(without) == 7  # the catalog's own have no estimate
    assert [i.memory["bytes"] for i in with_memory if i.memory is not None][:: -1 if descending else 1] == [
        9 + 3 * 2 + 4 * 2, 5000 + 10 * 4096, 5000 + 10 * 4096, 1000 + 100 * 1024 + 7 * 512, 100 + 4096 + 1000 * 512,
    ]  # fmt: skip
    assert [i.id for i in (await run(catalog, sort=sort, limit=50)).items] == expected
    for limit in (1, 2, 3, 7):
        walked, cursor = [], None
        while True:
            page = await run(catalog, sort=sort, limit=limit, cursor=cursor)
            walked += [i.id for i in page.items]
            if (cursor := page.next_cursor) is None:
                break
        assert walked == expected, limit
    fits = (await run(catalog, sort=sort, limit=50, max_memory=with_memory[3].memory["bytes"])).items
    assert [i.id for i in fits] == [i.id for i in with_memory if i.memory["bytes"] <= with_memory[3].memory["bytes"]]


def _where_sql(catalog: Database, where: list[Any]) -> str:
    return " AND ".join(str(w.compile(catalog.engine.sync_engine)) for w in where)


async def test_a_rare_filter_seeks_the_facet_index_prefix(catalog: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    """A rare file type among a common status, architecture and license: all four stay
    indexed, so SQLite seeks the four-column prefix of the covering index."""
    from registry.catalog import search as search_module

    monkeypatch.setattr(search_module, "COMMON_ROWS", 3)  # llama (6 rows) and llama3 (4) common, Q4_K_M (2) rare
    async with catalog.sessions() as session:
        plan = await search_module._filters(session, SearchQuery(architecture="llama", license="llama3",
                                                                 file_type="Q4_K_M"))  # fmt: skip
    assert "+" not in _where_sql(catalog, plan.where)
    async with catalog.sessions() as session:
        plan = await search_module._filters(session, SearchQuery(architecture="llama", license="llama3"))
    if catalog.dialect == "sqlite":  # both common: walked along the sort index
        assert "+artifacts.architecture" in _where_sql(catalog, plan.where)


async def test_a_common_range_of_the_sort_column_bounds_the_walk_of_its_index(
    catalog: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A common size range sorted by size: SQLite walks the size index between the bounds
    (the range stays indexed) instead of from the biggest file down, checking each row. A
    common range of another column is checked row by row; a rare filter beside it is the
    way in, and the range is then checked row by row too. Pages come out in order."""
    from registry.catalog import search as search_module

    monkeypatch.setattr(search_module, "COMMON_ROWS", 1)  # every filter is common
    bounded = SearchQuery(min_size=1000, max_size=16_000, sort="file_size")
    async with catalog.sessions() as session:
        walked = _where_sql(catalog, (await search_module._filters(session, bounded)).where)
        by_name = _where_sql(catalog, (await search_module._filters(session, SearchQuery(
            min_size=1000, max_size=16_000, sort="name"))).where)  # fmt: skip
    if catalog.dialect == "sqlite":
        assert "artifacts.file_size >=" in walked and "+artifacts.file_size" not in walked
        assert "+artifacts.file_size >=" in by_name
    monkeypatch.setattr(search_module, "COMMON_ROWS", 2000)  # every filter is rare: the way in
    async with catalog.sessions() as session:
        rare = await search_module._filters(session, SearchQuery(architecture="qwen2", min_size=1000, sort="file_size"))
    assert rare.filter_way_in is (catalog.dialect == "sqlite")
    monkeypatch.setattr(search_module, "COMMON_ROWS", 1)
    seen, cursor = [], None
    for _ in range(10):
        page = await run(catalog, min_size=1000, max_size=16_000, sort="file_size", limit=2, cursor=cursor)
        seen += [(i.file_size, i.id) for i in page.items]
        if (cursor := page.next_cursor) is None:
            break
    assert seen == sorted(seen, reverse=True) and len(seen) == len(set(seen)) >= 3
    assert all(1000 <= size <= 16_000 for size, _ in seen)


async def test_a_big_lineage_family_is_walked_along_the_sort_index(
    catalog: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    from registry.catalog import search as search_module

    monkeypatch.setattr(search_module, "COMMON_ROWS", 1)
    monkeypatch.setattr(search_module, "FAMILY_COMMON_ROWS", 10)
    async with catalog.sessions() as session:
        alone = await search_module._filters(session, SearchQuery(descendant_of="meta-llama/Llama-3-8B"))
        with_type = await search_module._filters(
            session, SearchQuery(descendant_of="meta-llama/Llama-3-8B", file_type="Q4_K_M")
        )
    walked = catalog.dialect == "sqlite"
    assert ("+artifacts.repo_pk IN" in _where_sql(catalog, alone.where)) == walked
    # Q4_K_M is common (2 rows), but rare within the family (at most 10 rows): its index is
    # the way in and the family a check; common within the family too, both are checks
    # along the sort index.
    sql = _where_sql(catalog, with_type.where)
    assert ("+artifacts.repo_pk IN" in sql, "+artifacts.file_type" in sql) == (walked, False)
    monkeypatch.setattr(search_module, "FAMILY_COMMON_ROWS", 0)
    async with catalog.sessions() as session:
        common_within = await search_module._filters(
            session, SearchQuery(descendant_of="meta-llama/Llama-3-8B", file_type="Q4_K_M")
        )
    sql = _where_sql(catalog, common_within.where)
    assert ("+artifacts.repo_pk IN" in sql, "+artifacts.file_type" in sql) == (walked, walked)
    assert common_within.filter_way_in is False  # a next page seeks the sort index too
    assert set(paths(await run(catalog, descendant_of="meta-llama/Llama-3-8B"))) == {
        "Llama-3-8B-Q4_K_M.gguf", "Llama-3-8B-IQ2_XS.gguf", "Llama-3-8B-Q8_0.gguf", "ft.gguf"}  # fmt: skip


async def test_a_next_page_of_a_rare_filter_keeps_off_the_sort_index(
    catalog: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first page of a rare filter comes through the filter's index; the next page's
    cursor range is written on `+column` too, or SQLite walks the sort index from the
    cursor on and checks the whole rest of the table for the filter's few rows."""
    from sqlalchemy import event

    from registry.catalog import search as search_module

    monkeypatch.setattr(search_module, "COMMON_ROWS", 3)  # Q4_K_M (2 rows) rare, llama (6 rows) common
    statements: list[str] = []
    listen = (catalog.engine.sync_engine, "before_cursor_execute")

    def record(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        statements.append(statement)

    async with catalog.sessions() as session:
        rare = await search_module._filters(session, SearchQuery(file_type="Q4_K_M"))
        common = await search_module._filters(session, SearchQuery(architecture="llama"))
    sqlite = catalog.dialect == "sqlite"
    assert (rare.filter_way_in, common.filter_way_in) == ((True, False) if sqlite else (False, False))
    for kwargs, unindexed in (({"file_type": "Q4_K_M"}, sqlite), ({"architecture": "llama"}, False)):
        first = await run(catalog, **kwargs, limit=1)
        event.listen(*listen, record)
        try:
            second = await run(catalog, **kwargs, limit=1, cursor=first.next_cursor)
        finally:
            event.remove(*listen, record)
        page_sql = next(sql for sql in statements if "ORDER BY" in sql)
        statements.clear()
        assert ("(+artifacts.downloads, +artifacts.id) <" in page_sql) == unindexed, page_sql
        assert second.items and second.items[0].id != first.items[0].id


async def test_a_memoised_family_follows_writes_of_any_connection(
    catalog: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A family's repos are kept until the next commit to the file (SQLite) or of any
    transaction that wrote (PostgreSQL, where the search binds them as one array): a new
    descendant, written by another engine, is in the next page at once."""
    from registry.catalog import search as search_module

    monkeypatch.setattr(search_module, "COMMON_ROWS", 1)  # the family (4 artifacts) is big
    family = {"Llama-3-8B-Q4_K_M.gguf", "Llama-3-8B-IQ2_XS.gguf", "Llama-3-8B-Q8_0.gguf", "ft.gguf"}
    for _ in range(2):  # the second page comes from the memo
        assert set(paths(await run(catalog, descendant_of="meta-llama/Llama-3-8B"))) == family
    key = ("meta-llama/llama-3-8b", search_module.MAX_DEPTH)
    async with catalog.sessions() as session:
        file_memo = memo_module.FileMemo.of(session)
        snapshots = memo_module.SnapshotMemo.of(session)
        if file_memo is not None:
            assert isinstance(file_memo.family(key, file_memo.generation()), str)
        else:
            assert snapshots is not None and catalog.dialect == "postgresql"
            pks = snapshots.family(key, await memo_module.SnapshotMemo.generation(session))
            assert isinstance(pks, list) and len(pks) == 2  # the quant repo and its fine-tune
            plan = await search_module._filters(session, SearchQuery(descendant_of="meta-llama/Llama-3-8B"))
            assert "= ANY (" in _where_sql(catalog, plan.where)
    other = Database.from_url(catalog.engine.url.render_as_string(hide_password=False))
    try:
        async with other.sessions() as session, session.begin():
            await upsert_repo_snapshot(session, make_snapshot(
                "new/Llama-3-8B-abliterated-GGUF", card_base_model=("someone/llama-3-8b-finetune-GGUF",),
                artifacts=(artifact("abl.gguf", make_facts()),)))  # fmt: skip
    finally:
        await other.dispose()
    assert set(paths(await run(catalog, descendant_of="meta-llama/Llama-3-8B"))) == family | {"abl.gguf"}


async def test_short_terms_rare_together_are_found_by_one_scan(
    catalog: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Short terms have no index. On a SQLite file, with no other way in, a scan (in slices
    of ids) finds the few artifacts holding them all; those are memoised until the next
    commit to the file (by any connection), fetched by id and sorted, and pages follow each
    other as before. Common together, they are checked along the sort index."""
    from registry.catalog import search as search_module

    monkeypatch.setattr(search_module, "COMMON_ROWS", 1)  # the status (7 rows) is no way in
    monkeypatch.setattr(search_module, "TERM_SCAN_SLICE", 2)  # the scan in slices of 2 ids
    llama_8b = {"llama-3-8b-f16.gguf", "Llama-3-8B-Q4_K_M.gguf", "Llama-3-8B-IQ2_XS.gguf", "Llama-3-8B-Q8_0.gguf",
                "ft.gguf"}  # fmt: skip
    async with catalog.sessions() as session:
        plan = await search_module._filters(session, SearchQuery(text="3 8b"))
    file_memo = catalog.dialect == "sqlite"
    assert plan.filter_way_in is file_memo
    assert ("json_each" in _where_sql(catalog, plan.where)) is file_memo
    seen: list[str] = []
    cursor = None
    for _ in range(len(llama_8b) + 1):
        page = await run(catalog, text="3 8b", limit=1, cursor=cursor)
        seen += paths(page)
        assert page.total == len(llama_8b)
        if (cursor := page.next_cursor) is None:
            break
    assert len(seen) == len(llama_8b) and set(seen) == llama_8b  # in downloads order, each once
    other = Database.from_url(catalog.engine.url.render_as_string(hide_password=False))
    try:
        async with other.sessions() as session, session.begin():
            await upsert_repo_snapshot(session, make_snapshot(
                "new/Llama-3-8B-abliterated-GGUF", artifacts=(artifact("abl.gguf", make_facts(
                    name="Llama 3 8B abliterated")),)))  # fmt: skip
    finally:
        await other.dispose()
    assert set(paths(await run(catalog, text="3 8b"))) == llama_8b | {"abl.gguf"}

    monkeypatch.setattr(search_module, "TERM_SCAN_ROWS", 2)  # 6 matches: common
    async with catalog.sessions() as session:
        plan = await search_module._filters(session, SearchQuery(text="8b"))
    assert plan.filter_way_in is False and "json_each" not in _where_sql(catalog, plan.where)
    assert set(paths(await run(catalog, text="8b"))) == llama_8b | {"abl.gguf"}


async def test_first_pages_of_column_filters_share_their_statement(catalog: Database) -> None:
    """Filter clauses and first-page statements are built once per filter values and sort;
    text, tensor type and lineage filters, and next pages, are built per query."""
    from sqlalchemy import event

    from registry.catalog import search as search_module

    executed: list[Any] = []
    listen = (catalog.engine.sync_engine, "before_execute")

    def record(_conn: Any, clauseelement: Any, *_args: Any) -> None:
        executed.append(clauseelement)

    event.listen(*listen, record)
    try:
        pages = [await run(catalog, architecture="llama", limit=2) for _ in range(2)]
        other = await run(catalog, architecture="qwen2", limit=2)
        texts = [await run(catalog, architecture="llama", text="llama", limit=2) for _ in range(2)]
    finally:
        event.remove(*listen, record)
    page_statements = [e for e in executed if "sort_value" in str(e)]
    assert len(page_statements) == 5
    first, second, qwen, text_1, text_2 = page_statements
    assert first is second and qwen is not first and text_1 is not text_2
    assert paths(pages[0]) == paths(pages[1]) and paths(other) != paths(pages[0])
    assert paths(texts[0]) == paths(texts[1])
    assert search_module._clause(search_module._column_predicates(SearchQuery(architecture="llama"))[1]) is (
        search_module._clause(search_module._column_predicates(SearchQuery(architecture="llama"))[1])
    )


async def test_facet_counts_follow_writes_of_any_connection(catalog: Database) -> None:
    async with catalog.sessions() as session:
        before = await facets(session, SearchQuery())
    other = Database.from_url(catalog.engine.url.render_as_string(hide_password=False))
    try:
        async with other.sessions() as session, session.begin():
            await upsert_repo_snapshot(session, make_snapshot("new/Phi-GGUF", artifacts=(
                artifact("phi.gguf", make_facts(architecture="phi3")),)))  # fmt: skip
    finally:
        await other.dispose()
    async with catalog.sessions() as session:
        after = await facets(session, SearchQuery())
    assert "phi3" not in before["architecture"]
    assert after["architecture"]["phi3"] == 1


async def test_facet_counts_are_kept_until_a_write_and_never_miss_one_in_flight(
    catalog: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Asked again with nothing written, the counts come from the memo (SQLite file or
    PostgreSQL snapshot). A write that another connection has begun but not committed while
    the counts are taken, and commits afterwards, is in the next answer."""

    counted = 0
    count_facets = facets_module._count_facets

    async def counting(session: Any, q: SearchQuery, names: tuple[str, ...]) -> dict[str, dict[str, int]]:
        nonlocal counted
        counted += 1
        return await count_facets(session, q, names)

    monkeypatch.setattr(facets_module, "_count_facets", counting)

    async def architectures() -> dict[str, int]:
        async with catalog.sessions() as session:
            return (await facets(session, SearchQuery()))["architecture"]

    first = await architectures()
    assert await architectures() == first and counted == 1
    other = Database.from_url(catalog.engine.url.render_as_string(hide_password=False))
    try:
        async with other.sessions() as session, session.begin():
            await upsert_repo_snapshot(session, make_snapshot("new/Phi-GGUF", artifacts=(
                artifact("phi.gguf", make_facts(architecture="phi3")),)))  # fmt: skip
            await session.flush()
            during = await architectures()  # the write is in flight, not committed
        after = await architectures()
    finally:
        await other.dispose()
    assert "phi3" not in during and after["phi3"] == 1
    settled = counted
    assert await architectures() == after and counted == settled
    # Facets counted on request join those kept; asked again, in any order, none is recounted.
    async with catalog.sessions() as session:
        kinds = await facets(session, SearchQuery(), ("kind", "verification"))
        assert counted == settled + 1 and kinds["kind"] == {"model": sum(after.values())}
        both = await facets(session, SearchQuery(), ("verification", "architecture", "kind"))
        assert both == {"verification": kinds["verification"], "architecture": after, "kind": kinds["kind"]}
        assert counted == settled + 1
        await facets(session, SearchQuery(), ("capability",))
        assert counted == settled + 2


async def test_requests_for_counts_under_way_wait_for_them(catalog: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    """After a commit, the requests asking for counts that one is taking wait for its answer
    instead of counting too; one that asks for other facets counts them itself. A count that
    fails or is cancelled leaves its waiters to count for themselves, never stuck."""
    import asyncio


    count_facets = facets_module._count_facets
    calls: list[tuple[str, ...]] = []
    release = asyncio.Event()
    fail: list[BaseException] = []

    async def held(session: Any, q: SearchQuery, names: tuple[str, ...]) -> dict[str, dict[str, int]]:
        calls.append(names)
        if len(calls) == 1:
            await release.wait()  # the first count stays under way until released
            if fail:
                raise fail[0]
        return await count_facets(session, q, names)

    monkeypatch.setattr(facets_module, "_count_facets", held)

    async def ask(*names: str) -> dict[str, dict[str, int]]:
        async with catalog.sessions() as session:
            return await facets(session, SearchQuery(), names or FACETS)

    commits: list[str] = []

    async def commit() -> None:
        commits.append(f"new/Phi-{len(commits)}-GGUF")
        other = Database.from_url(catalog.engine.url.render_as_string(hide_password=False))
        try:
            async with other.sessions() as session, session.begin():
                await upsert_repo_snapshot(session, make_snapshot(commits[-1], artifacts=(
                    artifact("phi.gguf", make_facts(architecture="phi3")),)))  # fmt: skip
        finally:
            await other.dispose()

    async def settle() -> None:
        for _ in range(20):  # let the others reach their wait
            await asyncio.sleep(0.01)

    # One counts; four more ask for the same or fewer of the four, one for `kind`.
    await commit()
    first = asyncio.create_task(ask())
    await settle()
    others = [asyncio.create_task(ask(*names)) for names in ((), (), ("license", "architecture"), ("size_bucket",))]
    kinds = asyncio.create_task(ask("kind"))
    await settle()
    assert len(calls) == 2 and calls[1] == ("kind",)  # only the one asking for other facets counted
    release.set()
    whole = await first
    answers = await asyncio.wait_for(asyncio.gather(*others), 60)
    assert answers[0] == answers[1] == whole and whole["architecture"]["phi3"] == 1
    assert answers[2] == {"license": whole["license"], "architecture": whole["architecture"]}
    assert answers[3] == {"size_bucket": whole["size_bucket"]}
    assert (await kinds)["kind"] == {"model": sum(whole["architecture"].values())}
    assert len(calls) == 2

    for failure in (RuntimeError("the database went away"), None):  # None: the first is cancelled
        await commit()
        calls.clear()
        release.clear()
        fail[:] = [failure] if failure is not None else []
        first = asyncio.create_task(ask())
        await settle()
        waiting = [asyncio.create_task(ask()) for _ in range(3)]
        await settle()
        assert len(calls) == 1
        if failure is None:
            first.cancel()
        release.set()
        with pytest.raises(RuntimeError if failure is not None else asyncio.CancelledError):
            await first
        answers = await asyncio.wait_for(asyncio.gather(*waiting), 60)  # a hang fails, not blocks
        assert answers[0] == answers[1] == answers[2] and answers[0]["architecture"]["phi3"] == len(commits)
        assert 2 <= len(calls) <= 4  # the waiters counted: at least one, one each at most


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)  # SQLite reads PRAGMA data_version
async def test_facets_of_a_family_read_the_snapshot_once_per_transaction(
    catalog: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PostgreSQL: facet counts under `descendant_of` need the generation twice (the counts'
    memo and the family's); one `txid_current_snapshot()` per transaction serves both, and
    the session's next transaction reads it again, so it sees a commit made in between."""
    from sqlalchemy import event

    from registry.catalog import search as search_module

    monkeypatch.setattr(search_module, "COMMON_ROWS", 1)  # the family (4 artifacts) is big: memoised
    reads: list[str] = []

    def record(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        if "txid_current_snapshot" in statement:
            reads.append(statement)

    q = SearchQuery(descendant_of="meta-llama/Llama-3-8B")
    listen = (catalog.engine.sync_engine, "before_cursor_execute")
    event.listen(*listen, record)
    try:
        async with catalog.sessions() as session:
            first = await facets(session, q)
            assert len(reads) == 1
            await session.commit()
            other = Database.from_url(catalog.engine.url.render_as_string(hide_password=False))
            try:
                async with other.sessions() as writer, writer.begin():
                    await upsert_repo_snapshot(writer, make_snapshot(
                        "new/Llama-3-8B-abliterated-GGUF", card_base_model=("meta-llama/Llama-3-8B",),
                        artifacts=(artifact("abl.gguf", make_facts(architecture="phi3")),)))  # fmt: skip
            finally:
                await other.dispose()
            second = await facets(session, q)
            assert len(reads) == 2
    finally:
        event.remove(*listen, record)
    assert "phi3" not in first["architecture"] and second["architecture"]["phi3"] == 1


@pytest.mark.parametrize("common", [False, True], ids=["rare", "common"])
async def test_a_word_matches_the_same_rows_whichever_way_in(
    db: Database, monkeypatch: pytest.MonkeyPatch, common: bool
) -> None:
    """Words are substrings of the lower-cased text. FTS5's trigram tokenizer takes `ſ` for
    `s` and final `ς` for `σ`; LIKE (common terms, PostgreSQL) does not: "sty" found
    "ſtyle" on SQLite while the word was rare, and no longer once it was common."""
    from registry.catalog import search as search_module
    from registry.catalog import search_index

    async with db.sessions() as session, session.begin():
        await upsert_repo_snapshot(session, make_snapshot(
            "org/greek", artifacts=(artifact("m.gguf", make_facts(name="ſtyle λόγοσ x1")),)))  # fmt: skip
    if common:  # every term and filter common: LIKE along the sort index, short terms scanned
        monkeypatch.setattr(search_module, "COMMON_ROWS", 0)
        monkeypatch.setattr(search_index, "COMMON_TERM", 0)
    for text, found in (("sty", 0), ("ſty", 1), ("όγος", 0), ("όγοσ", 1), ("x1 sty", 0), ("x1 ſty", 1)):
        assert (await run(db, text=text)).total == found, text
        async with db.sessions() as session:
            assert (await facets(session, SearchQuery(text=text)))["architecture"] == ({"llama": 1} if found else {})


async def _migrated_postgres(temp_databases: TempDatabases, pg_options: str = "") -> Database:
    """A new PostgreSQL database (`pg_options` follow CREATE DATABASE name) migrated to head."""
    url = temp_databases.new_url("postgresql", pg_options)
    engine = create_engine(url)
    try:
        await migrate.upgrade(engine)
    finally:
        await engine.dispose()
    return Database.from_url(url)


@pytest.mark.postgres
async def test_names_sort_by_code_point_whatever_the_database_collation(temp_databases: TempDatabases) -> None:
    """PostgreSQL compares text by the database's collation, and a database created with a
    language's (an initdb default such as en_US.UTF-8, or ICU) sorted names by its rules:
    "org/a_b", "org/a-c", "org/ab", where SQLite gives "org/a-c", "org/a_b", "org/ab"."""
    db = await _migrated_postgres(temp_databases, "TEMPLATE template0 LOCALE_PROVIDER icu ICU_LOCALE 'en-US'")
    try:
        for repo in ("org/ab", "org/a_b", "org/A-c", "org/aa"):
            async with db.sessions() as session, session.begin():
                await upsert_repo_snapshot(session, make_snapshot(repo, artifacts=(artifact("m.gguf"),)))
        expected = ["org/A-c", "org/a_b", "org/aa", "org/ab"]
        for sort, order in (("name", expected), ("name:desc", expected[::-1])):
            page = await run(db, sort=sort)
            assert [i.repo for i in page.items] == order
            assert await _all_pages(db, {"sort": sort}) == [i.id for i in page.items]
    finally:
        await db.dispose()


@pytest.mark.postgres
async def test_postgres_plans_a_search_with_its_values_and_only_that_transaction(
    temp_databases: TempDatabases,
) -> None:
    """From a prepared statement's sixth run PostgreSQL may plan it once for all values;
    the search asks for plans made with its values, for its own transaction only (the
    lineage walks keep their generic plans)."""
    from sqlalchemy import text

    db = await _migrated_postgres(temp_databases)
    show = text("SELECT current_setting('plan_cache_mode')")
    try:
        async with db.sessions() as session:
            assert (await session.execute(show)).scalar_one() == "auto"
            await search(session, SearchQuery(text="coder 7b"))
            assert (await session.execute(show)).scalar_one() == "force_custom_plan"
            await facets(session, SearchQuery(architecture="llama"))
        async with db.sessions() as session:
            assert (await session.execute(show)).scalar_one() == "auto"
            await facets(session, SearchQuery(architecture="qwen2"))  # counted, not memoised
            assert (await session.execute(show)).scalar_one() == "force_custom_plan"
    finally:
        await db.dispose()


@pytest.mark.parametrize("few", [True, False])
async def test_facets_of_models_are_every_kind_less_the_others(
    db: Database, monkeypatch: pytest.MonkeyPatch, few: bool
) -> None:
    """`kind=model` facets, with no other filter outside the facet columns, are counted as
    the facets without the kind filter less those of the artifacts of other kinds when those
    are few: the same counts as read directly (each value's count, values of no model
    left out, NULL as unknown), memoised or afresh, before and after a commit."""
    from registry.catalog import search as search_module

    def files(repo: int) -> tuple[ArtifactRecord, ...]:
        return (
            artifact(f"m{repo}-q4.gguf", make_facts(kind="model", file_type="Q4_K_M", license=None if repo % 3 else "mit")),
            artifact(f"m{repo}-q8.gguf", make_facts(kind="model", file_type="Q8_0", architecture=f"a{repo % 4}")),
            artifact(f"mmproj{repo}.gguf", make_facts(kind="mmproj", architecture="clip", file_type="F16")),
            artifact(f"lora{repo}.gguf", make_facts(kind="lora", file_type="Q8_0", license="mit")),
            error_artifact(f"broken{repo}.gguf"),
        )

    async def write(repo: int) -> None:
        async with db.sessions() as session, session.begin():
            await upsert_repo_snapshot(session, make_snapshot(f"org/r{repo}", artifacts=files(repo)))

    for repo in range(6):
        await write(repo)
    if not few:  # every other kind counts as many: read directly
        monkeypatch.setattr(search_module, "COMMON_ROWS", 0)
        monkeypatch.setattr(search_module, "SCAN_SHARE", 10**9)
    taken: list[tuple[SearchQuery, bool]] = []
    decide = facets_module._other_kinds_are_few

    async def spy(session: Any, q: SearchQuery) -> tuple[SearchQuery, list[Any]] | None:
        few = await decide(session, q)
        if q.kind is not None:  # not the counts without it, which this asks for in turn
            taken.append((q, few is not None))
        return few

    async def direct(session: Any, q: SearchQuery) -> None:
        return None

    queries = [SearchQuery(kind="model"), SearchQuery(kind="model", status="all"),
               SearchQuery(kind="model", architecture="a1"), SearchQuery(kind="model", license="mit", status="all"),
               SearchQuery(kind="model", status="error")]  # fmt: skip
    for round_ in range(2):
        for q in queries:
            monkeypatch.setattr(facets_module, "_other_kinds_are_few", direct)
            async with db.sessions() as session:
                expected = await facets_module.count_facets(session, q, FACET_NAMES)
            monkeypatch.setattr(facets_module, "_other_kinds_are_few", spy)
            async with db.sessions() as session:
                assert await facets_module.count_facets(session, q, FACET_NAMES) == expected, q
                assert await facets(session, q, FACET_NAMES) == expected, q
                assert await facets(session, q, FACET_NAMES) == expected, q  # from the memo
        if round_ == 0:
            await write(6)  # a commit: counted again
    assert expected["kind"] == {}  # status=error: no model
    # Without the threshold only a filter that no other kind matches (`a1`) subtracts: nothing.
    assert len(taken) == 4 * len(queries)
    assert all(t == (few or q.architecture == "a1") for q, t in taken), taken
