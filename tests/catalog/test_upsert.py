"""Writes: idempotent snapshots, revisions replacing artifacts, errors, hostile values, concurrency."""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError

from registry.catalog.db import Database
from registry.catalog.models import Artifact, Facts, LineageEdge, QuantMix, Repo, Shard
from registry.catalog.services import upsert_repo_snapshot
from registry.catalog.snapshot import RepoSnapshot, UpsertResult
from tests.catalog.factories import BaseModel, artifact, error_artifact, make_facts, make_snapshot


async def write(db: Database, snap: RepoSnapshot) -> UpsertResult:
    async with db.sessions() as session, session.begin():
        return await upsert_repo_snapshot(session, snap)


async def rows(db: Database, model: Any) -> list[Any]:
    async with db.sessions() as session:
        return list((await session.scalars(select(model))).all())


async def count(db: Database, model: Any) -> int:
    async with db.sessions() as session:
        return (await session.execute(select(func.count()).select_from(model))).scalar_one()


async def test_first_snapshot_writes_every_table(db: Database) -> None:
    facts = make_facts(base_models=(BaseModel(name="Base", repo_id="meta/base"),))
    snap = make_snapshot(
        artifacts=(
            artifact("a-Q4_K_M.gguf", facts),
            artifact("big.gguf", shards=3),
            error_artifact("broken.gguf"),
        ),
        card_base_model=("meta/base",),
        card_base_model_relation="quantized",
        tags=("gguf", "base_model:quantized:meta/base", "base_model:other/thing"),
    )
    result = await write(db, snap)
    assert result.created and not result.unchanged and result.written == 3 and result.gone == 0

    artifacts = {a.path: a for a in await rows(db, Artifact)}
    assert set(artifacts) == {"a-Q4_K_M.gguf", "big-00001-of-00003.gguf", "broken.gguf"}
    big = artifacts["big-00001-of-00003.gguf"]
    assert (big.status, big.shard_count, big.file_size) == ("indexed", 3, 3000)
    broken = artifacts["broken.gguf"]
    assert (broken.status, broken.error_code, broken.architecture) == ("error", "bad_magic", None)
    assert await count(db, Shard) == 5
    assert await count(db, Facts) == 2
    assert {(q.tensor_type, q.tensors) for q in await rows(db, QuantMix)} >= {("Q4_K", 150), ("F32", 45)}
    edges = {(e.parent_repo_id, e.relation, e.source) for e in await rows(db, LineageEdge)}
    assert edges == {
        ("meta/base", "quantized", "card"),
        ("meta/base", "quantized", "tags"),
        ("other/thing", "unknown", "tags"),
        ("meta/base", "unknown", "gguf"),
    }
    assert result.edges == 4


async def test_same_revision_twice_changes_nothing(db: Database) -> None:
    snap = make_snapshot()
    await write(db, snap)
    before = [(a.id, a.updated_at, a.status) for a in await rows(db, Artifact)]
    repo_before = [(r.id, r.updated_at, r.indexed_at) for r in await rows(db, Repo)]
    result = await write(db, snap)
    assert result.unchanged and result.written == 0
    assert [(a.id, a.updated_at, a.status) for a in await rows(db, Artifact)] == before
    assert [(r.id, r.updated_at, r.indexed_at) for r in await rows(db, Repo)] == repo_before
    assert await count(db, Shard) == 1


async def test_same_revision_new_counters_updates_search_copies(db: Database) -> None:
    await write(db, make_snapshot(downloads=10))
    result = await write(db, make_snapshot(downloads=99, likes=7))
    assert result.unchanged
    [a] = await rows(db, Artifact)
    assert (a.downloads, a.likes) == (99, 7)


async def test_new_revision_replaces_artifacts_and_marks_removed_gone(db: Database) -> None:
    await write(db, make_snapshot(artifacts=(artifact("keep.gguf"), artifact("drop.gguf"))))
    new_facts = make_facts(file_type="Q8_0", quant_mix={})
    result = await write(db, make_snapshot(revision="rev2", artifacts=(artifact("keep.gguf", new_facts),)))
    assert (result.written, result.gone) == (1, 1)
    by_path = {a.path: a for a in await rows(db, Artifact)}
    assert by_path["keep.gguf"].status == "indexed" and by_path["keep.gguf"].file_type == "Q8_0"
    assert by_path["keep.gguf"].revision == "rev2"
    assert by_path["drop.gguf"].status == "gone"
    assert {(s.path, s.revision) for s in await rows(db, Shard)} == {
        ("keep.gguf", "rev2"),
        ("drop.gguf", "rev1"),
    }
    assert await count(db, QuantMix) == 2  # only drop.gguf's rows remain; keep.gguf has an empty mix now
    [repo] = await rows(db, Repo)
    assert repo.revision == "rev2"


async def test_gone_artifact_comes_back(db: Database) -> None:
    await write(db, make_snapshot(artifacts=(artifact("a.gguf"),)))
    await write(db, make_snapshot(revision="rev2", artifacts=()))
    await write(db, make_snapshot(revision="rev3", artifacts=(artifact("a.gguf"),)))
    [a] = await rows(db, Artifact)
    assert (a.status, a.revision) == ("indexed", "rev3")


async def test_error_then_fixed(db: Database) -> None:
    await write(db, make_snapshot(artifacts=(error_artifact("a.gguf"),)))
    await write(db, make_snapshot(revision="rev2", artifacts=(artifact("a.gguf"),)))
    [a] = await rows(db, Artifact)
    assert (a.status, a.error_code, a.error_message) == ("indexed", None, None)


async def test_lineage_edges_follow_the_snapshot(db: Database) -> None:
    await write(db, make_snapshot(card_base_model=("a/one", "b/two"), card_base_model_relation="finetune"))
    await write(
        db, make_snapshot(revision="rev2", card_base_model=("b/two",), card_base_model_relation="finetune")
    )
    assert {e.parent_repo_id for e in await rows(db, LineageEdge)} == {"b/two"}


async def test_partial_snapshot_leaves_other_artifacts(db: Database) -> None:
    await write(db, make_snapshot(repo_id="local/models", artifacts=(artifact("a.gguf"), artifact("b.gguf"))))
    partial = make_snapshot(
        repo_id="local/models", revision="x", artifacts=(artifact("c.gguf"),), complete=False
    )
    await write(db, partial)
    assert (await write(db, partial)).written == 0
    [repo] = await rows(db, Repo)
    assert repo.revision == "rev1"  # a partial view does not claim its revision is indexed
    assert {(a.path, a.status) for a in await rows(db, Artifact)} == {
        ("a.gguf", "indexed"),
        ("b.gguf", "indexed"),
        ("c.gguf", "indexed"),
    }


async def test_hostile_values_are_stored_not_fatal(db: Database) -> None:
    facts = make_facts(
        architecture="x" * 500,
        name="nul\x00inside",
        parameter_count=2**70,
        block_count=2**40,
        bits_per_weight=float("nan"),
        metadata={"k": float("inf"), "s": "a\x00b", "nested": [b"\x01\x02"]},
    )
    await write(db, make_snapshot(artifacts=(artifact("evil.gguf", facts),)))
    [a] = await rows(db, Artifact)
    assert a.architecture == "x" * 64 and a.parameter_count == 2**63 - 1
    [f] = await rows(db, Facts)
    assert f.name == "nulinside" and f.extra["metadata"] == {"k": "inf", "s": "ab", "nested": ["0102"]}


async def test_lone_surrogates_are_stored_readable(db: Database) -> None:
    """A hub's JSON may carry lone surrogate escapes; neither driver can encode them."""
    snap = make_snapshot(
        repo_id="org/m\udce9",
        tags=("gguf", "base_model:org/b\ud800se"),
        description="d\udfff",
        artifacts=(artifact("caf\udce9.gguf", make_facts(name="n\udce9", metadata={"k\ud800": "v\udc00"})),),
    )
    await write(db, snap)
    assert (await write(db, snap)).unchanged
    [repo] = await rows(db, Repo)
    [a] = await rows(db, Artifact)
    [f] = await rows(db, Facts)
    [edge] = await rows(db, LineageEdge)
    assert (repo.repo_id, repo.description, a.path, f.name) == (
        "org/m\\udce9",
        "d\\udfff",
        "caf\\udce9.gguf",
        "n\\udce9",
    )
    assert f.extra["metadata"] == {"k\\ud800": "v\\udc00"}
    assert edge.parent_repo_id == "org/b\\ud800se"


@pytest.mark.parametrize("spellings", [("a/b", "a/b"), ("Org/Model", "org/model")])
async def test_lineage_edge_is_unique(db: Database, spellings: tuple[str, str]) -> None:
    """One edge per parent, relation and source, whatever the case of the parent's id."""
    result = await write(db, make_snapshot())
    with pytest.raises(IntegrityError):
        async with db.sessions() as session, session.begin():
            for parent in spellings:
                session.add(
                    LineageEdge(
                        child_pk=result.repo_pk, child_repo_id="org/model-GGUF", parent_repo_id=parent,
                        relation="merge", source="card",
                    )
                )


async def test_check_constraint_rejects_unknown_status(db: Database) -> None:
    result = await write(db, make_snapshot())
    with pytest.raises(IntegrityError):
        async with db.sessions() as session, session.begin():
            session.add(Artifact(repo_pk=result.repo_pk, path="x", status="weird", sort_name="x"))


async def test_concurrent_writers_do_not_duplicate(db: Database) -> None:
    many = tuple(artifact(f"m{i}.gguf") for i in range(20))
    snaps = [
        make_snapshot(repo_id="race/repo", artifacts=many),
        make_snapshot(repo_id="race/repo", artifacts=many),
    ]
    results = await asyncio.gather(*(write(db, s) for s in snaps))
    assert sorted(r.unchanged for r in results) == [False, True]
    assert await count(db, Repo) == 1
    assert await count(db, Artifact) == 20
    assert await count(db, Shard) == 20


async def test_concurrent_revisions_end_consistent(db: Database) -> None:
    base = make_snapshot(repo_id="race/rev", artifacts=(artifact("a.gguf"), artifact("b.gguf")))
    newer = dataclasses.replace(base, revision="rev2", artifacts=(artifact("b.gguf"), artifact("c.gguf")))
    await asyncio.gather(write(db, base), write(db, newer))
    arts = await rows(db, Artifact)
    [repo] = await rows(db, Repo)
    live = {a.path for a in arts if a.status == "indexed"}
    assert live == ({"a.gguf", "b.gguf"} if repo.revision == "rev1" else {"b.gguf", "c.gguf"})
    assert len({a.path for a in arts}) == len(arts)


async def test_an_older_revision_finishing_last_does_not_overwrite_the_newer(db: Database) -> None:
    """Two jobs read a repo on either side of a push; the one with the older commit finishes
    last. The crawl compares only revisions, so a catalog put back to rev1 would stay there
    (the next crawl re-reads it, but until then rev2's files are lost)."""
    older = make_snapshot(
        repo_id="race/order", revision="rev1", artifacts=(artifact("old.gguf"),), downloads=10,
        last_modified=datetime(2025, 1, 2, tzinfo=UTC),
    )  # fmt: skip
    newer = dataclasses.replace(
        older, revision="rev2", artifacts=(artifact("new.gguf"),), downloads=20,
        last_modified=datetime(2025, 1, 3, tzinfo=UTC),
    )  # fmt: skip
    await write(db, newer)
    result = await write(db, older)
    assert result.unchanged and (result.written, result.gone) == (0, 0)
    [repo] = await rows(db, Repo)
    assert (repo.revision, repo.downloads, repo.last_modified) == ("rev2", 20, newer.last_modified)
    assert {(a.path, a.status, a.revision) for a in await rows(db, Artifact)} == {
        ("new.gguf", "indexed", "rev2")
    }
    third = dataclasses.replace(newer, revision="rev3", last_modified=datetime(2025, 1, 4, tzinfo=UTC))
    assert not (await write(db, third)).unchanged  # a newer commit still replaces it


async def test_force_rewrites_the_same_revision(db: Database) -> None:
    await write(db, make_snapshot())
    fixed = make_snapshot(artifacts=(artifact("model-Q4_K_M.gguf", make_facts(file_type="Q5_K_M")),))
    assert (await write(db, fixed)).unchanged
    result = await write(db, dataclasses.replace(fixed, force=True))
    assert not result.unchanged and result.written == 1
    [a] = await rows(db, Artifact)
    assert a.file_type == "Q5_K_M"


async def test_new_tags_reach_the_search_text(db: Database) -> None:
    await write(db, make_snapshot(tags=("gguf",)))
    result = await write(db, make_snapshot(tags=("gguf", "roleplay")))
    assert not result.unchanged
    [a] = await rows(db, Artifact)
    assert "roleplay" in a.search_text


async def test_overlong_path_is_one_stable_key(db: Database) -> None:
    long = "d/" * 600 + "m.gguf"
    await write(db, make_snapshot(artifacts=(artifact(long),)))
    await write(db, make_snapshot(revision="rev2", artifacts=(artifact(long),)))
    [a] = await rows(db, Artifact)
    assert (a.status, len(a.path)) == ("indexed", 1000)
