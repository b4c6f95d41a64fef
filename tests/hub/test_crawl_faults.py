"""A crawl of the fake hub with every fault on: each artifact indexed once, with the right facts.

The design under test: a file that is bad (bad magic, a header cut short, a 404 from the
CDN) becomes an error row at once; a transient failure that outlasts the retries (the
faults below stack on the same files) or a file that changes mid-read writes nothing for
its repo, which a later crawl pass picks up. So the test crawls until a pass fails no
repo and then checks the catalog as a whole.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy import func, select

from registry.catalog import migrate
from registry.catalog.db import Database
from registry.catalog.models import Artifact, Facts, LineageEdge, Repo, Shard
from registry.gguf.facts import derive_facts
from registry.gguf.filename import group_shards
from registry.gguf.reader import parse_header
from registry.hub.client import HubClient
from registry.hub.http import HttpOptions, HubHttp
from tests.fakehub import FakeHub, Fault, sample_corpus
from tests.fakehub.corpus import BytesBlob, Corpus, RepoFile, SynthBlob, gguf_repo
from tests.fakehub.corpus import Repo as FakeRepo
from tests.fakehub.synth import ModelSpec, build
from tests.fakehub.testing import FAST_RETRY, TOKEN, Sleeps
from workers.crawl import CrawlParams, CrawlReport, crawl_hub

BROKEN = "broken/files-GGUF"
CHANGING = "changing/mid-vocab-GGUF"
OTHERS = "[!c]*"  # every repo but CHANGING, whose only fault is the change itself
MAX_PASSES = 4


def _corpus() -> Corpus:
    corpus = sample_corpus()
    cut = build(ModelSpec(name="Cut")).header[:5000]
    corpus.add(
        FakeRepo(
            BROKEN,
            [
                RepoFile("not-gguf.gguf", BytesBlob(b"PK\x03\x04" + b"\0" * 4096, lfs=True)),
                RepoFile("cut-short.gguf", BytesBlob(cut, lfs=True)),
                RepoFile("gone-from-cdn.gguf", SynthBlob(ModelSpec(name="Gone"))),
            ],
        )
    )
    # A header over the first window: read in two requests, so it can change in between.
    corpus.add(gguf_repo(CHANGING, ModelSpec(vocab_size=100_000, tokenizer="gpt2", pre="qwen2")))
    return corpus


def _faults() -> list[Fault]:
    every = None
    return [
        Fault("latency", route="*", delay=0.002, times=every),
        Fault("status", route="cdn", repo=OTHERS, status=429, retry_after="2", times=3),
        Fault("status", route="cdn", repo=OTHERS, status=500, skip=4, times=3),
        Fault("status", route="cdn", repo=OTHERS, status=503, skip=9, times=3),
        Fault("status", route="api", repo="synth/*", status=503, times=2),
        Fault("reset", route="cdn", repo=OTHERS, after_bytes=4096, skip=2, times=4),
        Fault("truncate", route="cdn", repo=OTHERS, after_bytes=1000, skip=6, times=4),
        Fault("ignore_range", route="cdn", file="*big-vocab*", times=every),
        Fault("ignore_range", route="cdn", file="*gemma*", times=every),
        Fault("change", route="cdn", repo=CHANGING, skip=1, times=1),
        Fault("status", route="cdn", repo=BROKEN, file="gone-from-cdn.gguf", status=404, times=every),
    ]


@pytest.fixture
async def db(tmp_path: Path) -> AsyncIterator[Database]:
    database = Database.from_url(f"sqlite+aiosqlite:///{tmp_path / 'catalog.db'}")
    await migrate.ensure_schema(database.engine)
    yield database
    await database.engine.dispose()


def _expected(corpus: Corpus) -> dict[tuple[str, str], Facts | None]:
    """(repo, first path) -> facts from the bytes themselves; None where a row must be an error."""
    out: dict[tuple[str, str], Facts | None] = {}
    for repo in corpus:
        files = {f.path: f for f in repo.files if f.path.endswith(".gguf")}
        for group in group_shards(files):
            key = (repo.repo_id, group.paths[0])
            if repo.repo_id == BROKEN:
                out[key] = None
                continue
            blobs = [files[p].blob for p in group.paths]
            headers = [
                parse_header(
                    b.file.header if isinstance(b, SynthBlob) else b.read(0, 16 << 20), file_size=b.size
                )
                for b in blobs
            ]
            out[key] = derive_facts(headers, file_sizes=[b.size for b in blobs])  # type: ignore[assignment]
    return out


async def test_crawl_with_every_fault_indexes_each_artifact_once(db: Database) -> None:
    corpus = _corpus()
    async with FakeHub(corpus, faults=_faults(), tokens={TOKEN}) as hub:
        sleeps = Sleeps()
        client = HubClient(hub.endpoint, TOKEN, retry=FAST_RETRY, sleep=sleeps)
        http = HubHttp(HttpOptions(endpoint=hub.endpoint, token=TOKEN, retry=FAST_RETRY), sleep=sleeps)
        reports: list[CrawlReport] = []
        async with http:
            for _ in range(MAX_PASSES):
                reports.append(await crawl_hub(db, client, http, CrawlParams(), concurrency=3))
                if reports[-1].failed == 0:
                    break
            # Every transient failure was recorded with its repo and then healed by a later pass.
            assert reports[-1].failed == 0, [r.errors for r in reports]
            assert sum(r.indexed for r in reports) == len(corpus)  # each repo written exactly once
            assert any(e["error"].startswith("file_changed") for r in reports for e in r.errors)
            assert any(f.hits for f in hub.faults.faults if f.kind == "reset")
            assert max(sleeps) >= 2  # Retry-After was honoured

            # No changes: the next crawl lists the hub and reads no header at all.
            hub.requests.clear()
            again = await crawl_hub(db, client, http, CrawlParams())
            assert again.unchanged == len(corpus) and again.indexed == again.failed == 0
            assert hub.requests_to("cdn") == [] and hub.requests_to("resolve") == []
        assert not any(r.authorization for r in hub.requests_to("cdn"))

    expected = _expected(corpus)
    async with db.sessions() as session:
        rows = (
            await session.execute(
                select(Repo.repo_id, Artifact, Facts)
                .join(Artifact, Artifact.repo_pk == Repo.id)
                .outerjoin(Facts, Facts.artifact_id == Artifact.id)
            )
        ).all()
        shard_counts = dict(
            (await session.execute(select(Shard.artifact_id, func.count()).group_by(Shard.artifact_id))).all()
        )
        edges = (await session.execute(select(LineageEdge.child_repo_id, LineageEdge.source))).all()
    keys = Counter((repo_id, a.path) for repo_id, a, _ in rows)
    assert all(n == 1 for n in keys.values()), "duplicate artifacts"
    assert set(keys) == set(expected)
    for repo_id, artifact, facts in rows:
        want = expected[(repo_id, artifact.path)]
        if want is None:
            assert artifact.status == "error" and artifact.error_code, artifact.path
            continue
        assert artifact.status != "error", (artifact.path, artifact.error_code, artifact.error_message)
        assert facts is not None
        assert (facts.architecture, facts.parameter_count, facts.context_length) == (
            want.architecture,
            want.parameter_count,
            want.context_length,
        )
        assert shard_counts[artifact.id] == artifact.shard_count
    codes = {a.path: a.error_code for r, a, _ in rows if r == BROKEN}
    assert codes == {"not-gguf.gguf": "bad_magic", "cut-short.gguf": "past_end_of_file",
                     "gone-from-cdn.gguf": "entry_not_found"}  # fmt: skip
    # The unrecoverable files are also listed on the crawl that met them.
    paths = {e["path"] for r in reports for e in r.errors if e["repo"] == BROKEN}
    assert paths == set(codes)
    # Lineage from all three sources is kept side by side.
    assert {s for child, s in edges if child == "synth/tiny-llama-GGUF"} >= {"gguf", "card", "tags"}
