"""Which way the read routes read: through registry.catalog.readpath, on both databases,
with the same answers as SQLAlchemy's session (the rest of the API tests run on both)."""

from __future__ import annotations

from typing import Any

import pytest

from registry.catalog import readpath
from registry.catalog.db import Database
from tests.api.conftest import ApiClient


@pytest.mark.usefixtures("catalog")
async def test_read_routes_use_the_read_path(
    api: ApiClient, db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    ran: list[str] = []
    execute = readpath.ReadConnection.execute

    async def counted(self: readpath.ReadConnection, statement: Any, parameters: Any = None) -> Any:
        ran.append(type(statement).__name__)
        return await execute(self, statement, parameters)

    monkeypatch.setattr(readpath.ReadConnection, "execute", counted)
    page = await api.get("/v1/artifacts?limit=5")
    assert page.status == 200 and page.body["items"]
    first = page.body["items"][0]
    detail = await api.get(f"/v1/artifacts/{first['id']}")
    repo = await api.get(f"/v1/repos/{first['repo']}")
    assert detail.status == repo.status == 200
    assert len(ran) >= 3
    pool = db.engine.sync_engine.pool
    assert pool.checkedout() == 0  # every request gave its connection back


@pytest.mark.usefixtures("catalog")
async def test_read_routes_need_no_sqlalchemy_session(
    api: ApiClient, db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every read of the routes a browser calls runs on the read path: a real AsyncSession
    opened behind one (an `await session.execute(...)` somewhere) costs its whole machinery,
    and on PostgreSQL reads a snapshot of its own."""
    made: list[str] = []
    opened: list[str] = []
    init, real_session = readpath.ReadSession.__init__, readpath.ReadSession.real_session

    def counted(self: readpath.ReadSession, *args: Any) -> None:
        made.append("read session")
        init(self, *args)

    def recorded(self: readpath.ReadSession) -> Any:
        opened.append("session")
        return real_session(self)

    monkeypatch.setattr(readpath.ReadSession, "__init__", counted)
    monkeypatch.setattr(readpath.ReadSession, "real_session", recorded)
    page = await api.get("/v1/artifacts?limit=2")
    first = page.body["items"][0]
    paths = [
        "/v1/artifacts?q=llama", "/v1/artifacts?q=llama%20instruct", "/v1/artifacts?q=q4",
        f"/v1/artifacts?architecture={first['architecture']}&sort=name", "/v1/facets", "/v1/facets?q=llama",
        f"/v1/artifacts/{first['id']}", f"/v1/repos/{first['repo']}", f"/v1/repos/{first['repo']}/lineage",
        f"/v1/artifacts?descendant_of={first['repo']}", f"/v1/artifacts?draft_for={first['id']}",
        f"/v1/facets?draft_for={first['id']}",
    ]  # fmt: skip
    for path in paths:
        answer = await api.get(path)
        assert answer.status == 200, (path, answer.body)
    assert opened == []
    assert len(made) >= len(paths)
