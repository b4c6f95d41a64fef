"""The fixtures' cleanup between tests: no row of one test is seen by the next."""

from __future__ import annotations

from sqlalchemy import func, select

from registry.catalog.db import Database
from registry.catalog.models import Base, Crawl, CrawlRepo, Job
from registry.catalog.services import upsert_repo_snapshot
from registry.catalog.snapshot import LineageRecord
from tests.catalog.conftest import empty_tables
from tests.catalog.factories import make_snapshot


async def test_empty_tables_leaves_no_row_in_any_table(db: Database) -> None:
    # `jobs` was missing from TABLES: a queued job of one test was still there in the next.
    async with db.sessions.begin() as session:
        await upsert_repo_snapshot(
            session, make_snapshot("a/b", lineage=(LineageRecord("c/d", "finetune", "card"),))
        )
        crawl = Crawl(kind="hub")
        session.add(crawl)
        await session.flush()
        session.add(CrawlRepo(crawl_id=crawl.id, repo_id="a/b"))
        session.add(Job(kind="crawl", queue="crawl", args={"crawl_id": crawl.id}))
    await empty_tables(db)
    async with db.sessions() as session:
        left = {
            t.name: await session.scalar(select(func.count()).select_from(t))
            for t in Base.metadata.sorted_tables
        }
    assert left and all(n == 0 for n in left.values()), left
