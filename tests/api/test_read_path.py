"""Which way the read routes read: through registry.catalog.readpath, on both databases (the
rest of the API tests check the answers on both). The database counts its read-only
sessions' statements (`CatalogReads.counts`): on the read path, and handed to SQLAlchemy."""

from __future__ import annotations

import dataclasses

import pytest

from registry.catalog.db import Database
from tests.api.conftest import ApiClient


@pytest.mark.usefixtures("catalog")
async def test_read_routes_take_the_read_path(api: ApiClient, db: Database) -> None:
    """Every read of the routes a browser calls runs on the read path: a statement handed to
    SQLAlchemy costs its whole machinery (and on PostgreSQL reads a snapshot of its own).
    Fails if the path is not taken on either database."""
    assert db.reads.fast
    page = await api.get("/v1/artifacts?limit=2")
    assert page.status == 200 and page.body["items"]
    first = page.body["items"][0]
    paths = [
        "/v1/artifacts?q=llama", "/v1/artifacts?q=llama%20instruct", "/v1/artifacts?q=q4",
        f"/v1/artifacts?architecture={first['architecture']}&sort=name", "/v1/facets", "/v1/facets?q=llama",
        f"/v1/artifacts/{first['id']}", f"/v1/repos/{first['repo']}", f"/v1/repos/{first['repo']}/lineage",
        f"/v1/artifacts?descendant_of={first['repo']}", f"/v1/artifacts?draft_for={first['id']}",
        f"/v1/facets?draft_for={first['id']}", "/v1/artifacts?sort=memory&memory_context=32768",
        "/v1/artifacts?sort=memory:desc&limit=1", "/metrics",
    ]  # fmt: skip
    for path in paths:
        before = dataclasses.replace(db.reads.counts)
        answer = await api.get(path)
        assert answer.status == 200, (path, answer.body)
        assert db.reads.counts.session == before.session, path  # nothing through SQLAlchemy
        if path != "/metrics":  # (its counts may be kept from the page before)
            assert db.reads.counts.fast > before.fast, path  # and the statements on the read path
    pool = db.engine.sync_engine.pool
    assert pool.checkedout() == 0  # every request gave its connection back


@pytest.mark.usefixtures("catalog")
async def test_what_the_routes_read_through_sqlalchemy_is_counted(api: ApiClient, db: Database) -> None:
    """The ORM reads of a few routes (a crawl, a verification by id) go to a real session;
    the count says so."""
    before = dataclasses.replace(db.reads.counts)
    assert (await api.get("/v1/crawls/1")).status == 404
    assert db.reads.counts.session == before.session + 1
