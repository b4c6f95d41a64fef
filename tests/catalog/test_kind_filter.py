"""The `kind` filter and hit field: what each indexed file is (model, projector, LoRA adapter,
importance matrix, vocabulary), for files written with gguf-py and the real SmolLM2, on
both databases, through the catalog, the API and the CLI."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import pytest

from registry.api.present import search_hits
from registry.catalog.db import Database
from registry.catalog.errors import InvalidQuery
from registry.catalog.facets import facets
from registry.catalog.search import SearchQuery, search
from registry.cli import main
from registry.gguf.facts_model import KINDS
from tests.api.conftest import ApiClient, MakeApi, make_api
from tests.catalog.conftest import db, db_url, empty_db_url, postgresql_url, sqlite_url, temp_databases
from workers.index import index_paths

__all__ = [  # fixtures used here
    "db", "db_url", "empty_db_url", "make_api", "postgresql_url", "sqlite_url", "temp_databases",
]  # fmt: skip

gguf = pytest.importorskip("gguf")

SMOLLM2 = "SmolLM2-135M-Instruct.Q4_1.gguf"


def _write(path: Path, arch: str, keys: dict[str, str], tensors: bool = True, tokens: bool = False) -> None:
    writer = gguf.GGUFWriter(str(path), arch)
    for key, value in keys.items():
        writer.add_string(key, value)
    if tokens:
        writer.add_tokenizer_model("gpt2")
        writer.add_token_list(["a", "b", "c"])
    if tensors:
        writer.add_tensor("blk.0.w", np.ones((4, 8), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


@pytest.fixture
def models(tmp_path: Path, smollm2_path: Path) -> Path:
    folder = tmp_path / "models"
    folder.mkdir()
    os.symlink(smollm2_path, folder / SMOLLM2)
    _write(folder / "mmproj-model-f16.gguf", "clip", {"general.type": "mmproj"})
    _write(folder / "adapter-lora.gguf", "llama", {"general.type": "adapter", "adapter.type": "lora"})
    _write(folder / "imatrix.gguf", "llama", {"general.type": "imatrix"})
    _write(folder / "vocab-only.gguf", "llama", {}, tensors=False, tokens=True)
    (folder / "broken.gguf").write_bytes(b"GGUF\x03\x00\x00\x00" + b"\xff" * 24)
    return folder


EXPECTED = {
    SMOLLM2: "model",
    "mmproj-model-f16.gguf": "mmproj",
    "adapter-lora.gguf": "lora",
    "imatrix.gguf": "imatrix",
    "vocab-only.gguf": "vocab",
}


async def test_kinds_are_stored_filtered_and_shown(db: Database, models: Path) -> None:
    report = await index_paths(db, [models])
    assert report.errors == 1
    async with db.sessions() as session:
        page = await search(session, SearchQuery(status="all", limit=50))
        assert {i.path: i.kind for i in search_hits(page)} == {**EXPECTED, "broken.gguf": None}
        for kind in KINDS:
            hits = await search(session, SearchQuery(kind=kind, sort="name"))
            assert [i.path for i in search_hits(hits)] == [p for p, k in EXPECTED.items() if k == kind], kind
        # With other filters: the projector is the only `clip` file.
        hits = await search(session, SearchQuery(kind="mmproj", architecture="CLIP"))
        assert [i.path for i in search_hits(hits)] == ["mmproj-model-f16.gguf"]
        assert search_hits(await search(session, SearchQuery(kind="model", architecture="clip"))) == []
        counts = await facets(session, SearchQuery(kind="model"))
        assert counts["architecture"] == {"llama": 1}
        # Counted on request: one file of each kind; the unreadable file has none.
        counts = await facets(session, SearchQuery(), ("kind",))
        assert counts == {"kind": {k: 1 for k in sorted(KINDS)}}
        counts = await facets(session, SearchQuery(status="all"), ("kind", "verification"))
        assert counts == {"kind": {**{k: 1 for k in sorted(KINDS)}, "unknown": 1}, "verification": {"unknown": 6}}
        # SmolLM2's chat template is the only one: its capabilities count once each.
        [smol] = search_hits(await search(session, SearchQuery(kind="model")))
        assert smol.chat_template_capabilities
        counts = await facets(session, SearchQuery(), ("capability", "architecture"))
        assert counts["capability"] == dict.fromkeys(sorted(smol.chat_template_capabilities), 1)
        assert counts["architecture"] == {"llama": 4, "clip": 1}
        with pytest.raises(InvalidQuery) as info:
            await search(session, SearchQuery(kind="adapter"))
        assert info.value.details == {"parameter": "kind", "allowed": list(KINDS)}


@pytest.fixture
async def api(make_api: MakeApi, db: Database, models: Path) -> AsyncIterator[ApiClient]:
    await index_paths(db, [models])
    yield await make_api()


async def test_api_kind(api: ApiClient) -> None:
    hits = await api.get("/v1/artifacts?kind=lora")
    assert hits.status == 200
    assert [(i["path"], i["kind"]) for i in hits.body["items"]] == [("adapter-lora.gguf", "lora")]
    detail = await api.get(hits.body["items"][0]["url"])
    assert detail.body["kind"] == "lora" and detail.body["facts"]["kind"] == "lora"
    facet = await api.get("/v1/facets?kind=mmproj")
    assert facet.status == 200 and facet.body["facets"]["architecture"] == {"clip": 1}
    kinds = await api.get("/v1/facets?facets=kind,license&architecture=llama")
    assert kinds.status == 200 and list(kinds.body["facets"]) == ["kind", "license"]
    assert kinds.body["facets"]["kind"] == {"imatrix": 1, "lora": 1, "model": 1, "vocab": 1}
    assert kinds.body["filters"] == {"architecture": "llama", "status": "indexed"}
    bad = await api.get("/v1/artifacts?kind=adapter")
    assert bad.status == 400 and bad.body["error"]["details"]["parameter"] == "kind"


def test_cli_kind(cli_db_url: str, models: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["index", str(models)]) == 0
    capsys.readouterr()
    assert main(["search", "--kind", "model", "--json"]) == 0
    items = json.loads(capsys.readouterr().out)["items"]
    assert [(i["path"], i["kind"]) for i in items] == [(SMOLLM2, "model")]
    assert main(["search", "--kind", "model", "--with-projector", "--json"]) == 0
    assert [i["path"] for i in json.loads(capsys.readouterr().out)["items"]] == [SMOLLM2]
    with pytest.raises(SystemExit) as stop:
        main(["search", "--kind", "adapter"])
    assert stop.value.code == 2


async def test_with_projector(db: Database, models: Path, tmp_path: Path, smollm2_path: Path) -> None:
    text_only = tmp_path / "text-only"
    text_only.mkdir()
    os.symlink(smollm2_path, text_only / "text-model.gguf")
    await index_paths(db, [models, text_only])

    async def paths(**kwargs: object) -> list[str]:
        async with db.sessions() as session:
            page = await search(session, SearchQuery(sort="name", **kwargs))  # type: ignore[arg-type]
        return [i.path for i in search_hits(page)]

    assert await paths(with_projector=True, kind="model") == [SMOLLM2]
    assert await paths(with_projector=False, kind="model") == ["text-model.gguf"]
    assert await paths(with_projector=True) == sorted(EXPECTED, key=str.lower)  # the projector itself too
    async with db.sessions() as session:
        counts = await facets(session, SearchQuery(with_projector=False))
    assert counts["architecture"] == {"llama": 1}

    # The projector removed: it is gone, and no longer counts.
    (models / "mmproj-model-f16.gguf").unlink()
    await index_paths(db, [models])
    assert await paths(with_projector=True) == []
    assert await paths(with_projector=False, kind="model") == [SMOLLM2, "text-model.gguf"]


async def test_api_and_cli_with_projector(api: ApiClient) -> None:
    hits = await api.get("/v1/artifacts?with_projector=1&kind=model")
    assert hits.status == 200 and [i["path"] for i in hits.body["items"]] == [SMOLLM2]
    none = await api.get("/v1/artifacts?with_projector=false")
    assert none.status == 200 and none.body["items"] == []
    bad = await api.get("/v1/artifacts?with_projector=maybe")
    assert bad.status == 400 and bad.body["error"]["details"]["parameter"] == "with_projector"
