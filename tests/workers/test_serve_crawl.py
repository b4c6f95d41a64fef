"""`registry serve`'s in-process launcher: POST /v1/crawls really crawls the (fake) hub."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path

import aiohttp

from registry.api.auth import hash_token
from registry.api.launchers import CrawlSpec, InProcessLauncher, LauncherBusy
from registry.api.serve import serve
from registry.catalog import migrate
from registry.catalog.db import Database
from registry.catalog.models import Crawl
from registry.config import ApiSettings, GeneralSettings, HubSettings, Settings
from tests.fakehub import FakeHub, Fault, sample_corpus
from tests.fakehub.testing import TOKEN

WRITER = "crawl-operator-token"


def _settings(tmp_path: Path, endpoint: str) -> Settings:
    return Settings(
        general=GeneralSettings(data_dir=str(tmp_path)),
        hub=HubSettings(endpoint=endpoint, token=TOKEN, backoff_base=0.01, backoff_max=0.05, max_attempts=3),
        api=ApiSettings(tokens=hash_token(WRITER)),
    )


async def _wait_finished(session: aiohttp.ClientSession, url: str) -> dict[str, object]:
    for _ in range(400):
        async with session.get(url) as resp:
            body: dict[str, object] = await resp.json()
        if body["status"] != "running":
            return body
        await asyncio.sleep(0.05)
    raise AssertionError(f"crawl still running: {body}")


async def test_post_crawl_runs_it_in_process_and_background_jobs_stop(tmp_path: Path) -> None:
    async with FakeHub(sample_corpus(real=False), tokens={TOKEN}) as hub:
        settings = _settings(tmp_path, hub.endpoint)
        launcher = InProcessLauncher(settings)
        listening: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        stop = asyncio.Event()
        background_cancelled = asyncio.Event()

        async def scheduler() -> None:
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                background_cancelled.set()
                raise

        running = serve(
            settings,
            "127.0.0.1",
            0,
            launcher=launcher,
            listening=listening,
            stop=stop,
            background=[scheduler],
        )
        server = asyncio.create_task(running)
        try:
            base = f"http://127.0.0.1:{await listening}"
            async with aiohttp.ClientSession() as session:
                async with session.post(
                    f"{base}/v1/crawls",
                    json={"source": "hub", "author": "synth"},
                    headers={"Authorization": f"Bearer {WRITER}"},
                ) as resp:
                    assert resp.status == 202, await resp.text()
                    created = await resp.json()
                done = await _wait_finished(session, base + created["url"])
        finally:
            stop.set()
            await server
            await launcher.aclose()
    assert done["status"] == "finished", done
    counters = done["counters"]
    assert isinstance(counters, dict)
    assert counters["listed"] == counters["indexed"] == 3 and counters["failed"] == 0
    assert counters["files"] >= 5 and counters["requests"] >= counters["files"]
    assert background_cancelled.is_set()


async def test_launcher_refuses_beyond_its_slots(tmp_path: Path) -> None:
    async with FakeHub(sample_corpus(real=False), tokens={TOKEN}) as hub:
        hub.faults.add(Fault("latency", route="api", delay=0.5, times=None))
        settings = _settings(tmp_path, hub.endpoint)
        db = Database.from_settings(settings)
        await migrate.ensure_schema(db.engine)
        async with db.sessions.begin() as session:
            rows = [Crawl(kind="hub", parameters={}) for _ in range(2)]
            session.add_all(rows)
        await db.dispose()
        launcher = InProcessLauncher(settings, max_running=1)
        try:
            await launcher.launch(rows[0].id, CrawlSpec(source="hub", repos=("synth/tiny-llama-GGUF",)))
            try:
                await launcher.launch(rows[1].id, CrawlSpec(source="hub"))
            except LauncherBusy:
                pass
            else:
                raise AssertionError("a second crawl was accepted beyond max_running")
            assert launcher.running == 1
        finally:
            await launcher.aclose()
        assert launcher.running == 0


async def test_hub_webhooks_keep_the_catalog_current_without_a_crawl_of_the_hub(tmp_path: Path) -> None:
    """Deliveries of the hub's webhook to a running server: a new commit indexes the repo,
    a move re-files it under its new id, a deletion marks its artifacts gone; a discussion
    changes nothing. Each is one crawl of the repos the delivery names."""
    secret = "hub-webhook-secret"
    async with FakeHub(sample_corpus(real=False), tokens={TOKEN}) as hub:
        settings = _settings(tmp_path, hub.endpoint)
        settings = replace(settings, api=replace(settings.api, webhook_secrets=hash_token(secret)))
        launcher = InProcessLauncher(settings)
        listening: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        stop = asyncio.Event()
        server = asyncio.create_task(serve(settings, "127.0.0.1", 0, launcher=launcher, listening=listening, stop=stop))
        try:
            base = f"http://127.0.0.1:{await listening}"
            async with aiohttp.ClientSession(headers={"X-Webhook-Secret": secret}) as session:

                async def deliver(scope: str, action: str, name: str, **extra: object) -> dict[str, object]:
                    payload = {"event": {"action": action, "scope": scope}, "repo": {"type": "model", "name": name},
                               **extra}  # fmt: skip
                    async with session.post(f"{base}/v1/hooks/hub", json=payload) as resp:
                        body: dict[str, object] = await resp.json()
                        assert resp.status in (200, 202), body
                    if resp.status == 200:
                        return body
                    return await _wait_finished(session, f"{base}{body['url']}")

                async def repo(repo_id: str) -> tuple[int, set[str]]:
                    """The repo route's status and its artifacts' statuses."""
                    async with session.get(f"{base}/v1/repos/{repo_id}", allow_redirects=False) as resp:
                        if resp.status != 200:
                            return resp.status, set()
                        return 200, {a["status"] for a in (await resp.json())["artifacts"]}

                old, new = "synth/tiny-llama-GGUF", "synth/tiny-llama-renamed-GGUF"
                main = [{"ref": "refs/heads/main", "newSha": "1"}]
                pushed = await deliver("repo.content", "update", old, updatedRefs=main)
                assert pushed["status"] == "finished" and pushed["counters"]["indexed"] == 1  # type: ignore[index]
                assert await repo(old) == (200, {"indexed"})
                talk = await deliver("discussion", "create", old, discussion={"num": 1})
                assert "changes no file" in str(talk["ignored"])

                hub.corpus.rename(old, new)
                moved = await deliver("repo", "move", old, movedTo={"name": new, "owner": {"id": "1"}})
                assert moved["counters"]["moved"] == 1  # type: ignore[index]
                assert await repo(new) == (200, {"indexed"}) and (await repo(old))[0] == 308

                hub.corpus.repos.pop(new)
                deleted = await deliver("repo", "delete", new)
                assert deleted["counters"]["deleted"] == 1  # type: ignore[index]
                assert await repo(new) == (200, set())  # the repo route lists what is not gone
                async with session.get(f"{base}/v1/artifacts?status=gone") as resp:
                    gone = (await resp.json())["items"]
                assert gone and {a["repo"] for a in gone} == {new}
        finally:
            stop.set()
            await server
            await launcher.aclose()
