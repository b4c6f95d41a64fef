"""Conditional GETs: ETags on successful reads, `304` for an `If-None-Match` that names one."""

from __future__ import annotations

import hashlib

import pytest

from registry.api.launchers import RecordingLauncher
from tests.api.conftest import WRITE_TOKEN, ApiClient, MakeApi, settings_with

AUTH = {"Authorization": f"Bearer {WRITE_TOKEN}"}
READS = ["/v1/artifacts", "/v1/artifacts?q=llama&limit=1", "/v1/facets", "/v1/crawls", "/v1/jobs", "/openapi.json",
         "/healthz", "/metrics"]  # fmt: skip


@pytest.mark.usefixtures("catalog")
@pytest.mark.parametrize("path", READS)
async def test_a_read_is_tagged_and_revalidates_to_304(api: ApiClient, path: str) -> None:
    first = await api.get(path)
    assert first.status == 200
    tag = first.headers["ETag"]
    assert tag.startswith('"') and tag.endswith('"') and len(tag) == 34
    assert first.headers["Cache-Control"] == "no-cache"
    again = await api.get(path, headers={"If-None-Match": tag})
    if path == "/metrics":  # its counters moved with the first request: a new answer
        assert again.status == 200 and again.headers["ETag"] != tag
        return
    assert again.status == 304 and again.body == ""
    assert again.headers["ETag"] == tag and again.headers["Cache-Control"] == "no-cache"
    assert "X-Request-Id" in again.headers
    assert "Content-Type" not in again.headers or again.headers.get("Content-Length") in (None, "0")


@pytest.mark.usefixtures("catalog")
async def test_the_tag_is_the_digest_of_the_body(api: ApiClient) -> None:
    async with api.client.get("/v1/artifacts?limit=3") as resp:
        body = await resp.read()
        assert resp.headers["ETag"] == f'"{hashlib.sha1(body).hexdigest()[:32]}"'


@pytest.mark.usefixtures("catalog")
async def test_if_none_match_compares_weakly_and_takes_lists_and_star(api: ApiClient) -> None:
    hit = await api.get("/v1/artifacts/1")
    assert hit.status == 200
    tag = hit.headers["ETag"]
    for offered in (f"W/{tag}", f'"other", {tag}', f'W/"x",W/{tag}', "*"):
        reply = await api.get("/v1/artifacts/1", headers={"If-None-Match": offered})
        assert reply.status == 304, offered
    for offered in ('"other"', 'W/"other"', tag[:-2] + '"', "garbage", ""):
        reply = await api.get("/v1/artifacts/1", headers={"If-None-Match": offered})
        assert reply.status == 200 and reply.body["id"] == 1, offered
    other = await api.get("/v1/artifacts/2")
    assert other.status == 200 and other.headers["ETag"] != tag
    async with api.client.head("/v1/artifacts/1", headers={"If-None-Match": tag}) as resp:
        assert resp.status == 304


async def test_a_changed_answer_gets_a_new_tag_and_a_full_body(make_api: MakeApi) -> None:
    api = await make_api(launcher=RecordingLauncher())
    empty = await api.get("/v1/crawls")
    assert empty.status == 200 and empty.body["items"] == []
    started = await api.post("/v1/crawls", json={"source": "hub", "author": "org"}, headers=AUTH)
    assert started.status == 202
    assert "ETag" not in started.headers  # writes are never tagged
    listed = await api.get("/v1/crawls", headers={"If-None-Match": empty.headers["ETag"]})
    assert listed.status == 200 and [c["id"] for c in listed.body["items"]] == [started.body["id"]]
    assert listed.headers["ETag"] != empty.headers["ETag"]
    crawl = await api.get(f"/v1/crawls/{started.body['id']}", headers={"If-None-Match": listed.headers["ETag"]})
    assert crawl.status == 200 and crawl.body["id"] == started.body["id"]


async def test_errors_and_writes_are_never_304(make_api: MakeApi) -> None:
    api = await make_api(launcher=RecordingLauncher())
    missing = await api.get("/v1/artifacts/999", headers={"If-None-Match": "*"})
    assert missing.status == 404 and "ETag" not in missing.headers
    bad = await api.get("/v1/artifacts?limit=0", headers={"If-None-Match": "*"})
    assert bad.status == 400 and "ETag" not in bad.headers
    write = await api.post("/v1/crawls", json={"source": "hub"}, headers={**AUTH, "If-None-Match": "*"})
    assert write.status == 202 and "ETag" not in write.headers


async def test_a_private_read_without_a_token_is_401_whatever_it_offers(make_api: MakeApi) -> None:
    api = await make_api(settings=settings_with(private_reads=True))
    allowed = await api.get("/v1/artifacts", headers=AUTH)
    assert allowed.status == 200
    denied = await api.get("/v1/artifacts", headers={"If-None-Match": allowed.headers["ETag"]})
    assert denied.status == 401 and "ETag" not in denied.headers
    again = await api.get("/v1/artifacts", headers={**AUTH, "If-None-Match": allowed.headers["ETag"]})
    assert again.status == 304
