"""Each shard on the artifact and repo pages says where to download it: the hub's /resolve/
URL at the commit the catalog read. Crawled from the fake hub over loopback, the URLs are
downloaded and hashed; a local folder's files have none."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import aiohttp
import numpy as np
import pytest

from registry.catalog.db import Database
from registry.config import HubSettings, Settings
from tests.api.conftest import MakeApi, settings_with
from tests.catalog.conftest import empty_tables
from tests.fakehub import FakeHub
from tests.fakehub.corpus import BytesBlob, Corpus, RepoFile
from tests.fakehub.corpus import Repo as HubRepo
from tests.fakehub.testing import TOKEN
from tests.gguf.gguf_py import write_gguf
from workers.crawl import CrawlParams, crawl_from_settings
from workers.index import index_paths

SPLIT = "org/tiny-split-GGUF"


def _split_repo(tmp_path: Path) -> HubRepo:
    """A repo of one model in three shards, written by gguf-py: real bytes, real hashes."""
    tensors = [(f"blk.{i}.w", np.full((4, 8), i, dtype=np.float32)) for i in range(3)]
    paths = write_gguf(tmp_path / "tiny.gguf", kv={"general.name": "tiny"}, tensors=tensors, split_max_tensors=1)
    assert len(paths) == 3
    return HubRepo(SPLIT, [RepoFile(p.name, BytesBlob(p.read_bytes(), lfs=True)) for p in paths])


async def _sha256(session: aiohttp.ClientSession, url: str) -> str:
    digest = hashlib.sha256()
    async with session.get(url, headers={"Authorization": f"Bearer {TOKEN}"}) as resp:
        assert resp.status == 200, url
        async for chunk in resp.content.iter_chunked(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


async def test_shards_of_a_crawled_repo_download_from_their_urls(
    db: Database, make_api: MakeApi, tmp_path: Path
) -> None:
    await empty_tables(db)
    async with FakeHub(Corpus([_split_repo(tmp_path)]), tokens={TOKEN}) as hub:
        hub_settings = HubSettings(endpoint=hub.endpoint, token=TOKEN)
        report = await crawl_from_settings(db, hub_settings, CrawlParams(repos=(SPLIT,)))
        assert report.indexed == 1 and report.failed == 0 and report.artifact_errors == 0
        base = settings_with()
        api = await make_api(settings=Settings(api=base.api, hub=hub_settings))
        page = await api.get(f"/v1/repos/{SPLIT}")
        assert page.status == 200
        revision = page.body["repo"]["revision"]
        [artifact] = [a for a in page.body["artifacts"] if a["shard_count"] == 3]
        shards = artifact["shards"]
        assert [s["url"] for s in shards] == [
            f"{hub.endpoint}/{SPLIT}/resolve/{revision}/{s['path']}" for s in shards
        ]
        detail = await api.get(artifact["url"])
        assert detail.body["shards"] == shards  # the artifact page says the same
        async with aiohttp.ClientSession() as session:
            for s in shards:
                assert await _sha256(session, s["url"]) == s["sha256"], s["path"]


async def test_a_local_file_has_no_url(db: Database, make_api: MakeApi, tmp_path: Path, smollm2_path: Path) -> None:
    await empty_tables(db)
    folder = tmp_path / "models"
    folder.mkdir()
    os.symlink(smollm2_path, folder / "SmolLM2-135M-Instruct.Q4_1.gguf")
    await index_paths(db, [folder])
    api = await make_api()
    hits = await api.get("/v1/artifacts?author=local")
    detail = await api.get(hits.body["items"][0]["url"])
    assert detail.status == 200
    assert [s["url"] for s in detail.body["shards"]] == [None]


@pytest.mark.parametrize(
    ("repo_id", "path", "expected"),
    [
        ("org/m-GGUF", "m-Q4_K_M.gguf", "http://hub.test/org/m-GGUF/resolve/abc123/m-Q4_K_M.gguf"),
        ("org/m-GGUF", "sub dir/m #1.gguf", "http://hub.test/org/m-GGUF/resolve/abc123/sub%20dir/m%20%231.gguf"),
    ],
)
def test_urls_quote_what_a_path_may_hold(repo_id: str, path: str, expected: str) -> None:
    from registry.hub.http import resolve_url

    assert resolve_url("http://hub.test/", repo_id, "abc123", path) == expected
