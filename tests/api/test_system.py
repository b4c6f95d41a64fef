"""Health, readiness, metrics, the OpenAPI document and request ids."""

from __future__ import annotations

import json
import logging

import pytest
from aiohttp import web
from openapi_spec_validator import validate as validate_openapi
from sqlalchemy import event, select

from registry.api import create_app
from registry.catalog.db import Database
from tests.api.conftest import AioClient, ApiClient, MakeApi, settings_with

SQLITE_ONLY = pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)


async def test_healthz(api: ApiClient) -> None:
    reply = await api.get("/healthz")
    assert reply.status == 200
    assert reply.body == {"status": "ok"}


async def test_readyz_when_database_answers(api: ApiClient) -> None:
    reply = await api.get("/readyz")
    assert reply.status == 200
    assert reply.body == {"status": "ready", "checks": {"database": "ok"}}


async def test_readyz_when_database_is_unreachable(aiohttp_client: AioClient, caplog: pytest.LogCaptureFixture) -> None:
    # Port 1 on loopback refuses at once: a database that is down, not a slow one.
    broken = Database.from_url("postgresql+asyncpg://nobody@127.0.0.1:1/nothing")
    try:
        app = create_app(settings_with(), broken.sessions)
        client = ApiClient(await aiohttp_client(app), app)
        reply = await client.get("/readyz")
    finally:
        await broken.dispose()
    assert reply.status == 503
    assert reply.body["error"]["code"] == "unavailable"
    assert reply.body["error"]["details"]["component"] == "database"  # as the OpenAPI 503 promises
    assert "127.0.0.1" not in json.dumps(reply.body)  # connection details stay in the log
    assert any("readiness check failed" in r.getMessage() for r in caplog.records)


@SQLITE_ONLY
async def test_openapi_document_is_valid_and_covers_every_route(api: ApiClient) -> None:
    reply = await api.get("/openapi.json")
    assert reply.status == 200
    validate_openapi(reply.body)
    documented = {(m.upper(), p) for p, ops in reply.body["paths"].items() for m in ops}
    routed = {
        (r.method, r.resource.canonical)
        for r in api.app.router.routes()
        if r.method != "HEAD" and r.resource is not None and not (r.name or "").startswith("web_")
    }
    assert documented == routed


@SQLITE_ONLY
async def test_openapi_documents_the_location_of_what_a_post_creates(api: ApiClient) -> None:
    paths = (await api.get("/openapi.json")).body["paths"]
    for path in ("/v1/crawls", "/v1/verifications"):
        assert "Location" in paths[path]["post"]["responses"]["202"]["headers"], path


@SQLITE_ONLY
async def test_metrics_count_requests_per_route(api: ApiClient) -> None:
    await api.get("/healthz")
    await api.get("/v1/crawls/12345")
    await api.get("/no/such/path")
    reply = await api.get("/metrics")
    assert reply.status == 200
    assert reply.headers["Content-Type"].startswith("text/plain; version=0.0.4")
    text = reply.body
    assert 'registry_http_requests_total{method="GET",route="/healthz",status="200"} 1' in text
    assert 'registry_http_requests_total{method="GET",route="/v1/crawls/{id}",status="404"} 1' in text
    assert 'route="unmatched",status="404"' in text  # no per-path label explosion
    assert 'registry_http_request_duration_seconds_bucket{method="GET",route="/healthz",le="+Inf"} 1' in text
    assert "# TYPE registry_crawls_total counter" in text
    assert "# TYPE registry_queue_depth gauge" in text


@SQLITE_ONLY
async def test_request_id_is_honoured_or_issued(api: ApiClient) -> None:
    given = await api.get("/healthz", headers={"X-Request-Id": "abc-123"})
    assert given.headers["X-Request-Id"] == "abc-123"
    issued = await api.get("/healthz")
    assert len(issued.headers["X-Request-Id"]) == 32
    # A hostile id (header injection, huge) is replaced, not echoed.
    hostile = await api.get("/healthz", headers={"X-Request-Id": "a b<script>" + "x" * 300})
    assert hostile.headers["X-Request-Id"] != "a b<script>" + "x" * 300
    error = await api.get("/nope", headers={"X-Request-Id": "err-1"})
    assert error.headers["X-Request-Id"] == "err-1"


@SQLITE_ONLY
async def test_access_log_is_one_json_line_per_request(api: ApiClient, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="registry.api.access"):
        await api.get("/v1/crawls?limit=5", headers={"X-Request-Id": "log-1"})
    records = [json.loads(r.getMessage()) for r in caplog.records if r.name == "registry.api.access"]
    assert records == [
        {
            "event": "http_request", "request_id": "log-1", "method": "GET", "path": "/v1/crawls",
            "route": "/v1/crawls", "status": 200, "duration_ms": records[0]["duration_ms"],
            "remote": "127.0.0.1",
        }
    ]  # fmt: skip


@SQLITE_ONLY
async def test_system_routes_reject_query_parameters(api: ApiClient) -> None:
    reply = await api.get("/healthz?verbose=1")
    assert reply.status == 400
    assert reply.body["error"]["details"]["parameter"] == "verbose"


@SQLITE_ONLY
async def test_create_app_accepts_an_engine(aiohttp_client: AioClient, db: Database) -> None:
    app = create_app(settings_with(), db.engine)
    client = await aiohttp_client(app)
    async with client.get("/readyz") as resp:
        assert resp.status == 200


@SQLITE_ONLY
async def test_app_disposes_engine_on_cleanup_when_asked(db_url: str) -> None:
    database = Database.from_url(db_url)
    disposed: list[object] = []
    event.listen(database.engine.sync_engine, "engine_disposed", disposed.append)
    app = create_app(settings_with(), database.sessions, dispose_engine=True)
    runner = web.AppRunner(app)
    await runner.setup()
    await runner.cleanup()
    assert disposed == [database.engine.sync_engine]


async def test_make_api_fixture_builds_fresh_apps(make_api: MakeApi) -> None:
    one, two = await make_api(), await make_api()
    assert one.app is not two.app


async def test_metrics_show_what_the_catalog_holds(make_api: MakeApi, catalog: None, db: Database) -> None:
    """Counts read from the database at each scrape, 0 for a status nothing has, and when a
    crawl last ended in each status: what a monitor alerts on when crawls stop."""
    from datetime import UTC, datetime

    from registry.catalog.models import Artifact, Crawl, Repo
    from registry.catalog.snapshot import DERIVATION
    from tests.api.data import INDEXED_ARTIFACTS

    ended = datetime(2026, 11, 27, 6, 0, tzinfo=UTC)
    async with db.sessions.begin() as session:
        session.add_all([Crawl(kind="hub", status="finished", finished_at=ended),
                         Crawl(kind="hub", status="finished", finished_at=datetime(2026, 11, 26, tzinfo=UTC)),
                         Crawl(kind="hub", status="running")])  # fmt: skip
        first = await session.scalar(select(Artifact).where(Artifact.status == "indexed").limit(1))
        assert first is not None
        first.verification_status = "passed"
    api = await make_api()
    text = (await api.get("/metrics")).body
    assert "registry_catalog_stats_ok 1" in text
    assert f'registry_catalog_artifacts{{status="indexed"}} {INDEXED_ARTIFACTS}' in text
    assert 'registry_catalog_artifacts{status="error"} 1' in text
    assert 'registry_catalog_artifacts{status="gone"} 0' in text
    assert 'registry_catalog_artifacts_verified{status="passed"} 1' in text
    assert 'registry_catalog_artifacts_verified{status="failed"} 0' in text
    assert "registry_catalog_repos 5" in text
    assert "registry_catalog_repos_derived_before 0" in text  # all written by this release
    assert "registry_crawls_running 1" in text
    assert f'registry_last_crawl_end_timestamp_seconds{{status="finished"}} {ended.timestamp():.0f}' in text
    assert 'registry_last_crawl_end_timestamp_seconds{status="failed"}' not in text  # never: no sample
    # kept until the next commit, whoever makes it
    assert (await api.get("/metrics")).body.count("registry_crawls_running 1") == 1
    async with db.sessions.begin() as session:
        session.add(Crawl(kind="hub", status="failed", finished_at=ended))
        running = await session.scalar(select(Crawl).where(Crawl.status == "running"))
        assert running is not None
        running.status, running.finished_at = "cancelled", ended
        # written by older releases: before repos carried the number, and one number back
        older = (await session.scalars(select(Repo).order_by(Repo.id).limit(2))).all()
        older[0].derivation, older[1].derivation = None, DERIVATION - 1
    text = (await api.get("/metrics")).body
    assert "registry_crawls_running 0" in text
    assert f'registry_last_crawl_end_timestamp_seconds{{status="failed"}} {ended.timestamp():.0f}' in text
    assert "registry_catalog_repos_derived_before 2" in text


async def test_metrics_without_a_database_still_answer(aiohttp_client: AioClient) -> None:
    broken = Database.from_url("postgresql+asyncpg://nobody@127.0.0.1:1/nothing")
    try:
        app = create_app(settings_with(), broken.sessions)
        reply = await ApiClient(await aiohttp_client(app), app).get("/metrics")
    finally:
        await broken.dispose()
    assert reply.status == 200
    assert "registry_catalog_stats_ok 0" in reply.body and "registry_http_requests_total" in reply.body
    assert 'registry_catalog_artifacts{status="indexed"}' not in reply.body
