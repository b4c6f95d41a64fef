"""The read path of requests (registry.catalog.readpath), on SQLite and on PostgreSQL: every
catalog read gives through a ReadSession exactly what it gives through an AsyncSession, and
the path's own parts (binding, rows, fallbacks, errors, the shape cache, the connection's
way back to the pool) do what SQLAlchemy does."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import Float, bindparam, event, exc, func, insert, literal, select, text, tuple_
from sqlalchemy import cast as sql_cast

from registry.api import reads
from registry.catalog import lineage
from registry.catalog.db import Database
from registry.catalog.facets import facets
from registry.catalog.models import Artifact, Facts, Repo
from registry.catalog.readpath import CatalogSession, ReadSession, run
from registry.catalog.search import SearchQuery, search
from registry.catalog.search.statements import FAMILY_WALK
from registry.catalog.services import upsert_repo_snapshot
from registry.catalog.shapes import Keyed, Rows, Shapes
from tests.catalog.conftest import empty_tables
from tests.catalog.test_search import _catalog


@pytest.fixture
async def catalog(db_url: str) -> AsyncIterator[Database]:
    database = Database.from_url(db_url)
    try:
        for snap in _catalog():
            async with database.sessions() as session, session.begin():
                await upsert_repo_snapshot(session, snap)
        yield database
    finally:
        await empty_tables(database)
        await database.dispose()


async def both(db: Database, read: Callable[[CatalogSession], Awaitable[Any]]) -> tuple[Any, Any]:
    """`read` through SQLAlchemy's session and through the read path (every statement of it)."""
    async with db.sessions() as session:
        expected = await read(session)
    lean = ReadSession(db.reads)
    before = dataclasses.replace(db.reads.counts)
    try:
        got = await read(lean)
    finally:
        await lean.close()
    assert db.reads.counts.session == before.session  # nothing went to SQLAlchemy
    return expected, got


def plain(value: Any) -> Any:
    """Rows as tuples, dataclasses as dicts: what both paths must agree on."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, list | tuple) or hasattr(value, "_fields"):  # SQLAlchemy's Row is no tuple
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    return value


QUERIES = [
    {},
    {"text": "llama"},
    {"text": "llama 8b"},
    {"architecture": "llama", "file_type": "Q4_K_M"},
    {"license": "llama3", "sort": "size:asc"},
    {"min_params": 1_000_000_000, "max_params": 10_000_000_000, "sort": "params"},
    {"tensor_type": "IQ2_XS"},
    {"descendant_of": "meta-llama/Llama-3-8B"},
    {"descendant_of": "meta-llama/Llama-3-8B", "file_type": "Q8_0"},
    {"status": "error"},
    {"size_label": "8B", "sort": "name"},
    {"min_context": 16_000, "limit": 1},
]


@pytest.mark.parametrize("kwargs", QUERIES, ids=lambda k: ",".join(k) or "default")
async def test_search_and_facets_agree(catalog: Database, kwargs: dict[str, Any]) -> None:
    q = SearchQuery(**kwargs)
    expected, got = await both(catalog, lambda s: search(s, q, with_total=True))
    assert plain(got) == plain(expected) and expected.rows
    expected, got = await both(catalog, lambda s: facets(s, q))
    assert got == expected


async def test_every_page_of_a_walk_agrees(catalog: Database) -> None:
    cursor = None
    pages = 0
    while True:
        q = SearchQuery(limit=2, cursor=cursor, sort="likes:asc")
        expected, got = await both(catalog, lambda s, q=q: search(s, q))  # type: ignore[misc]
        assert plain(got) == plain(expected)
        pages += 1
        cursor = expected.next_cursor
        if cursor is None:
            break
    assert pages >= 3


async def test_detail_and_lineage_reads_agree(catalog: Database) -> None:
    repo_id = "bartowski/Llama-3-8B-GGUF"
    expected, got = await both(catalog, lambda s: reads.get_repo(s, repo_id))
    assert tuple(got) == tuple(expected) and got.repo_id == repo_id
    pk = expected.id
    (expected, expected_count), (got, count) = await both(catalog, lambda s: reads.repo_artifacts(s, pk))
    assert plain(got) == plain(expected) and len(got) == count == expected_count == 3
    assert [d.facts for d in got] == [d.facts for d in expected] and got[0].facts
    (expected, _), (got, count) = await both(catalog, lambda s: reads.repo_artifacts(s, pk, limit=2))
    assert plain(got) == plain(expected) and len(got) == 2 and count == 3  # counted past the limit
    artifact_id = expected[0].row.id
    expected, got = await both(catalog, lambda s: reads.get_artifact(s, artifact_id))
    assert plain(got) == plain(expected) and got.row.repo_name == repo_id
    for read in (
        lambda s: lineage.descendants(s, "meta-llama/Llama-3-8B"),
        lambda s: lineage.ancestors(s, "someone/llama-3-8b-finetune-GGUF"),
        lambda s: lineage.neighbours(s, repo_id),
        lambda s: reads.is_lineage_node(s, "meta-llama/Llama-3-8B"),
        lambda s: reads.get_repo(s, "nobody/nothing"),
        lambda s: reads.get_repo(s, repo_id.upper()),
    ):
        expected, got = await both(catalog, read)
        assert plain(got) == plain(expected)


async def test_values_bound_every_way_sqlalchemy_binds_them(catalog: Database) -> None:
    names = ["qwen/Qwen2-0.5B-GGUF", "mistralai/Mixtral-8x7B-GGUF"]
    llama = {"family_root": "meta-llama/llama-3-8b"}
    statements: list[tuple[Any, dict[str, Any] | None]] = [
        # an IN list of a parameter, expanded per execution
        (select(Repo.repo_id).where(Repo.repo_id.in_(bindparam("names", expanding=True))), {"names": names}),
        # a literal IN list: its values are part of the statement
        (select(Repo.repo_id).where(Repo.repo_id.in_(names)), None),
        # a keyed statement (built once per key) and its parameters
        (FAMILY_WALK, llama),
        # literal values and LIMIT/OFFSET
        (select(Artifact.path, literal("x").label("tag")).order_by(Artifact.path).limit(2).offset(1), None),
        # a date bound through its type's processor, in a tuple comparison
        (select(Repo.repo_id).where(tuple_(Repo.created_at, Repo.id) > tuple_(
            bindparam("when", type_=Repo.created_at.type), bindparam("id"))).order_by(Repo.id),
         {"when": datetime(2000, 1, 1, tzinfo=UTC), "id": 0}),
    ]  # fmt: skip
    for statement, params in statements:

        async def read(s: CatalogSession, statement: Any = statement, params: Any = params) -> list[Any]:
            return [tuple(r) for r in (await run(s, statement, params)).all()]

        expected, got = await both(catalog, read)
        assert got == expected and got
    # the same shape with another value reads that value's rows, not the first one's
    first, second = await both(catalog, lambda s: _scalars(s, FAMILY_WALK, llama))
    lean = ReadSession(catalog.reads)
    try:
        fewer = await _scalars(lean, FAMILY_WALK, {"family_root": "bartowski/llama-3-8b-gguf"})
    finally:
        await lean.close()
    assert first == second and 0 < len(fewer) < len(first)


async def _scalars(session: CatalogSession, statement: Any, params: Any = None) -> list[Any]:
    return sorted((await run(session, statement, params)).scalars())


async def test_rows_read_like_sqlalchemy_rows(catalog: Database) -> None:
    lean = ReadSession(catalog.reads)
    try:
        conn = await lean.connection()
        stmt = select(Repo.repo_id, func.count(Artifact.id).label("count"), literal(7).label("index"))
        stmt = stmt.join(Artifact, Artifact.repo_pk == Repo.id).group_by(Repo.repo_id).order_by(Repo.repo_id)
        rows = (await conn.execute(stmt)).all()
        row = rows[0]
        assert row.count == row[1] == row._mapping["count"] and isinstance(row.count, int)
        assert row.index == 7  # a column, not tuple.index
        assert row._fields == ("repo_id", "count", "index")
        repo_id, count, _ = row
        assert (repo_id, count) == (row.repo_id, row.count)
        with pytest.raises(AttributeError):
            _ = row.nothing
        # processed values: dates and booleans come back as SQLAlchemy gives them
        full = (await conn.execute(select(Repo).order_by(Repo.id))).first()
    finally:
        await lean.close()
    async with catalog.sessions() as session:
        expected = (await (await session.connection()).execute(select(Repo).order_by(Repo.id))).first()
    assert full is not None and expected is not None
    assert tuple(full) == tuple(expected)
    assert full.created_at.tzinfo is not None and isinstance(full.gated, bool)
    # values whose processing depends on the type the driver names (PostgreSQL's numeric
    # and float columns): the same Python types and values as SQLAlchemy's
    typed = (
        select(func.avg(Repo.likes).label("mean"), func.sum(Repo.likes), sql_cast(Repo.likes, Float), Facts.bits_per_weight)
        .join(Artifact, Artifact.repo_pk == Repo.id)
        .join(Facts, Facts.artifact_id == Artifact.id)
        .group_by(Repo.likes, Facts.bits_per_weight)
        .order_by(Repo.likes, Facts.bits_per_weight)
    )

    async def read(s: CatalogSession) -> list[tuple[Any, ...]]:
        return [tuple(r) for r in (await (await s.connection()).execute(typed)).all()]

    expected_rows, got_rows = await both(catalog, read)
    assert got_rows == expected_rows and got_rows
    assert [tuple(map(type, r)) for r in got_rows] == [tuple(map(type, r)) for r in expected_rows]


async def test_result_methods_and_their_errors(catalog: Database) -> None:
    lean = ReadSession(catalog.reads)
    try:
        conn = await lean.connection()
        many = await conn.execute(select(Repo.repo_id).order_by(Repo.repo_id))
        none = await conn.execute(select(Repo.repo_id).where(Repo.repo_id == "nobody/nothing"))
    finally:
        await lean.close()
    assert isinstance(many, Rows) and len(many.all()) == 5
    assert many.first() == many.all()[0] and many.scalar() == many.all()[0][0]
    assert many.scalars().all() == [r[0] for r in many.all()]
    with pytest.raises(exc.MultipleResultsFound):
        many.one_or_none()
    with pytest.raises(exc.MultipleResultsFound):
        many.scalars().one()
    with pytest.raises(exc.NoResultFound):
        none.one()
    with pytest.raises(exc.NoResultFound):
        none.scalar_one()
    assert none.one_or_none() is None and none.scalar() is None and none.first() is None
    assert none.scalars().first() is None and none.scalar_one_or_none() is None


async def test_what_the_path_does_not_run_goes_to_sqlalchemy(catalog: Database) -> None:
    lean = ReadSession(catalog.reads)
    try:
        conn = await lean.connection()
        # not a select: SQLAlchemy runs it, on its own connection
        got = await conn.execute(text("SELECT count(*) FROM repos"))
        assert not isinstance(got, Rows) and got.scalar_one() == 5
        # session methods the path lacks: a real session's
        repo = await lean.get(Repo, 1)  # type: ignore[attr-defined]
        assert repo is not None and repo.repo_id
        assert (await lean.scalars(select(Repo.repo_id))).all()  # type: ignore[attr-defined]
    finally:
        await lean.close()
    pool = catalog.engine.sync_engine.pool
    assert pool.checkedout() == 0  # both connections went back


async def test_driver_errors_are_sqlalchemys(catalog: Database) -> None:
    bad = select(Repo.repo_id).where(func.no_such_function(Repo.id) == 1)
    async with catalog.sessions() as session:
        with pytest.raises(exc.DBAPIError) as expected:
            await (await session.connection()).execute(bad)
    lean = ReadSession(catalog.reads)
    try:
        with pytest.raises(exc.DBAPIError) as got:
            await (await lean.connection()).execute(bad)
    finally:
        await lean.close()
    # SQLAlchemy's class for the error (OperationalError on SQLite, ProgrammingError on
    # PostgreSQL), wrapping the dialect's DB-API error
    assert type(got.value) is type(expected.value)
    assert isinstance(got.value.orig, catalog.engine.dialect.loaded_dbapi.Error)
    assert "no_such_function" in str(got.value) and not got.value.connection_invalidated
    # the failed statement's transaction was ended: the connection went back, and reads
    expected_ids, got_ids = await both(catalog, lambda s: _scalars(s, select(Repo.id)))
    assert got_ids == expected_ids and len(got_ids) == 5
    assert catalog.engine.sync_engine.pool.checkedout() == 0


async def test_shapes_are_compiled_once_per_key_and_bounded(catalog: Database) -> None:
    shapes = Shapes(catalog.engine.dialect, limit=3)
    built: list[str] = []

    def by_name() -> Any:
        built.append("by name")
        return select(Repo.id).where(Repo.repo_id == bindparam("name"))

    keyed = Keyed("repo by name", by_name)
    for name in ("a/b", "c/d", "qwen/Qwen2-0.5B-GGUF"):  # one shape, three values
        shape = shapes.get(keyed)
        assert shape is not None and shape.bind({"name": name})[1] == (name,)
    assert built == ["by name"] and len(shapes) == 1
    constant = select(Repo.id).where(Repo.id > 1).limit(2)  # a statement built once is its own key
    assert shapes.get(constant) is shapes.get(constant) and len(shapes) == 2
    for column in (Repo.repo_id, Repo.downloads, Repo.likes):  # three more shapes
        shapes.get(select(column))
    assert len(shapes) == 3  # the oldest went
    shapes.get(keyed)
    assert built == ["by name", "by name"]  # built again once it was dropped


async def test_what_the_path_does_not_compile(catalog: Database) -> None:
    shapes = catalog.reads.caches.shapes
    assert shapes.get(insert(Repo).values(repo_id="x/y")) is None  # not a read
    assert shapes.get(text("SELECT 1")) is None  # no result columns it can name
    assert shapes.get(select(Repo.id).union(select(Artifact.repo_pk))) is not None  # a UNION of SELECTs


def test_which_databases_read_through_the_path(sqlite_url: str) -> None:
    database = Database.from_url(sqlite_url)
    echoing = Database.from_url(sqlite_url, echo=True)
    memory = Database.from_url("sqlite+aiosqlite:///:memory:")
    try:
        assert database.reads.fast
        assert not echoing.reads.fast  # its statements must be logged
        assert not memory.reads.fast  # no file to open read-only connections of
    finally:
        from tests.catalog.conftest import run_sync

        for db in (database, echoing, memory):
            run_sync(db.dispose)


@pytest.mark.postgres
def test_which_postgresql_databases_read_through_the_path(postgresql_url: str) -> None:
    database = Database.from_url(postgresql_url)
    echoing = Database.from_url(postgresql_url, echo=True)
    try:
        assert database.reads.fast
        assert not echoing.reads.fast
    finally:
        from tests.catalog.conftest import run_sync

        run_sync(database.dispose)
        run_sync(echoing.dispose)


ON_POSTGRESQL = pytest.mark.parametrize("db_url", [pytest.param("postgresql", marks=pytest.mark.postgres)], indirect=True)


@ON_POSTGRESQL
async def test_a_statement_cut_short_takes_its_connection_out_of_the_pool(catalog: Database) -> None:
    """A request cancelled while PostgreSQL runs its statement: the connection, in the
    middle of a statement, is closed and forgotten by the pool rather than given to the
    next request; the next read gets a sound one."""
    invalidated: list[object] = []
    event.listen(catalog.engine.sync_engine.pool, "invalidate", lambda *args: invalidated.append(args[0]))
    lean = ReadSession(catalog.reads)

    async def slow() -> Any:
        conn = await lean.connection()
        return await conn.execute(select(func.pg_sleep(30)))

    task = asyncio.create_task(slow())
    await asyncio.sleep(0.3)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await lean.close()
    assert len(invalidated) == 1 and catalog.engine.sync_engine.pool.checkedout() == 0
    # and the server was told: the statement does not sleep on to its end there
    sleeping = select(func.count()).select_from(text("pg_stat_activity")).where(
        text("query LIKE '%pg_sleep%' AND state = 'active' AND pid <> pg_backend_pid()")
    )
    async with catalog.engine.connect() as other:
        for _ in range(50):
            if (await other.execute(sleeping)).scalar_one() == 0:
                break
            await asyncio.sleep(0.1)
        assert (await other.execute(sleeping)).scalar_one() == 0
    expected, got = await both(catalog, lambda s: _scalars(s, select(Repo.id)))
    assert got == expected and len(got) == 5


@ON_POSTGRESQL
async def test_a_lost_connection_is_an_invalidated_error_and_leaves_the_pool(catalog: Database) -> None:
    """The server ends the connection under a request (a restart, an administrator): the
    statement fails with SQLAlchemy's error marked as a lost connection, and the pool drops
    the connection instead of handing it to the next request."""
    lean = ReadSession(catalog.reads)
    try:
        conn = await lean.connection()
        pid = (await conn.execute(select(func.pg_backend_pid()))).scalar_one()
        async with catalog.engine.connect() as other:
            assert (await other.execute(select(func.pg_terminate_backend(pid)))).scalar_one()
        with pytest.raises(exc.DBAPIError) as lost:
            await conn.execute(select(Repo.id))
    finally:
        await lean.close()
    assert lost.value.connection_invalidated
    assert catalog.engine.sync_engine.pool.checkedout() == 0
    expected, got = await both(catalog, lambda s: _scalars(s, select(Repo.id)))
    assert got == expected and len(got) == 5


@ON_POSTGRESQL
async def test_after_a_lost_connection_the_pool_reconnects_the_others(catalog: Database) -> None:
    """The server restarted: every pooled connection is dead. The first request to find one
    fails, and has the pool retire all connections made before (as SQLAlchemy's own execution
    does), so the next requests reconnect instead of failing one by one."""
    sessions = [ReadSession(catalog.reads) for _ in range(3)]
    try:
        pids = [(await (await s.connection()).execute(select(func.pg_backend_pid()))).scalar_one() for s in sessions]
    finally:
        for lean in sessions:
            await lean.close()
    assert len(set(pids)) == 3 and catalog.engine.sync_engine.pool.checkedin() >= 3
    admin = Database.from_url(catalog.engine.url.render_as_string(hide_password=False))  # a pool of its own
    try:
        async with admin.engine.connect() as other:
            for pid in pids:
                assert (await other.execute(select(func.pg_terminate_backend(pid)))).scalar_one()
    finally:
        await admin.dispose()
    for attempt in range(4):
        lean = ReadSession(catalog.reads)
        try:
            got = await _scalars(lean, select(Repo.id))
        except exc.DBAPIError as error:
            assert error.connection_invalidated and attempt == 0, attempt  # one request only
        else:
            assert len(got) == 5
        finally:
            await lean.close()
    assert catalog.engine.sync_engine.pool.checkedout() == 0


@ON_POSTGRESQL
async def test_a_schema_change_under_a_prepared_statement_costs_one_request(catalog: Database) -> None:
    """A migration changes a column's type while the API runs: PostgreSQL refuses the
    statements prepared before it. The request that meets the refusal fails, as it does
    through SQLAlchemy, and has the prepared statements renewed, so the next ones read."""
    likes = select(Repo.likes).order_by(Repo.id)
    lean = ReadSession(catalog.reads)
    try:
        before = (await (await lean.connection()).execute(likes)).scalars().all()
    finally:
        await lean.close()
    admin = Database.from_url(catalog.engine.url.render_as_string(hide_password=False))
    try:
        async with admin.engine.begin() as conn:
            await conn.execute(text("ALTER TABLE repos ALTER COLUMN likes TYPE bigint"))
        failures = 0
        for _ in range(3):
            lean = ReadSession(catalog.reads)
            try:
                after = (await (await lean.connection()).execute(likes)).scalars().all()
            except exc.DBAPIError as error:
                failures += 1
                assert "schema" in str(error) or "result type" in str(error), error
            finally:
                await lean.close()
        assert failures <= 1 and after == before
    finally:
        async with admin.engine.begin() as conn:
            await conn.execute(text("ALTER TABLE repos ALTER COLUMN likes TYPE integer"))
        await admin.dispose()


@ON_POSTGRESQL
async def test_postgresql_fallbacks_read_only_too(catalog: Database) -> None:
    """What the path hands to SQLAlchemy (text, ORM) runs in a read-only snapshot as well,
    though a transaction of its own."""
    lean = ReadSession(catalog.reads)
    try:
        level = (await lean.execute(text("SHOW transaction_isolation"))).scalar_one()  # type: ignore[attr-defined]
        with pytest.raises(exc.DBAPIError, match="read-only transaction"):
            await lean.execute(text("UPDATE repos SET likes = 0"))  # type: ignore[attr-defined]
    finally:
        await lean.close()
    assert level == "repeatable read" and catalog.engine.sync_engine.pool.checkedout() == 0
