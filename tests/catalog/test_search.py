"""Reads: free text, every filter, sorts, keyset pagination, cursors and facets."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import json
from collections import Counter
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy import inspect, select

from registry.api.present import search_hits
from registry.catalog import migrate
from registry.catalog.db import Database, create_engine
from registry.catalog.errors import InvalidCursor, InvalidQuery
from registry.catalog.facets import count_facets, facets
from registry.catalog.lineage import MAX_DEPTH
from registry.catalog.models import Artifact
from registry.catalog.readpath import CatalogSession, ReadSession
from registry.catalog.search import (
    FACET_NAMES,
    FACETS,
    MEMORY_SORT_INDEX,
    SORTS,
    PlannerSettings,
    SearchPage,
    SearchQuery,
    decode_cursor,
    encode_cursor,
    search,
    statements,
)
from registry.catalog.search.planner import Needs, Plan, Probe, plan_every_match, plan_page
from registry.catalog.services import upsert_repo_snapshot
from registry.catalog.shapes import Keyed, Shapes
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


async def run(db: Database, settings: PlannerSettings | None = None, **kwargs: object) -> SearchPage:
    """A page through SQLAlchemy's session and through the API's read path: the same."""
    q = SearchQuery(**kwargs)  # type: ignore[arg-type]
    async with db.sessions() as session:
        page = await search(session, q, with_total=True, settings=settings)
    lean = ReadSession(db.reads)
    try:
        fast = await search(lean, q, with_total=True, settings=settings)
    finally:
        await lean.close()
    assert (search_hits(fast), fast.next_cursor, fast.total) == (search_hits(page), page.next_cursor, page.total), q
    return page


def paths(page: SearchPage) -> list[str]:
    return [i.path for i in search_hits(page)]


async def test_default_is_indexed_by_downloads(catalog: Database) -> None:
    page = await run(catalog)
    assert paths(page)[0] == "llama-3-8b-f16.gguf"
    assert page.total == 7
    downloads = [i.downloads for i in search_hits(page)]
    assert downloads == sorted(downloads, reverse=True)
    assert all(i.status == "indexed" for i in search_hits(page))


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
    [item] = search_hits(await run(catalog, status="error"))
    assert item.error is not None
    assert (item.error.code, item.error.message) == ("truncated", "file ends inside the tensor infos")
    assert len(search_hits(await run(catalog, status="all"))) == 8


@pytest.mark.parametrize("sort", [*SORTS, "name:desc", "downloads:asc", "params", "size"])
async def test_pagination_walks_every_row_once_in_order(catalog: Database, sort: str) -> None:
    seen: list[int] = []
    cursor = None
    for _ in range(10):
        page = await run(catalog, sort=sort, limit=2, cursor=cursor, status="all")
        seen += [i.id for i in search_hits(page)]
        cursor = page.next_cursor
        if cursor is None:
            break
    full = await run(catalog, sort=sort, limit=100, status="all")
    assert seen == [i.id for i in search_hits(full)]
    assert len(seen) == 8


async def test_sort_directions(catalog: Database) -> None:
    by_size = await run(catalog, sort="file_size")
    assert [i.file_size for i in search_hits(by_size)] == sorted((i.file_size for i in search_hits(by_size)), reverse=True)
    by_name = await run(catalog, sort="name")
    assert [i.repo for i in search_hits(by_name)] == sorted(i.repo for i in search_hits(by_name))


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
    item = search_hits(await run(catalog, architecture="qwen2"))[0]
    data = msgspec.to_builtins(item)
    for key in ("repo", "path", "architecture", "parameter_count", "file_type", "size_label", "license",
                "shard_count", "status", "error"):  # fmt: skip
        assert key in data
    assert data["repo"] == "qwen/Qwen2-0.5B-GGUF" and data["shard_count"] == 1 and data["error"] is None


async def test_counters_refresh_moves_sort_order(catalog: Database) -> None:
    snap = next(s for s in _catalog() if s.repo_id == "qwen/Qwen2-0.5B-GGUF")
    async with catalog.sessions() as session, session.begin():
        await upsert_repo_snapshot(session, dataclasses.replace(snap, downloads=10**6))
    assert search_hits(await run(catalog, limit=1))[0].repo == "qwen/Qwen2-0.5B-GGUF"


# Thresholds that make every filter, term and family "common" on a catalog of a few rows:
# the `+column`, LIKE, short-term scan and family-walk ways in are all taken.
EVERYTHING_COMMON = PlannerSettings(common_rows=0, walk_index_common_rows=0, family_common_rows=0,
                                    family_common_rows_walk_index=0, common_together_rows=0, common_term_rows=0)  # fmt: skip
NOTHING_COMMON = PlannerSettings(common_rows=10**9, walk_index_common_rows=10**9, common_term_rows=10**9)


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
async def test_planner_steering_keeps_results(catalog: Database, kwargs: dict[str, object]) -> None:
    steered = set(paths(await run(catalog, settings=EVERYTHING_COMMON, **kwargs)))
    assert steered == set(paths(await run(catalog, settings=NOTHING_COMMON, **kwargs)))
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
        full = [i.id for i in search_hits(await run(db, sort=sort, limit=200))]
        walked: list[int] = []
        cursor = None
        while True:
            page = await run(db, sort=sort, limit=3, cursor=cursor)
            walked += [i.id for i in search_hits(page)]
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
    assert search_hits(again)[0].id != search_hits(page)[0].id


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


async def _all_pages(db: Database, kwargs: dict[str, object], settings: PlannerSettings | None = None) -> list[int]:
    ids: list[int] = []
    cursor = None
    while True:
        page = await run(db, settings, **kwargs, limit=1, cursor=cursor)
        ids += [i.id for i in search_hits(page)]
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
        {"min_size": 1000, "max_size": 16_000, "sort": "file_size"},
        {"architecture": "llama", "sort": "memory", "memory_context": 8192},
        {"architecture": "llama", "file_type": "Q4_K_M", "sort": "memory:desc", "memory_context": 8192},
    ],
)
async def test_every_plan_pages_like_the_plain_one(catalog: Database, threshold: int, kwargs: dict[str, object]) -> None:
    """Whatever the probes decide (walk the sort index, sort the few matches of common
    filters, check a family or a range along the index, scan for every match), every page
    holds the same rows in the same order."""
    reference = await _all_pages(catalog, kwargs, NOTHING_COMMON)
    assert reference
    small = PlannerSettings(common_rows=threshold, walk_index_common_rows=threshold, family_common_rows=threshold,
                            family_common_rows_walk_index=threshold, common_together_rows=threshold,
                            common_term_rows=threshold, scan_share=2)  # fmt: skip
    assert await _all_pages(catalog, kwargs, small) == reference


async def _explain(db: Database, statement: Keyed, values: dict[str, Any]) -> list[str]:
    """SQLite's plan of a search statement (the steps of EXPLAIN QUERY PLAN)."""
    shape = Shapes(db.engine.dialect).get(statement)
    assert shape is not None
    sql, args = shape.bind(values)
    async with db.engine.connect() as conn:
        return [row[-1] for row in await conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {sql}", args)]


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
async def test_sqlite_sorts_by_memory_on_its_narrow_index(catalog: Database) -> None:
    """At a context other than the default, SQLite reads what the sort by memory needs from
    MEMORY_SORT_INDEX, not from the table's rows."""
    plan = plan_every_match(SearchQuery(sort="memory", memory_context=8192), None, sqlite=True)
    page = statements.memory_page(plan, False, after=None, sqlite=True)
    steps = await _explain(catalog, page, {**statements.params(plan.where), "memory_context": 8192, "limit": 6})
    assert any(f"COVERING INDEX {MEMORY_SORT_INDEX}" in step for step in steps), steps
    assert [i.id for i in search_hits(await run(catalog, sort="memory", limit=50, memory_context=8192))] == [
        1, 2, 3, 4, 5, 6, 7,
    ]  # fmt: skip


@pytest.mark.postgres
async def test_postgresql_has_no_narrow_memory_index(temp_databases: TempDatabases) -> None:
    """It was slower there than reading the rows."""
    db = await _migrated_postgres(temp_databases)
    try:
        async with db.engine.connect() as conn:
            indexes = await conn.run_sync(lambda c: {i["name"] for i in inspect(c).get_indexes("artifacts")})
    finally:
        await db.dispose()
    assert MEMORY_SORT_INDEX not in indexes


@pytest.mark.parametrize("descending", [False, True])
async def test_by_memory_at_the_default_context_walks_its_index(catalog: Database, descending: bool) -> None:
    """At the default context the sort by memory reads the database's own
    `memory_at_default` (on SQLite, its status common as in a real catalog, by walking its
    index, no sort): the hits by their `memory`, then those without an estimate by id, in
    either direction, and cursors crossing from the one to the other."""
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
    if catalog.dialect == "sqlite":
        q = SearchQuery(sort=sort)
        plan = _planned(q, lambda probe: True)  # every filter common, as in a real catalog
        page = statements.page(plan, "memory_at_default", descending, after=False, estimated=True, sqlite=True)
        steps = await _explain(catalog, page, {**statements.params(plan.where), "limit": 6})
        assert any("ix_artifacts_memory_at_default_id" in step for step in steps), steps
        assert not any("TEMP B-TREE" in step for step in steps), steps  # walked in order, not sorted
    items = search_hits(await run(catalog, limit=50))
    with_memory = sorted((i for i in items if i.memory is not None), key=lambda i: (i.memory.bytes, i.id),
                         reverse=descending)  # fmt: skip
    without = sorted((i.id for i in items if i.memory is None), reverse=descending)
    expected = [i.id for i in with_memory] + without
    assert len(with_memory) == 5 and len(without) == 7  # the catalog's own have no estimate
    assert [i.memory.bytes for i in with_memory if i.memory is not None][:: -1 if descending else 1] == [
        9 + 3 * 2 + 4 * 2, 5000 + 10 * 4096, 5000 + 10 * 4096, 1000 + 100 * 1024 + 7 * 512, 100 + 4096 + 1000 * 512,
    ]  # fmt: skip
    for settings in (EVERYTHING_COMMON, None):
        assert [i.id for i in search_hits(await run(catalog, settings, sort=sort, limit=50))] == expected
        for limit in (1, 2, 3, 7):
            walked, cursor = [], None
            while True:
                page_ = await run(catalog, settings, sort=sort, limit=limit, cursor=cursor)
                walked += [i.id for i in search_hits(page_)]
                if (cursor := page_.next_cursor) is None:
                    break
            assert walked == expected, limit
    bound = with_memory[3].memory.bytes  # type: ignore[union-attr]
    fits = search_hits(await run(catalog, sort=sort, limit=50, max_memory=bound))
    assert [i.id for i in fits] == [i.id for i in with_memory if i.memory.bytes <= bound]  # type: ignore[union-attr]


def _planned(q: SearchQuery, answer: Callable[[Probe], object]) -> Plan:
    """The plan of a page of `q` on SQLite, each probe answered by `answer`."""
    answers: dict[Probe, object] = {}
    while isinstance(out := plan_page(q, None, answers, PlannerSettings(), sqlite=True, memo=True), Needs):
        answers.update((p, answer(p)) for p in out.probes)
    return out


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
async def test_a_next_page_of_a_rare_filter_keeps_off_the_sort_index(catalog: Database) -> None:
    """The first page of a rare filter comes through the filter's index; the next page's
    cursor range keeps SQLite off the sort index too, or it walks that index from the cursor
    on and checks the whole rest of the table for the filter's few rows."""
    plan = _planned(SearchQuery(file_type="Q4_K_M"), lambda p: p.where.filters[0].column == "status")  # type: ignore[union-attr]
    assert plan.filter_way_in
    page = statements.page(plan, "downloads", True, after=True, sqlite=True)
    values = {**statements.params(plan.where), "limit": 2, "after_value": 500, "after_id": 3}
    steps = await _explain(catalog, page, values)
    assert not any("downloads" in step for step in steps), steps
    first = await run(catalog, file_type="Q4_K_M", limit=1)
    second = await run(catalog, file_type="Q4_K_M", limit=1, cursor=first.next_cursor)
    assert search_hits(second) and search_hits(second)[0].id != search_hits(first)[0].id


async def test_a_memoised_family_follows_writes_of_any_connection(catalog: Database) -> None:
    """A family's repos are kept until the next commit to the file (SQLite, as a JSON array)
    or of any transaction that wrote (PostgreSQL, where the search binds them as one array):
    a new descendant, written by another engine, is in the next page at once."""
    family = {"Llama-3-8B-Q4_K_M.gguf", "Llama-3-8B-IQ2_XS.gguf", "Llama-3-8B-Q8_0.gguf", "ft.gguf"}
    for _ in range(2):  # the second page comes from the memo
        assert set(paths(await run(catalog, EVERYTHING_COMMON, descendant_of="meta-llama/Llama-3-8B"))) == family
    memo = catalog.reads.caches.memo
    assert memo is not None
    async with catalog.sessions() as session:
        pks = memo.family(("meta-llama/llama-3-8b", MAX_DEPTH), await memo.generation(session))
    assert isinstance(pks, str if catalog.dialect == "sqlite" else list) and len(json.loads(str(pks))) == 2
    other = Database.from_url(catalog.engine.url.render_as_string(hide_password=False))
    try:
        async with other.sessions() as session, session.begin():
            await upsert_repo_snapshot(session, make_snapshot(
                "new/Llama-3-8B-abliterated-GGUF", card_base_model=("someone/llama-3-8b-finetune-GGUF",),
                artifacts=(artifact("abl.gguf", make_facts()),)))  # fmt: skip
    finally:
        await other.dispose()
    found = set(paths(await run(catalog, EVERYTHING_COMMON, descendant_of="meta-llama/Llama-3-8B")))
    assert found == family | {"abl.gguf"}


async def test_short_terms_rare_together_are_found_by_one_scan(catalog: Database) -> None:
    """Short terms have no index. On a SQLite file, with no other way in, a scan (in slices
    of ids) finds the few artifacts holding them all; those are memoised until the next
    commit to the file (by any connection), fetched by id and sorted, and pages follow each
    other as before. Common together, they are checked along the sort index."""
    sliced = dataclasses.replace(EVERYTHING_COMMON, term_scan_slice=2, term_scan_rows=600)
    llama_8b = {"llama-3-8b-f16.gguf", "Llama-3-8B-Q4_K_M.gguf", "Llama-3-8B-IQ2_XS.gguf", "Llama-3-8B-Q8_0.gguf",
                "ft.gguf"}  # fmt: skip
    seen: list[str] = []
    cursor = None
    for _ in range(len(llama_8b) + 1):
        page = await run(catalog, sliced, text="3 8b", limit=1, cursor=cursor)
        seen += paths(page)
        assert page.total == len(llama_8b)
        if (cursor := page.next_cursor) is None:
            break
    assert len(seen) == len(llama_8b) and set(seen) == llama_8b  # in downloads order, each once
    memo = catalog.reads.caches.memo
    assert memo is not None
    async with catalog.sessions() as session:
        known, ids = memo.term_ids(("3", "8b"), await memo.generation(session))
    assert (known, sorted(json.loads(ids or "[]")) if known else None) == (
        (True, sorted(json.loads(ids or "[]"))) if catalog.dialect == "sqlite" else (False, None)
    )
    if catalog.dialect == "sqlite":
        assert len(json.loads(str(ids))) == len(llama_8b)
    other = Database.from_url(catalog.engine.url.render_as_string(hide_password=False))
    try:
        async with other.sessions() as session, session.begin():
            await upsert_repo_snapshot(session, make_snapshot(
                "new/Llama-3-8B-abliterated-GGUF", artifacts=(artifact("abl.gguf", make_facts(
                    name="Llama 3 8B abliterated")),)))  # fmt: skip
    finally:
        await other.dispose()
    assert set(paths(await run(catalog, sliced, text="3 8b"))) == llama_8b | {"abl.gguf"}
    few = dataclasses.replace(sliced, term_scan_rows=2)  # 6 matches: common
    assert set(paths(await run(catalog, few, text="8b"))) == llama_8b | {"abl.gguf"}


async def test_statements_are_compiled_once_per_shape(catalog: Database) -> None:
    """A search's statements are built and compiled once per shape (its plan without the
    values): other values of the same filters reuse them; another filter or sort adds one."""
    shapes = catalog.reads.caches.shapes
    await run(catalog, architecture="llama", limit=2)
    known = len(shapes)
    llama = await run(catalog, architecture="llama", limit=2)
    qwen = await run(catalog, architecture="qwen2", limit=3)
    assert len(shapes) == known  # the same shapes, other values
    assert paths(llama) != paths(qwen) and {i.architecture for i in search_hits(qwen)} == {"qwen2"}
    await run(catalog, architecture="llama", sort="likes", limit=2)
    assert len(shapes) > known


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


async def _read(db: Database, read: Callable[[CatalogSession], Awaitable[Any]]) -> tuple[Any, int]:
    """`read` through the read path, and how many statements it ran there."""
    before = db.reads.counts.fast
    lean = ReadSession(db.reads)
    try:
        return await read(lean), db.reads.counts.fast - before
    finally:
        await lean.close()


async def test_facet_counts_are_kept_until_a_write_and_never_miss_one_in_flight(catalog: Database) -> None:
    """Asked again with nothing written, the counts come from the memo (SQLite file or
    PostgreSQL snapshot): no count runs (on PostgreSQL one statement reads the snapshot). A
    write that another connection has begun but not committed while the counts are taken,
    and commits afterwards, is in the next answer."""
    kept = 0 if catalog.dialect == "sqlite" else 1  # the statements of an answer from the memo

    async def architectures() -> tuple[dict[str, int], int]:
        counts, ran = await _read(catalog, lambda s: facets(s, SearchQuery()))
        return counts["architecture"], ran

    first, counted = await architectures()
    assert counted > kept and await architectures() == (first, kept)
    other = Database.from_url(catalog.engine.url.render_as_string(hide_password=False))
    try:
        async with other.sessions() as session, session.begin():
            await upsert_repo_snapshot(session, make_snapshot("new/Phi-GGUF", artifacts=(
                artifact("phi.gguf", make_facts(architecture="phi3")),)))  # fmt: skip
            await session.flush()
            during, _ = await architectures()  # the write is in flight, not committed
        after, recounted = await architectures()
    finally:
        await other.dispose()
    assert "phi3" not in during and after["phi3"] == 1 and recounted > kept
    assert await architectures() == (after, kept)
    # Facets counted on request join those kept; asked again, in any order, none is recounted.
    kinds, ran = await _read(catalog, lambda s: facets(s, SearchQuery(), ("kind", "verification")))
    assert ran > kept and kinds["kind"] == {"model": sum(after.values())}
    both, ran = await _read(catalog, lambda s: facets(s, SearchQuery(), ("verification", "architecture", "kind")))
    assert both == {"verification": kinds["verification"], "architecture": after, "kind": kinds["kind"]}
    assert ran == kept
    _, ran = await _read(catalog, lambda s: facets(s, SearchQuery(), ("capability",)))
    assert ran > kept


async def test_requests_for_counts_under_way_wait_for_them(catalog: Database) -> None:
    """The requests asking for counts that one is taking wait for its answer instead of
    counting too; one that asks for other facets counts them itself. A count that fails or
    is cancelled leaves its waiters to count for themselves, never stuck."""
    memo = catalog.reads.caches.memo
    assert memo is not None
    groups = (FACETS, ("license", "architecture"), ("size_bucket",))

    async def scenario(q: SearchQuery, outcome: str) -> bool:
        """False when the catalog's generation moved meanwhile: on PostgreSQL it is the
        server's snapshot, which any other client's write moves, and the waiters then
        rightly count for themselves."""
        async with catalog.sessions() as session:
            expected = await count_facets(session, q, FACET_NAMES)
            generation = await memo.generation(session)
        other, ran = await _read(catalog, lambda s, q=q: facets(s, q, ("kind",)))  # type: ignore[misc]
        assert other == {"kind": expected["kind"]} and ran > 0  # nothing under way: counted here
        under_way = memo.start_counting(q, generation, FACETS)  # as a request taking them says
        before = catalog.reads.counts.fast
        waiting = [asyncio.create_task(_read(catalog, lambda s, n=names, q=q: facets(s, q, n)))  # type: ignore[misc]
                   for names in groups]  # fmt: skip
        for _ in range(20):
            await asyncio.sleep(0.01)
        waited = not any(task.done() for task in waiting)  # they wait for the count under way
        memo.end_counting(q, under_way, {f: expected[f] for f in FACETS} if outcome == "counted" else None)
        answers = await asyncio.wait_for(asyncio.gather(*waiting), 60)  # a hang fails, not blocks
        for (counts, _), names in zip(answers, groups, strict=True):
            assert counts == {name: expected[name] for name in names}
        async with catalog.sessions() as session:
            if await memo.generation(session) != generation:
                return False
        assert waited
        ran = catalog.reads.counts.fast - before
        kept = 0 if catalog.dialect == "sqlite" else len(groups)  # PostgreSQL reads its snapshot
        if outcome == "counted":
            assert ran == kept  # the answer of the count under way
        else:
            assert ran > kept  # they counted for themselves
        return True

    for q, outcome in ((SearchQuery(), "counted"), (SearchQuery(status="all"), "failed")):
        for _attempt in range(10):  # until a window in which no other client wrote
            if await scenario(q, outcome):
                break
        else:
            pytest.fail("the catalog's generation moved during every one of 10 attempts")


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)  # SQLite reads PRAGMA data_version
async def test_facets_of_a_family_read_the_snapshot_once_per_transaction(catalog: Database) -> None:
    """PostgreSQL: facet counts under `descendant_of` need the generation twice (the counts'
    memo and the family's); one `txid_current_snapshot()` per transaction serves both, and
    the session's next transaction reads it again, so it sees a commit made in between."""
    from sqlalchemy import event

    reads: list[str] = []

    def record(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        if "txid_current_snapshot" in statement:
            reads.append(statement)

    q = SearchQuery(descendant_of="meta-llama/Llama-3-8B")
    listen = (catalog.engine.sync_engine, "before_cursor_execute")
    event.listen(*listen, record)
    try:
        async with catalog.sessions() as session:
            first = await facets(session, q, settings=EVERYTHING_COMMON)  # the family is big: memoised
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
            second = await facets(session, q, settings=EVERYTHING_COMMON)
            assert len(reads) == 2
    finally:
        event.remove(*listen, record)
    assert "phi3" not in first["architecture"] and second["architecture"]["phi3"] == 1


@pytest.mark.parametrize("common", [False, True], ids=["rare", "common"])
async def test_a_word_matches_the_same_rows_whichever_way_in(db: Database, common: bool) -> None:
    """Words are substrings of the lower-cased text. FTS5's trigram tokenizer takes `ſ` for
    `s` and final `ς` for `σ`; LIKE (common terms, PostgreSQL) does not: "sty" found
    "ſtyle" on SQLite while the word was rare, and no longer once it was common."""
    async with db.sessions() as session, session.begin():
        await upsert_repo_snapshot(session, make_snapshot(
            "org/greek", artifacts=(artifact("m.gguf", make_facts(name="ſtyle λόγοσ x1")),)))  # fmt: skip
    # every term and filter common: LIKE along the sort index, short terms scanned
    settings = EVERYTHING_COMMON if common else None
    for text, found in (("sty", 0), ("ſty", 1), ("όγος", 0), ("όγοσ", 1), ("x1 sty", 0), ("x1 ſty", 1)):
        assert (await run(db, settings, text=text)).total == found, text
        async with db.sessions() as session:
            counts = await facets(session, SearchQuery(text=text), settings=settings)
        assert counts["architecture"] == ({"llama": 1} if found else {})


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
            assert [i.repo for i in search_hits(page)] == order
            assert await _all_pages(db, {"sort": sort}) == [i.id for i in search_hits(page)]
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
async def test_facets_of_models_are_every_kind_less_the_others(db: Database, few: bool) -> None:
    """`kind=model` facets, with no other filter outside the facet columns, are counted as
    the facets without the kind filter less those of the artifacts of other kinds when those
    are few (`few`; else, every other kind counting as many, read directly): the same counts
    as SQLite and PostgreSQL read them plainly (each value's count, values of no model left
    out, NULL as unknown), memoised or afresh, before and after a commit."""

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
    settings = None if few else PlannerSettings(common_rows=0, scan_share=10**9)

    async def plainly(q: SearchQuery) -> dict[str, dict[str, int]]:
        """The counts as the artifacts' rows give them, read here."""
        async with db.sessions() as session:
            rows = (await session.execute(select(Artifact).where(
                *([] if q.status == "all" else [Artifact.status == q.status]), Artifact.kind == "model",
                *([Artifact.architecture == q.architecture] if q.architecture else []),
                *([Artifact.license == q.license] if q.license else []),
            ))).scalars().all()  # fmt: skip
        out: dict[str, dict[str, int]] = {}
        for facet in FACETS:
            counted = Counter(getattr(r, facet) or "unknown" for r in rows)
            out[facet] = dict(sorted(counted.items(), key=lambda kv: (-kv[1], kv[0])))
        return out

    queries = [SearchQuery(kind="model"), SearchQuery(kind="model", status="all"),
               SearchQuery(kind="model", architecture="a1"), SearchQuery(kind="model", license="mit", status="all"),
               SearchQuery(kind="model", status="error")]  # fmt: skip
    for round_ in range(2):
        for q in queries:
            expected = await plainly(q)
            async with db.sessions() as session:
                assert await count_facets(session, q, settings=settings) == expected, q
            lean = ReadSession(db.reads)
            try:
                assert await facets(lean, q, settings=settings) == expected, q
                assert await facets(lean, q, settings=settings) == expected, q  # from the memo
            finally:
                await lean.close()
        if round_ == 0:
            await write(6)  # a commit: counted again
    assert expected["file_type"] == {}  # status=error: no model
