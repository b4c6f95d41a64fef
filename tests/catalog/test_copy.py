"""`registry db copy`: a whole catalog from one database into another, SQLite and PostgreSQL
both ways, row for row, with the search index and the id sequences in working order."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import select, text

from registry.api import pages, reads
from registry.api.present import search_hits
from registry.catalog import migrate
from registry.catalog.copy import CopyRefused, copy_catalog, tables
from registry.catalog.db import Database
from registry.catalog.models import Crawl, Job, Verification
from registry.catalog.search import SearchQuery, search
from registry.catalog.services import repo_moved, upsert_repo_snapshot
from registry.cli import main
from tests.api.data import sample_catalog
from tests.catalog.conftest import TempDatabases, _migrate, run_sync
from tests.catalog.factories import artifact, make_facts, make_snapshot

DIRECTIONS = [("sqlite", "postgresql"), ("postgresql", "sqlite"), ("sqlite", "sqlite")]


async def _fill(db: Database) -> None:
    """The sample catalog, a repo the hub moved, a verification, a crawl and a queued job."""
    async with db.sessions() as session, session.begin():
        for snap in sample_catalog():
            await upsert_repo_snapshot(session, snap)
        await repo_moved(session, "qwen/Qwen2-0.5B-GGUF", "Qwen/Qwen2-0.5B-Instruct-GGUF")
        first = await session.scalar(text("SELECT MIN(id) FROM artifacts"))
        session.add(Verification(artifact_id=first, status="passed", tensors_checked=3, perplexity=9.5,
                                 details={"runner": "numpy"}, finished_at=datetime(2026, 1, 2, tzinfo=UTC)))  # fmt: skip
        session.add(Crawl(kind="hub", status="finished", parameters={"author": "bartowski"}, counters={"repos": 4}))
        session.add(Job(kind="index_repo", queue="index", status="queued", args={"repo_id": "a/b"}))


async def _rows(db: Database) -> dict[str, list[dict[str, Any]]]:
    async with db.engine.connect() as conn:
        return {
            t.name: [dict(r._mapping) for r in await conn.execute(select(t).order_by(*t.primary_key.columns))]
            for t in tables()
        }


def _new(temp_databases: TempDatabases, dialect: str, migrated: bool) -> Database:
    url = temp_databases.new_url(dialect)
    if migrated:
        run_sync(lambda: _migrate(url))
    return Database.from_url(url)


@pytest.mark.parametrize(("source_dialect", "target_dialect"), DIRECTIONS)
async def test_a_catalog_is_copied_row_for_row_and_works_there(
    temp_databases: TempDatabases, source_dialect: str, target_dialect: str
) -> None:
    source, target = _new(temp_databases, source_dialect, True), _new(temp_databases, target_dialect, False)
    async with source, target:
        await _fill(source)
        done: list[tuple[str, int]] = []
        report = await copy_catalog(source, target, on_table=lambda name, n: done.append((name, n)))
        assert await migrate.current_revision(target.engine) == migrate.head_revision()
        want = await _rows(source)
        assert await _rows(target) == want
        assert done == [(name, len(rows)) for name, rows in want.items()] == list(report.rows.items())
        assert len(want["artifacts"]) == 8 and len(want["repo_moves"]) == 1 and len(want["verifications"]) == 1
        assert report.unfinished_jobs == 1

        # the pages and searches of the copy are those of the source, text search included
        for db_ in (source, target):
            async with db_.sessions() as session:
                ids = [r[0] for r in (await session.execute(text("SELECT id FROM artifacts ORDER BY id"))).all()]
                page = await pages.artifact_page(session, ids[0], endpoint="https://hub.example")
                repo = await reads.get_repo(session, "qwen/qwen2-0.5b-gguf")
                found = await search(session, SearchQuery(text="llama 8b", sort="name", limit=50))
            if db_ is source:
                first = (page, repo is None, [i.id for i in search_hits(found)])
            else:
                assert (page, repo is None, [i.id for i in search_hits(found)]) == first
        assert len(first[2]) >= 4 and first[0] is not None and first[0].latest_verification.status == "passed"

        # new rows get new ids in the copy (PostgreSQL's sequences were moved past the copied ones)
        async with target.sessions() as session, session.begin():
            await upsert_repo_snapshot(session, make_snapshot("new/repo-GGUF", artifacts=(artifact("n.gguf"),)))
        after = await _rows(target)
        assert max(r["id"] for r in after["artifacts"]) == max(r["id"] for r in want["artifacts"]) + 1
        async with target.sessions() as session:
            assert [i.repo for i in search_hits(await search(session, SearchQuery(text="repo-gguf")))] == ["new/repo-GGUF"]


async def test_the_source_is_read_as_one_snapshot_while_it_is_written(temp_databases: TempDatabases) -> None:
    """A server goes on writing while the copy runs: the copy is the catalog as it was when it
    began, not tables from different moments (here: an artifact deleted after the repos were
    read would be missing, its repo and shards half there)."""
    import sqlite3

    source, target = _new(temp_databases, "sqlite", True), _new(temp_databases, "sqlite", False)
    async with source, target:
        await _fill(source)
        before = await _rows(source)
        path = source.engine.url.database
        assert path is not None

        def write_meanwhile(name: str, _: int) -> None:
            if name == "repos":
                with sqlite3.connect(path) as other:
                    other.execute("PRAGMA foreign_keys = ON")
                    other.execute("DELETE FROM artifacts")
                other.close()

        await copy_catalog(source, target, on_table=write_meanwhile)
        assert await _rows(target) == before
        assert (await _rows(source))["artifacts"] == [] != before["artifacts"]


async def test_a_target_that_holds_rows_is_left_as_it_is(temp_databases: TempDatabases) -> None:
    source, target = _new(temp_databases, "sqlite", True), _new(temp_databases, "postgresql", True)
    async with source, target:
        await _fill(source)
        async with target.sessions() as session, session.begin():
            await upsert_repo_snapshot(session, make_snapshot("mine/own-GGUF"))
        before = await _rows(target)
        with pytest.raises(CopyRefused, match=r"already holds catalog rows \(1 in repos\)"):
            await copy_catalog(source, target)
        assert await _rows(target) == before


async def test_a_source_below_the_schema_head_is_refused(temp_databases: TempDatabases) -> None:
    source, target = _new(temp_databases, "sqlite", False), _new(temp_databases, "sqlite", False)
    async with source, target:
        with pytest.raises(CopyRefused, match=r"schema revision base \(empty\), not .*registry db upgrade"):
            await copy_catalog(source, target)
        assert await migrate.current_revision(target.engine) is None  # not even migrated


async def test_a_row_the_target_refuses_leaves_it_empty(temp_databases: TempDatabases) -> None:
    """SQLite keeps text in an integer column; PostgreSQL refuses it. Nothing of the copy stays."""
    source, target = _new(temp_databases, "sqlite", True), _new(temp_databases, "postgresql", False)
    async with source, target:
        await _fill(source)
        async with source.engine.begin() as conn:
            await conn.execute(text("UPDATE artifacts SET downloads = 'lots' WHERE id = (SELECT MAX(id) FROM artifacts)"))
        with pytest.raises(CopyRefused, match=r"the target refused a row of artifacts \(the batch from \{'id': 1\}\)"):
            await copy_catalog(source, target)
        assert all(rows == [] for rows in (await _rows(target)).values())


async def test_every_batch_is_copied(temp_databases: TempDatabases) -> None:
    """Batches of 2 rows: tables of several batches, composite keys (quant_mix) included."""
    source, target = _new(temp_databases, "postgresql", True), _new(temp_databases, "sqlite", False)
    async with source, target:
        await _fill(source)
        async with source.sessions() as session, session.begin():
            facts = make_facts(quant_mix={t: make_facts().quant_mix["Q4_K"] for t in ("Q4_K", "Q6_K", "F32", "Q8_0", "F16")})
            await upsert_repo_snapshot(session, make_snapshot("mix/ed-GGUF", artifacts=(artifact("m.gguf", facts),)))
        await copy_catalog(source, target, batch=2)
        assert await _rows(target) == await _rows(source)


@pytest.mark.parametrize("target_dialect", ["sqlite", "postgresql"])
def test_the_command(
    temp_databases: TempDatabases, target_dialect: str, monkeypatch: pytest.MonkeyPatch,
    tmp_path: Any, capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    source_url = temp_databases.new_url("sqlite")
    run_sync(lambda: _migrate(source_url))

    async def fill() -> None:
        async with Database.from_url(source_url) as db:
            await _fill(db)

    run_sync(fill)
    monkeypatch.setenv("REGISTRY_DATABASE_URL", source_url)
    monkeypatch.chdir(tmp_path)
    target_url = temp_databases.new_url(target_dialect)
    assert main(["db", "copy", "--to", target_url]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("copied ") and "in 14 tables: 5 repos, 8 artifacts\n" in out
    assert "artifacts: 8 rows\n" in err and "1 embedded jobs were queued or running in the source" in err
    assert main(["db", "copy", "--to", target_url]) == 1  # not empty now
    assert "copy_refused: the target already holds catalog rows" in capsys.readouterr().err
    for argv in (["db", "copy"], ["db", "upgrade", "--to", target_url], ["db", "copy", "head", "--to", target_url]):
        assert main(argv) == 2, argv
    monkeypatch.setenv("REGISTRY_DATABASE_URL", target_url)
    assert main(["search", "mixtral", "--json"]) == 0
    assert [i["repo"] for i in __import__("json").loads(capsys.readouterr().out)["items"]] == ["mistralai/Mixtral-8x7B-GGUF"]
