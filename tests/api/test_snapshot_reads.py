"""A read-only request reads one snapshot of the catalog (registry.api.sessions): a commit
made while it reads shows in none of its answer, and in the next request's whole."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest
from sqlalchemy import exc, func, literal, select, text, update

from registry.api import reads
from registry.api.sessions import open_read_session
from registry.catalog.db import Database
from registry.catalog.facets import facets
from registry.catalog.models import Artifact, Repo
from registry.catalog.search import SearchQuery
from registry.catalog.services import upsert_repo_snapshot
from registry.catalog.snapshot import RepoSnapshot
from tests.api.conftest import ApiClient
from tests.catalog.conftest import empty_tables
from tests.catalog.factories import artifact, make_snapshot

REPO = "org/model-GGUF"
BEFORE = make_snapshot(REPO, "rev1", artifacts=(artifact("model-Q4_K_M.gguf"), artifact("model-Q8_0.gguf")))
AFTER = make_snapshot(REPO, "rev2", artifacts=(artifact("model-Q5_K_M.gguf"),))


# The catalog's `db` fixture on one database only.
ON_SQLITE = pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
ON_POSTGRESQL = pytest.mark.parametrize(
    "db_url", [pytest.param("postgresql", marks=pytest.mark.postgres)], indirect=True
)


async def write(db: Database, snapshot: RepoSnapshot) -> None:
    async with db.sessions.begin() as session:
        await upsert_repo_snapshot(session, snapshot)


async def count_repos(session: Any) -> int:
    conn = await session.connection()
    return int((await conn.execute(select(func.count()).select_from(Repo))).scalar_one())


async def test_a_commit_while_a_session_reads_is_not_seen_by_it(db: Database) -> None:
    await write(db, BEFORE)
    async with open_read_session(db.sessions) as session:
        assert await count_repos(session) == 1
        await write(db, make_snapshot("other/model-GGUF"))  # committed meanwhile
        assert await count_repos(session) == 1
    async with open_read_session(db.sessions) as session:
        assert await count_repos(session) == 2
    pool = db.engine.sync_engine.pool
    assert pool.checkedout() == 0


@ON_SQLITE
async def test_reads_in_the_snapshot_run_inline_on_sqlite(db: Database) -> None:
    """The read transaction does not send the reads to a reader thread, and the connection
    goes back with it ended."""
    await write(db, BEFORE)
    assert db.reads.sqlite is not None
    conn = await db.reads.sqlite.acquire()  # the connection the session will be handed
    conn.conn.create_function("tid", 0, threading.get_ident)
    conn.release()
    async with open_read_session(db.sessions) as session:
        for _ in range(3):
            assert await count_repos(session) == 1
        threads = (await (await session.connection()).execute(select(func.tid()))).scalar_one()
        assert conn.conn.in_transaction
    assert threads == threading.get_ident()
    assert not conn.conn.in_transaction


@ON_POSTGRESQL
async def test_postgresql_reads_at_repeatable_read_and_refuses_writes(db: Database) -> None:
    await write(db, BEFORE)
    settings = select(func.current_setting("transaction_isolation"), func.current_setting("transaction_read_only"))
    async with open_read_session(db.sessions) as session:
        conn = await session.connection()  # the read path's own
        assert tuple((await conn.execute(settings)).one()) == ("repeatable read", "on")
        level = (await session.execute(text("SHOW transaction_isolation"))).scalar_one()  # SQLAlchemy's
        read_only = (await session.execute(text("SHOW transaction_read_only"))).scalar_one()
        assert (level, read_only) == ("repeatable read", "on")
        with pytest.raises(exc.DBAPIError, match="read-only transaction"):
            await session.execute(update(Repo).values(likes=0))
    async with db.sessions() as session:  # the pool's connection is back at the default level
        level = (await session.execute(text("SHOW transaction_isolation"))).scalar_one()
        assert level == "read committed"
        assert (await session.execute(select(Repo.likes))).scalar_one() == 5


async def test_counts_found_in_an_old_snapshot_are_not_kept_as_new(db: Database) -> None:
    """Facet counts are kept per generation of the catalog. Counted in a snapshot that a
    commit has since left behind, they must not be served to the next request as current."""
    await write(db, BEFORE)
    async with open_read_session(db.sessions) as session:
        assert await count_repos(session) == 1  # the snapshot begins
        await write(db, make_snapshot("other/model-GGUF", artifacts=(artifact("other-Q6_K.gguf"),)))
        old = await facets(session, SearchQuery())
    async with open_read_session(db.sessions) as session:
        new = await facets(session, SearchQuery())
    assert sum(old["file_type"].values()) == 2
    assert sum(new["file_type"].values()) == 3


async def test_a_repo_page_is_all_before_or_all_after_a_crawl_commits(
    api: ApiClient, db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A crawl writes the repo's new revision between the page's read of the repo row and
    its read of the artifacts: the page shows the old revision with its old files."""
    await write(db, BEFORE)
    listed = reads.repo_artifacts
    wrote: list[str] = []

    async def crawl_meanwhile(session: Any, repo_pk: int, limit: int | None = None) -> Any:
        if not wrote:
            await write(db, AFTER)
            wrote.append(AFTER.revision)
        return await listed(session, repo_pk, limit)

    monkeypatch.setattr(reads, "repo_artifacts", crawl_meanwhile)
    first = await api.get(f"/v1/repos/{REPO}")
    second = await api.get(f"/v1/repos/{REPO}")
    assert wrote == ["rev2"] and first.status == second.status == 200

    def seen(body: dict[str, Any]) -> tuple[str, list[str]]:
        return body["repo"]["revision"], sorted(a["path"] for a in body["artifacts"])

    assert seen(first.body) == ("rev1", ["model-Q4_K_M.gguf", "model-Q8_0.gguf"])
    assert seen(second.body) == ("rev2", ["model-Q5_K_M.gguf"])
    async with db.sessions() as session:
        gone = await session.scalar(select(func.count()).where(Artifact.status == "gone"))
    assert gone == 2  # the crawl did write while the first page read


async def test_the_snapshot_holds_with_every_read_on_the_thread(sqlite_url: str) -> None:
    """`database.sqlite_inline_read_ms = 0`: the read transaction begins and ends on a
    reader thread, and holds the same."""
    threaded = Database.from_url(sqlite_url, inline_read_ms=0)
    try:
        await write(threaded, BEFORE)
        async with open_read_session(threaded.sessions) as session:
            assert await count_repos(session) == 1
            await write(threaded, make_snapshot("other/model-GGUF"))
            assert await count_repos(session) == 1
        async with open_read_session(threaded.sessions) as session:
            assert await count_repos(session) == 2
    finally:
        await empty_tables(threaded)
        await threaded.dispose()


async def test_a_request_cut_short_mid_read_leaves_its_connection_clean(db: Database) -> None:
    """A request gives up while a statement of its snapshot runs (on SQLite on a reader
    thread, past the inline budget; on PostgreSQL on the server): SQLite stops the statement,
    PostgreSQL is told to cancel it; the connection goes back to the pool (or, on PostgreSQL,
    is dropped from it) with no transaction left open, and the next request reads as usual."""
    await write(db, BEFORE)
    step = select(literal(1).label("x")).cte("steps", recursive=True)
    step = step.union_all(select(step.c.x + 1).where(step.c.x < 50_000_000))
    slow = select(func.count()).select_from(step)
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.3), open_read_session(db.sessions) as session:
            assert await count_repos(session) == 1
            await (await session.connection()).execute(slow)
    async with open_read_session(db.sessions) as session:
        assert await count_repos(session) == 1
        await write(db, make_snapshot("other/model-GGUF"))
    async with open_read_session(db.sessions) as session:
        assert await count_repos(session) == 2
    assert time.monotonic() - started < 5  # the count of 50 million steps did not run to its end
    assert db.engine.sync_engine.pool.checkedout() == 0
    if db.reads.sqlite is not None:
        assert db.reads.sqlite.in_use() == 0
