"""The `local` crawl source: `registry serve` keeps configured folders in the catalog.

A real `registry serve` subprocess (embedded mode, SQLite) with local.folders set indexes
them when asked over the API, as `registry index` does: new files are added, removed ones
become gone, and a request can name nothing but the source. The same job runs on
local.schedule, can be cancelled, and the distributed mode refuses the settings.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from sqlalchemy import update

from registry.catalog import migrate
from registry.catalog.crawls import cancel_crawl
from registry.catalog.db import Database
from registry.catalog.models import Crawl, Facts
from registry.config import load_settings
from tests.catalog.test_index_worker import write_gguf
from tests.jobs.conftest import API_TOKEN, ROOT, Processes, drain, free_port, server_up, wait_for
from workers.index import index_paths
from workers.jobs import create_scheduled_crawl
from workers.queue_embedded import EmbeddedQueue

AUTH = {"Authorization": f"Bearer {API_TOKEN}"}


def _env(tmp_path: Path, folders: list[Path], **extra: str) -> dict[str, str]:
    from registry.api.auth import hash_token

    env = {k: v for k, v in os.environ.items() if not k.startswith("REGISTRY_")}
    env.update({
        "REGISTRY_CONFIG": str(ROOT / "config" / "registry.toml"),
        "REGISTRY_GENERAL_DATA_DIR": str(tmp_path / "data"),
        "REGISTRY_API_TOKENS": hash_token(API_TOKEN),
        "REGISTRY_LOCAL_FOLDERS": os.pathsep.join(str(f) for f in folders),
        "REGISTRY_HUB_ENDPOINT": "http://127.0.0.1:9",  # no hub here: nothing may ask one
        **extra,
    })  # fmt: skip
    return env


async def _call(method: str, url: str, **kwargs: Any) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as http, http.request(method, url, **kwargs) as r:
        return r.status, await r.json()


async def test_serve_indexes_its_local_folders_when_asked(tmp_path: Path, processes: Processes) -> None:
    shelf, other = tmp_path / "shelf", tmp_path / "other"
    write_gguf(shelf / "a.gguf", name="Alpha")
    write_gguf(shelf / "b.gguf", name="Beta")
    write_gguf(other / "c.gguf", name="Gamma")
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    processes.start("serve", ["serve", "--port", str(port)], _env(tmp_path, [shelf, other]))
    await wait_for(lambda: server_up(base), 30, "registry serve to answer")

    async def crawl(**extra: Any) -> dict[str, Any]:
        status, body = await _call("POST", f"{base}/v1/crawls", json={"source": "local", **extra}, headers=AUTH)
        assert status == 202, body
        assert body["kind"] == "local"

        async def ended() -> bool:
            return (await _call("GET", base + body["url"]))[1]["status"] != "running"

        await wait_for(ended, 60, "the local crawl to end")
        return (await _call("GET", base + body["url"]))[1]  # type: ignore[no-any-return]

    async def files() -> dict[str, str]:
        status, page = await _call("GET", f"{base}/v1/artifacts?status=all&limit=100")
        assert status == 200, page
        return {f"{a['repo']}:{a['path']}": a["status"] for a in page["items"]}

    first = await crawl()
    assert first["status"] == "finished", first
    assert first["parameters"]["paths"] == [str(shelf), str(other)]
    assert (first["counters"]["repos"], first["counters"]["artifacts"], first["counters"]["errors"]) == (2, 3, 0)
    assert await files() == {"local/shelf:a.gguf": "indexed", "local/shelf:b.gguf": "indexed",
                             "local/other:c.gguf": "indexed"}  # fmt: skip

    write_gguf(shelf / "d.gguf", name="Delta")
    (shelf / "a.gguf").unlink()
    second = await crawl()
    assert second["status"] == "finished", second
    assert await files() == {"local/shelf:a.gguf": "gone", "local/shelf:b.gguf": "indexed",
                             "local/shelf:d.gguf": "indexed", "local/other:c.gguf": "indexed"}  # fmt: skip

    # `full` writes unchanged folders again: a fact an older release derived is replaced.
    catalog = Database.from_url(f"sqlite+aiosqlite:///{tmp_path / 'data' / 'registry.db'}")
    async with catalog as db, db.sessions() as session, session.begin():
        await session.execute(update(Facts).values(name="stale"))

    async def names() -> set[str]:
        page = (await _call("GET", f"{base}/v1/artifacts?limit=100"))[1]
        return {(await _call("GET", f"{base}/v1/artifacts/{a['id']}"))[1]["facts"]["name"] for a in page["items"]}

    assert (await crawl())["status"] == "finished" and await names() == {"stale"}
    third = await crawl(full=True)
    assert third["status"] == "finished" and third["parameters"]["full"] is True, third
    assert await names() == {"Beta", "Gamma", "Delta"}

    # A request names the source, and `full`: the folders are the server's.
    for body, field in (({"source": "local", "repos": ["org/name"]}, "repos"), ({"source": "local", "search": "x"},
                        "search"), ({"source": "local", "full": "yes"}, "full"), ({"source": "/etc"}, "source")):  # fmt: skip
        status, reply = await _call("POST", f"{base}/v1/crawls", json=body, headers=AUTH)
        assert status == 400, (body, reply)
        assert reply["error"]["details"]["field"] == field, reply
    doc = (await _call("GET", f"{base}/openapi.json"))[1]
    request = doc["paths"]["/v1/crawls"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    shapes = [doc["components"]["schemas"][s["$ref"].rsplit("/", 1)[1]] for s in request["oneOf"]]
    assert [s["properties"]["source"].get("enum", s["properties"]["source"].get("const")) for s in shapes] \
        == [["hub"], "local"]  # fmt: skip


async def test_a_scheduled_local_crawl_runs_in_the_pool_and_can_be_cancelled(tmp_path: Path) -> None:
    shelf = tmp_path / "shelf"
    for name in ("a", "b"):
        write_gguf(shelf / name / f"{name}.gguf", name=name)
    settings = load_settings(env=_env(tmp_path, [shelf / "a", shelf / "b"]))
    async with Database.from_settings(settings) as db:
        await migrate.ensure_schema(db.engine)
        queue = EmbeddedQueue(settings, db)
        tick = await create_scheduled_crawl(db, settings, source="local", scheduled_at=1_800_000_000)
        assert await create_scheduled_crawl(db, settings, source="local", scheduled_at=1_800_000_000) == tick
        assert await create_scheduled_crawl(db, settings, scheduled_at=1_800_000_000) != tick  # the hub's own
        await queue.enqueue_crawl(tick)
        await drain(queue, timeout=60)
        async with db.sessions() as session:
            row = await session.get_one(Crawl, tick)
        assert (row.kind, row.status, row.counters["repos"], row.counters["artifacts"]) == ("local", "finished", 2, 2)

        # Cancelled before its turn: it reads no folder and stays cancelled.
        cancelled = await create_scheduled_crawl(db, settings, source="local")
        async with db.sessions() as session, session.begin():
            await cancel_crawl(session, cancelled)
        report = await index_paths(db, settings.local.paths, crawl_id=cancelled)
        assert report.cancelled == 2 and report.artifacts == []
        async with db.sessions() as session:
            row = await session.get_one(Crawl, cancelled)
        assert (row.status, row.counters["cancelled"], row.counters["repos"]) == ("cancelled", 2, 2)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"REGISTRY_JOBS_MODE": "distributed", "REGISTRY_DATABASE_URL": "postgresql+asyncpg://u@127.0.0.1:1/x"},
         "work in the embedded mode only"),
        ({"REGISTRY_LOCAL_FOLDERS": "", "REGISTRY_LOCAL_SCHEDULE": "every 1h"}, "names no folder"),
        ({"REGISTRY_LOCAL_SCHEDULE": "every 5s"}, "local.schedule: 'every 5s' is more often"),
    ],
)  # fmt: skip
def test_serve_refuses_local_settings_that_cannot_work(tmp_path: Path, extra: dict[str, str], message: str) -> None:
    env = _env(tmp_path, [tmp_path], **extra)
    done = subprocess.run([sys.executable, "-m", "registry.cli", "serve", "--port", "0"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "configuration error" in done.stderr and message in done.stderr
