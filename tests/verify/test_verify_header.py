"""A verification confirms, or refutes, how the crawl read an artifact's header."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import select

from registry.catalog.db import Database
from registry.catalog.models import Artifact, Verification
from registry.catalog.services import upsert_repo_snapshot
from registry.catalog.snapshot import ArtifactRecord, RepoSnapshot, ShardRecord
from registry.gguf.facts import derive_facts
from registry.gguf.facts_model import Facts
from registry.hub.local import read_header
from tests.catalog.factories import make_facts
from tests.fakehub import FakeHub
from tests.fakehub.corpus import BytesBlob, Corpus, Repo, RepoFile
from tests.fakehub.testing import TOKEN
from tests.verify.conftest import make_settings, write_tiny
from workers.verify import run_verification


async def _verify(db: Database, tmp_path: Path, facts_of: str) -> tuple[Artifact, Verification]:
    path = write_tiny(tmp_path / "tiny.gguf")
    blob = BytesBlob(path.read_bytes(), lfs=True)
    repo = Repo("org/tiny-GGUF", [RepoFile("tiny-Q8_0.gguf", blob), RepoFile("tiny-Q4_0.gguf", blob)])
    facts: Facts = derive_facts([read_header(path).header], file_sizes=[blob.size])
    if facts_of == "other":
        facts = make_facts()
    shard = ShardRecord("tiny-Q8_0.gguf", size=blob.size, sha256=blob.sha256, header_bytes=100)
    record = ArtifactRecord(shard.path, (shard,), facts, header_read="sibling", header_leader="tiny-Q4_0.gguf",
                            header_samples=40)  # fmt: skip
    async with db.sessions() as session, session.begin():
        await upsert_repo_snapshot(session, RepoSnapshot(repo.repo_id, repo.sha, (record,)))
    async with db.sessions() as session:
        artifact_id = (await session.scalars(select(Artifact.id))).one()
        row = Verification(artifact_id=artifact_id, status="queued")
        session.add(row)
        await session.commit()
        row_id = row.id
    async with FakeHub(Corpus([repo]), tokens={TOKEN}) as hub:
        await run_verification(db, make_settings(tmp_path, hub.endpoint), row_id)
    async with db.sessions() as session:
        art, done = await session.get(Artifact, artifact_id), await session.get(Verification, row_id)
    assert art is not None and done is not None
    return art, done


async def test_a_sibling_read_whose_facts_hold_is_confirmed(db: Database, tmp_path: Path) -> None:
    art, done = await _verify(db, tmp_path, "same")
    assert art.header_read == "sibling" and art.header_confirmed is True
    assert (done.status, done.reason) == ("skipped", "unsupported_architecture")  # the tiny file's own verdict


async def test_a_sibling_read_whose_facts_differ_fails_the_verification(db: Database, tmp_path: Path) -> None:
    art, done = await _verify(db, tmp_path, "other")
    assert art.header_confirmed is False
    assert (done.status, done.reason) == ("failed", "header_mismatch")
    message = (done.details or {}).get("message", "")
    assert "from the bytes of tiny-Q4_0.gguf" in message and "architecture" in message
