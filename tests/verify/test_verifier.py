"""The job function and the in-process Verifier: POST /v1/verifications to a finished row."""

from __future__ import annotations

import asyncio
import functools
from pathlib import Path

import pytest
from sqlalchemy import select, text

from registry.api.launchers import TaskVerifier
from registry.catalog.db import Database
from registry.catalog.models import Artifact, Verification
from registry.catalog.services import upsert_repo_snapshot
from registry.catalog.snapshot import ArtifactRecord, RepoSnapshot, ShardRecord
from tests.api.conftest import WRITE_TOKEN, MakeApi
from tests.catalog.conftest import empty_tables
from tests.catalog.factories import make_facts
from tests.fakehub import FakeHub, Fault
from tests.fakehub.corpus import BytesBlob, Corpus, Repo, RepoFile
from tests.fakehub.testing import TOKEN
from tests.jobs.conftest import scalar, wait_for
from tests.verify.conftest import make_settings, write_tiny
from workers.index import index_paths
from workers.verify import in_process_verifier, run_verification

AUTH = {"Authorization": f"Bearer {WRITE_TOKEN}"}


async def _local_artifact(db: Database, folder: Path, **tiny: object) -> int:
    folder.mkdir()
    write_tiny(folder / "tiny-mamba.gguf", **tiny)  # type: ignore[arg-type]
    await index_paths(db, [folder])
    async with db.sessions() as session:
        return (await session.scalars(select(Artifact.id))).one()


async def test_post_verification_runs_and_records_the_row(
    make_api: MakeApi,
    db: Database,
    tmp_path: Path,
) -> None:
    artifact_id = await _local_artifact(db, tmp_path / "models")
    settings = make_settings(tmp_path)
    verifier = TaskVerifier(db.sessions, functools.partial(run_verification, db, settings), concurrency=1)
    api = await make_api(verifier=verifier)
    reply = await api.post("/v1/verifications", json={"artifact_id": artifact_id}, headers=AUTH)
    assert reply.status == 202 and reply.body["status"] == "queued"
    await verifier.join()
    got = await api.get(reply.headers["Location"])
    body = got.body
    assert (body["status"], body["reason"]) == ("skipped", "unsupported_architecture")
    assert body["tensors_checked"] == 3 and body["nonfinite_values"] == 0
    assert len(body["sha256"]) == 64 and body["finished_at"] is not None
    assert {"hash", "header", "dequantize"} <= set(body["timings"])
    assert body["details"]["architecture"] == "mamba" and body["details"]["message"]
    assert body["details"]["kept_matrices"] == 0  # no forward pass was built
    async with db.sessions() as session:
        row = await session.get(Verification, reply.body["id"])
        art = await session.get(Artifact, artifact_id)
    assert row is not None and art is not None
    assert row.bytes_downloaded == 0 and row.peak_rss_bytes and row.peak_rss_bytes > 0
    assert art.verification_status == "skipped"


async def test_failed_verification_and_resume(db: Database, tmp_path: Path) -> None:
    artifact_id = await _local_artifact(db, tmp_path / "models", nan=True)
    settings = make_settings(tmp_path)
    async with db.sessions() as session:
        left = Verification(artifact_id=artifact_id, status="running")  # a server killed mid-run
        stopped = Verification(artifact_id=artifact_id, status="failed", reason="cancelled")  # shut down
        session.add_all([left, stopped])
        await session.commit()
    verifier = TaskVerifier(db.sessions, functools.partial(run_verification, db, settings))
    await verifier.resume()
    await verifier.join()
    for resumed in (left, stopped):
        async with db.sessions() as session:
            row = await session.get(Verification, resumed.id)
        assert row is not None
        assert (row.status, row.reason, row.nonfinite_values) == ("failed", "nonfinite_weights", 1)


async def test_missing_file_is_a_failed_row_not_a_stuck_one(db: Database, tmp_path: Path) -> None:
    artifact_id = await _local_artifact(db, tmp_path / "models")
    (tmp_path / "models" / "tiny-mamba.gguf").unlink()
    async with db.sessions() as session:
        row = Verification(artifact_id=artifact_id, status="queued")
        session.add(row)
        await session.commit()
    await run_verification(db, make_settings(tmp_path), row.id)
    async with db.sessions() as session:
        done = await session.get(Verification, row.id)
    assert done is not None and done.status == "failed" and done.finished_at is not None


async def _hub_verification(db: Database, repo: Repo) -> tuple[int, int]:
    """The catalog's artifact of the one file of `repo` and a queued verification of it:
    (artifact id, verification id)."""
    file = repo.files[0]
    shard = ShardRecord(file.path, size=file.blob.size, sha256=file.blob.sha256, header_bytes=100)
    async with db.sessions() as session, session.begin():
        snapshot = RepoSnapshot(repo.repo_id, repo.sha, (ArtifactRecord(shard.path, (shard,), make_facts()),))
        await upsert_repo_snapshot(session, snapshot)
    async with db.sessions() as session:
        artifact_id = (await session.scalars(select(Artifact.id))).one()
        row = Verification(artifact_id=artifact_id, status="queued")
        session.add(row)
        await session.commit()
        return artifact_id, row.id


async def test_hub_artifact_is_downloaded_by_the_job(db: Database, tmp_path: Path) -> None:
    data = write_tiny(tmp_path / "tiny.gguf").read_bytes()
    blob = BytesBlob(data, lfs=True)
    repo = Repo("org/tiny-GGUF", [RepoFile("tiny-Q8_0.gguf", blob)])
    _, row_id = await _hub_verification(db, repo)
    async with FakeHub(Corpus([repo]), tokens={TOKEN}) as hub:
        await run_verification(db, make_settings(tmp_path, hub.endpoint), row_id)
        cdn = hub.requests_to("cdn")
    async with db.sessions() as session:
        done = await session.get(Verification, row_id)
    assert done is not None
    assert (done.status, done.reason) == ("skipped", "unsupported_architecture")
    assert done.sha256 == blob.sha256 and done.bytes_downloaded == len(data)
    assert len(cdn) == 1 and f"/{repo.sha}/" in hub.requests_to("resolve")[0].path  # pinned revision


async def test_in_process_verifier_from_settings(tmp_path: Path) -> None:
    settings = make_settings(tmp_path)  # SQLite file in data_dir, as `registry serve` uses it
    catalog = Database.from_settings(settings)
    try:
        artifact_id = await _local_artifact(catalog, tmp_path / "models")
    finally:
        await catalog.dispose()
    async with in_process_verifier(settings) as verifier:
        verification_id = await verifier.enqueue(artifact_id)
        await verifier.join()
    catalog = Database.from_settings(settings)
    try:
        async with catalog.sessions() as session:
            row = await session.get(Verification, verification_id)
    finally:
        await catalog.dispose()
    assert row is not None and row.status == "skipped" and row.finished_at is not None


def _slow_cdn(first: int) -> list[Fault]:
    """A slow CDN: the first body breaks off after `first` bytes, every later range request
    brings 64 KiB more, each 0.1 s late."""
    return [
        Fault("reset", route="cdn", after_bytes=first),
        Fault("short_range", route="cdn", after_bytes=64 << 10, times=None),
        Fault("latency", route="cdn", delay=0.1, times=None),
    ]


async def test_a_verification_cancelled_mid_download_ends_failed_cancelled(
    db: Database, tmp_path: Path
) -> None:
    data = write_tiny(tmp_path / "tiny.gguf", rows=40_000).read_bytes()  # 5 MB
    blob = BytesBlob(data, lfs=True)
    repo = Repo("org/tiny-GGUF", [RepoFile("tiny-Q8_0.gguf", blob)])
    artifact_id, row_id = await _hub_verification(db, repo)
    # The first body breaks off after 2 MiB, every later range brings 64 KiB more.
    async with FakeHub(Corpus([repo]), tokens={TOKEN}, faults=_slow_cdn(first=2 << 20)) as hub:
        settings = make_settings(tmp_path, hub.endpoint)
        partial = settings.cache_dir / "partial" / blob.sha256
        task = asyncio.create_task(run_verification(db, settings, row_id))

        async def downloading() -> bool:
            return task.done() or (partial.exists() and partial.stat().st_size > 0)

        await wait_for(downloading, 30, "the download to start")
        assert not task.done()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    async with db.sessions() as session:
        done = await session.get(Verification, row_id)
        art = await session.get(Artifact, artifact_id)
    assert done is not None and art is not None
    assert (done.status, done.reason) == ("failed", "cancelled")
    assert done.finished_at is not None and done.details["message"]
    assert art.verification_status is None  # a stopped run says nothing of the file
    assert 0 < partial.stat().st_size < len(data)  # kept for the next run to continue


@pytest.mark.postgres
async def test_a_second_cancel_does_not_interrupt_the_record_of_the_first(
    postgresql_url: str, tmp_path: Path
) -> None:
    db = Database.from_url(postgresql_url)
    try:
        repo = Repo("org/stalled-GGUF", [RepoFile("tiny-Q8_0.gguf", BytesBlob(b"GGUF" + bytes(4 << 20), lfs=True))])
        _, row_id = await _hub_verification(db, repo)
        # 64 KiB a request: the verification is mid-download when it is cancelled.
        async with FakeHub(Corpus([repo]), tokens={TOKEN}, faults=_slow_cdn(first=64 << 10)) as hub:
            task = asyncio.create_task(run_verification(db, make_settings(tmp_path, hub.endpoint), row_id))

            async def downloading() -> bool:
                return task.done() or bool(hub.requests_to("cdn"))

            await wait_for(downloading, 30, "the download to start")
            assert not task.done()
            async with db.engine.connect() as holder:
                # Another transaction holds the row: the record of the cancellation waits on it.
                await holder.execute(text("SELECT id FROM verifications WHERE id = :id FOR UPDATE"), {"id": row_id})
                task.cancel()

                async def record_waiting() -> bool:
                    waiting = await scalar(db, "SELECT count(*) FROM pg_stat_activity WHERE datname = "
                                               "current_database() AND wait_event_type = 'Lock'")  # fmt: skip
                    return task.done() or waiting > 0

                await wait_for(record_waiting, 30, "the record of the cancellation to wait for the row", 0.01)
                assert not task.done()
                task.cancel()  # a second stop signal, while the row is being written
                await asyncio.sleep(0)  # the task sees it before the row is free
                await holder.rollback()
            with pytest.raises(asyncio.CancelledError):
                await asyncio.wait_for(task, 30)
        async with db.sessions() as session:
            done = await session.get(Verification, row_id)
        assert done is not None
        assert (done.status, done.reason) == ("failed", "cancelled")
    finally:
        await empty_tables(db)
        await db.dispose()
