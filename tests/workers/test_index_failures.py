"""`workers.index.index_paths` when writing fails: the crawl row says so, it never stays running."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from sqlalchemy import select, text
from sqlalchemy.exc import OperationalError

from registry.catalog import migrate
from registry.catalog.db import Database
from registry.catalog.models import Artifact, Crawl, Repo
from registry.cli import EXIT_ERROR, main
from tests.verify.conftest import write_tiny
from workers.index import index_paths


async def test_a_failed_write_ends_the_crawl_row_failed(tmp_path: Path) -> None:
    """A database that fails as a whole (here its schema is broken: every repo insert
    writes to a table that is gone) ends the run, and the crawl row says so."""
    folder = tmp_path / "models"
    folder.mkdir()
    write_tiny(folder / "tiny.gguf")
    db = Database.from_url(f"sqlite+aiosqlite:///{tmp_path / 'catalog.db'}")
    try:
        await migrate.ensure_schema(db.engine)
        async with db.engine.begin() as conn:
            await conn.execute(text("CREATE TABLE spill (repo_id TEXT)"))
            await conn.execute(text(
                "CREATE TRIGGER spill BEFORE INSERT ON repos BEGIN INSERT INTO spill VALUES (NEW.repo_id); END"
            ))  # fmt: skip
            await conn.execute(text("DROP TABLE spill"))
        with pytest.raises(OperationalError, match="no such table"):
            await index_paths(db, [folder])
        async with db.sessions() as session:
            crawl = (await session.scalars(select(Crawl))).one()
        assert crawl.kind == "local"
        assert crawl.status == "failed" and crawl.finished_at is not None
        assert "no such table" in str(crawl.errors)
    finally:
        await db.dispose()


async def test_a_repo_the_database_refuses_is_an_error_and_the_rest_is_indexed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    folders = [tmp_path / name for name in ("alpha", "bad", "zeta")]  # the refused one in the middle
    for folder in folders:
        folder.mkdir()
        write_tiny(folder / f"{folder.name}.gguf")
    url = f"sqlite+aiosqlite:///{tmp_path / 'catalog.db'}"
    db = Database.from_url(url)
    try:
        await migrate.ensure_schema(db.engine)
        async with db.engine.begin() as conn:
            await conn.execute(text(
                "CREATE TRIGGER refuse_bad BEFORE INSERT ON repos WHEN NEW.repo_id = 'local/bad' "
                "BEGIN SELECT RAISE(ABORT, 'no room for this repo'); END"
            ))  # fmt: skip
        report = await index_paths(db, folders)
        assert [(a.repo, a.status) for a in report.artifacts] == [
            ("local/alpha", "indexed"),
            ("local/zeta", "indexed"),
        ]
        assert [(f["repo"], f["path"]) for f in report.failed] == [("local/bad", "")]
        assert "no room for this repo" in report.failed[0]["error"]
        async with db.sessions() as session:
            repos = set(await session.scalars(select(Repo.repo_id)))
            artifacts = (await session.execute(select(Artifact.path, Artifact.status))).all()
            crawl = (await session.scalars(select(Crawl))).one()
        assert repos == {"local/alpha", "local/zeta"}
        assert sorted(artifacts) == [("alpha.gguf", "indexed"), ("zeta.gguf", "indexed")]
        assert crawl.status == "finished" and crawl.finished_at is not None
        assert crawl.errors == report.failed
        assert crawl.counters["failed"] == 1
    finally:
        await db.dispose()
    # The command says which repo was not written, and exits non-zero.
    monkeypatch.setenv("REGISTRY_DATABASE_URL", url)
    code = await asyncio.to_thread(main, ["index", *map(str, folders)])
    err = capsys.readouterr().err
    assert code == EXIT_ERROR
    assert "registry: index: local/bad: not written: IntegrityError: " in err
    assert "no room for this repo" in err and "Traceback" not in err
