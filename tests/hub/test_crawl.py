"""The hub crawl end to end: fake hub over loopback -> headers -> facts -> SQLite catalog."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import pytest
from sqlalchemy import select

from registry.api.present import search_hits
from registry.catalog import migrate
from registry.catalog.db import Database
from registry.catalog.models import Artifact, Crawl, Repo
from registry.config import HubSettings, Settings
from registry.gguf.filename import group_shards
from registry.hub.client import HubClient
from registry.hub.http import HttpOptions, HubHttp, first_window_for
from tests.catalog.conftest import TempDatabases, temp_databases  # noqa: F401  (session fixture)
from tests.fakehub import FakeHub, Fault, RepoFile, sample_corpus
from tests.fakehub.corpus import BytesBlob, Corpus, SynthBlob
from tests.fakehub.corpus import Repo as HubRepo
from tests.fakehub.testing import FAST_RETRY, TOKEN, Sleeps
from workers.crawl import CrawlParams, crawl_hub, index_repo
from workers.crawl_jobs import enqueue_crawl
from workers.jobs import JobContext, TransientJobError, index_repo_job


@pytest.fixture
async def db(tmp_path: Path) -> AsyncIterator[Database]:
    database = Database.from_url(f"sqlite+aiosqlite:///{tmp_path / 'catalog.db'}")
    await migrate.ensure_schema(database.engine)
    yield database
    await database.engine.dispose()


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
async def any_db(request: pytest.FixtureRequest, temp_databases: TempDatabases) -> AsyncIterator[Database]:  # noqa: F811
    """An empty database of each dialect; the crawl creates its schema."""
    database = Database.from_url(temp_databases.new_url(request.param))
    yield database
    await database.engine.dispose()


@pytest.fixture
async def hub() -> AsyncIterator[FakeHub]:
    async with FakeHub(sample_corpus(), tokens={TOKEN}) as h:
        yield h


def _clients(hub: FakeHub, token: str | None = TOKEN) -> tuple[HubClient, HubHttp]:
    sleeps = Sleeps()
    client = HubClient(hub.endpoint, token, retry=FAST_RETRY, sleep=sleeps)
    http = HubHttp(HttpOptions(endpoint=hub.endpoint, token=token, retry=FAST_RETRY), sleep=sleeps)
    return client, http


async def _artifacts(db: Database) -> dict[tuple[str, str], Artifact]:
    async with db.sessions() as session:
        rows = await session.execute(
            select(Repo.repo_id, Artifact).join(Artifact, Artifact.repo_pk == Repo.id)
        )
        return {(repo_id, a.path): a for repo_id, a in rows.all()}


async def test_crawl_indexes_then_skips_unchanged(db: Database, hub: FakeHub) -> None:
    client, http = _clients(hub)
    async with http:
        first = await crawl_hub(db, client, http, CrawlParams())
        assert first.failed == 0 and first.errors == []
        assert first.indexed == first.listed == len(hub.corpus)
        artifacts = await _artifacts(db)
        split = artifacts[("synth/split-moe-GGUF", "split-moe-Q8_0-00001-of-00003.gguf")]
        assert split.status != "error"
        # The projector's vision flag, read from its header bytes like the rest.
        assert artifacts[("other/vision-GGUF", "mmproj-vision-F16.gguf")].modalities == 1
        assert {k for k, a in artifacts.items() if a.modalities is not None} == {
            ("other/vision-GGUF", "mmproj-vision-F16.gguf")
        }
        assert ("synth/tiny-llama-GGUF", "tiny-llama-Q8_0.gguf") in artifacts
        # The token reached the hub, never the CDN.
        assert not any(r.authorization for r in hub.requests_to("cdn"))

        hub.requests.clear()
        second = await crawl_hub(db, client, http, CrawlParams())
    assert second.unchanged == second.listed == len(hub.corpus)
    assert second.indexed == 0
    assert {r.route for r in hub.requests} == {"api"}  # only the listing: no repo info, no bytes
    async with db.sessions() as session:
        crawls = (await session.scalars(select(Crawl).order_by(Crawl.id))).all()
        repo = (await session.scalars(select(Repo).where(Repo.repo_id == "synth/tiny-llama-GGUF"))).one()
    assert [c.status for c in crawls] == ["finished", "finished"]
    assert crawls[1].counters["unchanged"] == len(hub.corpus)
    assert repo.card_license == "llama3.1" and repo.card_base_model == ["synth/tiny-llama"]
    assert repo.revision == hub.corpus.repos["synth/tiny-llama-GGUF"].sha


async def test_transient_failure_writes_nothing_and_is_retried_next_crawl(db: Database, hub: FakeHub) -> None:
    client, http = _clients(hub)
    hub.faults.add(
        Fault("status", route="cdn", repo="synth/tiny-llama-GGUF", file="*Q8_0*", status=503, times=None)
    )
    async with http:
        report = await crawl_hub(db, client, http, CrawlParams(author="synth"))
        assert report.failed == 1
        assert report.errors[0]["repo"] == "synth/tiny-llama-GGUF"
        assert report.errors[0]["error"].startswith("server_error")
        assert not any(repo == "synth/tiny-llama-GGUF" for repo, _ in await _artifacts(db))
        hub.faults.clear()
        again = await crawl_hub(db, client, http, CrawlParams(author="synth"))
    assert again.failed == 0 and again.indexed == 1 and again.unchanged == again.listed - 1


async def test_malformed_listing_page_ends_the_crawl_failed_with_what_it_listed_indexed(db: Database) -> None:
    async with FakeHub(sample_corpus(), tokens={TOKEN}, page_size=2) as hub:
        hub.faults.add(Fault("body", route="api", repo="", body=b'[{"id": 42}]', skip=1))  # the second page
        client, http = _clients(hub)
        async with http:
            report = await crawl_hub(db, client, http, CrawlParams())
    assert report.status == "failed"
    assert report.listed == report.indexed == 2
    assert [e["error"].split(":")[0] for e in report.errors] == ["invalid_response"]
    async with db.sessions() as session:
        crawl = (await session.scalars(select(Crawl))).one()
        indexed = (await session.scalars(select(Repo.repo_id).where(Repo.indexed_at.is_not(None)))).all()
    assert crawl.status == "failed" and crawl.errors == report.errors
    assert crawl.counters["indexed"] == 2 and len(indexed) == 2


async def test_listing_failing_mid_crawl_lets_started_repos_finish(db: Database) -> None:
    async with FakeHub(sample_corpus(), tokens={TOKEN}, page_size=2) as hub:
        hub.faults.add(Fault("status", route="api", repo="", status=400, skip=1))  # the second page
        client, http = _clients(hub)
        async with http:
            report = await crawl_hub(db, client, http, CrawlParams(), batch=1)
    assert report.status == "failed"
    assert report.listed == report.indexed == 2 and report.failed == 0


async def test_a_repo_named_twice_is_read_once(any_db: Database, hub: FakeHub) -> None:
    tiny = hub.corpus.repos["synth/tiny-llama-GGUF"]
    ggufs = {f.path: f for f in tiny.files if f.path.endswith(".gguf")}
    client, http = _clients(hub)
    async with http:
        # Explicit ids repeated, read at once by as many workers: the same new repo each time.
        params = CrawlParams(repos=(tiny.repo_id, "synth/big-vocab-GGUF", tiny.repo_id, tiny.repo_id))
        report = await crawl_hub(any_db, client, http, params, concurrency=4)
    assert report.errors == [] and report.failed == 0
    assert report.listed == report.indexed == 2
    assert report.artifacts == len(group_shards(ggufs)) + 1  # big-vocab has one GGUF file
    assert len([r for r in hub.requests_to("api") if r.repo == tiny.repo_id]) == 1
    assert {r.file for r in hub.requests_to("cdn") if r.repo == tiny.repo_id} == set(ggufs)
    assert len([r for r in hub.requests_to("cdn") if r.repo == tiny.repo_id]) == len(ggufs)


async def test_a_listing_that_names_a_repo_twice_reads_it_once(db: Database, hub: FakeHub) -> None:
    tiny = hub.corpus.repos["synth/tiny-llama-GGUF"]
    entry = {"id": tiny.repo_id, "sha": tiny.sha}
    # A repo that changed while the listing was paged by lastModified comes twice.
    hub.faults.add(Fault("body", route="api", repo="", body=json.dumps([entry, entry]).encode()))
    client, http = _clients(hub)
    async with http:
        report = await crawl_hub(db, client, http, CrawlParams())
    assert report.status == "finished" and report.failed == 0
    assert report.listed == report.indexed == 1
    assert len([r for r in hub.requests_to("api") if r.repo == tiny.repo_id]) == 1


async def _queued_crawl(db: Database, hub: FakeHub, params: CrawlParams) -> tuple[Crawl, list[str]]:
    """`params` crawled as jobs: the listing job, then each repo job it queued, run here one
    after another. The crawl's row and the repos queued, in order."""
    await migrate.ensure_schema(db.engine)
    async with db.sessions() as session, session.begin():
        crawl = Crawl(kind="hub", parameters=params.to_parameters())
        session.add(crawl)
        await session.flush()
        crawl_id = crawl.id
    queued: list[tuple[str, str | None]] = []

    async def enqueue(repo_id: str, known: str | None) -> int:
        queued.append((repo_id, known))
        return len(queued)

    client, http = _clients(hub)
    async with http:
        await enqueue_crawl(db, client, crawl_id, enqueue)
        ctx = JobContext(Settings(hub=HubSettings(endpoint=hub.endpoint, token=TOKEN)), db, client, http)
        for repo_id, known in queued:
            await index_repo_job(ctx, repo_id, known, crawl_id)
    async with db.sessions() as session:
        return await session.get_one(Crawl, crawl_id), [r for r, _ in queued]


async def _both_modes(
    tmp_path: Path, hub: FakeHub, params: CrawlParams
) -> tuple[dict[str, int], Crawl, list[str]]:
    """The counters of `params` crawled in process, and the crawl row and queued repos of
    the same crawl run as jobs, each on a new catalog."""
    client, http = _clients(hub)
    async with Database.from_url(f"sqlite+aiosqlite:///{tmp_path / 'in_process.db'}") as db, http:
        counters = (await crawl_hub(db, client, http, params)).counters()
    async with Database.from_url(f"sqlite+aiosqlite:///{tmp_path / 'queued.db'}") as db:
        row, queued = await _queued_crawl(db, hub, params)
    assert row.status == "finished" and row.errors == []
    return counters, row, queued


async def test_limit_counts_repos_named_twice_once_in_both_modes(tmp_path: Path, hub: FakeHub) -> None:
    tiny, vocab = "synth/tiny-llama-GGUF", "synth/big-vocab-GGUF"
    counters, row, queued = await _both_modes(tmp_path, hub, CrawlParams(repos=(tiny, tiny, vocab), limit=2))
    assert counters["listed"] == counters["indexed"] == 2 and counters["failed"] == 0
    assert queued == [tiny, vocab]
    assert {k: row.counters[k] for k in counters} == counters


async def test_a_listing_that_names_a_repo_twice_counts_it_once_in_both_modes(
    tmp_path: Path, hub: FakeHub
) -> None:
    tiny = hub.corpus.repos["synth/tiny-llama-GGUF"]
    entry = {"id": tiny.repo_id, "sha": tiny.sha}
    hub.faults.add(Fault("body", route="api", repo="", body=json.dumps([entry, entry]).encode(), times=None))
    counters, row, queued = await _both_modes(tmp_path, hub, CrawlParams())
    assert counters["listed"] == counters["indexed"] == 1
    assert queued == [tiny.repo_id]
    assert {k: row.counters[k] for k in counters} == counters


async def test_a_named_repo_without_gguf_files_is_not_catalogued_in_both_modes(tmp_path: Path, hub: FakeHub) -> None:
    """A repo named by id (a hub webhook, `registry crawl ORG/NAME`) that holds no GGUF file
    is counted as `not_gguf` and not written, in process and as jobs; one the catalog
    already has is written as it is now, its artifacts gone."""
    card = {"base_model": "meta-llama/Llama-3.1-8B"}
    hub.corpus.add(HubRepo("someone/weights-only", [RepoFile("model.safetensors", BytesBlob(b"\0" * 64))], card=card))
    tiny = "synth/tiny-llama-GGUF"
    counters, row, queued = await _both_modes(tmp_path, hub, CrawlParams(repos=("someone/weights-only", tiny)))
    assert (counters["not_gguf"], counters["indexed"], counters["failed"]) == (1, 1, 0)
    assert queued == ["someone/weights-only", tiny]
    assert {k: row.counters[k] for k in counters} == counters
    for name in ("in_process.db", "queued.db"):
        async with Database.from_url(f"sqlite+aiosqlite:///{tmp_path / name}") as db:
            async with db.sessions() as session:
                assert set(await session.scalars(select(Repo.repo_id))) == {tiny}, name
            # the catalog's own repo, now without GGUF files: written, its artifacts gone
            original = hub.corpus.repos[tiny]
            hub.corpus.repos[tiny] = replace(original, files=[], sha="f" * 40)
            client, http = _clients(hub)
            try:
                async with http:
                    again = await crawl_hub(db, client, http, CrawlParams(repos=(tiny,)))
            finally:
                hub.corpus.repos[tiny] = original
            assert (again.indexed, again.not_gguf) == (1, 0)
            assert (await _repo_state(db, tiny))[1] == {"gone"}


async def test_limit_counts_a_repo_on_two_pages_once_in_both_modes(tmp_path: Path) -> None:
    """A repo on two pages (a lastModified listing whose repos changed while it was paged)
    used up two of `limit`, so fewer distinct repos than asked were crawled."""
    async with FakeHub(sample_corpus(), tokens={TOKEN}, max_page=2) as hub:
        client, _ = _clients(hub)
        order = [r.repo_id async for r in client.list_gguf_repos(sort="last_modified")]
        hub.requests.clear()
        hub.faults.add(Fault("overlap", route="api", repo="", times=None))  # page 2 repeats page 1's last
        counters, row, queued = await _both_modes(tmp_path, hub, CrawlParams(limit=3))
        api = hub.requests_to("api")
    assert queued == order[:3]
    assert counters["listed"] == counters["indexed"] == 3 and counters["failed"] == 0
    assert {k: row.counters[k] for k in counters} == counters
    pages = [r for r in api if not r.repo]
    assert len(pages) == 4 and all(p.query["limit"] == "3" for p in pages)  # two pages per mode
    assert Counter(r.repo for r in api if r.repo) == {repo_id: 2 for repo_id in order[:3]}  # once per mode


async def test_bad_files_become_error_rows(db: Database, hub: FakeHub) -> None:
    client, http = _clients(hub, token=None)  # no token: the gated repo's files cannot be read
    async with http:
        result = await index_repo(db, client, http, "other/vision-GGUF")
    assert result is not None and result.written == 2
    artifacts = await _artifacts(db)
    vision = artifacts[("other/vision-GGUF", "vision-Q4_0.gguf")]
    assert vision.status == "error" and vision.error_code == "gated_repo"


async def test_a_split_set_announcing_huge_counts_gets_a_short_error(db: Database) -> None:
    # One shard of a set its name says has 99,999: the row says so in one short line, where
    # it listed every missing shard number (700 KB).
    repo = HubRepo("org/huge-split-GGUF", [RepoFile("m-00001-of-99999.gguf", BytesBlob(b"GGUF" + bytes(60)))])
    async with FakeHub(Corpus([repo]), tokens={TOKEN}) as fake:
        client, http = _clients(fake)
        async with http:
            result = await index_repo(db, client, http, repo.repo_id)
        assert fake.requests_to("cdn") == []  # nothing of an incomplete set is read
    assert result is not None and result.written == 1
    (artifact,) = (await _artifacts(db)).values()
    assert artifact.status == "error" and artifact.error_message is not None
    assert artifact.error_message.endswith("99998 of 99999 shards missing: 2, 3, 4, 5, 6 and 99993 more")


async def test_explicit_repos_and_known_revision(db: Database, hub: FakeHub) -> None:
    client, http = _clients(hub)
    async with http:
        report = await crawl_hub(
            db, client, http, CrawlParams(repos=("synth/big-vocab-GGUF", "nobody/missing"))
        )
        assert report.indexed == 1 and report.failed == 1
        assert report.errors[0]["error"].startswith("repo_not_found")
        hub.requests.clear()
        sha = hub.corpus.repos["synth/big-vocab-GGUF"].sha
        assert await index_repo(db, client, http, "synth/big-vocab-GGUF", known_revision=sha) is None
    assert hub.requests_to("cdn") == []


async def test_new_revision_is_reindexed_alone(db: Database, hub: FakeHub) -> None:
    client, http = _clients(hub)
    async with http:
        await crawl_hub(db, client, http, CrawlParams())
        # A new commit replaces the F16 file by a Q6_K one.
        repo = hub.corpus.repos["synth/tiny-llama-GGUF"]
        blob = repo.file("tiny-llama-Q8_0.gguf").blob  # type: ignore[union-attr]
        assert isinstance(blob, SynthBlob)
        repo.files = [f for f in repo.files if "F16" not in f.path]
        repo.files.append(RepoFile("tiny-llama-Q6_K.gguf", SynthBlob(replace(blob.spec, quant="Q6_K"))))
        repo.sha = "f" * 40
        hub.corpus.add(repo)  # registers the new blob with the CDN
        hub.requests.clear()
        report = await crawl_hub(db, client, http, CrawlParams())
    assert report.indexed == 1 and report.unchanged == len(hub.corpus) - 1
    # Beyond the listing, only the changed repo was looked into (its new revision as a whole).
    assert {r.repo for r in hub.requests if r.route != "api" or r.repo} == {"synth/tiny-llama-GGUF"}
    artifacts = await _artifacts(db)
    assert artifacts[("synth/tiny-llama-GGUF", "tiny-llama-F16.gguf")].status == "gone"
    new = artifacts[("synth/tiny-llama-GGUF", "tiny-llama-Q6_K.gguf")]
    assert new.status != "error" and new.file_type == "Q6_K" and new.revision == "f" * 40


def test_first_window_follows_name_and_size() -> None:
    big, small = 2 * 1024 * 1024, 256 * 1024
    kw = {"first_window": big, "small_window": small}
    assert first_window_for("Llama-3-8B-Q4_K_M.gguf", **kw) == big
    assert first_window_for("Llama-3-8B-Q4_K_M-00001-of-00003.gguf", **kw) == big
    assert first_window_for("Llama-3-8B-Q4_K_M-00002-of-00003.gguf", **kw) == small
    assert first_window_for("x.gguf", split_no=1, **kw) == small
    assert first_window_for("mmproj-model-f16.gguf", **kw) == small
    assert first_window_for("sub/Qwen2-VL-mmproj.F16.gguf", **kw) == small
    assert first_window_for("Llama-3-8B-F16-LoRA.gguf", **kw) == small
    assert first_window_for("Florance-7B.gguf", **kw) == big  # "lora" only as a whole word
    assert first_window_for("tiny.gguf", size=50_000, **kw) == 50_000


async def _repo_state(db: Database, repo_id: str) -> tuple[str | None, set[str], int]:
    """(revision, statuses of its artifacts, lineage edges it has as a child)."""
    from registry.catalog.models import LineageEdge

    async with db.sessions() as session:
        repo = (await session.scalars(select(Repo).where(Repo.repo_id == repo_id))).one()
        statuses = set(await session.scalars(select(Artifact.status).where(Artifact.repo_pk == repo.id)))
        edges = len((await session.scalars(select(LineageEdge).where(LineageEdge.child_pk == repo.id))).all())
    return repo.revision, statuses, edges


async def test_a_repo_the_hub_deleted_is_marked_gone_by_the_next_whole_hub_crawl(db: Database, hub: FakeHub) -> None:
    """The listing no longer names it; the crawl asks for it by id, the hub says it has no
    such repo, and its artifacts become `gone` (kept, out of default searches). Named
    again, it is read in full again."""
    from registry.catalog.search import SearchQuery, search

    deleted_id = "synth/tiny-llama-GGUF"
    client, http = _clients(hub)
    async with http:
        first = await crawl_hub(db, client, http, CrawlParams())
        assert first.deleted == 0 and first.indexed == len(hub.corpus)
        revision, statuses, edges = await _repo_state(db, deleted_id)
        assert statuses == {"indexed"} and edges > 0
        saved = hub.corpus.repos.pop(deleted_id)

        hub.requests.clear()
        second = await crawl_hub(db, client, http, CrawlParams())
        assert (second.deleted, second.failed, second.unchanged) == (1, 0, len(hub.corpus))
        assert second.listed == len(hub.corpus) + 1  # the listing's repos and the one it lost
        assert await _repo_state(db, deleted_id) == (None, {"gone"}, 0)
        async with db.sessions() as session:
            hits = search_hits(await search(session, SearchQuery(limit=100)))
            gone = search_hits(await search(session, SearchQuery(status="gone", limit=100)))
        assert deleted_id not in {h.repo for h in hits} and {h.repo for h in gone} == {deleted_id}

        third = await crawl_hub(db, client, http, CrawlParams())  # already marked: not asked again
        assert (third.deleted, third.listed) == (0, len(hub.corpus))

        hub.corpus.add(saved)  # back (a hub's mistake, a repo made public again)
        fourth = await crawl_hub(db, client, http, CrawlParams())
    assert (fourth.indexed, fourth.deleted) == (1, 0)
    assert await _repo_state(db, deleted_id) == (revision, {"indexed"}, edges)


async def test_only_a_crawl_of_the_catalogs_own_hub_marks_repos_deleted(db: Database, hub: FakeHub) -> None:
    """A filtered listing does not name every repo, and another hub (`crawl --endpoint`)
    does not know the catalog's: neither marks anything deleted. Asked for by id, a repo the
    hub does not have is marked deleted if the catalog has it, else the crawl says why it failed."""
    deleted_id = "synth/tiny-llama-GGUF"
    client, http = _clients(hub)
    async with http:
        await crawl_hub(db, client, http, CrawlParams())
        hub.corpus.repos.pop(deleted_id)
        filtered = await crawl_hub(db, client, http, CrawlParams(author="synth"))
        other_hub = await crawl_hub(db, client, http, CrawlParams(prune=False))
        by_id_elsewhere = await crawl_hub(db, client, http, CrawlParams(repos=(deleted_id,), prune=False))
        assert filtered.deleted == other_hub.deleted == by_id_elsewhere.deleted == 0
        assert by_id_elsewhere.failed == 1 and "repo_not_found" in by_id_elsewhere.errors[0]["error"]
        assert (await _repo_state(db, deleted_id))[1] == {"indexed"}

        by_id = await crawl_hub(db, client, http, CrawlParams(repos=(deleted_id, "nobody/never-GGUF")))
    assert (by_id.deleted, by_id.failed) == (1, 1)
    assert [e["repo"] for e in by_id.errors] == ["nobody/never-GGUF"]
    assert (await _repo_state(db, deleted_id))[1] == {"gone"}


async def test_a_deleted_repo_is_counted_the_same_when_the_crawl_runs_as_jobs(tmp_path: Path, hub: FakeHub) -> None:
    """The listing job queues the catalog's repos its listing lost, and their repo jobs
    mark them deleted and report it into the crawl row, as the in-process crawl counts it."""
    deleted_id = "synth/tiny-llama-GGUF"
    async with Database.from_url(f"sqlite+aiosqlite:///{tmp_path / 'queued.db'}") as db:
        await _queued_crawl(db, hub, CrawlParams())
        saved = hub.corpus.repos.pop(deleted_id)
        try:
            row, queued = await _queued_crawl(db, hub, CrawlParams())
            kept, _ = await _queued_crawl(db, hub, CrawlParams(prune=False))
        finally:
            hub.corpus.add(saved)
        state = await _repo_state(db, deleted_id)
    assert queued == [deleted_id]  # every other repo is unchanged: no job
    assert row.status == "finished" and row.errors == []
    assert (row.counters["deleted"], row.counters["listed"], row.counters["failed"]) == (1, len(hub.corpus), 0)
    assert state == (None, {"gone"}, 0)
    assert kept.counters["deleted"] == 0 and kept.counters["listed"] == len(hub.corpus) - 1


async def _hub_rows(db: Database, repo_id: str) -> list[tuple[str, str | None, dict[str, tuple[int, str]]]]:
    """Every catalog repo spelled `repo_id` in any ASCII case: (id, revision, {path: (artifact
    id, status)}), in row order."""
    from registry.catalog.models import repo_key

    async with db.sessions() as session:
        query = select(Repo).where(Repo.repo_key == repo_key(repo_id)).order_by(Repo.id)
        repos = (await session.scalars(query)).all()
        out = []
        for repo in repos:
            rows = await session.execute(select(Artifact.path, Artifact.id, Artifact.status).where(Artifact.repo_pk == repo.id))
            out.append((repo.repo_id, repo.revision, {p: (i, s) for p, i, s in rows}))
        return out


async def _searched(db: Database, text: str) -> set[str]:
    from registry.catalog.search import SearchQuery, search

    async with db.sessions() as session:
        return {h.repo for h in search_hits(await search(session, SearchQuery(text=text, limit=100)))}


@pytest.mark.parametrize("params", [CrawlParams(), CrawlParams(search="tiny-llama")], ids=["whole hub", "search"])
async def test_a_repo_respelled_on_the_hub_keeps_its_row_artifacts_and_ids(
    any_db: Database, hub: FakeHub, params: CrawlParams
) -> None:
    """The owner changes only the letter case of the repo id: the listing names the new
    spelling, which is the same repo; its row takes the new spelling and keeps every
    artifact and artifact id, and nothing is marked gone. A filtered listing, which asks
    for no unlisted repo by id, respells it too."""
    old, new = "synth/tiny-llama-GGUF", "Synth/Tiny-Llama-gguf"
    client, http = _clients(hub)
    async with http:
        await crawl_hub(any_db, client, http, params)
        [(_, revision, artifacts)] = await _hub_rows(any_db, old)
        hub.corpus.rename(old, new)
        second = await crawl_hub(any_db, client, http, params)
        # The whole-hub crawl asks for the unlisted old id and is answered under the new
        # one (a move); the filtered listing meets the new spelling only.
        assert (second.deleted, second.failed, second.moved) == (0, 0, int(params.whole_hub))
        assert await _hub_rows(any_db, old) == [(new, revision, artifacts)]
        assert {s for _, s in artifacts.values()} == {"indexed"}
        third = await crawl_hub(any_db, client, http, params)
    assert (third.indexed, third.deleted, third.failed, third.moved) == (0, 0, 0, 0)


async def test_a_repo_renamed_on_the_hub_leaves_one_row_under_its_new_id(db: Database, hub: FakeHub) -> None:
    """A repo transferred to another owner: the listing names only the new id, and the old
    id answers with the repo under its new id (the hub redirects it). The whole-hub crawl
    indexes the repo under its new id; the old row either took the new id itself (when its
    job wrote first) or has its artifacts marked gone. Searches find the repo once, under
    its new id, and the next crawl asks the hub for nothing by id."""
    old, new = "synth/tiny-llama-GGUF", "new-owner/tiny-llama-GGUF"
    client, http = _clients(hub)
    async with http:
        await crawl_hub(db, client, http, CrawlParams())
        [(_, _, before)] = await _hub_rows(db, old)
        hub.corpus.rename(old, new)
        second = await crawl_hub(db, client, http, CrawlParams())
        assert (second.failed, second.indexed) == (0, 1)
        assert await _searched(db, "tiny-llama-gguf") == {new}
        [(_, revision, artifacts)] = await _hub_rows(db, new)
        assert revision == hub.corpus.repos[new].sha and artifacts.keys() == before.keys()
        assert {s for _, s in artifacts.values()} == {"indexed"}
        for _, old_revision, gone in await _hub_rows(db, old):
            assert old_revision is None and {s for _, s in gone.values()} == {"gone"}
        hub.requests.clear()
        third = await crawl_hub(db, client, http, CrawlParams())
    assert (third.indexed, third.deleted, third.listed) == (0, 0, len(hub.corpus))
    assert [r.repo for r in hub.requests_to("api") if r.repo] == []  # no repo asked for by id


@pytest.mark.parametrize("mode", ["in process", "jobs"])
async def test_a_renamed_repo_asked_for_by_its_old_id_moves_its_row(
    tmp_path: Path, hub: FakeHub, mode: str
) -> None:
    """Asked for by its old id while the catalog has no row for the new one, the repo's row
    takes the new id: its artifacts keep their ids (and so their verifications), its edges
    follow, and it is read again so that searches match the new id; the old id, which
    people still know the repo by, finds it too (under its new id)."""
    from registry.catalog.models import LineageEdge

    old, new = "synth/tiny-llama-GGUF", "new-owner/tiny-llama-GGUF"
    async with Database.from_url(f"sqlite+aiosqlite:///{tmp_path / 'moved.db'}") as db:
        client, http = _clients(hub)
        async with http:
            await crawl_hub(db, client, http, CrawlParams(repos=(old,)))
            [(_, revision, artifacts)] = await _hub_rows(db, old)
            hub.corpus.rename(old, new)
            if mode == "jobs":
                row, _ = await _queued_crawl(db, hub, CrawlParams(repos=(old,)))
                counters = row.counters
            else:
                counters = (await crawl_hub(db, client, http, CrawlParams(repos=(old,)))).counters()
        assert (counters["indexed"], counters["failed"], counters["deleted"], counters["moved"]) == (1, 0, 0, 1)
        assert await _hub_rows(db, new) == [(new, revision, artifacts)]
        assert await _hub_rows(db, old) == []
        assert await _searched(db, "new-owner") == {new} and await _searched(db, "synth/tiny-llama-gguf") == {new}
        async with db.sessions() as session:
            children = set(await session.scalars(select(LineageEdge.child_repo_id)))
        assert new in children and old not in children


async def _write_children(db: Database, *children: tuple[str, tuple[tuple[str, str, str], ...]]) -> None:
    """Catalog repos (one artifact each) whose lineage names these (parent, relation, source)."""
    from registry.catalog.services import upsert_repo_snapshot
    from registry.catalog.snapshot import LineageRecord
    from tests.catalog.factories import make_snapshot

    for repo_id, parents in children:
        lineage = tuple(LineageRecord(*p) for p in parents)
        async with db.sessions() as session, session.begin():
            await upsert_repo_snapshot(session, make_snapshot(repo_id, lineage=lineage))


async def _tree(db: Database, repo_id: str) -> dict[str, set[tuple[str, str, str, str]] | str | None]:
    """Where the catalog files `repo_id`'s children: its depth-1 descendants (child, parent as
    shown, relation, source), the repos of a `descendant_of` search, and the repo the API
    redirects the id to."""
    from registry.catalog import lineage
    from registry.catalog.search import SearchQuery, search

    async with db.sessions() as session:
        walk = await lineage.descendants(session, repo_id, max_depth=1)
        page = await search(session, SearchQuery(descendant_of=repo_id, limit=100))
        return {
            "edges": {(e.child, e.parent, e.relation, e.source) for e in walk.edges},
            "searched": {h.repo for h in search_hits(page)},
            "moved_to": await lineage.moved_to(session, repo_id),
        }


async def test_children_that_name_a_moved_repo_by_its_old_id_stay_in_its_tree(
    any_db: Database, hub: FakeHub
) -> None:
    """Files and cards keep naming a repo's old id long after the hub moved it. Edges that name
    it, written before or after the move and in any letter case, are filed under the repo: its
    tree and `descendant_of` (by either id) list those children, showing the repo's new id.
    When the hub later answers for the old id as a repo of its own, the edges whose sources
    spelled the old id are filed under it again (a child whose sources named both ids is
    then a child of both), a search for the old id finds only the repo of that id at once,
    and the repo it had moved to is read again on its next crawl."""
    old, new = "synth/tiny-llama-GGUF", "new-owner/tiny-llama-GGUF"
    client, http = _clients(hub)
    async with http:
        await crawl_hub(any_db, client, http, CrawlParams(repos=(old,)))
        await _write_children(
            any_db,
            ("fan/early-GGUF", ((old, "quantized", "card"),)),
            # the new id before the hub moved the repo to it: two edges, one after the move
            ("fan/ahead-GGUF", ((old, "finetune", "card"), (new, "finetune", "card"))),
        )
        hub.corpus.rename(old, new)
        moved = await crawl_hub(any_db, client, http, CrawlParams(repos=(old,)))
        assert (moved.moved, moved.failed) == (1, 0)
        await _write_children(
            any_db,
            ("fan/late-GGUF", (("Synth/Tiny-Llama-GGUF", "quantized", "gguf"),)),
            # both ids of the repo: one edge, spelled as the first, holding the other
            ("fan/both-GGUF", ((new, "finetune", "card"), (old, "finetune", "card"))),
        )
        fans = {"fan/early-GGUF", "fan/ahead-GGUF", "fan/late-GGUF", "fan/both-GGUF"}
        under_new = {
            ("fan/early-GGUF", new, "quantized", "card"),
            ("fan/ahead-GGUF", new, "finetune", "card"),
            ("fan/late-GGUF", new, "quantized", "gguf"),
            ("fan/both-GGUF", new, "finetune", "card"),
        }
        assert await _tree(any_db, new) == {"edges": under_new, "searched": fans, "moved_to": None}
        # the old id: its own edges are none, its search is the repo's, and the API redirects it
        assert await _tree(any_db, old) == {"edges": set(), "searched": fans, "moved_to": new}

        # A new repo under the old id, which the hub answers for as itself.
        hub.corpus.add(HubRepo(old, files=list(hub.corpus.repos[new].files), sha="f" * 40))
        assert await _searched(any_db, old) == {new}
        reclaimed = await crawl_hub(any_db, client, http, CrawlParams(repos=(old,)))
        assert (reclaimed.indexed, reclaimed.moved, reclaimed.failed) == (1, 0, 0)
        [(_, forgotten, _)] = await _hub_rows(any_db, new)
        assert forgotten is None  # read again in full on its next crawl
        assert await _searched(any_db, old) == {old} and await _searched(any_db, new) == {new}
        again = await crawl_hub(any_db, client, http, CrawlParams(repos=(new,)))
        assert (again.indexed, again.failed) == (1, 0)
        assert await _searched(any_db, old) == {old} and await _searched(any_db, new) == {new}
    assert await _tree(any_db, old) == {
        "edges": {
            ("fan/early-GGUF", old, "quantized", "card"),
            ("fan/late-GGUF", old, "quantized", "gguf"),
            ("fan/ahead-GGUF", old, "finetune", "card"),
            ("fan/both-GGUF", old, "finetune", "card"),
        },
        "searched": fans,
        "moved_to": None,
    }
    assert await _tree(any_db, new) == {
        "edges": {("fan/ahead-GGUF", new, "finetune", "card"), ("fan/both-GGUF", new, "finetune", "card")},
        "searched": {"fan/ahead-GGUF", "fan/both-GGUF"},
        "moved_to": None,
    }


async def test_a_repo_moved_twice_keeps_the_children_of_both_old_ids(any_db: Database, hub: FakeHub) -> None:
    """A -> B -> C: children naming A or B are C's, and both old ids redirect to C."""
    a, b, c = "synth/tiny-llama-GGUF", "second/tiny-llama-GGUF", "third/tiny-llama-GGUF"
    client, http = _clients(hub)
    async with http:
        await crawl_hub(any_db, client, http, CrawlParams(repos=(a,)))
        await _write_children(any_db, ("fan/of-a-GGUF", ((a, "quantized", "card"),)))
        hub.corpus.rename(a, b)
        await crawl_hub(any_db, client, http, CrawlParams(repos=(a,)))
        await _write_children(any_db, ("fan/of-b-GGUF", ((b, "quantized", "card"),)))
        hub.corpus.rename(b, c)
        report = await crawl_hub(any_db, client, http, CrawlParams(repos=(b,)))
        assert (report.moved, report.failed) == (1, 0)
        await _write_children(any_db, ("fan/late-GGUF", ((a, "merge", "gguf"),)))
    fans = {"fan/of-a-GGUF", "fan/of-b-GGUF", "fan/late-GGUF"}
    tree = await _tree(any_db, c)
    assert tree["searched"] == fans and {e[1] for e in tree["edges"]} == {c}  # type: ignore[union-attr]
    for old in (a, b):
        assert await _tree(any_db, old) == {"edges": set(), "searched": fans, "moved_to": c}
    from registry.catalog import lineage

    async with any_db.sessions() as session:
        pk = await session.scalar(select(Repo.id).where(Repo.repo_id == c))
        assert pk is not None and await lineage.moved_from(session, pk) == [a, b]


async def test_a_move_is_counted_when_the_job_that_made_it_is_retried(tmp_path: Path, hub: FakeHub) -> None:
    """A repo job moves the row, then fails for a transient reason and is retried (the
    attempt reports nothing): the retry, which finds the row moved already, counts the move."""
    old, new = "synth/tiny-llama-GGUF", "new-owner/tiny-llama-GGUF"
    async with Database.from_url(f"sqlite+aiosqlite:///{tmp_path / 'retried.db'}") as db:
        client, http = _clients(hub)
        async with http:
            await crawl_hub(db, client, http, CrawlParams(repos=(old,)))
            hub.corpus.rename(old, new)
            params = CrawlParams(repos=(old,))
            async with db.sessions() as session, session.begin():
                crawl = Crawl(kind="hub", parameters=params.to_parameters())
                session.add(crawl)
                await session.flush()
                crawl_id = crawl.id
            ctx = JobContext(Settings(hub=HubSettings(endpoint=hub.endpoint, token=TOKEN)), db, client, http)
            # every request for the repo's files fails through all of the client's retries
            hub.faults.add(Fault("status", route="cdn", repo=new, status=503, times=FAST_RETRY.max_attempts))
            with pytest.raises(TransientJobError):
                await index_repo_job(ctx, old, None, crawl_id, final_attempt=False)
            assert await _hub_rows(db, new) != []  # moved by the failed attempt
            await index_repo_job(ctx, old, None, crawl_id)
            async with db.sessions() as session:
                counters = (await session.get_one(Crawl, crawl_id)).counters
    assert (counters["moved"], counters["indexed"], counters["failed"]) == (1, 1, 0)


async def test_another_hub_answering_under_another_id_moves_nothing(db: Database, hub: FakeHub) -> None:
    """`crawl --endpoint` elsewhere: that hub's renames say nothing about the catalog's
    repos; the old row stays as it was (and the repo, at the revision the catalog has
    under its old id, is not read again)."""
    old, new = "synth/tiny-llama-GGUF", "new-owner/tiny-llama-GGUF"
    client, http = _clients(hub)
    async with http:
        await crawl_hub(db, client, http, CrawlParams(repos=(old,)))
        before = await _hub_rows(db, old)
        hub.corpus.rename(old, new)
        report = await crawl_hub(db, client, http, CrawlParams(repos=(old,), prune=False))
    assert report.errors == [] and report.moved == 0
    assert await _hub_rows(db, old) == before


async def test_a_rename_onto_an_id_the_catalog_has_in_another_case_retires_the_old_row(
    db: Database, hub: FakeHub
) -> None:
    """The catalog already has the new id spelled otherwise: the old row is marked deleted
    rather than taking the new id (which would make two rows of one repo), and the other
    row takes the hub's spelling."""
    from datetime import UTC, datetime

    from registry.catalog.services import upsert_repo_snapshot
    from tests.catalog.factories import artifact, make_snapshot

    old, new = "synth/tiny-llama-GGUF", "new-owner/tiny-llama-GGUF"
    async with db.sessions() as session, session.begin():
        older = datetime(2024, 1, 1, tzinfo=UTC)  # than the hub's commit
        other = make_snapshot("New-Owner/Tiny-Llama-gguf", artifacts=(artifact("x.gguf"),), last_modified=older)
        await upsert_repo_snapshot(session, other)
    client, http = _clients(hub)
    async with http:
        await crawl_hub(db, client, http, CrawlParams(repos=(old,)))
        await _write_children(db, ("fan/early-GGUF", ((old, "quantized", "card"),)))
        hub.corpus.rename(old, new)
        report = await crawl_hub(db, client, http, CrawlParams(repos=(old,)))
    assert (report.failed, report.indexed, report.moved) == (0, 1, 1), report.counters()
    [(spelled, revision, artifacts)] = await _hub_rows(db, new)
    assert (spelled, revision) == (new, hub.corpus.repos[new].sha)
    ggufs = {f.path for f in hub.corpus.repos[new].files if f.path.endswith(".gguf")}
    assert {p for p, (_, s) in artifacts.items() if s == "indexed"} == ggufs
    [(old_spelled, old_revision, gone)] = await _hub_rows(db, old)
    assert (old_spelled, old_revision) == (old, None) and {s for _, s in gone.values()} == {"gone"}
    # the other row was written again, its search text now holding the old id
    assert await _searched(db, old) == {new} and await _searched(db, "synth") == {new}
    # The old id moved to the other row: children naming it, before or after, are that row's.
    await _write_children(db, ("fan/late-GGUF", ((old, "quantized", "card"),)))
    assert await _tree(db, old) == {"edges": set(), "searched": {"fan/early-GGUF", "fan/late-GGUF"},
                                    "moved_to": new}  # fmt: skip
    assert (await _tree(db, new))["edges"] == {("fan/early-GGUF", new, "quantized", "card"),
                                               ("fan/late-GGUF", new, "quantized", "card")}  # fmt: skip


async def _stale_facts(db: Database) -> None:
    """Make every indexed artifact look as an older release derived it: another
    architecture in its facts and no KV cache estimate."""
    from sqlalchemy import update

    from registry.catalog.models import Facts

    async with db.sessions() as session, session.begin():
        await session.execute(update(Facts).values(architecture="stale", extra={}))
        await session.execute(update(Artifact).values(architecture="stale"))


async def _architectures(db: Database) -> Counter[str | None]:
    from registry.catalog.models import Facts

    async with db.sessions() as session:
        rows = await session.execute(select(Facts.architecture, Facts.extra))
        return Counter(f"{arch}{'+kv' if (extra or {}).get('kv_cache') else ''}" for arch, extra in rows)


@pytest.mark.parametrize("mode", ["in process", "jobs"])
async def test_a_full_crawl_writes_unchanged_repos_again(tmp_path: Path, hub: FakeHub, mode: str) -> None:
    """`--full` re-read the headers of repos at the revision indexed and then wrote nothing:
    facts a new release derives never reached them."""
    async with Database.from_url(f"sqlite+aiosqlite:///{tmp_path / 'full.db'}") as db:

        async def crawl(params: CrawlParams) -> None:
            if mode == "jobs":
                await _queued_crawl(db, hub, params)
                return
            client, http = _clients(hub)
            async with http:
                await crawl_hub(db, client, http, params)

        await crawl(CrawlParams())
        fresh = await _architectures(db)
        assert fresh["llama+kv"] > 0 and "stale" not in fresh
        ids = {k: a.id for k, a in (await _artifacts(db)).items()}
        await _stale_facts(db)
        await crawl(CrawlParams())
        assert set(await _architectures(db)) == {"stale"}  # unchanged revisions: not read
        await crawl(CrawlParams(full=True))
        assert await _architectures(db) == fresh
        assert {k: a.id for k, a in (await _artifacts(db)).items()} == ids  # the same rows, rewritten


async def _derived_by_an_older_release(db: Database, repo_ids: set[str], derivation: int | None) -> None:
    from sqlalchemy import update

    async with db.sessions() as session, session.begin():
        await session.execute(update(Repo).where(Repo.repo_id.in_(repo_ids)).values(derivation=derivation))


async def _architectures_of(db: Database) -> dict[str, set[str | None]]:
    from registry.catalog.models import Facts

    async with db.sessions() as session:
        rows = await session.execute(
            select(Repo.repo_id, Facts.architecture)
            .join(Artifact, Artifact.repo_pk == Repo.id)
            .join(Facts, Facts.artifact_id == Artifact.id)
        )
        out: dict[str, set[str | None]] = {}
        for repo_id, arch in rows:
            out.setdefault(repo_id, set()).add(arch)
        return out


@pytest.mark.parametrize("mode", ["in process", "jobs"])
async def test_a_plain_crawl_reads_again_once_the_repos_an_older_release_wrote(
    tmp_path: Path, hub: FakeHub, mode: str
) -> None:
    """A repo written by a release that derived less (a lower `DERIVATION`, or none: before
    repos carried it) is read and written again at the same revision by the next crawl,
    without `--full`, and only once; the other repos stay skipped."""
    from registry.catalog.snapshot import DERIVATION

    async with Database.from_url(f"sqlite+aiosqlite:///{tmp_path / 'older.db'}") as db:

        async def crawl() -> dict[str, int]:
            if mode == "jobs":
                return dict((await _queued_crawl(db, hub, CrawlParams()))[0].counters)
            client, http = _clients(hub)
            async with http:
                return (await crawl_hub(db, client, http, CrawlParams())).counters()

        await crawl()
        fresh = await _architectures_of(db)
        async with db.sessions() as session:
            assert set((await session.scalars(select(Repo.derivation))).all()) == {DERIVATION}
        older = {"synth/tiny-llama-GGUF", "synth/big-vocab-GGUF"}
        assert older <= set(fresh)
        await _stale_facts(db)
        await _derived_by_an_older_release(db, {"synth/tiny-llama-GGUF"}, None)
        await _derived_by_an_older_release(db, {"synth/big-vocab-GGUF"}, DERIVATION - 1)
        hub.requests.clear()
        counters = await crawl()
        read = {r.repo for r in hub.requests if r.route != "api" or r.repo}
        assert read == older  # the listing, then the two older repos alone
        assert (counters["indexed"], counters["rederived"]) == (2, 2)
        assert counters["unchanged"] == len(hub.corpus) - 2
        again = await _architectures_of(db)
        assert {r: again[r] for r in older} == {r: fresh[r] for r in older}
        assert all(again[r] == {"stale"} for r in set(fresh) - older)  # at their revision: not read
        async with db.sessions() as session:
            assert set((await session.scalars(select(Repo.derivation))).all()) == {DERIVATION}
        hub.requests.clear()
        counters = await crawl()
        assert {r.repo for r in hub.requests if r.route != "api" or r.repo} == set()  # once
        assert (counters["indexed"], counters["rederived"]) == (0, 0)
