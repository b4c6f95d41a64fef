"""Search against a plain-Python oracle over random catalogs (see tests/catalog/search_oracle.py).

Each example writes a random catalog through the catalog's writer and runs random queries
(every filter, the architecture, license, file type and size label written and asked for in
any case, free text with short terms and non-ASCII, lineage, every sort and direction,
page sizes) under the default plan thresholds, where a catalog of a few rows takes the
"rare filter" plans, and under random small thresholds, where the same rows take the walks
along the sort index, LIKE checks, memoised short-term scans and lineage families, and
with every "common or rare?" probe answered at random (a wrong answer may cost speed, never
change a result). For every query: all rows in order with the total, every page walked by cursor, and the facet
counts equal the oracle's; on SQLite through SQLAlchemy's session and through the
driver-level read path; a sample through the HTTP API; and SQLite and PostgreSQL agree.

`REGISTRY_SEARCH_EXAMPLES` raises the example count and explores new examples on every run
(by default a fixed set, so that the suite is repeatable).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlencode

import pytest
from aiohttp.test_utils import TestClient, TestServer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from registry.api import create_app
from registry.api.present import search_hits
from registry.catalog.db import Database
from registry.catalog.facets import facets
from registry.catalog.readpath import CatalogSession, ReadSession
from registry.catalog.search import FACET_NAMES, MAX_LIMIT, SearchQuery, search
from registry.config import ApiSettings, Settings
from tests.catalog.conftest import empty_tables
from tests.catalog.search_oracle import (
    ALL_COMMON,
    SORT_CHOICES,
    CatalogSpec,
    Oracle,
    catalog_words,
    catalogs,
    item_dict,
    plan_thresholds,
    queries,
    thresholds,
    write_catalog,
)

EXAMPLES = int(os.environ.get("REGISTRY_SEARCH_EXAMPLES", "0"))
PROPERTY = settings(
    max_examples=EXAMPLES or 12,
    derandomize=not EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
    ],
)
API_LIMIT = 100


async def check_sessions(db: Database, oracle: Oracle, q: SearchQuery, plan: str) -> None:
    """The query through SQLAlchemy's session and through the read path."""
    async with db.sessions() as session:
        await check_query(session, oracle, q, plan)
    assert db.reads.fast
    lean = ReadSession(db.reads)
    try:
        await check_query(lean, oracle, q, plan)
    finally:
        await lean.close()


async def _walk(session: CatalogSession, q: SearchQuery) -> list[list[dict[str, Any]]]:
    """Every page of the query, following the cursors."""
    pages: list[list[dict[str, Any]]] = []
    cursor = None
    for _ in range(200):
        page = await search(session, dataclasses.replace(q, cursor=cursor))
        pages.append([item_dict(i) for i in search_hits(page)])
        if (cursor := page.next_cursor) is None:
            return pages
    raise AssertionError(f"more than 200 pages for {q}")


def _split(rows: list[dict[str, Any]], limit: int) -> list[list[dict[str, Any]]]:
    """The pages the rows must come in: full pages, the last one possibly shorter (or empty:
    a catalog with no match still answers one page)."""
    return [rows[i : i + limit] for i in range(0, len(rows), limit)] or [[]]


async def check_query(session: CatalogSession, oracle: Oracle, q: SearchQuery, plan: str) -> None:
    expected = oracle.search(q)
    where = f"{plan} plan, {type(session).__name__}: {q}"
    full = await search(session, dataclasses.replace(q, limit=MAX_LIMIT), with_total=True)
    assert [item_dict(i) for i in search_hits(full)] == expected, where
    assert full.total == len(expected), where
    assert full.next_cursor is None, where
    assert await _walk(session, q) == _split(expected, q.limit), where
    counts = await facets(session, q)
    assert {name: list(c.items()) for name, c in counts.items()} == oracle.facets(q), where
    # Every facet, then a few again in another order: the second answer comes from what the
    # first counted (or is counted again where nothing is memoised), in the order asked for.
    for names in (FACET_NAMES, ("verification", "capability", "license")):
        counts = await facets(session, q, names)
        assert list(counts) == list(names), where
        assert {name: list(c.items()) for name, c in counts.items()} == oracle.facets(q, names), where


async def check_catalog(
    db: Database, oracle: Oracle, qs: list[SearchQuery], plan: dict[str, int], seed: int
) -> None:
    plans = (
        ("default", None, None),
        ("all common", ALL_COMMON, None),
        (f"thresholds {plan}", plan, None),
        (f"probes answered at random ({seed}), thresholds {plan}", plan, seed),
    )
    for name, values, answers in plans:
        with thresholds(db, values, answers):
            for q in qs:
                await check_sessions(db, oracle, q, name)


@pytest.fixture
async def api(db: Database) -> AsyncIterator[TestClient[Any, Any]]:
    app = create_app(Settings(api=ApiSettings(max_limit=API_LIMIT)), db.sessions)
    async with TestClient(TestServer(app)) as client:
        yield client


def _params(q: SearchQuery) -> dict[str, str]:
    names = {"text": "q"}
    skip = {"cursor", "limit"}
    out = {names.get(f.name, f.name): str(getattr(q, f.name)) for f in dataclasses.fields(q)
           if f.name not in skip and getattr(q, f.name) is not None}  # fmt: skip
    if "q" in out and not out["q"].strip():
        del out["q"]  # the API refuses a blank q; no words filter nothing in the catalog either
    out["limit"] = str(min(q.limit, API_LIMIT))
    return out


async def check_http(client: TestClient[Any, Any], oracle: Oracle, q: SearchQuery) -> None:
    """GET /v1/artifacts page by page through the Link header, and GET /v1/facets."""
    params = _params(q)
    expected = oracle.search(q)
    ids: list[int] = []
    url: str | None = "/v1/artifacts?" + urlencode(params)
    while url is not None:
        async with client.get(url) as resp:
            assert resp.status == 200, await resp.text()
            body = await resp.json()
            link = resp.headers.get("Link")
        ids += [i["id"] for i in body["items"]]
        assert (link is None) == (body["next"] is None)
        url = link[1 : link.index(">")] if link is not None else None
        assert len(ids) <= len(expected), q
    assert ids == [r["id"] for r in expected], q
    facet_params = {k: v for k, v in params.items() if k not in ("sort", "limit")}
    async with client.get("/v1/facets?" + urlencode(facet_params)) as resp:
        assert resp.status == 200, await resp.text()
        counts = (await resp.json())["facets"]
    assert {name: list(c.items()) for name, c in counts.items()} == oracle.facets(q), q
    names = ("kind", "size_bucket", "capability", "verification")
    async with client.get("/v1/facets?" + urlencode({**facet_params, "facets": ",".join(names)})) as resp:
        assert resp.status == 200, await resp.text()
        counts = (await resp.json())["facets"]
    assert {name: list(c.items()) for name, c in counts.items()} == oracle.facets(q, names), q


# Every sort; and every query sorted by memory: a sum in double precision that no index
# holds, the artifacts without an estimate last by id, and cursors across that boundary.
SORTS_DRAWN = {"any sort": SORT_CHOICES, "by memory": ("memory", "memory:asc", "memory:desc")}


@pytest.mark.parametrize("sorts", list(SORTS_DRAWN.values()), ids=list(SORTS_DRAWN))
@PROPERTY
@given(spec=catalogs(), data=st.data(), plan=plan_thresholds, seed=st.integers(0, 2**32))
async def test_search_matches_the_oracle(
    db: Database,
    api: TestClient[Any, Any],
    sorts: tuple[str, ...],
    spec: CatalogSpec,
    data: st.DataObject,
    plan: dict[str, int],
    seed: int,
) -> None:
    qs = data.draw(st.lists(queries(catalog_words(spec), sorts=sorts), min_size=1, max_size=5), label="queries")
    await empty_tables(db)
    oracle = await write_catalog(db, spec)
    qs = [oracle.bind(q) for q in qs]
    await check_catalog(db, oracle, qs, plan, seed)
    with thresholds(db, ALL_COMMON if len(qs) % 2 else None):
        await check_http(api, oracle, qs[0])


# Filters drawn into every query of a test of their own, and what each asks of the plan:
ALWAYS = {
    # a range of the name sort's column: a seek into its index, or a check along another
    "author": "author",
    # the repo's primary keys by its key, an IN list on repo_pk: its index, or the walk index's column
    "repo": "repo",
    # a sum over four columns and the context, checked row by row behind whatever way in
    "max_memory": "memory",
    # an equality on the key, a parameter range below the target's and a token-count range
    # checked behind it, looked up from the target first
    "draft_for": "draft",
    # an IN list of the masks holding its bits, on an indexed column; NULL never matches
    "capability": "capability",
    # a correlated EXISTS over the artifact's repo; gone and error projectors do not count
    "with_projector": "projector",
    # the same EXISTS, with an IN list of the projector's masks holding the asked-for bits
    "modality": "modality",
}


@pytest.mark.parametrize("always", list(ALWAYS), ids=list(ALWAYS.values()))
@PROPERTY
@given(spec=catalogs(), data=st.data(), plan=plan_thresholds, seed=st.integers(0, 2**32))
async def test_a_filter_in_every_query_matches_the_oracle(
    db: Database, always: str, spec: CatalogSpec, data: st.DataObject, plan: dict[str, int], seed: int
) -> None:
    qs = data.draw(st.lists(queries(catalog_words(spec), always=(always,)), min_size=1, max_size=5))
    await empty_tables(db)
    oracle = await write_catalog(db, spec)
    qs = [oracle.bind(q) for q in qs]
    await check_catalog(db, oracle, qs, plan, seed)


@pytest.fixture
async def both(sqlite_url: str, postgresql_url: str) -> AsyncIterator[tuple[Database, Database]]:
    lite, pg = Database.from_url(sqlite_url), Database.from_url(postgresql_url)
    try:
        yield lite, pg
    finally:
        for database in (lite, pg):
            await empty_tables(database)
            await database.dispose()


def _portable(pages: list[list[dict[str, Any]]]) -> list[list[dict[str, Any]]]:
    """Pages with each hit named by repo and path instead of its database's id."""
    return [[{k: v for k, v in item.items() if k != "id"} for item in page] for page in pages]


@pytest.mark.postgres
@settings(PROPERTY, max_examples=EXAMPLES or 6)
@given(spec=catalogs(), data=st.data(), plan=plan_thresholds)
async def test_sqlite_and_postgresql_agree(
    both: tuple[Database, Database], spec: CatalogSpec, data: st.DataObject, plan: dict[str, int]
) -> None:
    qs = data.draw(st.lists(queries(catalog_words(spec)), min_size=1, max_size=4), label="queries")
    answers = []
    for db in both:
        await empty_tables(db)
        oracle = await write_catalog(db, spec)
        with thresholds(db, plan):
            answer = []
            async with db.sessions() as session:
                for q in map(oracle.bind, qs):
                    counts = {name: list(c.items()) for name, c in (await facets(session, q, FACET_NAMES)).items()}
                    answer.append((_portable(await _walk(session, q)), counts))
            answers.append(answer)
    assert answers[0] == answers[1]
