"""What a multimodal projector takes in (vision, audio): read from its header, stored on the
projector's row, and the `modality` filter that keeps the artifacts of repos whose projector
takes it; files written with gguf-py, on both databases, through the catalog, the API, the
CLI and `inspect`."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from registry.api.present import search_hits
from registry.catalog.db import Database
from registry.catalog.errors import InvalidQuery
from registry.catalog.facets import facets
from registry.catalog.search import SearchQuery, search
from registry.cli import main
from registry.gguf.facts import derive_facts
from registry.gguf.facts_model import MODALITIES, modality_mask, modality_names
from tests.api.conftest import ApiClient, MakeApi, make_api
from tests.catalog.conftest import db, db_url, empty_db_url, postgresql_url, sqlite_url, temp_databases
from tests.gguf.gguf_py import parse_file, write_gguf
from workers.index import index_paths

__all__ = [  # fixtures used here
    "db", "db_url", "empty_db_url", "make_api", "postgresql_url", "sqlite_url", "temp_databases",
]  # fmt: skip

pytest.importorskip("gguf")


def _write(path: Path, arch: str, keys: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_gguf(path, arch=arch, kv=keys, tensors=[("blk.0.w", np.ones((4, 8), dtype=np.float32))])
    return path


VISION = {"clip.has_vision_encoder": True, "clip.has_audio_encoder": False, "clip.projector_type": "gemma3"}
AUDIO = {"clip.has_audio_encoder": True, "clip.audio.projector_type": "ultravox"}
OMNI = {  # one projector type for both, a per-modality one overriding it for audio
    "clip.has_vision_encoder": True, "clip.has_audio_encoder": True,
    "clip.projector_type": "qwen2.5o", "clip.audio.projector_type": "qwen2.5o-audio",
}  # fmt: skip


def _modalities(path: Path) -> dict[str, str | None]:
    return derive_facts([parse_file(path)]).modalities


@pytest.mark.parametrize(
    ("keys", "expected"),
    [
        (VISION, {"vision": "gemma3"}),
        (AUDIO, {"audio": "ultravox"}),
        (OMNI, {"vision": "qwen2.5o", "audio": "qwen2.5o-audio"}),
        ({"clip.has_vision_encoder": True, "clip.vision.projector_type": "pixtral"}, {"vision": "pixtral"}),
        ({"clip.has_vision_encoder": True}, {"vision": None}),  # no type named
        ({"clip.has_audio_encoder": True, "clip.projector_type": "x" * 100_000}, {"audio": "x" * 64}),  # cut
        ({}, {}),  # no encoder declared
        ({"clip.has_vision_encoder": 1, "clip.projector_type": "mlp"}, {}),  # a number, not a flag
        ({"clip.has_vision_encoder": False, "clip.has_audio_encoder": False}, {}),
    ],
)
def test_a_projectors_modalities_come_from_its_encoder_flags(
    tmp_path: Path, keys: dict[str, Any], expected: dict[str, str | None]
) -> None:
    assert _modalities(_write(tmp_path / "mmproj.gguf", "clip", keys)) == expected


def test_only_projectors_have_modalities(tmp_path: Path) -> None:
    """A model file carrying the same flags is a model: it takes text."""
    assert _modalities(_write(tmp_path / "model.gguf", "llama", VISION)) == {}


def test_the_mask_round_trips_in_order() -> None:
    for bits in range(1 << len(MODALITIES)):
        names = modality_names(bits)
        assert names is not None and modality_mask(names) == bits
        assert names == [m for m in MODALITIES if m in names]
    assert modality_names(None) is None
    assert modality_mask(["audio", "vision", "audio"]) == 3


@pytest.fixture
def shelf(tmp_path: Path) -> Path:
    """Four repos (folders): a model with a vision projector, one with an audio projector,
    one with a projector of both, and a text-only model."""
    root = tmp_path / "shelf"
    for repo, keys in (("seeing", VISION), ("hearing", AUDIO), ("omni", OMNI)):
        _write(root / repo / f"{repo}-Q8_0.gguf", "llama", {"general.name": repo})
        _write(root / repo / f"mmproj-{repo}-f16.gguf", "clip", {"general.type": "mmproj", **keys})
    _write(root / "text" / "text-Q8_0.gguf", "llama", {"general.name": "text"})
    return root


async def _index(db: Database, shelf: Path) -> None:
    report = await index_paths(db, sorted(shelf.iterdir()))
    assert report.errors == 0 and len(report.artifacts) == 7


async def _paths(db: Database, **kwargs: Any) -> list[str]:
    async with db.sessions() as session:
        return [i.path for i in search_hits(await search(session, SearchQuery(sort="name", **kwargs)))]


async def test_the_modality_filter_keeps_the_repos_whose_projector_takes_it(db: Database, shelf: Path) -> None:
    await _index(db, shelf)
    async with db.sessions() as session:
        page = await search(session, SearchQuery(sort="name", limit=50))
    assert {i.path: i.modalities for i in search_hits(page)} == {
        "hearing-Q8_0.gguf": None, "mmproj-hearing-f16.gguf": ("audio",),
        "mmproj-omni-f16.gguf": ("vision", "audio"), "omni-Q8_0.gguf": None,
        "mmproj-seeing-f16.gguf": ("vision",), "seeing-Q8_0.gguf": None, "text-Q8_0.gguf": None,
    }  # fmt: skip
    assert await _paths(db, modality="vision", kind="model") == ["omni-Q8_0.gguf", "seeing-Q8_0.gguf"]
    assert await _paths(db, modality="audio", kind="model") == ["hearing-Q8_0.gguf", "omni-Q8_0.gguf"]
    assert await _paths(db, modality="audio,vision", kind="model") == ["omni-Q8_0.gguf"]
    assert await _paths(db, modality="vision") == ["mmproj-omni-f16.gguf", "omni-Q8_0.gguf",  # by repo, then path
                                                   "mmproj-seeing-f16.gguf", "seeing-Q8_0.gguf"]  # fmt: skip
    assert await _paths(db, modality="vision", with_projector=False) == []
    assert await _paths(db, modality="audio", architecture="clip") == ["mmproj-hearing-f16.gguf", "mmproj-omni-f16.gguf"]
    async with db.sessions() as session:
        counts = await facets(session, SearchQuery(modality="audio"))
        assert counts["architecture"] == {"clip": 2, "llama": 2}
        for bad in ("image", "vision,", "Vision"):
            with pytest.raises(InvalidQuery) as info:
                await search(session, SearchQuery(modality=bad))
            assert info.value.details == {"parameter": "modality", "allowed": list(MODALITIES)}

    # The omni projector removed: it is gone, and its repo takes nothing any more.
    (shelf / "omni" / "mmproj-omni-f16.gguf").unlink()
    await index_paths(db, [shelf / "omni"])
    assert await _paths(db, modality="audio", kind="model") == ["hearing-Q8_0.gguf"]
    assert await _paths(db, modality="vision", kind="model") == ["seeing-Q8_0.gguf"]


@pytest.fixture
async def api(make_api: MakeApi, db: Database, shelf: Path) -> AsyncIterator[ApiClient]:
    await _index(db, shelf)
    yield await make_api()


async def test_api_modality(api: ApiClient) -> None:
    hits = await api.get("/v1/artifacts?modality=audio&kind=model&sort=name")
    assert hits.status == 200
    assert [(i["path"], i["modalities"]) for i in hits.body["items"]] == [
        ("hearing-Q8_0.gguf", None), ("omni-Q8_0.gguf", None)
    ]  # fmt: skip
    projector = await api.get("/v1/artifacts?modality=vision,audio&kind=mmproj")
    assert [i["modalities"] for i in projector.body["items"]] == [["vision", "audio"]]
    detail = await api.get(projector.body["items"][0]["url"])
    assert detail.status == 200 and detail.body["modalities"] == ["vision", "audio"]
    assert detail.body["facts"]["modalities"] == {"vision": "qwen2.5o", "audio": "qwen2.5o-audio"}
    assert detail.body["projectors"] == []  # itself left out
    model = (await api.get("/v1/artifacts?modality=vision,audio&kind=model")).body["items"][0]
    beside = (await api.get(model["url"])).body["projectors"]
    assert beside == [{"id": projector.body["items"][0]["id"], "path": "mmproj-omni-f16.gguf",
                       "file_size": projector.body["items"][0]["file_size"], "modalities": ["vision", "audio"],
                       "url": projector.body["items"][0]["url"]}]  # fmt: skip
    text = (await api.get("/v1/artifacts?q=text&kind=model")).body["items"][0]
    assert text["path"] == "text-Q8_0.gguf" and (await api.get(text["url"])).body["projectors"] == []
    for bad in ("image", "vision;audio", "vision," * 10):
        reply = await api.get(f"/v1/artifacts?modality={bad}")
        assert reply.status == 400 and reply.body["error"]["details"]["parameter"] == "modality", bad


def test_cli_modality_and_inspect(cli_db_url: str, shelf: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["index", *map(str, sorted(shelf.iterdir()))]) == 0
    capsys.readouterr()
    assert main(["search", "--kind", "model", "--modality", "vision", "--modality", "audio", "--json"]) == 0
    assert [i["path"] for i in json.loads(capsys.readouterr().out)["items"]] == ["omni-Q8_0.gguf"]
    with pytest.raises(SystemExit) as stop:  # refused as the option is read, as the API's parameter
        main(["search", "--modality", "smell"])
    assert stop.value.code == 2 and "unknown modality 'smell'" in capsys.readouterr().err
    assert main(["inspect", str(shelf / "omni" / "mmproj-omni-f16.gguf")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert any(line.split() == ["takes", "in", "vision", "(qwen2.5o),", "audio", "(qwen2.5o-audio)"] for line in lines)
    assert main(["inspect", str(shelf / "omni" / "omni-Q8_0.gguf")]) == 0
    assert "takes in" not in capsys.readouterr().out
