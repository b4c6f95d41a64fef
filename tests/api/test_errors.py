"""One envelope for every error, from every route, with no traceback ever sent."""

from __future__ import annotations

import json
import logging
import re

import pytest
from aiohttp import web

from registry.api import create_app
from registry.api.errors import error_response
from registry.api.launchers import RecordingLauncher
from registry.catalog.db import Database
from registry.catalog.errors import CatalogError, InvalidQuery
from tests.api.conftest import WEBHOOK_SECRET, WRITE_TOKEN, AioClient, ApiClient, MakeApi, settings_with

SQLITE_ONLY = pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
AUTH = {"Authorization": f"Bearer {WRITE_TOKEN}", "X-Webhook-Secret": WEBHOOK_SECRET}


def assert_envelope(body: object, code: str | None = None) -> None:
    assert isinstance(body, dict) and set(body) == {"error"}
    error = body["error"]
    assert set(error) == {"code", "message", "details"}
    assert isinstance(error["code"], str) and isinstance(error["message"], str)
    assert isinstance(error["details"], dict)
    assert "Traceback" not in error["message"]
    if code is not None:
        assert error["code"] == code, body


def test_error_response_builds_the_envelope() -> None:
    response = error_response(418, "teapot", "short and stout", {"x": 1}, {"Retry-After": "1"})
    assert response.status == 418
    assert response.headers["Retry-After"] == "1"
    assert response.content_type == "application/json"
    assert json.loads(response.text) == {"error": {"code": "teapot", "message": "short and stout", "details": {"x": 1}}}


@SQLITE_ONLY
async def test_unknown_path_is_404_envelope(api: ApiClient) -> None:
    reply = await api.get("/v2/anything")
    assert reply.status == 404
    assert_envelope(reply.body, "not_found")


@SQLITE_ONLY
async def test_wrong_method_is_405_with_allow(api: ApiClient) -> None:
    reply = await api.request("DELETE", "/v1/artifacts")
    assert reply.status == 405
    assert_envelope(reply.body, "method_not_allowed")
    assert "GET" in reply.headers["Allow"]
    assert "GET" in reply.body["error"]["details"]["allowed"]


@SQLITE_ONLY
async def test_body_too_large_is_413_envelope(make_api: MakeApi) -> None:
    api = await make_api(launcher=RecordingLauncher())
    reply = await api.post("/v1/crawls", data=b"x" * (1024 * 1024), headers={**AUTH, "Content-Type": "application/json"})
    assert reply.status == 413
    assert_envelope(reply.body, "payload_too_large")


@SQLITE_ONLY
async def test_unexpected_exception_is_generic_500_logged_with_request_id(
    aiohttp_client: AioClient, db: Database, caplog: pytest.LogCaptureFixture
) -> None:
    async def boom(request: web.Request) -> web.Response:
        raise RuntimeError("secret internals: password=hunter2")

    app = create_app(settings_with(), db.sessions)
    app.router.add_get("/boom", boom)
    client = await aiohttp_client(app)
    with caplog.at_level(logging.ERROR, logger="registry.api"):
        async with client.get("/boom", headers={"X-Request-Id": "req-500"}) as resp:
            body = await resp.json()
            status, headers = resp.status, resp.headers
    assert status == 500
    assert_envelope(body, "internal_error")
    assert "hunter2" not in str(body) and "RuntimeError" not in str(body)
    assert body["error"]["details"] == {"request_id": "req-500"}
    assert headers["X-Request-Id"] == "req-500"
    logged = [r for r in caplog.records if r.name == "registry.api" and r.levelno == logging.ERROR]
    assert logged and logged[0].request_id == "req-500"  # type: ignore[attr-defined]
    assert logged[0].exc_info is not None  # the traceback goes to the log only


@SQLITE_ONLY
async def test_catalog_errors_keep_their_status_and_code(aiohttp_client: AioClient, db: Database) -> None:
    async def bad_query(request: web.Request) -> web.Response:
        raise InvalidQuery("unknown sort 'x'", allowed=["a"])

    async def broken(request: web.Request) -> web.Response:
        raise CatalogError("migrations missing at /srv/secret/path")

    app = create_app(settings_with(), db.sessions)
    app.router.add_get("/bad", bad_query)
    app.router.add_get("/broken", broken)
    client = await aiohttp_client(app)
    async with client.get("/bad") as resp:
        assert resp.status == 400
        body = await resp.json()
        assert_envelope(body, "invalid_query")
        assert body["error"]["details"] == {"allowed": ["a"]}
    async with client.get("/broken") as resp:
        assert resp.status == 500
        body = await resp.json()
        assert_envelope(body, "internal_error")
        assert "/srv/secret" not in str(body)


def _fill(path: str) -> str:
    """A concrete path for a route template: ids and names that exist nowhere."""
    return re.sub(r"\{(\w+)\}", lambda m: "999999" if m.group(1) == "id" else "no-such", path)


@SQLITE_ONLY
async def test_every_route_answers_errors_in_the_envelope(make_api: MakeApi) -> None:
    """Walk every route of the router: an unknown query parameter is a 400 envelope naming
    it, on every route (writes with a valid token, so auth is not what answers)."""
    api = await make_api(launcher=RecordingLauncher())
    seen = 0
    for route in api.app.router.routes():
        if route.method == "HEAD" or route.resource is None or (route.name or "").startswith("web_"):
            continue  # the web catalog's pages are HTML, tested in tests/web
        path = _fill(route.resource.canonical)
        reply = await api.request(route.method, f"{path}?bogus_param=1", headers=AUTH, json={})
        assert reply.status == 400, (route.method, path, reply.body)
        assert_envelope(reply.body, "unknown_parameter")
        assert reply.body["error"]["details"]["parameter"] == "bogus_param"
        seen += 1
    # jobs routes, the hub's webhook, crawl cancelling, files by sha256, the verifications list
    # and an artifact's tensors included
    assert seen == 21


@SQLITE_ONLY
async def test_every_route_has_a_not_found_or_method_error(make_api: MakeApi) -> None:
    """And each route, asked with a method it does not serve, answers a 405 envelope."""
    api = await make_api()
    for route in api.app.router.routes():
        if route.method == "HEAD" or route.resource is None or (route.name or "").startswith("web_"):
            continue  # the web catalog's pages are HTML, tested in tests/web
        path = _fill(route.resource.canonical)
        reply = await api.request("PATCH", path, headers=AUTH)
        assert reply.status == 405, (path, reply.body)
        assert_envelope(reply.body, "method_not_allowed")


async def test_an_unreachable_database_is_503_with_retry_after(
    aiohttp_client: AioClient, caplog: pytest.LogCaptureFixture
) -> None:
    """Every read route over a database that refuses connections (down, restarting): 503
    naming the database, with Retry-After, the cause in the log only, never a 500."""
    broken = Database.from_url("postgresql+asyncpg://nobody@127.0.0.1:1/nothing")  # port 1 refuses at once
    try:
        app = create_app(settings_with(), broken.sessions)
        client = ApiClient(await aiohttp_client(app), app)
        paths = ["/v1/artifacts?q=llama", "/v1/facets", "/v1/artifacts/1", "/v1/repos/org/name",
                 "/v1/repos/org/name/lineage", f"/v1/files/{'a' * 64}", "/v1/crawls", "/v1/jobs"]  # fmt: skip
        with caplog.at_level(logging.WARNING, logger="registry.api"):
            replies = [await client.get(path) for path in paths]
    finally:
        await broken.dispose()
    for path, reply in zip(paths, replies, strict=True):
        assert reply.status == 503, (path, reply.body)
        assert_envelope(reply.body, "unavailable")
        assert reply.body["error"]["details"] == {"component": "database"}
        assert reply.headers["Retry-After"] == "2"
        assert "127.0.0.1" not in json.dumps(reply.body)
    assert sum("catalog database unavailable" in r.getMessage() for r in caplog.records) == len(paths)


@SQLITE_ONLY
async def test_no_free_connection_in_time_is_503(aiohttp_client: AioClient, db_url: str) -> None:
    """Every pooled connection busy for longer than the pool's timeout: the request is told
    to come back (503), not failed as a server error."""
    small = Database.from_url(db_url, pool_size=1, max_overflow=0, pool_timeout=0.2)
    assert small.reads.sqlite is not None  # the API reads on read-only connections, pooled alike
    held = await small.reads.sqlite.acquire()  # the pool's only connection, taken
    try:
        app = create_app(settings_with(), small.sessions)
        client = ApiClient(await aiohttp_client(app), app)
        busy = await client.get("/v1/artifacts")
        held.release()
        free = await client.get("/v1/artifacts")
    finally:
        await small.dispose()
    assert busy.status == 503 and busy.headers["Retry-After"] == "2"
    assert_envelope(busy.body, "unavailable")
    assert free.status == 200


def test_what_counts_as_the_database_being_unavailable() -> None:
    import sqlite3

    from sqlalchemy import exc as sa_exc

    from registry.api.errors import database_unavailable

    def wrapped(orig: BaseException, **kw: bool) -> sa_exc.DBAPIError:
        return sa_exc.DBAPIError("SELECT 1", None, orig, **kw)  # type: ignore[arg-type]

    class ServerError(Exception):  # a driver's error carrying PostgreSQL's SQLSTATE
        def __init__(self, sqlstate: str) -> None:
            super().__init__(sqlstate)
            self.sqlstate = sqlstate

    assert database_unavailable(ConnectionRefusedError(111, "refused"))
    assert database_unavailable(wrapped(ConnectionResetError()))
    assert database_unavailable(wrapped(Exception("gone"), connection_invalidated=True))
    assert database_unavailable(sa_exc.TimeoutError("QueuePool limit"))
    assert database_unavailable(wrapped(ServerError("57P03")))  # the server is starting up
    assert database_unavailable(wrapped(ServerError("53300")))  # too many connections
    assert database_unavailable(wrapped(sqlite3.OperationalError("database is locked")))
    # failures of the request or of the code: still 500s
    assert not database_unavailable(wrapped(ServerError("42P01")))  # no such table
    assert not database_unavailable(wrapped(sqlite3.OperationalError("no such table: repos")))
    assert not database_unavailable(RuntimeError("boom"))
    assert not database_unavailable(wrapped(Exception("syntax")))
