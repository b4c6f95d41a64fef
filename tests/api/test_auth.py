"""Bearer tokens: writes need one, reads only when private, probes always open."""

from __future__ import annotations

import asyncio
import json

import pytest

from registry.api.auth import TokenAuth, hash_token, parse_token_hashes
from registry.api.launchers import RecordingLauncher
from tests.api.conftest import WRITE_TOKEN, MakeApi, settings_with

SQLITE_ONLY = pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
CRAWL = {"source": "hub", "repos": ["org/model-GGUF"]}


def test_tokens_are_checked_against_hashes() -> None:
    auth = TokenAuth([hash_token("one"), hash_token("two")])
    assert auth.is_valid("one") and auth.is_valid("two")
    assert not auth.is_valid("three") and not auth.is_valid("")
    assert not TokenAuth([]).writes_enabled


def test_raw_tokens_in_settings_are_refused() -> None:
    assert parse_token_hashes(f" {hash_token('a').upper()} , ,{hash_token('b')}") == (hash_token("a"), hash_token("b"))
    with pytest.raises(ValueError, match="sha256"):
        parse_token_hashes("my-secret-token")


@SQLITE_ONLY
async def test_writes_are_forbidden_without_configured_tokens(make_api: MakeApi) -> None:
    api = await make_api(settings=settings_with(tokens=""), launcher=RecordingLauncher())
    reply = await api.post("/v1/crawls", json=CRAWL, headers={"Authorization": f"Bearer {WRITE_TOKEN}"})
    assert reply.status == 403
    assert reply.body["error"]["code"] == "forbidden"
    assert "api.tokens" in reply.body["error"]["message"]


@SQLITE_ONLY
async def test_writes_need_a_valid_bearer_token(make_api: MakeApi) -> None:
    launcher = RecordingLauncher()
    api = await make_api(launcher=launcher)
    missing = await api.post("/v1/crawls", json=CRAWL)
    assert missing.status == 401
    assert missing.headers["WWW-Authenticate"].startswith("Bearer")
    wrong = await api.post("/v1/crawls", json=CRAWL, headers={"Authorization": "Bearer nope"})
    assert wrong.status == 401
    assert wrong.body["error"]["code"] == "unauthorized"
    basic = await api.post("/v1/crawls", json=CRAWL, headers={"Authorization": f"Basic {WRITE_TOKEN}"})
    assert basic.status == 401
    assert launcher.launched == []
    ok = await api.post("/v1/crawls", json=CRAWL, headers={"Authorization": f"Bearer {WRITE_TOKEN}"})
    assert ok.status == 202


@SQLITE_ONLY
async def test_reads_are_open_by_default(api: object) -> None:
    from tests.api.conftest import ApiClient

    assert isinstance(api, ApiClient)
    assert (await api.get("/v1/artifacts")).status == 200


@SQLITE_ONLY
async def test_private_reads_need_a_token_but_probes_stay_open(make_api: MakeApi) -> None:
    api = await make_api(settings=settings_with(private_reads=True))
    for path in ("/v1/artifacts", "/v1/facets", "/metrics", "/openapi.json", "/v1/crawls"):
        reply = await api.get(path)
        assert reply.status == 401, path
    for path in ("/healthz", "/readyz"):
        assert (await api.get(path)).status == 200, path
    authed = await api.get("/v1/artifacts", headers={"Authorization": f"Bearer {WRITE_TOKEN}"})
    assert authed.status == 200
    doc = (await api.get("/openapi.json", headers={"Authorization": f"Bearer {WRITE_TOKEN}"})).body
    assert doc["paths"]["/v1/artifacts"]["get"]["security"] == [{"bearer": []}]
    assert doc["paths"]["/healthz"]["get"]["security"] == []


@SQLITE_ONLY
async def test_unknown_routes_are_404_even_for_writes(make_api: MakeApi) -> None:
    api = await make_api(settings=settings_with(tokens=""))
    reply = await api.post("/v1/nothing-here", json={})
    assert reply.status == 404


@SQLITE_ONLY
async def test_a_token_that_is_not_utf8_is_401_not_500(make_api: MakeApi) -> None:
    # Raw bytes over the socket: an HTTP client library would not send them.
    api = await make_api(launcher=RecordingLauncher())
    server = api.client.server
    reader, writer = await asyncio.open_connection(server.host, server.port)
    body = b'{"source": "hub"}'
    writer.write(
        b"POST /v1/crawls HTTP/1.1\r\nHost: test\r\nConnection: close\r\n"
        b"Authorization: Bearer \xff\xfe\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
    )
    await writer.drain()
    answer = await reader.read()
    writer.close()
    status_line, _, rest = answer.partition(b"\r\n")
    assert status_line == b"HTTP/1.1 401 Unauthorized", answer
    assert json.loads(rest.partition(b"\r\n\r\n")[2])["error"]["code"] == "unauthorized"
