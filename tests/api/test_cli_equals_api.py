"""`registry ... --json` prints what the API answers for the same question: the same models,
field names and values, on both databases. The command runs in-process on the API's catalog."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from registry.catalog.db import Database
from registry.catalog.models import Job
from registry.cli import main
from tests.api.conftest import ApiClient

pytestmark = pytest.mark.usefixtures("catalog")


@pytest.fixture
def cli(db_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> Callable[..., Awaitable[Any]]:  # fmt: skip
    """`registry ARGS --json` on the API's database: its exit status 0 and its JSON."""
    monkeypatch.setenv("REGISTRY_DATABASE_URL", db_url)
    monkeypatch.chdir(tmp_path)  # no config/registry.toml from the checkout

    async def run(*argv: str) -> Any:
        capsys.readouterr()
        code = await asyncio.to_thread(main, [*argv, "--json"])  # the command runs its own event loop
        out, err = capsys.readouterr()
        assert code == 0, err
        return json.loads(out)

    return run


async def _api(api: ApiClient, path: str) -> Any:
    reply = await api.get(path)
    assert reply.status == 200, reply.body
    return reply.body


@pytest.mark.parametrize(
    ("query", "argv"),
    [
        ("q=llama", ("search", "llama")),
        ("q=llama&sort=name&limit=3", ("search", "llama", "--sort", "name", "--limit", "3")),
        ("max_memory=8GiB&memory_context=32K&sort=memory", ("search", "--max-memory", "8GiB", "--memory-context",
                                                            "32K", "--sort", "memory")),
        ("status=all&kind=model&with_projector=0", ("search", "--status", "all", "--kind", "model",
                                                    "--no-with-projector")),
        ("author=BARTOWSKI&min_params=7B&sort=size:asc", ("search", "--author", "BARTOWSKI", "--min-params", "7B",
                                                          "--sort", "size:asc")),
        ("status=error", ("search", "--status", "error")),
    ],
)  # fmt: skip
async def test_search_json_is_the_api_page(api: ApiClient, cli: Any, query: str, argv: tuple[str, ...]) -> None:
    from_api = await _api(api, f"/v1/artifacts?{query}")
    assert from_api["items"], query
    assert await cli(*argv) == from_api
    first = from_api["items"][0]
    for name in ("shard_count", "verification_status", "url", "memory"):  # the API's names, not the catalog's
        assert name in first


async def test_search_pages_follow_the_same_cursor(api: ApiClient, cli: Any) -> None:
    first = await _api(api, "/v1/artifacts?sort=name&limit=2")
    assert first["next"] is not None
    assert await cli("search", "--sort", "name", "--limit", "2") == first
    after = await _api(api, f"/v1/artifacts?sort=name&limit=2&cursor={first['next']}")
    assert await cli("search", "--sort", "name", "--limit", "2", "--cursor", first["next"]) == after


@pytest.mark.parametrize(
    ("query", "argv"),
    [
        ("", ("search", "--facets")),
        ("architecture=LLAMA&facets=license,kind", ("search", "--architecture", "LLAMA", "--facets", "license,kind")),
        ("license=MIT&status=all&facets=verification", ("search", "--license", "MIT", "--status", "all",
                                                        "--facets", "verification")),
    ],
)  # fmt: skip
async def test_facets_json_is_the_api_answer(api: ApiClient, cli: Any, query: str, argv: tuple[str, ...]) -> None:
    assert await cli(*argv) == await _api(api, f"/v1/facets?{query}")


async def test_show_json_is_the_api_page_of_an_artifact_and_a_repo(api: ApiClient, cli: Any) -> None:
    [hit] = (await _api(api, "/v1/artifacts?file_type=F16"))["items"]
    for query, options in (("", ()), ("?context=32K", ("--context", "32K")), ("?context=1000", ("--context", "1000"))):
        assert await cli("show", str(hit["id"]), *options) == await _api(api, f"{hit['url']}{query}")
    assert await cli("show", "bartowski/llama-3-8b-gguf") == await _api(api, "/v1/repos/bartowski/Llama-3-8B-GGUF")


@pytest.mark.parametrize(
    ("path", "argv"),
    [
        ("/v1/repos/meta-llama/Llama-3-8B/lineage", ("tree", "meta-llama/Llama-3-8B")),
        ("/v1/repos/bartowski/Llama-3-8B-GGUF/lineage?direction=ancestors&depth=1",
         ("tree", "bartowski/Llama-3-8B-GGUF", "--direction", "ancestors", "--depth", "1")),
        ("/v1/repos/qwen/Qwen2-0.5B/lineage?direction=descendants", ("tree", "qwen/Qwen2-0.5B", "--direction",
                                                                     "descendants")),
    ],
)  # fmt: skip
async def test_tree_json_is_the_api_lineage(api: ApiClient, cli: Any, path: str, argv: tuple[str, ...]) -> None:
    assert await cli(*argv) == await _api(api, path)


async def test_jobs_json_is_the_api_page(api: ApiClient, cli: Any, db: Database) -> None:
    async with db.sessions.begin() as session:
        session.add_all([Job(kind="crawl", queue="crawl", status="done", args={"crawl_id": 1}),
                         Job(kind="verify", queue="verify", status="queued", args={"verification_id": 2})])  # fmt: skip
    assert await cli("jobs") == await _api(api, "/v1/jobs")
    page = await _api(api, "/v1/jobs?status=queued&limit=1")
    assert page["items"] and await cli("jobs", "--status", "queued", "--limit", "1") == page
