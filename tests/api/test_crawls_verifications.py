"""Starting and watching crawls and verifications."""

from __future__ import annotations

from collections.abc import Collection

import pytest

from registry.api.cursors import encode_id_cursor
from registry.api.launchers import CrawlLauncher, CrawlSpec, RecordingLauncher, Verifier
from registry.catalog.db import Database
from registry.catalog.models import Crawl
from registry.catalog.types import utcnow
from tests.api.conftest import WEBHOOK_SECRET, WRITE_TOKEN, ApiClient, MakeApi, RowVerifier, settings_with

AUTH = {"Authorization": f"Bearer {WRITE_TOKEN}"}
SQLITE_ONLY = pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)


def test_recording_launcher_is_a_crawl_launcher() -> None:
    assert isinstance(RecordingLauncher(), CrawlLauncher)


async def test_crawls_without_a_launcher_are_503(api: ApiClient) -> None:
    reply = await api.post("/v1/crawls", json={"source": "hub"}, headers=AUTH)
    assert reply.status == 503
    assert reply.body["error"]["details"] == {"component": "crawler"}
    assert "crawl worker" in reply.body["error"]["message"]
    listed = await api.get("/v1/crawls")
    assert listed.status == 200 and listed.body["items"] == []


async def test_start_crawl_records_it_and_hands_it_to_the_launcher(make_api: MakeApi) -> None:
    launcher = RecordingLauncher()
    api = await make_api(launcher=launcher)
    body = {"source": "hub", "repos": ["org/a-GGUF", "org/a-GGUF", "org/b"], "limit": 5, "full": True}
    reply = await api.post("/v1/crawls", json=body, headers=AUTH)
    assert reply.status == 202, reply.body
    crawl = reply.body
    assert reply.headers["Location"] == f"/v1/crawls/{crawl['id']}"
    assert crawl["kind"] == "hub" and crawl["status"] == "running"
    assert crawl["parameters"]["repos"] == ["org/a-GGUF", "org/b"]
    assert launcher.launched == [
        (crawl["id"], CrawlSpec(source="hub", repos=("org/a-GGUF", "org/b"), limit=5, full=True))
    ]
    fetched = await api.get(crawl["url"])
    assert fetched.status == 200 and fetched.body == crawl
    metrics = await api.get("/metrics")
    assert 'registry_crawls_started_total{kind="hub"} 1' in metrics.body
    doc = (await api.get("/openapi.json")).body
    assert doc["components"]["schemas"]["CrawlRequest"]["properties"]["source"]["enum"] == ["hub"]


@SQLITE_ONLY
@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"source": "https://evil.example/api"}, "source"),
        ({"source": "local"}, "source"),
        ({}, "source"),
        ({"source": "hub", "endpoint": "https://evil.example"}, "endpoint"),
        ({"source": "hub", "url": "http://169.254.169.254/"}, "url"),
        ({"source": "hub", "repos": ["https://evil.example/x"]}, "repos"),
        ({"source": "hub", "repos": ["../../etc/passwd"]}, "repos"),
        ({"source": "hub", "repos": "org/a"}, "repos"),
        ({"source": "hub", "repos": [f"org/m{i}" for i in range(101)]}, "repos"),
        ({"source": "hub", "author": "a/b"}, "author"),
        ({"source": "hub", "limit": 0}, "limit"),
        ({"source": "hub", "limit": True}, "limit"),
        ({"source": "hub", "full": "yes"}, "full"),
        ({"source": "hub", "search": ""}, "search"),
        ({"source": "hub", "repos": ["org/name\n"]}, "repos"),  # `$` alone allows a final newline
        ({"source": "hub", "author": "org\n"}, "author"),
    ],
)
async def test_crawl_bodies_name_only_configured_sources(make_api: MakeApi, body: dict[str, object], field: str) -> None:
    launcher = RecordingLauncher()
    api = await make_api(launcher=launcher)
    reply = await api.post("/v1/crawls", json=body, headers=AUTH)
    assert reply.status == 400, reply.body
    assert reply.body["error"]["code"] == "invalid_body"
    assert reply.body["error"]["details"]["field"] == field
    assert launcher.launched == []


@pytest.mark.parametrize("search", ["a\x00b", "\ud800"])
async def test_crawl_search_the_database_cannot_store_is_refused(make_api: MakeApi, search: str) -> None:
    # The parameters are stored as JSON: PostgreSQL's jsonb refuses NUL, and a lone
    # surrogate has no UTF-8 form at all.
    launcher = RecordingLauncher()
    api = await make_api(launcher=launcher)
    reply = await api.post("/v1/crawls", json={"source": "hub", "search": search}, headers=AUTH)
    assert reply.status == 400, reply.body
    assert reply.body["error"]["details"]["field"] == "search"
    assert launcher.launched == []


@SQLITE_ONLY
@pytest.mark.parametrize(
    ("data", "content_type"),
    [
        (b"{not json", "application/json"),
        (b"[1, 2]", "application/json"),
        (b"source=hub", "text/plain"),
        (b"[" * 50_000, "application/json"),  # nested deeper than the parser recurses
        (b'{"a":' * 10_000 + b"1" + b"}" * 10_000, "application/json"),
    ],
)
async def test_crawl_body_must_be_a_json_object(make_api: MakeApi, data: bytes, content_type: str) -> None:
    api = await make_api(launcher=RecordingLauncher())
    reply = await api.post("/v1/crawls", data=data, headers={**AUTH, "Content-Type": content_type})
    assert reply.status == 400
    assert reply.body["error"]["code"] == "invalid_body"


class FailingLauncher(RecordingLauncher):
    async def launch(self, crawl_id: int, spec: CrawlSpec) -> None:
        raise ConnectionError("queue down")


@SQLITE_ONLY
async def test_a_launcher_failure_marks_the_crawl_failed(make_api: MakeApi) -> None:
    api = await make_api(launcher=FailingLauncher())
    reply = await api.post("/v1/crawls", json={"source": "hub"}, headers=AUTH)
    assert reply.status == 503
    assert reply.body["error"]["details"]["component"] == "crawler"  # as the OpenAPI 503 promises
    crawl = await api.get(f"/v1/crawls/{reply.body['error']['details']['crawl_id']}")
    assert crawl.body["status"] == "failed" and crawl.body["finished_at"] is not None
    assert "queue down" not in str(reply.body)


async def test_list_crawls_newest_first_with_status_filter_and_pages(make_api: MakeApi) -> None:
    api = await make_api(launcher=RecordingLauncher(source_kinds={"hub": "hub", "models": "local"}))
    ids = []
    for source in ("hub", "models", "hub"):
        ids.append((await api.post("/v1/crawls", json={"source": source}, headers=AUTH)).body["id"])
    first = await api.get("/v1/crawls?limit=2")
    assert [c["id"] for c in first.body["items"]] == ids[::-1][:2]
    assert first.body["items"][1]["kind"] == "local"
    link = first.headers["Link"]
    second = await api.get(link[1 : link.index(">")])
    assert [c["id"] for c in second.body["items"]] == [ids[0]]
    assert second.body["next"] is None
    assert (await api.get("/v1/crawls?status=finished")).body["items"] == []
    assert len((await api.get("/v1/crawls?status=running")).body["items"]) == 3


async def test_cancel_a_crawl(make_api: MakeApi, db: Database) -> None:
    launcher = RecordingLauncher()
    api = await make_api(launcher=launcher)
    started = (await api.post("/v1/crawls", json={"source": "hub"}, headers=AUTH)).body
    path = f"/v1/crawls/{started['id']}/cancel"
    assert (await api.post(path)).status == 401  # a write: the token is required
    reply = await api.post(path, headers=AUTH)
    assert reply.status == 200, reply.body
    assert reply.body["status"] == "cancelled" and reply.body["finished_at"] is not None
    assert reply.body["parameters"] == started["parameters"]
    assert (await api.get(started["url"])).body == reply.body
    again = await api.post(path, headers=AUTH)  # idempotent: the same row, not cancelled twice
    assert again.status == 200 and again.body == reply.body
    assert [c["id"] for c in (await api.get("/v1/crawls?status=cancelled")).body["items"]] == [started["id"]]
    metrics = (await api.get("/metrics")).body
    assert "registry_crawls_running 0" in metrics
    assert 'registry_last_crawl_end_timestamp_seconds{status="cancelled"}' in metrics

    ended = (await api.post("/v1/crawls", json={"source": "hub"}, headers=AUTH)).body
    async with db.sessions() as session, session.begin():
        row = await session.get_one(Crawl, ended["id"])
        row.status, row.finished_at = "finished", utcnow()
    conflict = await api.post(f"/v1/crawls/{ended['id']}/cancel", headers=AUTH)
    assert conflict.status == 409, conflict.body
    assert conflict.body["error"]["details"] == {"crawl_id": ended["id"], "status": "finished"}
    assert (await api.get(ended["url"])).body["status"] == "finished"

    missing = await api.post("/v1/crawls/424242/cancel", headers=AUTH)
    assert missing.status == 404 and missing.body["error"]["details"] == {"crawl_id": 424242}
    assert (await api.post("/v1/crawls/abc/cancel", headers=AUTH)).status == 400
    assert (await api.get(path)).status == 405


@SQLITE_ONLY
@pytest.mark.parametrize(
    ("path", "status", "parameter"),
    [
        ("/v1/crawls/424242", 404, None),
        ("/v1/crawls/abc", 400, "id"),
        ("/v1/crawls?cursor=bm9wZQ", 400, "cursor"),
        ("/v1/crawls?status=sleeping", 400, "status"),
        ("/v1/crawls?limit=1000", 400, "limit"),
    ],
)
async def test_crawl_read_errors(api: ApiClient, path: str, status: int, parameter: str | None) -> None:
    reply = await api.get(path)
    assert reply.status == status
    if parameter:
        assert reply.body["error"]["details"]["parameter"] == parameter


@pytest.mark.parametrize("path", ["/v1/crawls", "/v1/jobs"])
async def test_id_cursor_beyond_a_bigint_is_refused(api: ApiClient, path: str) -> None:
    reply = await api.get(f"{path}?cursor={encode_id_cursor(2**63)}")
    assert reply.status == 400, reply.body
    assert reply.body["error"]["details"]["parameter"] == "cursor"


async def test_verifications_answer_503_without_a_verifier(api: ApiClient) -> None:
    for reply in (
        await api.post("/v1/verifications", json={"artifact_id": 1}, headers=AUTH),
        await api.get("/v1/verifications/1"),
    ):
        assert reply.status == 503
        assert reply.body["error"]["details"] == {"component": "verifier"}
        assert "verification worker" in reply.body["error"]["message"]


@pytest.mark.usefixtures("catalog")
async def test_verifications_with_a_verifier(make_api: MakeApi, db: Database) -> None:
    verifier: Verifier = RowVerifier(db)
    api = await make_api(verifier=verifier)
    artifact_id = (await api.get("/v1/artifacts?limit=1")).body["items"][0]["id"]
    reply = await api.post("/v1/verifications", json={"artifact_id": artifact_id}, headers=AUTH)
    assert reply.status == 202
    assert reply.body["status"] == "queued" and reply.body["artifact_id"] == artifact_id
    got = await api.get(reply.headers["Location"])
    assert got.status == 200 and got.body["id"] == reply.body["id"]
    page = await api.get(f"/v1/artifacts/{artifact_id}")
    assert page.body["latest_verification"]["id"] == reply.body["id"]
    assert (await api.get("/v1/verifications/999999")).status == 404
    missing = await api.post("/v1/verifications", json={"artifact_id": 999999}, headers=AUTH)
    assert missing.status == 404
    for body in ({}, {"artifact_id": "1"}, {"artifact_id": 1, "force": True}):
        bad = await api.post("/v1/verifications", json=body, headers=AUTH)
        assert bad.status == 400 and bad.body["error"]["code"] == "invalid_body"


def test_protocol_shapes() -> None:
    class Sources:
        def sources(self) -> Collection[str]:
            return ()

    assert not isinstance(Sources(), CrawlLauncher)


class ForgetfulVerifier:
    """A verifier that returns an id it never recorded (a worker bug)."""

    async def enqueue(self, artifact_id: int) -> int:
        return 424242


@pytest.mark.usefixtures("catalog")
@SQLITE_ONLY
async def test_a_verifier_that_records_nothing_is_a_503_naming_it(make_api: MakeApi) -> None:
    api = await make_api(verifier=ForgetfulVerifier())
    artifact_id = (await api.get("/v1/artifacts?limit=1")).body["items"][0]["id"]
    reply = await api.post("/v1/verifications", json={"artifact_id": artifact_id}, headers=AUTH)
    assert reply.status == 503
    assert reply.body["error"]["details"]["component"] == "verifier"  # as the OpenAPI 503 promises


def _delivery(scope: str = "repo.content", action: str = "update", *, kind: str = "model",
              name: str = "org/model-GGUF", **extra: object) -> dict[str, object]:
    """A hub webhook payload (version 3), with the fields the hub sends beside ours."""
    return {
        "event": {"action": action, "scope": scope},
        "repo": {"type": kind, "name": name, "id": "6366c000a2abcdf2fd69a080", "private": False,
                 "url": {"web": f"https://huggingface.co/{name}"}, "headSha": "c379e821", "owner": {"id": "61d2"}},
        "webhook": {"id": "6390e855e30d9209411de93b", "version": 3},
        **extra,
    }  # fmt: skip


HOOK = {"X-Webhook-Secret": WEBHOOK_SECRET}
MAIN = [{"ref": "refs/heads/main", "oldSha": "ce9a4674", "newSha": "575db8b7"}]


@pytest.mark.parametrize(
    ("payload", "repos"),
    [
        (_delivery(updatedRefs=MAIN), ("org/model-GGUF",)),
        (_delivery(), ("org/model-GGUF",)),  # no updatedRefs: the content may have changed
        (_delivery("repo", "create"), ("org/model-GGUF",)),
        (_delivery("repo", "delete"), ("org/model-GGUF",)),  # the crawl marks it deleted
        (_delivery("repo.config", updatedConfig={"private": True}), ("org/model-GGUF",)),
        (_delivery("repo.config.dois"), ("org/model-GGUF",)),  # a narrower scope the hub may add
        (_delivery("repo", "move", movedTo={"name": "neworg/model-GGUF", "owner": {"id": "1"}}),
         ("org/model-GGUF", "neworg/model-GGUF")),
    ],
)
async def test_a_hub_webhook_crawls_the_repo_it_names(
    make_api: MakeApi, payload: dict[str, object], repos: tuple[str, ...]
) -> None:
    launcher = RecordingLauncher()
    api = await make_api(launcher=launcher)
    reply = await api.post("/v1/hooks/hub", json=payload, headers=HOOK)
    assert reply.status == 202, reply.body
    crawl = reply.body
    assert reply.headers["Location"] == crawl["url"] and crawl["kind"] == "hub"
    event = payload["event"]
    assert crawl["parameters"]["repos"] == list(repos) and crawl["parameters"]["webhook"] == event
    assert launcher.launched == [(crawl["id"], CrawlSpec(source="hub", repos=repos))]
    metrics = await api.get("/metrics")
    assert 'registry_webhooks_total{outcome="crawl"} 1' in metrics.body


@pytest.mark.parametrize(
    ("payload", "why"),
    [
        (_delivery("discussion", "create", discussion={"num": 3}), "changes no file"),
        (_delivery("discussion.comment", "create"), "changes no file"),
        (_delivery(kind="dataset", name="org/data"), "dataset repo"),
        (_delivery(kind="space", name="org/app"), "space repo"),
        (_delivery(updatedRefs=[{"ref": "refs/pr/3", "newSha": "1"}, {"ref": "refs/tags/v1"}]), "refs/heads/main"),
        (_delivery(updatedRefs=[]), "refs/heads/main"),
    ],
)
async def test_a_hub_webhook_without_news_for_the_catalog_starts_nothing(
    make_api: MakeApi, payload: dict[str, object], why: str
) -> None:
    launcher = RecordingLauncher()
    api = await make_api(launcher=launcher)
    reply = await api.post("/v1/hooks/hub", json=payload, headers=HOOK)
    assert reply.status == 200, reply.body
    assert why in reply.body["ignored"] and reply.body["event"] == payload["event"]
    assert launcher.launched == [] and (await api.get("/v1/crawls")).body["items"] == []
    assert 'registry_webhooks_total{outcome="ignored"} 1' in (await api.get("/metrics")).body


@SQLITE_ONLY
async def test_a_hub_webhook_needs_its_secret_not_a_bearer_token(make_api: MakeApi) -> None:
    launcher = RecordingLauncher()
    api = await make_api(launcher=launcher)
    for headers, status in [({}, 401), (AUTH, 401), ({"X-Webhook-Secret": "guess"}, 401),
                            ({"X-Webhook-Secret": WRITE_TOKEN}, 401)]:  # fmt: skip
        reply = await api.post("/v1/hooks/hub?bogus=1", json=_delivery(), headers=headers)
        assert reply.status == status, (headers, reply.body)
        assert reply.body["error"]["code"] == "unauthorized"
        assert "WWW-Authenticate" not in reply.headers  # not a bearer challenge
    # nor is a webhook secret a bearer token
    reply = await api.post("/v1/crawls", json={"source": "hub"}, headers={"Authorization": f"Bearer {WEBHOOK_SECRET}"})
    assert reply.status == 401
    # with no secret configured, the route is closed whatever comes
    closed = await make_api(launcher=launcher, settings=settings_with(webhook_secrets=""))
    reply = await closed.post("/v1/hooks/hub", json=_delivery(), headers=HOOK)
    assert reply.status == 403 and "api.webhook_secrets" in reply.body["error"]["message"]
    assert launcher.launched == []
    # private reads change nothing for it
    private = await make_api(launcher=launcher, settings=settings_with(private_reads=True))
    assert (await private.post("/v1/hooks/hub", json=_delivery(), headers=HOOK)).status == 202


@SQLITE_ONLY
@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"repo": {"type": "model", "name": "org/m"}}, "event"),
        ({"event": {"action": "update"}, "repo": {"type": "model", "name": "org/m"}}, "event.scope"),
        ({"event": {"action": "update", "scope": "repo\nx"}, "repo": {"type": "model", "name": "org/m"}},
         "event.scope"),
        (_delivery(name="https://evil.example/x"), "repo.name"),
        (_delivery(name="org/m\n"), "repo.name"),
        (_delivery(name="../../etc/passwd"), "repo.name"),
        ({**_delivery(), "repo": {"name": "org/m"}}, "repo.type"),
        (_delivery("repo", "move", movedTo={"owner": {"id": "1"}}), "movedTo.name"),
        (_delivery("repo", "move", movedTo=None), "movedTo"),
        (_delivery(updatedRefs={"ref": "refs/heads/main"}), "updatedRefs"),
        (_delivery(updatedRefs=[{"ref": 1}]), "updatedRefs"),
        (_delivery(updatedRefs=["refs/heads/main"]), "updatedRefs"),
    ],
)  # fmt: skip
async def test_a_malformed_hub_webhook_is_400_naming_the_field(
    make_api: MakeApi, payload: dict[str, object], field: str
) -> None:
    launcher = RecordingLauncher()
    api = await make_api(launcher=launcher)
    reply = await api.post("/v1/hooks/hub", json=payload, headers=HOOK)
    assert reply.status == 400, reply.body
    assert reply.body["error"]["code"] == "invalid_body" and reply.body["error"]["details"]["field"] == field
    assert launcher.launched == []


@SQLITE_ONLY
async def test_a_hub_webhook_without_a_hub_crawler_is_503(make_api: MakeApi) -> None:
    api = await make_api()
    reply = await api.post("/v1/hooks/hub", json=_delivery(), headers=HOOK)
    assert reply.status == 503 and reply.body["error"]["details"] == {"component": "crawler"}
    local_only = await make_api(launcher=RecordingLauncher(source_kinds={"local": "local"}))
    reply = await local_only.post("/v1/hooks/hub", json=_delivery(), headers=HOOK)
    assert reply.status == 503 and "no hub source" in reply.body["error"]["message"]
