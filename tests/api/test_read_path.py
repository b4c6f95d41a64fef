"""Which way the read routes read: on SQLite through registry.catalog.readpath, on
PostgreSQL through SQLAlchemy's session, with the same answers either way (the rest of the
API tests run on both)."""

from __future__ import annotations

from typing import Any

import pytest

from registry.catalog import readpath
from registry.catalog.db import Database
from tests.api.conftest import ApiClient


@pytest.mark.usefixtures("catalog")
async def test_read_routes_use_the_read_path_on_sqlite_only(
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
    if db.dialect == "sqlite":
        assert len(ran) >= 3
    else:
        assert ran == []
    pool = db.engine.sync_engine.pool
    assert pool.checkedout() == 0  # every request gave its connection back
