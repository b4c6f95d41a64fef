"""A real client generated from the server's own /openapi.json by openapi-python-client (no
network: the generator reads the document from a file), imported and used against the server
on a loopback socket: every operation and every schema of the document has its code in the
client, the generator warns of nothing, and the client's models read what the server answers."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

pytest.importorskip("openapi_python_client")

from registry.api import openapi
from registry.api.launchers import RecordingLauncher
from tests.api.conftest import WEBHOOK_SECRET, WRITE_TOKEN, settings_with
from tests.api.live import LiveServer
from tests.catalog.conftest import TempDatabases

PACKAGE = "registry_client"  # the generated package's name: its folder's
LAUNCHER = RecordingLauncher(source_kinds={"hub": "hub", "local": "local"})  # both crawl body shapes


@pytest.fixture(scope="module")
def live_url(temp_databases: TempDatabases) -> Iterator[str]:
    server = LiveServer(temp_databases.new_url("sqlite"), LAUNCHER)
    try:
        yield server.start()
    finally:
        server.stop()


@pytest.fixture(scope="module")
def generated(live_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ModuleType, dict[str, Any]]]:
    """The client generated from the live server's document, imported; and the document."""
    folder = tmp_path_factory.mktemp("client")
    with urllib.request.urlopen(f"{live_url}/openapi.json", timeout=30) as reply:
        document = json.load(reply)
    (folder / "openapi.json").write_text(json.dumps(document))
    (folder / "config.yaml").write_text("post_hooks: []\n")  # no formatter run over the code
    generate = [sys.executable, "-m", "openapi_python_client", "generate", "--path", "openapi.json",
                "--output-path", PACKAGE, "--meta", "none", "--config", "config.yaml"]  # fmt: skip
    done = subprocess.run(generate, cwd=folder, capture_output=True, text=True, timeout=300)
    said = done.stdout + done.stderr
    assert done.returncode == 0, said
    # The generator drops what it cannot read with a warning ("Unable to process schema ...").
    assert "warning" not in said.lower() and "unable" not in said.lower(), said
    sys.path.insert(0, str(folder))
    try:
        yield importlib.import_module(PACKAGE), document
    finally:
        sys.path.remove(str(folder))
        for name in [m for m in sys.modules if m == PACKAGE or m.startswith(f"{PACKAGE}.")]:
            del sys.modules[name]


def test_every_operation_and_schema_has_its_code(generated: tuple[ModuleType, dict[str, Any]]) -> None:
    _package, document = generated
    operations = [(op["tags"][0], op["operationId"]) for item in document["paths"].values() for op in item.values()]
    assert {op for _, op in operations} == {op.operation_id for op in openapi.operations(settings_with().api)}
    for tag, operation_id in operations:
        module = importlib.import_module(f"{PACKAGE}.api.{tag}.{operation_id}")
        assert callable(module.sync_detailed) and callable(module.asyncio_detailed), operation_id
    models = importlib.import_module(f"{PACKAGE}.models")
    for name in document["components"]["schemas"]:
        assert isinstance(getattr(models, name, None), type), name


def _api(package: str, tag: str, operation_id: str) -> Any:
    return importlib.import_module(f"{PACKAGE}.api.{tag}.{operation_id}")


def test_the_client_reads_what_the_server_answers(generated: tuple[ModuleType, dict[str, Any]], live_url: str) -> None:
    package, _ = generated
    models = importlib.import_module(f"{PACKAGE}.models")
    client = package.Client(base_url=live_url, raise_on_unexpected_status=True)
    writer = package.AuthenticatedClient(base_url=live_url, token=WRITE_TOKEN, raise_on_unexpected_status=True)
    api = lambda tag, op: _api(PACKAGE, tag, op)  # noqa: E731

    assert isinstance(api("system", "healthz").sync(client=client), models.Health)
    assert api("system", "readyz").sync(client=client).checks.database.value == "ok"
    assert api("system", "metrics").sync_detailed(client=client).status_code == 200

    page = api("artifacts", "search_artifacts").sync(client=client, q="llama", memory_context="32K", limit=2,
                                                     sort=models.SearchArtifactsSort("name"))  # fmt: skip
    assert isinstance(page, models.ArtifactPage) and len(page.items) == 2 and page.next_
    hit = page.items[0]
    assert isinstance(hit, models.ArtifactSummary) and hit.status == models.ArtifactStatus.INDEXED
    after = api("artifacts", "search_artifacts").sync(client=client, q="llama", memory_context="32K", limit=2,
                                                      sort=models.SearchArtifactsSort("name"), cursor=page.next_)  # fmt: skip
    assert {i.id for i in after.items}.isdisjoint(i.id for i in page.items)

    [f16] = api("artifacts", "search_artifacts").sync(client=client, file_type="F16").items
    artifact = api("artifacts", "get_artifact").sync(f16.id, client=client, context="32K")
    assert isinstance(artifact, models.Artifact)
    assert artifact.memory.tokens == artifact.facts.kv_cache.at_context.tokens == 8192  # its own context
    assert artifact.shards[0].sha256 == "ab" * 32 and artifact.chat_template
    counts = api("artifacts", "facets").sync(client=client, architecture="LLAMA")
    assert isinstance(counts, models.Facets) and counts.filters["architecture"] == "llama"
    files = api("artifacts", "get_files").sync("AB" * 32, client=client)
    assert isinstance(files, models.FileMatches) and files.count == len(files.files) > 0
    missing = api("artifacts", "get_artifact").sync(10**9, client=client)
    assert isinstance(missing, models.Error) and missing.error.code == "not_found"

    repo = api("repos", "get_repo").sync("bartowski", "llama-3-8b-gguf", client=client)
    assert isinstance(repo, models.RepoDetail) and repo.repo.repo_id == "bartowski/Llama-3-8B-GGUF"
    assert repo.artifact_count == len(repo.artifacts) == 4
    tree = api("repos", "get_lineage").sync("meta-llama", "Llama-3-8B", client=client)
    assert isinstance(tree, models.Lineage) and tree.in_catalog and tree.descendants

    # writes: with the token; without it the client reads the error envelope
    refused = api("crawls", "start_crawl").sync(client=client, body=models.CrawlRequest(source=models.CrawlRequestSource("hub")))
    assert isinstance(refused, models.Error) and refused.error.code == "unauthorized"
    crawl = api("crawls", "start_crawl").sync(
        client=writer, body=models.CrawlRequest(source=models.CrawlRequestSource("hub"), repos=["org/name"]))
    assert isinstance(crawl, models.Crawl) and crawl.status == models.CrawlStatus.RUNNING
    local = api("crawls", "start_crawl").sync(client=writer, body=models.LocalCrawlRequest(source="local", full=True))
    assert isinstance(local, models.Crawl) and local.kind == models.CrawlKind.LOCAL
    cancelled = api("crawls", "cancel_crawl").sync(crawl.id, client=writer)
    assert cancelled.status == models.CrawlStatus.CANCELLED
    crawls = api("crawls", "list_crawls").sync(client=client)
    assert isinstance(crawls, models.CrawlPage) and [c.id for c in crawls.items] == [local.id, crawl.id]
    assert api("crawls", "get_crawl").sync(crawl.id, client=client).parameters["repos"] == ["org/name"]
    hook = package.AuthenticatedClient(base_url=live_url, token=WEBHOOK_SECRET, prefix="",
                                       auth_header_name="X-Webhook-Secret")  # fmt: skip
    event = models.HubWebhook(event=models.HubEvent(action="update", scope="discussion"),
                              repo=models.HubRepo(type_="model", name="org/name"))  # fmt: skip
    ignored = api("crawls", "hub_webhook").sync(client=hook, body=event)
    assert isinstance(ignored, models.WebhookIgnored) and ignored.event.scope == "discussion"

    queued = api("verifications", "start_verification").sync(
        client=writer, body=models.VerificationRequest(artifact_id=f16.id))
    assert isinstance(queued, models.Verification) and queued.status == models.VerificationStatus.QUEUED
    assert api("verifications", "get_verification").sync(queued.id, client=client).artifact_id == f16.id
    jobs = api("jobs", "list_jobs").sync(client=client)
    assert isinstance(jobs, models.JobPage) and jobs.items == []
    assert api("jobs", "get_job").sync(1, client=client).error.code == "not_found"
    document = api("system", "openapi").sync_detailed(client=client)
    assert json.loads(document.content)["openapi"] == "3.1.0"
    assert Path(package.__file__).parent.name == PACKAGE
