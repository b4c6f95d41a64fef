"""Template capabilities in the product: stored at index time, the `capability` filter
(catalog, API, CLI), the hit and detail fields and `registry inspect`, on both databases."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy import select

from registry.api.present import search_hits
from registry.catalog.db import Database
from registry.catalog.errors import InvalidQuery
from registry.catalog.facets import facets
from registry.catalog.models import Artifact
from registry.catalog.search import SearchQuery, search
from registry.safety.capabilities import mask
from tests.api.conftest import ApiClient, MakeApi, make_api
from tests.catalog.conftest import db, db_url, empty_db_url, postgresql_url, sqlite_url, temp_databases
from tests.safety import templates as T
from tests.safety.test_capabilities import DEEPSEEK_R1_LIKE
from tests.safety.test_integration import run, write_gguf

__all__ = [  # fixtures used here
    "db", "db_url", "empty_db_url", "make_api", "postgresql_url", "sqlite_url", "temp_databases",
]  # fmt: skip

TEMPLATES = {"qwen3.gguf": T.QWEN3, "r1.gguf": DEEPSEEK_R1_LIKE, "chatml.gguf": T.CHATML, "plain.gguf": None}


@pytest.fixture
def models(tmp_path: Path) -> Path:
    folder = tmp_path / "models"
    folder.mkdir()
    for name, template in TEMPLATES.items():
        write_gguf(folder / name, template)
    (folder / "broken.gguf").write_bytes(b"GGUF\x03\x00\x00\x00" + b"\xff" * 24)
    return folder


async def _paths(database: Database, q: SearchQuery) -> set[str]:
    async with database.sessions() as session:
        return {i.path for i in search_hits(await search(session, q))}


async def test_index_stores_capabilities_and_filters(db: Database, models: Path) -> None:
    from workers.index import index_paths

    await index_paths(db, [models])
    async with db.sessions() as session:
        stored = {a.path: a.chat_template_capabilities for a in (await session.scalars(select(Artifact))).all()}
    assert stored == {
        "qwen3.gguf": mask(["system", "tools", "tool_calls", "thinking", "parallel_tool_calls"]),
        "r1.gguf": mask(["thinking"]),
        "chatml.gguf": mask(["system"]),
        "plain.gguf": 0,  # probed: no template, nothing it can do
        "broken.gguf": None,  # no header: not probed
    }

    cases = {
        "tools": {"qwen3.gguf"},
        "tool_calls,tools": {"qwen3.gguf"},
        "parallel_tool_calls": {"qwen3.gguf"},
        "thinking": {"qwen3.gguf", "r1.gguf"},
        "system": {"qwen3.gguf", "chatml.gguf"},
        " system , thinking ": {"qwen3.gguf"},
        "system,system": {"qwen3.gguf", "chatml.gguf"},
    }
    for capability, expected in cases.items():
        assert await _paths(db, SearchQuery(capability=capability)) == expected, capability
        # Sorted through other plans too: by name, and with a column filter beside it.
        assert await _paths(db, SearchQuery(capability=capability, sort="name:asc", architecture="llama")) == expected
    assert await _paths(db, SearchQuery(capability="thinking", status="all")) == {"qwen3.gguf", "r1.gguf"}

    async with db.sessions() as session:
        page = await search(session, SearchQuery(sort="name:asc", status="all"))
        hits = {i.path: i.chat_template_capabilities for i in search_hits(page)}
        assert hits == {
            "broken.gguf": None,
            "chatml.gguf": ("system",),
            "plain.gguf": (),
            "qwen3.gguf": ("system", "tools", "tool_calls", "thinking", "parallel_tool_calls"),  # CAPABILITIES order
            "r1.gguf": ("thinking",),
        }
        counts = await facets(session, SearchQuery(capability="thinking"))
        assert counts["architecture"] == {"llama": 2}
        for bad in ("vision", "tools,", ""):
            with pytest.raises(InvalidQuery) as info:
                await search(session, SearchQuery(capability=bad))
            assert info.value.details["parameter"] == "capability"
            assert info.value.details["allowed"] == ["system", "tools", "tool_calls", "thinking", "parallel_tool_calls"]


@pytest.fixture
async def api(make_api: MakeApi, db: Database, models: Path) -> AsyncIterator[ApiClient]:
    from workers.index import index_paths

    await index_paths(db, [models])
    yield await make_api()


async def test_api_filter_hits_and_detail(api: ApiClient) -> None:
    hits = await api.get("/v1/artifacts?capability=thinking&sort=name:asc")
    assert hits.status == 200
    items = hits.body["items"]
    assert [(i["path"], i["chat_template_capabilities"]) for i in items] == [
        ("qwen3.gguf", ["system", "tools", "tool_calls", "thinking", "parallel_tool_calls"]),
        ("r1.gguf", ["thinking"]),
    ]
    detail = await api.get(items[1]["url"])
    assert detail.status == 200 and detail.body["chat_template_capabilities"] == ["thinking"]

    facet = await api.get("/v1/facets?capability=tools")
    assert facet.status == 200 and facet.body["facets"]["architecture"] == {"llama": 1}

    bad = await api.get("/v1/artifacts?capability=vision")
    assert bad.status == 400
    assert bad.body["error"]["details"]["parameter"] == "capability"

    doc = (await api.get("/openapi.json")).body
    params = {p["name"]: p for p in doc["paths"]["/v1/artifacts"]["get"]["parameters"]}
    assert "tool_calls" in params["capability"]["description"]


def test_cli_search_and_inspect(cli_db_url: str, models: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "index", str(models))
    assert code == 0, err

    code, out, err = run(capsys, "search", "--capability", "thinking", "--capability", "system", "--json")
    assert code == 0, err
    assert [i["path"] for i in json.loads(out)["items"]] == ["qwen3.gguf"]
    code, out, err = run(capsys, "search", "--capability", "tools,thinking", "--json")
    assert code == 0 and [i["path"] for i in json.loads(out)["items"]] == ["qwen3.gguf"]
    with pytest.raises(SystemExit) as stop:  # refused as the option is read, as the API's parameter
        run(capsys, "search", "--capability", "vision")
    assert stop.value.code == 2 and "unknown capability 'vision'" in capsys.readouterr().err

    code, out, err = run(capsys, "inspect", "--json", str(models / "r1.gguf"))
    assert code == 0, err
    assert json.loads(out)["chat_template_capabilities"] == ["thinking"]
    code, out, _ = run(capsys, "inspect", str(models / "qwen3.gguf"))
    assert re.search(r"^  template can do +system, tools, tool_calls, thinking, parallel_tool_calls$", out, re.M)
    code, out, _ = run(capsys, "inspect", str(models / "plain.gguf"))
    assert "template can do" not in out  # no template, no line
    code, out, _ = run(capsys, "inspect", "--json", str(models / "plain.gguf"))
    assert json.loads(out)["chat_template_capabilities"] == []
