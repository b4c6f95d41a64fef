"""Template safety in the product: findings stored at index and crawl time, the severity
filter (catalog, CLI, API), the artifact detail and `registry inspect`, on both databases."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import pytest
from sqlalchemy import select

from registry.api.present import search_hits
from registry.catalog.db import Database
from registry.catalog.errors import InvalidQuery
from registry.catalog.facets import facets
from registry.catalog.models import Artifact, Repo
from registry.catalog.search import SearchQuery, search
from registry.cli import main
from registry.gguf.reader import parse_header
from registry.hub.client import HubClient
from registry.hub.http import HttpOptions, HubHttp
from registry.safety.capabilities import mask
from registry.safety.sandbox import SandboxUnavailable
from tests.api.conftest import ApiClient, MakeApi, make_api
from tests.catalog.conftest import db, db_url, empty_db_url, postgresql_url, sqlite_url, temp_databases
from tests.fakehub import FakeHub
from tests.fakehub.corpus import Corpus, gguf_repo
from tests.fakehub.synth import ModelSpec
from tests.fakehub.testing import FAST_RETRY, Sleeps
from tests.safety.templates import CHATML, CVE_2024_34359
from workers import templates as worker_templates
from workers.crawl import CrawlParams, ReadOptions, crawl_hub
from workers.index import index_paths
from workers.templates import TemplateScanner

__all__ = [  # fixtures used here
    "db", "db_url", "empty_db_url", "make_api", "postgresql_url", "sqlite_url", "temp_databases",
]  # fmt: skip

gguf = pytest.importorskip("gguf")

HOSTILE = "hostile.gguf"


def write_gguf(path: Path, template: str | None) -> Path:
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name(path.stem)
    if template is not None:
        writer.add_chat_template(template)
    writer.add_tensor("blk.0.w", np.ones((4, 8), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.fixture
def models(tmp_path: Path, smollm2_path: Path) -> Path:
    """The CVE-2024-34359 payload in a tiny GGUF, the real SmolLM2, and an unreadable file."""
    folder = tmp_path / "models"
    folder.mkdir()
    write_gguf(folder / HOSTILE, CVE_2024_34359)
    os.symlink(smollm2_path, folder / smollm2_path.name)
    (folder / "broken.gguf").write_bytes(b"GGUF\x03\x00\x00\x00" + b"\xff" * 24)
    return folder


async def _rows(database: Database) -> dict[str, Artifact]:
    async with database.sessions() as session:
        rows = (await session.scalars(select(Artifact))).all()
        return {a.path: a for a in rows}


async def _paths(database: Database, q: SearchQuery) -> list[str]:
    async with database.sessions() as session:
        return [i.path for i in search_hits(await search(session, q))]


async def test_index_stores_findings_and_filters(db: Database, models: Path, smollm2_path: Path) -> None:
    report = await index_paths(db, [models])
    assert report.errors == 1
    rows = await _rows(db)
    hostile, smol, broken = rows[HOSTILE], rows[smollm2_path.name], rows["broken.gguf"]

    assert hostile.status == "indexed" and hostile.chat_template_findings
    assert hostile.chat_template_findings[0]["severity"] == "critical"  # stored worst first
    assert {"dunder-attribute", "sandbox-security-error"} <= {f["code"] for f in hostile.chat_template_findings}
    assert hostile.chat_template_max_severity == 4
    # SmolLM2's real template is clean: an empty list, not "not scanned".
    assert smol.status == "indexed" and smol.chat_template_findings == []
    assert smol.chat_template_max_severity is None
    # No header, no scan: NULL ("not scanned"), never the server default [] ("clean").
    assert broken.status == "error" and broken.chat_template_findings is None
    assert broken.chat_template_max_severity is None

    for severity in ("info", "high", "critical"):
        assert await _paths(db, SearchQuery(template_severity=severity)) == [HOSTILE]
    assert await _paths(db, SearchQuery(template_severity="high", status="all")) == [HOSTILE]
    assert sorted(await _paths(db, SearchQuery())) == sorted([HOSTILE, smollm2_path.name])
    async with db.sessions() as session:
        page = await search(session, SearchQuery(template_severity="high"))
        assert search_hits(page)[0].chat_template_severity == "critical"
        counts = await facets(session, SearchQuery(template_severity="critical"))
        assert counts["architecture"] == {"llama": 1}
        with pytest.raises(InvalidQuery) as info:
            await search(session, SearchQuery(template_severity="severe"))
    assert info.value.details["parameter"] == "template_severity"
    assert "critical" in info.value.details["allowed"]


async def test_unavailable_sandbox_means_not_scanned(
    db: Database, models: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def unavailable(*args: object, **kwargs: object) -> None:
        raise SandboxUnavailable("sandbox process failed to start: test")

    monkeypatch.setattr(worker_templates, "scan_header_report", unavailable)
    await index_paths(db, [models])
    rows = await _rows(db)
    assert rows[HOSTILE].status == "indexed"
    assert rows[HOSTILE].chat_template_findings is None and rows[HOSTILE].chat_template_max_severity is None
    assert await _paths(db, SearchQuery(template_severity="info")) == []


@pytest.fixture
async def api(make_api: MakeApi, db: Database, models: Path) -> AsyncIterator[ApiClient]:
    await index_paths(db, [models])
    yield await make_api()


async def test_api_filter_and_detail(api: ApiClient, smollm2_path: Path) -> None:
    hits = await api.get("/v1/artifacts?template_severity=high")
    assert hits.status == 200
    assert [i["path"] for i in hits.body["items"]] == [HOSTILE]
    assert hits.body["items"][0]["chat_template_severity"] == "critical"

    everything = await api.get("/v1/artifacts")
    by_path = {i["path"]: i for i in everything.body["items"]}
    assert by_path[smollm2_path.name]["chat_template_severity"] is None

    detail = await api.get(f"/v1/artifacts/{by_path[HOSTILE]['id']}")
    assert detail.status == 200
    assert detail.body["chat_template_findings"][0]["severity"] == "critical"
    clean = await api.get(f"/v1/artifacts/{by_path[smollm2_path.name]['id']}")
    assert clean.body["chat_template_findings"] == []

    repo = await api.get("/v1/repos/local/models")
    findings = {a["path"]: a["chat_template_findings"] for a in repo.body["artifacts"]}
    assert findings[smollm2_path.name] == [] and findings["broken.gguf"] is None and findings[HOSTILE]

    facet = await api.get("/v1/facets?template_severity=critical")
    assert facet.status == 200 and facet.body["facets"]["architecture"] == {"llama": 1}

    bad = await api.get("/v1/artifacts?template_severity=severe")
    assert bad.status == 400
    assert bad.body["error"]["details"]["parameter"] == "template_severity"


async def test_openapi_declares_the_filter(api: ApiClient) -> None:
    doc = (await api.get("/openapi.json")).body
    params = {p["name"]: p for p in doc["paths"]["/v1/artifacts"]["get"]["parameters"]}
    assert params["template_severity"]["schema"]["enum"] == ["info", "low", "medium", "high", "critical"]
    assert "TemplateFinding" in doc["components"]["schemas"]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_index_search_inspect(
    empty_db_url: str,
    models: Path,
    smollm2_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("REGISTRY_DATABASE_URL", empty_db_url)
    monkeypatch.chdir(tmp_path)  # no config/registry.toml from the checkout
    code, _, err = run(capsys, "index", str(models))
    assert code == 0, err

    code, out, err = run(capsys, "search", "--template-severity", "high", "--json")
    assert code == 0, err
    items = json.loads(out)["items"]
    assert [i["path"] for i in items] == [HOSTILE] and items[0]["chat_template_severity"] == "critical"
    code, out, _ = run(capsys, "search", "--template-severity", "high")
    assert HOSTILE in out and smollm2_path.name not in out and "critical" in out
    with pytest.raises(SystemExit) as stop:  # refused as the option is read, as the API's parameter
        run(capsys, "search", "--template-severity", "severe")
    assert stop.value.code == 2 and "template_severity must be one of info, low" in capsys.readouterr().err

    code, out, err = run(capsys, "inspect", "--json", str(models / HOSTILE))
    assert code == 0, err
    doc = json.loads(out)
    assert doc["chat_template_findings"][0]["severity"] == "critical"
    code, out, _ = run(capsys, "inspect", "--json", str(smollm2_path))
    assert json.loads(out)["chat_template_findings"] == []
    code, out, _ = run(capsys, "inspect", str(models / HOSTILE))
    assert "template safety  CRITICAL: " in out
    code, out, _ = run(capsys, "inspect", str(smollm2_path))
    assert "template safety  clean (no findings)" in out


def test_inspect_without_template_is_clean(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)  # no config/registry.toml from the checkout
    path = write_gguf(tmp_path / "plain.gguf", None)
    code, out, _ = run(capsys, "inspect", "--json", str(path))
    assert code == 0 and json.loads(out)["chat_template_findings"] == []
    code, out, _ = run(capsys, "inspect", str(path))
    assert "template safety" not in out


def test_inspect_reports_a_template_the_jinja_lexer_cannot_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A 5000-digit number literal made the parser raise ValueError: `inspect` crashed and
    # the index stored the file as not scanned, hiding the payload that follows it.
    monkeypatch.chdir(tmp_path)  # no config/registry.toml from the checkout
    template = "{{ " + "1" * 5000 + " }}" + CVE_2024_34359
    path = write_gguf(tmp_path / "bigint.gguf", template)
    code, out, err = run(capsys, "inspect", "--json", str(path))
    assert code == 0, err
    findings = json.loads(out)["chat_template_findings"]
    assert findings[0]["severity"] == "critical"
    assert "template-syntax-error" in {f["code"] for f in findings}


def test_scanner_reports_a_template_whose_folding_would_blow_up(tmp_path: Path) -> None:
    # Lists nested through 2000 `set`s: the scanner raised RecursionError in the indexing
    # process and the artifact was stored as not scanned instead of with a finding.
    nested = "{% set a0 = ['x'] %}" + "".join(f"{{% set a{i + 1} = [a{i}] %}}" for i in range(2000))
    path = write_gguf(tmp_path / "nested.gguf", nested + "{{ a2000 ~ 'y' }}" + CVE_2024_34359)
    header = parse_header(path.read_bytes(), file_size=path.stat().st_size)
    scanner = TemplateScanner()
    try:
        scan = scanner.scan_sync(header)
    finally:
        scanner.close()
    assert scan is not None
    findings = scan.findings
    assert findings[0].severity == "critical"
    assert "template-too-complex" in {f.code for f in findings}


async def test_a_template_already_scanned_is_answered_without_the_sandbox(tmp_path: Path) -> None:
    """The second quant's template is the first's: its report comes from the cache, even
    once the scanner (and its sandbox) is closed; a new template still needs the sandbox."""
    first, second, other = (
        parse_header(p.read_bytes(), file_size=p.stat().st_size)
        for p in (write_gguf(tmp_path / "a.gguf", CVE_2024_34359), write_gguf(tmp_path / "b.gguf", CVE_2024_34359),
                  write_gguf(tmp_path / "c.gguf", CHATML))
    )  # fmt: skip
    scanner = TemplateScanner()
    try:
        report = await scanner.scan(first)
    finally:
        await scanner.aclose()
    assert report is not None and report.findings[0].severity == "critical"
    assert await scanner.scan(second) == report
    assert await scanner.scan(other) is None  # not cached: the closed scanner cannot scan it


async def test_crawl_stores_findings_scanning_each_template_once(db: Database) -> None:
    corpus = Corpus()
    corpus.add(gguf_repo("evil/hostile-GGUF", ModelSpec(name="Evil", chat_template=CVE_2024_34359),
                         quants=("Q4_K_M", "Q8_0")))  # fmt: skip
    corpus.add(gguf_repo("good/chatml-GGUF", ModelSpec(name="Good", chat_template=CHATML), quants=("Q8_0",)))
    scanner = TemplateScanner()
    async with FakeHub(corpus) as hub:
        sleeps = Sleeps()
        client = HubClient(hub.endpoint, None, retry=FAST_RETRY, sleep=sleeps)
        http = HubHttp(HttpOptions(endpoint=hub.endpoint, retry=FAST_RETRY), sleep=sleeps)
        try:
            async with http:
                report = await crawl_hub(db, client, http, CrawlParams(), opts=ReadOptions(scanner=scanner))
        finally:
            await scanner.aclose()
    assert report.failed == 0 and report.indexed == 2
    async with db.sessions() as session:
        rows = (await session.execute(select(Repo.repo_id, Artifact).join(Artifact))).all()
    severity = {(repo_id, a.path): a.chat_template_max_severity for repo_id, a in rows}
    assert len(severity) == 3
    for (repo_id, _), rank in severity.items():
        assert rank == (4 if repo_id == "evil/hostile-GGUF" else None)
    assert all(a.chat_template_findings is not None for _, a in rows)
    # The capabilities are stored by the crawl too: ChatML passes a system message on.
    assert [a.chat_template_capabilities for r, a in rows if r == "good/chatml-GGUF"] == [mask(["system"])]
    # Two hostile quantizations with the same template and tokens: one scan, one cache entry.
    assert len(scanner.cache._data) == 2
