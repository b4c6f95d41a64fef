"""A crawl of a multi-quant repo with sibling reuse on and off: the same catalog rows, fewer
bytes, and each artifact's way of reading recorded."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from registry.catalog import migrate
from registry.catalog.db import Database
from registry.catalog.models import Artifact, Facts, Repo
from registry.cli import main
from registry.hub.client import HubClient
from registry.hub.http import HttpOptions, HubHttp
from tests.fakehub import FakeHub
from tests.fakehub.corpus import Corpus, RepoFile, SynthBlob, gguf_repo
from tests.fakehub.synth import ModelSpec
from tests.fakehub.testing import FAST_RETRY, TOKEN, Sleeps
from workers.crawl import CrawlParams, CrawlReport, ReadOptions, crawl_hub

SPEC = ModelSpec(name="Tiny", vocab_size=32000, tokenizer="gpt2", pre="qwen2")
QUANTS = ("Q4_K_M", "Q5_K_M", "Q6_K", "Q8_0", "Q2_K", "IQ4_XS")
REPO = "org/Tiny-GGUF"


def _corpus() -> Corpus:
    extra = [
        RepoFile("mmproj-Tiny-F16.gguf", SynthBlob(replace(SPEC, kind="mmproj", quant="F16"))),
        # Another model in the same repo: a family of its own.
        RepoFile("Other-Q4_K_M.gguf", SynthBlob(replace(SPEC, name="Other", vocab_size=2048, tokenizer="llama"))),
        RepoFile("Other-Q8_0.gguf", SynthBlob(replace(SPEC, name="Other", vocab_size=2048, tokenizer="llama", quant="Q8_0"))),
    ]  # fmt: skip
    repos = [
        gguf_repo(REPO, SPEC, quants=QUANTS, extra_files=extra),
        gguf_repo("org/Split-GGUF", SPEC, quants=("Q4_K_M", "Q8_0"), shards=2),
    ]
    return Corpus(repos)


@pytest.fixture
async def hub() -> AsyncIterator[FakeHub]:
    async with FakeHub(_corpus(), tokens={TOKEN}) as h:
        yield h


async def _crawl(tmp_path: Path, hub: FakeHub, name: str, reuse: bool) -> tuple[CrawlReport, dict[str, Any]]:
    db = Database.from_url(f"sqlite+aiosqlite:///{tmp_path / name}")
    await migrate.ensure_schema(db.engine)
    sleeps = Sleeps()
    client = HubClient(hub.endpoint, TOKEN, retry=FAST_RETRY, sleep=sleeps)
    try:
        async with HubHttp(HttpOptions(endpoint=hub.endpoint, token=TOKEN, retry=FAST_RETRY), sleep=sleeps) as http:
            report = await crawl_hub(db, client, http, CrawlParams(), opts=ReadOptions(sibling_reuse=reuse))
        async with db.sessions() as session:
            rows = await session.execute(
                select(Repo.repo_id, Artifact, Facts)
                .join(Artifact, Artifact.repo_pk == Repo.id)
                .outerjoin(Facts, Facts.artifact_id == Artifact.id)
            )
            out = {}
            for repo_id, a, f in rows.all():
                facts = {c.name: getattr(f, c.name) for c in Facts.__table__.c if c.name != "artifact_id"}
                how = (a.header_read, a.header_leader, a.header_samples is not None)
                out[f"{repo_id}/{a.path}"] = (a.status, a.vocab_sha256, facts, how)
    finally:
        await db.dispose()
    return report, out


async def test_reuse_on_indexes_the_same_facts_for_a_fraction_of_the_bytes(tmp_path: Path, hub: FakeHub) -> None:
    off_report, off = await _crawl(tmp_path, hub, "off.db", reuse=False)
    on_report, on = await _crawl(tmp_path, hub, "on.db", reuse=True)
    assert on.keys() == off.keys()
    for key in on:
        assert on[key][:3] == off[key][:3], key
        assert off[key][3] == ("full", None, False)
    how = {k: v[3] for k, v in on.items()}
    leader = f"{REPO}/Tiny-IQ4_XS.gguf"  # the first of the family by name
    assert how[leader] == ("full", None, False)
    for q in QUANTS:
        if f"{REPO}/Tiny-{q}.gguf" != leader:
            assert how[f"{REPO}/Tiny-{q}.gguf"] == ("sibling", "Tiny-IQ4_XS.gguf", True)
    assert how[f"{REPO}/Other-Q8_0.gguf"] == ("sibling", "Other-Q4_K_M.gguf", True)
    # Projectors are read as before; of split models, shard 1 is a sibling like a single file.
    assert how[f"{REPO}/mmproj-Tiny-F16.gguf"] == ("full", None, False)
    assert how["org/Split-GGUF/Split-Q4_K_M-00001-of-00002.gguf"] == ("full", None, False)
    assert how["org/Split-GGUF/Split-Q8_0-00001-of-00002.gguf"] == ("sibling", "Split-Q4_K_M-00001-of-00002.gguf", True)
    assert on_report.sibling_reads == len(QUANTS) - 1 + 1 + 1 and on_report.sibling_fallbacks == 0
    assert off_report.sibling_reads == 0
    assert on_report.bytes_fetched < off_report.bytes_fetched * 0.5


async def test_show_and_the_api_say_how_a_header_was_read(
    tmp_path: Path, hub: FakeHub, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    db_url = f"sqlite+aiosqlite:///{tmp_path / 'show.db'}"
    db = Database.from_url(db_url)
    await migrate.ensure_schema(db.engine)
    client = HubClient(hub.endpoint, TOKEN, retry=FAST_RETRY, sleep=Sleeps())
    async with HubHttp(HttpOptions(endpoint=hub.endpoint, token=TOKEN, retry=FAST_RETRY), sleep=Sleeps()) as http:
        await crawl_hub(db, client, http, CrawlParams(repos=(REPO,)))
    async with db.sessions() as session:
        ids = dict((await session.execute(select(Artifact.path, Artifact.id))).all())
    await db.dispose()
    monkeypatch.setenv("REGISTRY_DATABASE_URL", db_url)
    capsys.readouterr()
    assert await asyncio.to_thread(main, ["show", str(ids["Tiny-Q8_0.gguf"])]) == 0
    out = capsys.readouterr().out
    assert "from sibling Tiny-IQ4_XS.gguf" in out and "ranges sampled" in out
    assert await asyncio.to_thread(main, ["show", str(ids["Tiny-Q8_0.gguf"]), "--json"]) == 0
    how = json.loads(capsys.readouterr().out)["header_read"]
    assert how["mode"] == "sibling" and how["leader"] == "Tiny-IQ4_XS.gguf" and how["samples"] > 0
    assert how["confirmed"] is None
    assert await asyncio.to_thread(main, ["show", str(ids["Tiny-IQ4_XS.gguf"]), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["header_read"] == {
        "mode": "full", "leader": None, "samples": None, "confirmed": None
    }
