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
        if route.method == "HEAD" or route.resource is None:
            continue
        path = _fill(route.resource.canonical)
        reply = await api.request(route.method, f"{path}?bogus_param=1", headers=AUTH, json={})
        assert reply.status == 400, (route.method, path, reply.body)
        assert_envelope(reply.body, "unknown_parameter")
        assert reply.body["error"]["details"]["parameter"] == "bogus_param"
        seen += 1
    assert seen == 19  # jobs routes, the hub's webhook, crawl cancelling and files by sha256 included


@SQLITE_ONLY
async def test_every_route_has_a_not_found_or_method_error(make_api: MakeApi) -> None:
    """And each route, asked with a method it does not serve, answers a 405 envelope."""
    api = await make_api()
    for route in api.app.router.routes():
        if route.method == "HEAD" or route.resource is None:
            continue
        path = _fill(route.resource.canonical)
        reply = await api.request("PATCH", path, headers=AUTH)
        assert reply.status == 405, (path, reply.body)
        assert_envelope(reply.body, "method_not_allowed")
