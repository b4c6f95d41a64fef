"""The "fits in memory" filter and each hit's `memory`: llama.cpp's memory estimate
(registry/gguf/memory.py) at a context, on the real sample models, against the buffers
llama.cpp allocates for them."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest
from sqlalchemy import select

from registry.api.present import search_hits
from registry.catalog.db import Database
from registry.catalog.errors import InvalidQuery
from registry.catalog.facets import facets
from registry.catalog.models import Artifact
from registry.catalog.search import MEMORY_CONTEXT, SearchQuery, search
from registry.catalog.services import upsert_repo_snapshot
from registry.gguf.memory import MemorySettings, estimate, memory_line
from registry.gguf.memory_profile import MemoryProfile, memory_profile
from registry.hub.local import read_header
from tests.catalog.factories import artifact, error_artifact, make_facts, make_snapshot
from workers.index import index_paths

MiB = 1 << 20
SMOLLM2, GEMMA3 = "SmolLM2-135M-Instruct.Q4_1.gguf", "gemma-3-270m-q4_k_m.gguf"
# Their trained contexts: the most the catalog sizes them for.
OWN_CONTEXT = {SMOLLM2: 8192, GEMMA3: 32768}
FIGURES = json.loads((Path(__file__).parents[1] / "memory" / "llama_cpp_figures.json").read_text())


@pytest.fixture
async def models(db: Database, smollm2_path: Path, gemma3_path: Path) -> dict[str, MemoryProfile]:
    """Both sample models indexed from their files: file name -> memory profile."""
    report = await index_paths(db, [smollm2_path, gemma3_path])
    assert report.errors == 0
    profiles = {p.name: memory_profile(read_header(p).header) for p in (smollm2_path, gemma3_path)}
    assert all(profiles.values())
    return profiles  # type: ignore[return-value]


def needs(profile: MemoryProfile, name: str, tokens: int) -> int:
    """What the catalog says `name` needs at `tokens`: its memory line at the context asked
    for, or at its own when that is shorter."""
    return memory_line(profile).bytes_at(min(tokens, OWN_CONTEXT[name]))


async def names(db: Database, **kwargs: object) -> set[str]:
    async with db.sessions() as session:
        page = await search(session, SearchQuery(limit=200, **kwargs))  # type: ignore[arg-type]
    return {Path(i.path).name for i in search_hits(page)}


async def test_the_stored_line_is_the_estimate(db: Database, models: dict[str, MemoryProfile]) -> None:
    """The catalog's memory at a context is what the estimate says llama.cpp allocates (from
    one micro-batch on), and within 5% or 32 MiB of what llama.cpp allocated for these files."""
    async with db.sessions() as session:
        rows = (await session.execute(select(Artifact.path, Artifact.memory_at_default))).all()
    stored = {Path(path).name: at_default for path, at_default in rows}
    for name, profile in models.items():
        assert stored[name] == estimate(profile, MemorySettings(context=4096)).total, name
        for tokens in (512, 5000, 32768):
            assert needs(profile, name, tokens) == estimate(
                profile, MemorySettings(context=min(tokens, OWN_CONTEXT[name]))
            ).total, (name, tokens)  # fmt: skip
    checked = 0
    for case in FIGURES["cases"]:
        settings = case["settings"]
        if case["source"] != "sample" or case["variant"] != "default" or settings["offload"] != "cpu":
            continue
        name = case["name"] + ".gguf"
        if settings["context"] > OWN_CONTEXT[name]:
            continue  # llama.cpp allocates past the trained context; the catalog sizes up to it
        llama_cpp = sum(case["llama_cpp"].values())
        ours = needs(models[name], name, settings["context"])
        assert abs(ours - llama_cpp) <= max(0.05 * llama_cpp, 32 * MiB), (name, settings["context"], ours, llama_cpp)
        checked += 1
    assert checked >= 3


async def test_a_model_fits_exactly_at_its_memory_and_not_a_byte_below(
    db: Database, models: dict[str, MemoryProfile]
) -> None:
    for tokens in (None, 1, 512, 513, 4096, 8192, 32768, 1 << 40):
        at = MEMORY_CONTEXT if tokens is None else tokens
        for name, profile in models.items():
            memory = needs(profile, name, at)
            fits = await names(db, max_memory=memory, memory_context=tokens)
            assert name in fits, (tokens, name, memory)
            assert name not in await names(db, max_memory=memory - 1, memory_context=tokens), (tokens, name)


async def test_the_context_is_capped_at_the_model_s_own(db: Database, models: dict[str, MemoryProfile]) -> None:
    """SmolLM2 cannot use more than 8,192 tokens: asked at a million, it needs what it needs
    at 8,192, while Gemma's cache keeps growing to its 32,768."""
    smollm2 = needs(models[SMOLLM2], SMOLLM2, 1 << 20)
    assert smollm2 == needs(models[SMOLLM2], SMOLLM2, 8192)
    assert await names(db, max_memory=smollm2, memory_context=1 << 20) == {SMOLLM2}
    assert await names(db, max_memory=smollm2 - 1, memory_context=1 << 20) == set()
    gemma3 = needs(models[GEMMA3], GEMMA3, 1 << 20)
    assert gemma3 > needs(models[GEMMA3], GEMMA3, 8192)
    assert await names(db, max_memory=max(smollm2, gemma3), memory_context=1 << 20) == set(models)


async def test_artifacts_without_an_estimate_never_match(db: Database) -> None:
    async with db.sessions() as session, session.begin():
        await upsert_repo_snapshot(session, make_snapshot("org/models", artifacts=(
            artifact("encoder.gguf", make_facts(architecture="bert", kv_cache=None), size=10),
            error_artifact("broken.gguf"),
        )))  # fmt: skip
    assert await names(db, max_memory=2**62, status="all") == set()
    assert await names(db, max_size=2**62, status="all") == {"encoder.gguf", "broken.gguf"}


async def test_the_filter_narrows_facets_and_other_filters_combine(
    db: Database, models: dict[str, MemoryProfile]
) -> None:
    smollm2, gemma3 = needs(models[SMOLLM2], SMOLLM2, MEMORY_CONTEXT), needs(models[GEMMA3], GEMMA3, MEMORY_CONTEXT)
    async with db.sessions() as session:
        counts = await facets(session, SearchQuery(max_memory=min(smollm2, gemma3)))
    assert counts["architecture"] == ({"llama": 1} if smollm2 < gemma3 else {"gemma3": 1})
    assert await names(db, max_memory=2**40, architecture="gemma3") == {"gemma-3-270m-q4_k_m.gguf"}
    assert await names(db, max_memory=2**40, text="smollm2") == {"SmolLM2-135M-Instruct.Q4_1.gguf"}
    assert await names(db, max_memory=2**40, tensor_type="Q4_K") == {"gemma-3-270m-q4_k_m.gguf"}
    assert await names(db, max_memory=2**40, min_context=16384) == {"gemma-3-270m-q4_k_m.gguf"}
    assert await names(db, max_memory=2**40, sort="size:asc") == set(models)


async def test_hits_show_the_memory_at_the_context_with_or_without_the_filter(
    db: Database, models: dict[str, MemoryProfile]
) -> None:
    for kwargs, tokens in (({}, (4096, 4096)), ({"memory_context": 512}, (512, 512)),
                           ({"memory_context": 65536}, (8192, 32768)),
                           ({"memory_context": 65536, "max_memory": 10**12}, (8192, 32768))):  # fmt: skip
        async with db.sessions() as session:
            page = await search(session, SearchQuery(sort="name:desc", **kwargs))  # type: ignore[arg-type]
        assert [msgspec.to_builtins(i.memory) for i in search_hits(page)] == [
            {"tokens": tokens[0], "bytes": needs(models[SMOLLM2], SMOLLM2, tokens[0]), "basis": "llama.cpp"},
            {"tokens": tokens[1], "bytes": needs(models[GEMMA3], GEMMA3, tokens[1]), "basis": "llama.cpp"},
        ], kwargs


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_memory": 10**9, "memory_context": 0}, "between 1 and"),
        ({"max_memory": 10**9, "memory_context": (1 << 40) + 1}, "between 1 and"),
    ],
)
async def test_a_context_out_of_range_is_a_typed_error(
    db: Database, kwargs: dict[str, int], message: str
) -> None:
    async with db.sessions() as session:
        with pytest.raises(InvalidQuery, match=message):
            await search(session, SearchQuery(**kwargs))  # type: ignore[arg-type]
