"""`workers.index.index_paths` when writing fails: the crawl row says so, it never stays running."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import select, text

from registry.catalog import migrate
from registry.catalog.db import Database
from registry.catalog.models import Crawl
from tests.verify.conftest import write_tiny
from workers.index import index_paths


async def test_a_failed_write_ends_the_crawl_row_failed(tmp_path: Path) -> None:
    folder = tmp_path / "models"
    folder.mkdir()
    write_tiny(folder / "tiny.gguf")
    db = Database.from_url(f"sqlite+aiosqlite:///{tmp_path / 'catalog.db'}")
    try:
        await migrate.ensure_schema(db.engine)
        async with db.engine.begin() as conn:  # the disk fills up as the first repo is written
            await conn.execute(text(
                "CREATE TRIGGER full BEFORE INSERT ON repos BEGIN SELECT RAISE(ABORT, 'disk full'); END"
            ))  # fmt: skip
        with pytest.raises(Exception, match="disk full"):
            await index_paths(db, [folder])
        async with db.sessions() as session:
            crawl = (await session.scalars(select(Crawl))).one()
        assert crawl.kind == "local"
        assert crawl.status == "failed" and crawl.finished_at is not None
        assert "disk full" in str(crawl.errors)
    finally:
        await db.dispose()
