"""The `author` and `repo` filters: the artifacts of the repos a user or organisation owns,
or of one repo, by ids in any ASCII case, on both databases, through the catalog (with
every plan the probes can choose), the API and the CLI; a repo the hub moved to another
owner is found under the new one at once; and a repo page lists a bounded number of
artifacts, the search for the repo all of them."""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy import select

from registry.api import reads
from registry.api.present import search_hits
from registry.catalog.db import Database
from registry.catalog.facets import facets
from registry.catalog.models import Artifact, repo_key
from registry.catalog.search import SearchQuery, search
from registry.catalog.services import repo_moved, upsert_repo_snapshot
from registry.catalog.snapshot import RepoSnapshot
from registry.cli import main
from registry.responses.params import BadValue, filter_param
from tests.api.conftest import ApiClient, MakeApi, make_api
from tests.catalog.conftest import (
    db,
    db_url,
    empty_db_url,
    empty_tables,
    postgresql_url,
    sqlite_url,
    temp_databases,
)
from tests.catalog.factories import artifact, make_facts, make_snapshot
from tests.catalog.search_oracle import ALL_COMMON, thresholds
from workers.index import index_paths

__all__ = [  # fixtures used here
    "db", "db_url", "empty_db_url", "make_api", "postgresql_url", "sqlite_url", "temp_databases",
]  # fmt: skip

# repo id -> (downloads, architectures of its files). Owners that begin or extend one
# another, in several cases, and one that is not ASCII.
REPOS = {
    "bartowski/Alpha-GGUF": (500, ("llama", "qwen2")),
    "BARTOWSKI/Beta-GGUF": (300, ("llama",)),
    "bartowski2/Gamma-GGUF": (900, ("llama",)),
    "bart/Delta-GGUF": (100, ("gemma3",)),
    "bartowski-x/Epsilon-GGUF": (800, ("llama",)),
    "bartowski.x/Zeta-GGUF": (700, ("llama",)),
    "Bartowsk/Eta-GGUF": (600, ("llama",)),
    "ünï/Theta-GGUF": (400, ("llama",)),
}


def _snapshot(repo_id: str) -> RepoSnapshot:
    downloads, archs = REPOS[repo_id]
    files = tuple(
        artifact(f"{repo_id.split('/')[1]}-{arch}-Q4_K_M.gguf", make_facts(architecture=arch)) for arch in archs
    )
    return make_snapshot(repo_id, artifacts=files, downloads=downloads)


async def _catalog(db: Database) -> None:
    await empty_tables(db)
    async with db.sessions() as session, session.begin():
        for repo_id in REPOS:
            await upsert_repo_snapshot(session, _snapshot(repo_id), hub_answered=True)


async def _walked(db: Database, q: SearchQuery) -> list[str]:
    """Every hit's repo/path, page after page."""
    out: list[str] = []
    cursor = None
    async with db.sessions() as session:
        while True:
            page = await search(session, dataclasses.replace(q, cursor=cursor))
            out += [f"{i.repo}/{i.path}" for i in search_hits(page)]
            if (cursor := page.next_cursor) is None:
                return out


def _expected(owner: str, sort: str) -> list[str]:
    rows = [
        (downloads, f"{repo_id}/{repo_id.split('/')[1]}-{arch}-Q4_K_M.gguf")
        for repo_id, (downloads, archs) in REPOS.items()
        if repo_id.split("/")[0].lower() == owner
        for arch in archs
    ]
    if sort == "name":
        return [name for _, name in sorted(rows, key=lambda r: r[1].lower())]
    # downloads, most first; ties by id, also descending (the later written first)
    order = {name: i for i, (_, name) in enumerate(rows)}
    return [name for _, name in sorted(rows, key=lambda r: (-r[0], -order[r[1]]))]


@pytest.mark.parametrize("plan", ["default", "all common"])
async def test_an_author_matches_its_repos_only(db: Database, plan: str) -> None:
    await _catalog(db)
    with thresholds(db, ALL_COMMON if plan == "all common" else None):
        for author in ("bartowski", "BartOwski", "bart", "bartowski2", "Bartowsk", "bartowski-x", "bartowski.x"):
            owner = author.lower()
            for sort in ("downloads", "name"):
                for limit in (1, 2, 20):
                    got = await _walked(db, SearchQuery(author=author, sort=sort, limit=limit))
                    assert got == _expected(owner, sort), (author, sort, limit)
        # Names that begin an owner, or that an owner begins, are other authors.
        for author in ("b", "barto", "bartowski1", "bartowskix", "nobody"):
            assert await _walked(db, SearchQuery(author=author)) == [], author
        # With other filters, and in the facets.
        got = await _walked(db, SearchQuery(author="bartowski", architecture="qwen2"))
        assert got == ["bartowski/Alpha-GGUF/Alpha-GGUF-qwen2-Q4_K_M.gguf"]
        async with db.sessions() as session:
            counts = await facets(session, SearchQuery(author="BARTOWSKI"))
        assert counts["architecture"] == {"llama": 2, "qwen2": 1}


def test_an_author_that_is_not_a_name_is_refused() -> None:
    # Refused where the API and the command line read it, its one check.
    for author in ("ünï", "bart/owski", "", "bart owski", "x" * 97, "-bart", ".bart"):
        with pytest.raises(BadValue) as info:
            filter_param("author").read(author)
        assert info.value.name == "author", author
    assert filter_param("author").read("Bart.owski-2") == "Bart.owski-2"


@pytest.mark.parametrize("plan", ["default", "all common"])
async def test_a_repo_matches_its_own_artifacts(db: Database, plan: str) -> None:
    await _catalog(db)
    with thresholds(db, ALL_COMMON if plan == "all common" else None):
        for repo_id in REPOS:
            for spelling in (repo_id, repo_id.upper(), repo_id.swapcase()):
                # only A-Z fold: an id whose other letters changed names another repo
                expected = _expected_repo(repo_id) if repo_key(spelling) == repo_key(repo_id) else []
                for sort in ("downloads", "name"):
                    got = await _walked(db, SearchQuery(repo=spelling, sort=sort, limit=1))
                    assert sorted(got) == sorted(expected), (spelling, sort)
        for other in ("bartowski/Alpha", "bartowski/Alpha-GGUF-2", "bartowski2/Alpha-GGUF", "nobody/x"):
            assert await _walked(db, SearchQuery(repo=other)) == [], other
        got = await _walked(db, SearchQuery(repo="Bartowski/alpha-gguf", architecture="QWEN2", author="BARTOWSKI"))
        assert got == ["bartowski/Alpha-GGUF/Alpha-GGUF-qwen2-Q4_K_M.gguf"]
        async with db.sessions() as session:
            counts = await facets(session, SearchQuery(repo="bartowski/alpha-gguf"))
        assert counts["architecture"] == {"llama": 1, "qwen2": 1}


def test_a_repo_that_is_not_one_id_is_refused() -> None:
    for bad in ("bartowski", "a/b/c", "/x", "x/", "x" * 200 + "/" + "y" * 101):
        with pytest.raises(BadValue) as info:
            filter_param("repo").read(bad)
        assert info.value.name == "repo", bad
    assert filter_param("repo").read("Bartowski/alpha-gguf") == "Bartowski/alpha-gguf"


def _expected_repo(repo_id: str) -> list[str]:
    _, archs = REPOS[repo_id]
    return [f"{repo_id}/{repo_id.split('/')[1]}-{arch}-Q4_K_M.gguf" for arch in archs]


async def _sort_names(db: Database) -> set[str]:
    async with db.sessions() as session:
        return set((await session.scalars(select(Artifact.sort_name))).all())


async def test_a_repo_moved_to_another_owner_is_found_under_it_at_once(db: Database) -> None:
    await _catalog(db)
    async with db.sessions() as session, session.begin():
        assert await repo_moved(session, "bartowski/Alpha-GGUF", "Unsloth/Alpha-Moved-GGUF") == "renamed"
    names = await _sort_names(db)
    assert "unsloth/alpha-moved-gguf/alpha-gguf-llama-q4_k_m.gguf" in names
    assert not any(n.startswith("bartowski/alpha-gguf/") for n in names)
    assert await _walked(db, SearchQuery(author="unsloth", sort="name")) == [
        "Unsloth/Alpha-Moved-GGUF/Alpha-GGUF-llama-Q4_K_M.gguf",
        "Unsloth/Alpha-Moved-GGUF/Alpha-GGUF-qwen2-Q4_K_M.gguf",
    ]
    assert await _walked(db, SearchQuery(author="bartowski")) == ["BARTOWSKI/Beta-GGUF/Beta-GGUF-llama-Q4_K_M.gguf"]
    # Respelled in another case only: the sort names (lower case) stay as they are.
    before = await _sort_names(db)
    async with db.sessions() as session, session.begin():
        assert await repo_moved(session, "BARTOWSKI/Beta-GGUF", "bartowski/beta-gguf") == "renamed"
    assert await _sort_names(db) == before


@pytest.fixture
def models(tmp_path: Path, smollm2_path: Path) -> Path:
    folder = tmp_path / "models"
    folder.mkdir()
    os.symlink(smollm2_path, folder / "SmolLM2-135M-Instruct.Q4_1.gguf")
    return folder


@pytest.fixture
async def api(make_api: MakeApi, db: Database, models: Path) -> AsyncIterator[ApiClient]:
    await _catalog(db)
    await index_paths(db, [models])
    yield await make_api()


async def test_api_author(api: ApiClient) -> None:
    hits = await api.get("/v1/artifacts?author=Bartowski&sort=name")
    assert hits.status == 200
    assert [i["repo"] for i in hits.body["items"]] == ["bartowski/Alpha-GGUF"] * 2 + ["BARTOWSKI/Beta-GGUF"]
    local = await api.get("/v1/artifacts?author=LOCAL")
    assert [(i["repo"], i["path"]) for i in local.body["items"]] == [("local/models", "SmolLM2-135M-Instruct.Q4_1.gguf")]
    facet = await api.get("/v1/facets?author=BART")
    assert facet.status == 200 and facet.body["facets"]["architecture"] == {"gemma3": 1}
    assert facet.body["filters"]["author"] == "bart"
    for bad in ("b%C3%BC", "a/b", "%20bart", ""):
        answer = await api.get(f"/v1/artifacts?author={bad}")
        assert answer.status == 400, bad
        assert answer.body["error"]["details"]["parameter"] == "author", bad


def test_cli_author(cli_db_url: str, models: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["index", str(models)]) == 0
    capsys.readouterr()
    assert main(["search", "--author", "Local", "--json"]) == 0
    assert [i["repo"] for i in json.loads(capsys.readouterr().out)["items"]] == ["local/models"]
    assert main(["search", "--author", "bartowski", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["items"] == []
    with pytest.raises(SystemExit) as stop:  # refused as the option is read, as the API's parameter
        main(["search", "--author", "a/b"])
    assert stop.value.code == 2 and "author must be a user or organisation name" in capsys.readouterr().err


async def test_api_repo(api: ApiClient) -> None:
    hits = await api.get("/v1/artifacts?repo=BARTOWSKI/alpha-gguf&sort=name")
    assert hits.status == 200
    assert [i["path"] for i in hits.body["items"]] == ["Alpha-GGUF-llama-Q4_K_M.gguf", "Alpha-GGUF-qwen2-Q4_K_M.gguf"]
    local = await api.get("/v1/artifacts?repo=local/MODELS")
    assert [i["repo"] for i in local.body["items"]] == ["local/models"]
    for bad in ("bartowski", "a/b/c", "a%00b/c", "x" * 301):
        answer = await api.get(f"/v1/artifacts?repo={bad}")
        assert answer.status == 400, bad
        assert answer.body["error"]["details"]["parameter"] == "repo", bad


async def test_a_repo_page_lists_a_bounded_number_and_links_to_all(db: Database, make_api: MakeApi) -> None:
    await empty_tables(db)
    many = reads.MAX_REPO_ARTIFACTS + 3
    files = tuple(artifact(f"part-{i:04d}-Q4_K_M.gguf") for i in range(many))
    async with db.sessions() as session, session.begin():
        await upsert_repo_snapshot(session, make_snapshot("big/Many-GGUF", artifacts=files), hub_answered=True)
        await upsert_repo_snapshot(session, _snapshot("bart/Delta-GGUF"), hub_answered=True)
    api = await make_api()
    page = await api.get("/v1/repos/big/many-gguf")
    assert page.status == 200
    assert page.body["artifact_count"] == many
    listed = [a["path"] for a in page.body["artifacts"]]
    assert listed == [f"part-{i:04d}-Q4_K_M.gguf" for i in range(reads.MAX_REPO_ARTIFACTS)]
    url: str | None = page.body["artifacts_url"] + "&limit=100"
    paths: list[str] = []
    while url is not None:
        hits = await api.get(url)
        assert hits.status == 200
        paths += [i["path"] for i in hits.body["items"]]
        url = hits.body["next"] and f"{page.body['artifacts_url']}&limit=100&cursor={hits.body['next']}"
    assert paths == [f"part-{i:04d}-Q4_K_M.gguf" for i in range(many)]
    small = await api.get("/v1/repos/bart/Delta-GGUF")
    assert small.body["artifact_count"] == len(small.body["artifacts"]) == 1
