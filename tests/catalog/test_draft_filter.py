"""The draft-model filter (`draft_for`): the same vocabulary key, at most 128 tokens apart and
fewer parameters, on a family of files carrying SmolLM2's real tokenizer (`draft_family`),
checked against llama.cpp's own test when the peer virtualenv is there."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from sqlalchemy import select

from registry.api.present import search_hits
from registry.catalog.db import Database
from registry.catalog.errors import ArtifactNotFound
from registry.catalog.facets import facets
from registry.catalog.models import Artifact
from registry.catalog.search import SearchQuery, search
from registry.catalog.services import upsert_repo_snapshot
from tests.catalog.draft_family import LLAMA_CPP_CHECK, MEMBERS, write_family
from tests.catalog.factories import artifact, error_artifact, make_facts, make_snapshot
from tests.gguf.gguf_py import parse_file
from tests.gguf.test_kvcache import REFVENV_PYTHON
from workers.index import index_paths

SMOLLM2 = "SmolLM2-135M-Instruct.Q4_1.gguf"
GEMMA3 = "gemma-3-270m-q4_k_m.gguf"


@pytest.fixture(scope="module")
def family(smollm2_path: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return write_family(smollm2_path, tmp_path_factory.mktemp("draft-family"))


@pytest.fixture
async def ids(db: Database, family: dict[str, Path], smollm2_path: Path, gemma3_path: Path) -> dict[str, int]:
    """The family and both sample models indexed: file name -> artifact id."""
    report = await index_paths(db, [smollm2_path, gemma3_path, *family.values()])
    assert report.errors == 0
    async with db.sessions() as session:
        rows = (await session.execute(select(Artifact.path, Artifact.id))).all()
    return {Path(path).name: id_ for path, id_ in rows}


async def drafts(db: Database, target: int, **kwargs: object) -> list[str]:
    async with db.sessions() as session:
        page = await search(session, SearchQuery(draft_for=target, limit=200, **kwargs))  # type: ignore[arg-type]
    return [Path(i.path).name for i in search_hits(page)]


async def test_the_family_members_that_llama_cpp_accepts_draft_for_smollm2(db: Database, ids: dict[str, int]) -> None:
    expected = {name for name, (params, _, accepted) in MEMBERS.items() if accepted and params}
    assert set(await drafts(db, ids[SMOLLM2])) == expected == {"same.gguf", "padded.gguf", "early.gguf"}


async def test_a_draft_has_fewer_parameters_than_its_target(db: Database, ids: dict[str, int]) -> None:
    # same.gguf has 64: SmolLM2 (135M) is no draft for it, and padded.gguf (64 too) neither.
    assert await drafts(db, ids["same.gguf"]) == ["early.gguf"]
    assert await drafts(db, ids["early.gguf"]) == []


async def test_drafts_sort_and_combine_with_other_filters(db: Database, ids: dict[str, int]) -> None:
    by_size = await drafts(db, ids[SMOLLM2], sort="parameter_count:asc")
    assert by_size[0] == "early.gguf" and set(by_size[1:]) == {"same.gguf", "padded.gguf"}
    assert set(await drafts(db, ids[SMOLLM2], min_params=33)) == {"same.gguf", "padded.gguf"}
    assert await drafts(db, ids[SMOLLM2], text="early") == ["early.gguf"]
    assert await drafts(db, ids[SMOLLM2], architecture="gemma3") == []
    async with db.sessions() as session:
        counts = await facets(session, SearchQuery(draft_for=ids[SMOLLM2]))
    assert counts["architecture"] == {"llama": 3}


async def test_pages_of_drafts_follow_each_other(db: Database, ids: dict[str, int]) -> None:
    seen: list[str] = []
    cursor = None
    async with db.sessions() as session:
        while True:
            page = await search(session, SearchQuery(draft_for=ids[SMOLLM2], limit=1, cursor=cursor, sort="name"))
            seen += [Path(i.path).name for i in search_hits(page)]
            if (cursor := page.next_cursor) is None:
                break
    assert seen == ["early.gguf", "padded.gguf", "same.gguf"]


async def test_a_model_with_another_vocabulary_has_no_drafts_here(db: Database, ids: dict[str, int]) -> None:
    assert await drafts(db, ids[GEMMA3]) == []
    assert GEMMA3 not in await drafts(db, ids[SMOLLM2])


async def test_the_stored_key_and_size(db: Database, ids: dict[str, int]) -> None:
    async with db.sessions() as session:
        rows = (await session.execute(select(Artifact.path, Artifact.vocab_sha256, Artifact.vocab_size))).all()
    stored = {Path(path).name: (key, size) for path, key, size in rows}
    smollm2_key = stored[SMOLLM2][0]
    assert smollm2_key is not None and len(smollm2_key) == 64
    assert stored[SMOLLM2][1] == 49152 and stored[GEMMA3][1] == 262144
    assert stored[GEMMA3][0] not in (None, smollm2_key)
    same_key = {name for name, (key, _) in stored.items() if key == smollm2_key}
    assert same_key == {SMOLLM2, "same.gguf", "padded.gguf", "overpadded.gguf", "early.gguf", "vocab-only.gguf"}
    assert stored["padded.gguf"][1] == 49152 + 128 and stored["overpadded.gguf"][1] == 49152 + 129


async def test_an_unknown_target_is_an_error_and_one_without_a_key_has_no_drafts(db: Database) -> None:
    async with db.sessions() as session, session.begin():
        await upsert_repo_snapshot(session, make_snapshot(artifacts=(
            artifact("keyless.gguf", make_facts(vocab_sha256=None, parameter_count=7_000_000_000)),
            artifact("small.gguf", make_facts(vocab_sha256=None, parameter_count=1_000_000)),
            error_artifact("bad.gguf"),
        )))  # fmt: skip
    async with db.sessions() as session:
        rows = dict((await session.execute(select(Artifact.path, Artifact.id))).all())
        for target in (rows["keyless.gguf"], rows["bad.gguf"]):
            assert search_hits(await search(session, SearchQuery(draft_for=target, status="all"))) == []
        missing = max(rows.values()) + 1
        with pytest.raises(ArtifactNotFound, match=f"no artifact {missing}"):
            await search(session, SearchQuery(draft_for=missing))
        with pytest.raises(ArtifactNotFound):
            await facets(session, SearchQuery(draft_for=missing))


@pytest.mark.skipif(not REFVENV_PYTHON.exists(), reason="no peer virtualenv (make refvenv): llama.cpp not here")
def test_the_key_and_size_agree_with_llama_cpp_on_every_pair(family: dict[str, Path], smollm2_path: Path) -> None:
    """Live: llama.cpp loads each vocabulary (vocab_only) and runs its compatibility test on
    every ordered pair; same key and at most 128 tokens apart must be its answer."""
    from registry.gguf.vocab import MAX_SIZE_DIFFERENCE, vocab_sha256

    paths = [smollm2_path, *family.values()]
    run = subprocess.run([str(REFVENV_PYTHON), "-c", LLAMA_CPP_CHECK, *map(str, paths)],
                         capture_output=True, text=True, timeout=600, check=True)  # fmt: skip
    theirs = {(Path(a).name, Path(b).name): ok for a, b, ok in json.loads(run.stdout.strip().splitlines()[-1])}
    keys = {}
    for path in paths:
        header = parse_file(path)
        keys[path.name] = (vocab_sha256(header), len(header.get("tokenizer.ggml.tokens")))
    ours = {
        (a, b): keys[a][0] == keys[b][0] and abs(keys[a][1] - keys[b][1]) <= MAX_SIZE_DIFFERENCE for a, b in theirs
    }
    assert ours == theirs
    assert theirs[(SMOLLM2, "padded.gguf")] and not theirs[(SMOLLM2, "overpadded.gguf")]
    assert theirs[("padded.gguf", "overpadded.gguf")]
