"""The "fits in memory" filter: file size plus the KV cache at a context, on the real sample
models, against the sizes llama.cpp allocates for them."""

from __future__ import annotations

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
from tests.catalog.factories import artifact, error_artifact, make_facts, make_snapshot
from workers.index import index_paths

MiB = 1 << 20
# llama.cpp's f16 cache for SmolLM2-135M: 30 layers x 3 KV heads x 64 x (K + V) x 2 bytes a
# token, 90 MiB at 4,096 tokens as it logs it. Its context length is 8,192.
SMOLLM2_PER_TOKEN = 23_040
SMOLLM2_CONTEXT = 8192
# Gemma 3 270M: 3 full-attention layers of 1 KiB a token, and 15 sliding layers of 1 KiB a
# token that keep a 512-token window; context length 32,768.
GEMMA3_PER_TOKEN, GEMMA3_SWA_PER_TOKEN, GEMMA3_WINDOW = 3 * 1024, 15 * 1024, 512
GEMMA3_CONTEXT = 32768


@pytest.fixture
async def models(db: Database, smollm2_path: Path, gemma3_path: Path) -> dict[str, int]:
    """Both sample models indexed from their files: file name -> file size."""
    report = await index_paths(db, [smollm2_path, gemma3_path])
    assert report.errors == 0
    return {p.name: p.stat().st_size for p in (smollm2_path, gemma3_path)}


def smollm2_memory(size: int, tokens: int) -> int:
    return size + SMOLLM2_PER_TOKEN * min(tokens, SMOLLM2_CONTEXT)


def gemma3_memory(size: int, tokens: int) -> int:
    tokens = min(tokens, GEMMA3_CONTEXT)
    return size + GEMMA3_PER_TOKEN * tokens + GEMMA3_SWA_PER_TOKEN * min(tokens, GEMMA3_WINDOW)


async def names(db: Database, **kwargs: object) -> set[str]:
    async with db.sessions() as session:
        page = await search(session, SearchQuery(limit=200, **kwargs))  # type: ignore[arg-type]
    return {Path(i.path).name for i in search_hits(page)}


async def test_the_stored_estimate_is_the_one_llama_cpp_allocates(db: Database, models: dict[str, int]) -> None:
    async with db.sessions() as session:
        rows = (await session.execute(select(
            Artifact.path, Artifact.kv_bytes_per_token, Artifact.kv_swa_bytes_per_token, Artifact.kv_sliding_window,
        ))).all()  # fmt: skip
    stored = {Path(path).name: tuple(kv) for path, *kv in rows}
    assert stored == {
        "SmolLM2-135M-Instruct.Q4_1.gguf": (SMOLLM2_PER_TOKEN, 0, None),
        "gemma-3-270m-q4_k_m.gguf": (GEMMA3_PER_TOKEN, GEMMA3_SWA_PER_TOKEN, GEMMA3_WINDOW),
    }
    assert 90 * MiB == SMOLLM2_PER_TOKEN * 4096


async def test_a_model_fits_exactly_at_its_memory_and_not_a_byte_below(db: Database, models: dict[str, int]) -> None:
    smollm2, gemma3 = models["SmolLM2-135M-Instruct.Q4_1.gguf"], models["gemma-3-270m-q4_k_m.gguf"]
    for tokens in (None, 1, 512, 513, 4096, 8192, 32768, 1 << 40):
        at = MEMORY_CONTEXT if tokens is None else tokens
        for name, memory in (
            ("SmolLM2-135M-Instruct.Q4_1.gguf", smollm2_memory(smollm2, at)),
            ("gemma-3-270m-q4_k_m.gguf", gemma3_memory(gemma3, at)),
        ):
            fits = await names(db, max_memory=memory, memory_context=tokens)
            assert name in fits, (tokens, name, memory)
            assert name not in await names(db, max_memory=memory - 1, memory_context=tokens), (tokens, name)


async def test_the_context_is_capped_at_the_model_s_own(db: Database, models: dict[str, int]) -> None:
    """SmolLM2 cannot use more than 8,192 tokens: asked at a million, it needs what it needs
    at 8,192 (180 MiB of cache), while Gemma's cache keeps growing to its 32,768."""
    smollm2 = models["SmolLM2-135M-Instruct.Q4_1.gguf"]
    budget = smollm2 + 180 * MiB
    assert await names(db, max_memory=budget, memory_context=1 << 20) == {"SmolLM2-135M-Instruct.Q4_1.gguf"}
    assert await names(db, max_memory=budget - 1, memory_context=1 << 20) == set()
    # At the default 4,096 tokens both fit in 300 MB; at 32K Gemma needs 96 MiB + 7.5 MiB more.
    assert await names(db, max_memory=300 * 10**6) == set(models)
    assert await names(db, max_memory=300 * 10**6, memory_context=32768) == {"SmolLM2-135M-Instruct.Q4_1.gguf"}


async def test_artifacts_without_an_estimate_never_match(db: Database) -> None:
    async with db.sessions() as session, session.begin():
        await upsert_repo_snapshot(session, make_snapshot("org/models", artifacts=(
            artifact("encoder.gguf", make_facts(architecture="bert", kv_cache=None), size=10),
            error_artifact("broken.gguf"),
        )))  # fmt: skip
    assert await names(db, max_memory=2**62, status="all") == set()
    assert await names(db, max_size=2**62, status="all") == {"encoder.gguf", "broken.gguf"}


async def test_the_filter_narrows_facets_and_other_filters_combine(db: Database, models: dict[str, int]) -> None:
    smollm2 = models["SmolLM2-135M-Instruct.Q4_1.gguf"]
    async with db.sessions() as session:
        counts = await facets(session, SearchQuery(max_memory=smollm2_memory(smollm2, MEMORY_CONTEXT)))
    assert counts["architecture"] == {"llama": 1}
    assert await names(db, max_memory=2**40, architecture="gemma3") == {"gemma-3-270m-q4_k_m.gguf"}
    assert await names(db, max_memory=2**40, text="smollm2") == {"SmolLM2-135M-Instruct.Q4_1.gguf"}
    assert await names(db, max_memory=2**40, tensor_type="Q4_K") == {"gemma-3-270m-q4_k_m.gguf"}
    assert await names(db, max_memory=2**40, min_context=16384) == {"gemma-3-270m-q4_k_m.gguf"}
    assert await names(db, max_memory=2**40, sort="size:asc") == set(models)


async def test_hits_show_the_memory_at_the_context_with_or_without_the_filter(
    db: Database, models: dict[str, int]
) -> None:
    smollm2, gemma3 = models["SmolLM2-135M-Instruct.Q4_1.gguf"], models["gemma-3-270m-q4_k_m.gguf"]
    for kwargs, tokens in (({}, (4096, 4096)), ({"memory_context": 512}, (512, 512)),
                           ({"memory_context": 65536}, (8192, 32768)),
                           ({"memory_context": 65536, "max_memory": 10**12}, (8192, 32768))):  # fmt: skip
        async with db.sessions() as session:
            page = await search(session, SearchQuery(sort="name:desc", **kwargs))  # type: ignore[arg-type]
        assert [msgspec.to_builtins(i.memory) for i in search_hits(page)] == [
            {"tokens": tokens[0], "bytes": smollm2_memory(smollm2, tokens[0])},
            {"tokens": tokens[1], "bytes": gemma3_memory(gemma3, tokens[1])},
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
