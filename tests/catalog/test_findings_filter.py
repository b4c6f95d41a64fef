"""llama.cpp compatibility findings through the catalog: stored per artifact by `registry
index`, searched by `finding` and `runs_in`, shown by the API and the command line, on
SQLite and PostgreSQL; the two sample models carry none."""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy import select

from registry.api.present import search_hits
from registry.catalog.db import Database
from registry.catalog.errors import InvalidQuery
from registry.catalog.facets import facets
from registry.catalog.models import Artifact, ArtifactFinding
from registry.catalog.search import SearchQuery, search
from registry.catalog.services import upsert_repo_snapshot
from registry.catalog.snapshot import ArtifactRecord, LineageRecord
from registry.cli import main
from registry.gguf.types import GGMLType, ValueType
from tests.api.conftest import ApiClient, MakeApi, make_api
from tests.catalog.conftest import db, db_url, empty_db_url, postgresql_url, sqlite_url, temp_databases
from tests.catalog.factories import artifact, make_snapshot
from tests.gguf.builders import HeaderBuilder
from tests.gguf.test_compat import model
from workers.index import index_paths

__all__ = [  # fixtures used here
    "db", "db_url", "empty_db_url", "make_api", "postgresql_url", "sqlite_url", "temp_databases",
]  # fmt: skip

SMOLLM2 = "SmolLM2-135M-Instruct.Q4_1.gguf"
GEMMA3 = "gemma-3-270m-q4_k_m.gguf"


def _dup_key(b: HeaderBuilder) -> None:
    b.kv("llama.block_count", ValueType.UINT32, 1)


@pytest.fixture
def models(tmp_path: Path, smollm2_path: Path, gemma3_path: Path) -> Path:
    folder = tmp_path / "models"
    folder.mkdir()
    os.symlink(smollm2_path, folder / SMOLLM2)
    os.symlink(gemma3_path, folder / GEMMA3)
    (folder / "missing-tensor.gguf").write_bytes(model(skip=("blk.0.attn_k",)).build(with_data=True))
    (folder / "dup-key.gguf").write_bytes(model(kvs=_dup_key).build(with_data=True))
    (folder / "no-eos.gguf").write_bytes(model(special={"bos": 1}).build(with_data=True))
    (folder / "truncated.gguf").write_bytes(model().build(with_data=True)[:-16])
    return folder


async def _paths(db: Database, **kw: object) -> list[str]:
    async with db.sessions() as session:
        page = await search(session, SearchQuery(sort="name", limit=50, **kw))  # type: ignore[arg-type]
    return [i.path for i in search_hits(page)]


async def test_findings_are_stored_and_searched(db: Database, models: Path) -> None:
    report = await index_paths(db, [models])
    assert report.errors == 1  # the truncated file: an error row, with the refusal it stands for
    async with db.sessions() as session:
        rows = (await session.execute(
            select(Artifact.path, Artifact.runs_in_llama_cpp, ArtifactFinding.code, ArtifactFinding.severity)
            .outerjoin(ArtifactFinding, ArtifactFinding.artifact_id == Artifact.id)
            .order_by(Artifact.path, ArtifactFinding.position)
        )).all()  # fmt: skip
    assert [tuple(r) for r in rows] == [
        (SMOLLM2, True, None, None),
        ("dup-key.gguf", False, "L003", "error"),
        (GEMMA3, True, None, None),
        ("missing-tensor.gguf", False, "L010", "error"),
        ("no-eos.gguf", True, "L017", "warning"),
        ("truncated.gguf", False, "L006", "error"),
    ]
    assert await _paths(db, finding="L010") == ["missing-tensor.gguf"]
    assert await _paths(db, finding="L017", runs_in="llama.cpp") == ["no-eos.gguf"]
    assert await _paths(db, finding="L003,L010") == []  # all of them
    assert await _paths(db, finding="L006") == []  # error rows are not `indexed`
    assert await _paths(db, finding="L006", status="all") == ["truncated.gguf"]
    assert await _paths(db, runs_in="llama.cpp") == [GEMMA3, "no-eos.gguf", SMOLLM2]
    assert await _paths(db, runs_in="llama.cpp", architecture="gemma3") == [GEMMA3]
    async with db.sessions() as session:
        counts = await facets(session, SearchQuery(runs_in="llama.cpp"))
        assert counts["architecture"] == {"gemma3": 1, "llama": 2}
        counts = await facets(session, SearchQuery(finding="L010"))
        assert counts["architecture"] == {"llama": 1}
        for bad, parameter in ((SearchQuery(finding="L999"), "finding"), (SearchQuery(runs_in="vllm"), "runs_in")):
            with pytest.raises(InvalidQuery) as info:
                await search(session, bad)
            assert info.value.details["parameter"] == parameter


async def test_a_reindex_replaces_the_findings(db: Database, models: Path) -> None:
    await index_paths(db, [models])
    (models / "missing-tensor.gguf").write_bytes(model().build(with_data=True))
    await index_paths(db, [models])
    assert await _paths(db, finding="L010") == []
    assert "missing-tensor.gguf" in await _paths(db, runs_in="llama.cpp")


@pytest.fixture
async def api(make_api: MakeApi, db: Database, models: Path) -> AsyncIterator[ApiClient]:
    await index_paths(db, [models])
    yield await make_api()


async def test_api_findings(api: ApiClient) -> None:
    hits = await api.get("/v1/artifacts?finding=L010")
    assert hits.status == 200 and [i["path"] for i in hits.body["items"]] == ["missing-tensor.gguf"]
    detail = await api.get(hits.body["items"][0]["url"])
    assert detail.body["runs_in_llama_cpp"] is False
    assert detail.body["llama_cpp_findings"] == [{
        "code": "L010", "severity": "error", "field": "blk.0.attn_k.weight",
        "message": "llama requires tensor blk.0.attn_k.weight, which the file lacks",
    }]  # fmt: skip
    both = await api.get("/v1/artifacts?finding=L017,L010")
    assert both.status == 200 and both.body["items"] == []
    runs = await api.get("/v1/artifacts?runs_in=llama.cpp&sort=name")
    assert [i["path"] for i in runs.body["items"]] == [GEMMA3, "no-eos.gguf", SMOLLM2]
    for path in (SMOLLM2, GEMMA3):  # the sample models: loaded by llama.cpp, no finding
        item = next(i for i in runs.body["items"] if i["path"] == path)
        page = await api.get(item["url"])
        assert page.body["llama_cpp_findings"] == [] and page.body["runs_in_llama_cpp"] is True
    bad = await api.get("/v1/artifacts?finding=L999")
    assert bad.status == 400 and bad.body["error"]["details"]["parameter"] == "finding"
    bad = await api.get("/v1/artifacts?runs_in=vllm")
    assert bad.status == 400 and bad.body["error"]["details"]["parameter"] == "runs_in"


def test_cli_findings(cli_db_url: str, models: Path, capsys: pytest.CaptureFixture[str]) -> None:
    main(["index", str(models)])  # one error row: the exit code is index's own business
    capsys.readouterr()
    assert main(["search", "--finding", "L010", "--json"]) == 0
    items = json.loads(capsys.readouterr().out)["items"]
    assert [i["path"] for i in items] == ["missing-tensor.gguf"]
    assert main(["search", "--runs-in", "llama.cpp", "--finding", "L017", "--json"]) == 0
    assert [i["path"] for i in json.loads(capsys.readouterr().out)["items"]] == ["no-eos.gguf"]
    assert main(["show", str(items[0]["id"])]) == 0
    out = capsys.readouterr().out
    assert "refuses to load" in out and "L010 error blk.0.attn_k.weight" in out
    with pytest.raises(SystemExit) as stop:
        main(["search", "--finding", "L999"])
    assert stop.value.code == 2


def test_cli_inspect_findings(models: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", str(models / "no-eos.gguf"), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [f["code"] for f in doc["llama_cpp_findings"]] == ["L017"] and doc["runs_in_llama_cpp"] is True
    assert main(["inspect", str(models / SMOLLM2), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["llama_cpp_findings"] == [] and doc["runs_in_llama_cpp"] is True
    assert main(["inspect", str(models / "truncated.gguf"), "--json"]) != 0
    captured = capsys.readouterr()
    assert [f["code"] for f in json.loads(captured.out)["llama_cpp_findings"]] == ["L006"]
    assert "llama.cpp refuses it too: L006" in captured.err


async def test_l022_template_renders_unlike_the_base_model(db: Database, make_api: MakeApi) -> None:
    """Compared when read: the child indexed before its base, then the base, then a child
    that renders alike."""
    def record(path: str, render: str) -> ArtifactRecord:
        return dataclasses.replace(artifact(path), llama_cpp_findings=(), chat_template_render_sha256=render)

    edge = (LineageRecord("org/base", "finetune", "card"),)
    async with db.sessions() as session, session.begin():
        await upsert_repo_snapshot(session, make_snapshot("org/child-GGUF", artifacts=(record("c.gguf", "b" * 64),),
                                                          lineage=edge))  # fmt: skip
        await upsert_repo_snapshot(session, make_snapshot("org/same-GGUF", artifacts=(record("s.gguf", "a" * 64),),
                                                          lineage=edge))  # fmt: skip
    api = await make_api()

    async def codes(path: str) -> list[str]:
        hits = await api.get(f"/v1/artifacts?q={path.removesuffix('.gguf')}&status=all")
        [item] = [i for i in hits.body["items"] if i["path"] == path]
        page = await api.get(item["url"])
        return [f["code"] for f in page.body["llama_cpp_findings"]]

    assert await codes("c.gguf") == []  # no base model in the catalog yet: nothing to compare
    async with db.sessions() as session, session.begin():
        await upsert_repo_snapshot(session, make_snapshot("org/base", artifacts=(record("base.gguf", "a" * 64),)))
    assert await codes("c.gguf") == ["L022"]
    assert await codes("s.gguf") == []


async def test_hostile_strings_are_stored(db: Database, tmp_path: Path) -> None:
    """A duplicated tensor whose name holds a NUL and invalid UTF-8: findings stored on both databases."""
    name = b"blk.0.\x00\xff\xfe" + b"x" * 40

    def extra(b: HeaderBuilder) -> None:
        b.tensor(name, [8], GGMLType.F32)
        b.tensor(name, [8], GGMLType.F32)

    folder = tmp_path / "hostile"
    folder.mkdir()
    (folder / "hostile.gguf").write_bytes(model(extra=extra).build(with_data=True))
    await index_paths(db, [folder])
    async with db.sessions() as session:
        rows = (await session.execute(select(ArtifactFinding.code, ArtifactFinding.field))).all()
    assert sorted(code for code, _ in rows) == ["L004", "L018", "L018"]
    assert await _paths(db, finding="L004,L018") == ["hostile.gguf"]
