"""API fixtures: the real app in-process over real SQLite and PostgreSQL databases.

The databases come from the catalog's fixtures (migrated once per session, tables
emptied after each test). `ApiClient` wraps aiohttp's test client and validates every
JSON body it receives against the app's own /openapi.json.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient
from jsonschema import Draft202012Validator

from registry.api import create_app
from registry.api.auth import hash_token
from registry.api.keys import OPENAPI_KEY
from registry.api.launchers import CrawlLauncher, Verifier
from registry.catalog.db import Database
from registry.catalog.models import Verification
from registry.catalog.services import upsert_repo_snapshot
from registry.catalog.snapshot import RepoSnapshot
from registry.config import ApiSettings, Settings

# The catalog's database fixtures, shared rather than copied.
from tests.catalog.conftest import (  # noqa: F401
    db,
    db_url,
    postgresql_url,
    sqlite_url,
    temp_databases,
)

WRITE_TOKEN = "test-write-token"
WEBHOOK_SECRET = "test-webhook-secret"
AioClient = Callable[..., Awaitable[TestClient[web.Request, web.Application]]]


def settings_with(**api: Any) -> Settings:
    values: dict[str, Any] = {"tokens": hash_token(WRITE_TOKEN), "webhook_secrets": hash_token(WEBHOOK_SECRET)}
    values.update(api)
    return Settings(api=ApiSettings(**values))


class SpecValidator:
    """Validates bodies against the OpenAPI document's component schemas (JSON Schema 2020-12)."""

    def __init__(self, doc: dict[str, Any]) -> None:
        self.doc = doc
        self._routes = [
            (re.compile("^" + re.sub(r"\{[^}]+\}", "[^/]+", path) + "$"), path) for path in doc["paths"]
        ]

    def schema_validator(self, schema: dict[str, Any]) -> Draft202012Validator:
        # `#/components/...` refs resolve against the root, so the components ride along.
        return Draft202012Validator({**schema, "components": self.doc["components"]})

    def validate(self, method: str, path: str, status: int, body: Any) -> None:
        template = next((t for rx, t in self._routes if rx.match(path)), None)
        if template is None or method.lower() not in self.doc["paths"][template]:
            assert status in (404, 405), f"{method} {path} is not in the OpenAPI document but answered {status}"
            self.schema_validator({"$ref": "#/components/schemas/Error"}).validate(body)
            return
        responses = self.doc["paths"][template][method.lower()]["responses"]
        assert str(status) in responses, f"{method} {template}: status {status} is not documented"
        response = responses[str(status)]
        if "$ref" in response:
            response = self.doc["components"]["responses"][response["$ref"].rsplit("/", 1)[1]]
        schema = response["content"]["application/json"]["schema"]
        self.schema_validator(schema).validate(body)


@dataclass
class Reply:
    status: int
    headers: Any
    body: Any  # parsed JSON, or text for non-JSON responses


class ApiClient:
    def __init__(self, client: TestClient[web.Request, web.Application], app: web.Application) -> None:
        self.client = client
        self.app = app
        self.spec = SpecValidator(app[OPENAPI_KEY])

    async def request(self, method: str, path: str, **kwargs: Any) -> Reply:
        async with self.client.request(method, path, **kwargs) as resp:
            if resp.content_type == "application/json":
                body = await resp.json()
                assert "X-Request-Id" in resp.headers
                bare = path.split("?", 1)[0]
                self.spec.validate(method, bare, resp.status, body)
            else:
                body = await resp.text()
            return Reply(resp.status, resp.headers, body)

    async def get(self, path: str, **kwargs: Any) -> Reply:
        return await self.request("GET", path, **kwargs)

    async def post(self, path: str, **kwargs: Any) -> Reply:
        return await self.request("POST", path, **kwargs)


MakeApi = Callable[..., Awaitable[ApiClient]]


class RowVerifier:
    """Stands in for the verify worker: records a queued row, as the real one will."""

    def __init__(self, db: Database) -> None:  # noqa: F811 - a parameter, not the fixture
        self.db = db

    async def enqueue(self, artifact_id: int) -> int:
        async with self.db.sessions.begin() as session:
            row = Verification(artifact_id=artifact_id, status="queued")
            session.add(row)
        return row.id


@pytest.fixture
def make_api(aiohttp_client: AioClient, db: Database) -> MakeApi:  # noqa: F811
    """Build an app over the test database with chosen settings and workers."""

    async def make(
        *,
        settings: Settings | None = None,
        launcher: CrawlLauncher | None = None,
        verifier: Verifier | None = None,
    ) -> ApiClient:
        app = create_app(settings or settings_with(), db.sessions, launcher=launcher, verifier=verifier)
        return ApiClient(await aiohttp_client(app), app)

    return make


@pytest.fixture
async def api(make_api: MakeApi) -> ApiClient:
    return await make_api()


@pytest.fixture
def insert(db: Database) -> Callable[..., Awaitable[None]]:  # noqa: F811
    """Write snapshots through the catalog's own writer."""

    async def write(*snapshots: RepoSnapshot) -> None:
        for snap in snapshots:
            async with db.sessions() as session, session.begin():
                await upsert_repo_snapshot(session, snap)

    return write


@pytest.fixture
async def catalog(insert: Callable[..., Awaitable[None]]) -> AsyncIterator[None]:
    from tests.api.data import sample_catalog

    await insert(*sample_catalog())
    yield
