"""The job runners' parts in-process: schedule conversion, the embedded queue's locks and
retries, `registry jobs`, and the jobs routes over the catalog's table."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from registry.api import create_app
from registry.api.launchers import QueueVerifier
from registry.catalog import migrate
from registry.catalog.db import Database
from registry.catalog.models import Artifact, Job, Repo, Verification
from registry.cli import main
from registry.config import load_settings
from tests.api.conftest import ApiClient
from tests.jobs.conftest import drain
from workers.jobs import JobContext, TransientJobError, schedule_cron
from workers.queue_embedded import EmbeddedQueue
from workers.schedule import parse_schedule


@pytest.mark.parametrize(
    ("text", "cron"),
    [
        ("every 15m", "*/15 * * * *"),
        ("every 1m", "* * * * *"),
        ("every 6h", "0 */6 * * *"),
        ("every 1h", "0 * * * *"),
        ("every 1d", "0 0 * * *"),
        ("every 2d", "0 0 */2 * *"),
        ("30 2 * * 1", "30 2 * * 1"),
    ],
)
def test_schedule_texts_become_procrastinate_crons(text: str, cron: str) -> None:
    schedule = parse_schedule(text)
    assert schedule is not None
    assert schedule_cron(schedule) == cron


@pytest.mark.parametrize("text", ["every 7m", "every 5h", "every 90s"])
def test_intervals_that_no_cron_can_express_are_refused(text: str) -> None:
    schedule = parse_schedule(text)
    assert schedule is not None
    with pytest.raises(ValueError, match="cannot run as a distributed periodic task"):
        schedule_cron(schedule)


@pytest.fixture
async def queue(tmp_path: Path) -> EmbeddedQueue:
    settings = load_settings(env={"REGISTRY_GENERAL_DATA_DIR": str(tmp_path), "REGISTRY_JOBS_RETRY_WAIT": "0",
                                  "REGISTRY_JOBS_MAX_ATTEMPTS": "3", "REGISTRY_CONFIG": ""})  # fmt: skip
    db = Database.from_settings(settings)
    await migrate.ensure_schema(db.engine)
    return EmbeddedQueue(settings, db)


async def test_one_queued_job_per_repo(queue: EmbeddedQueue) -> None:
    first = await queue.enqueue_index_repo("org/a")
    assert first is not None
    assert await queue.enqueue_index_repo("org/a") is None  # the queued one will do
    assert await queue.enqueue_index_repo("org/b") is not None
    jobs = await queue.list_jobs(status="queued")
    assert [j.args["repo_id"] for j in jobs] == ["org/b", "org/a"]  # newest first
    await queue.db.dispose()


async def test_transient_errors_retry_then_fail_others_fail_at_once(
    queue: EmbeddedQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []

    async def flaky(ctx: JobContext, kind: str, args: dict[str, object], **_: object) -> None:
        calls.append(str(args["repo_id"]))
        if args["repo_id"] == "org/transient":
            raise TransientJobError("503 from the hub")
        if args["repo_id"] == "org/bug":
            raise RuntimeError("a bug")

    monkeypatch.setattr(queue, "_call", flaky)
    for repo in ("org/transient", "org/bug", "org/fine"):
        await queue.enqueue_index_repo(repo)
    await drain(queue, concurrency=2, timeout=30)
    by_repo = {j.args["repo_id"]: j for j in await queue.list_jobs()}
    assert by_repo["org/transient"].status == "failed" and by_repo["org/transient"].attempts == 3
    assert by_repo["org/bug"].status == "failed" and by_repo["org/bug"].attempts == 1
    assert by_repo["org/bug"].error == "RuntimeError: a bug"
    assert by_repo["org/fine"].status == "done"
    assert calls.count("org/transient") == 3
    await queue.db.dispose()


async def test_jobs_command_and_routes_list_the_embedded_jobs(
    queue: EmbeddedQueue,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    aiohttp_client: object,
) -> None:
    job_id = await queue.enqueue_verify(7)
    assert job_id is not None
    await queue.enqueue_crawl(3)
    async with queue.db.sessions() as session, session.begin():
        (await session.get_one(Job, job_id)).status = "failed"

    def run_cli() -> int:
        return main(["jobs", "--status", "failed", "--json"])

    monkeypatch.setenv("REGISTRY_GENERAL_DATA_DIR", str(tmp_path))
    code = await asyncio.to_thread(run_cli)  # its own event loop, as from a terminal
    assert code == 0
    lines = json.loads(capsys.readouterr().out)["items"]  # the API's JobPage
    assert [(j["id"], j["kind"], j["status"]) for j in lines] == [(job_id, "verify", "failed")]

    app = create_app(queue.settings, queue.db.sessions)  # default reader: the catalog's jobs table
    api = ApiClient(await aiohttp_client(app), app)  # type: ignore[operator]  # validates against /openapi.json
    page = (await api.get("/v1/jobs?limit=1")).body
    assert page["items"][0]["kind"] == "crawl" and page["next"] is not None
    second = (await api.get(f"/v1/jobs?limit=1&cursor={page['next']}")).body
    assert second["items"][0]["id"] == job_id and second["next"] is None
    one = await api.get(f"/v1/jobs/{job_id}")
    assert one.body["url"] == f"/v1/jobs/{job_id}" and one.body["status"] == "failed"
    assert (await api.get("/v1/jobs/999")).status == 404
    assert (await api.get("/v1/jobs?status=stuck")).status == 400
    await queue.db.dispose()


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        (["worker"], {}, "needs jobs.mode = distributed"),
        (["serve"], {"REGISTRY_JOBS_MODE": "distributed"}, "needs a PostgreSQL database.url"),
        (["jobs"], {"REGISTRY_JOBS_MODE": "sideways"}, "jobs.mode must be one of"),
        (
            ["worker"],
            {
                "REGISTRY_JOBS_MODE": "distributed",
                "REGISTRY_DATABASE_URL": "postgresql+asyncpg://x@127.0.0.1/x",
                "REGISTRY_SCHEDULE_CRAWL": "every 7m",
            },
            "cannot run as a distributed periodic task",
        ),
    ],
)
def test_job_commands_refuse_settings_that_cannot_work(
    argv: list[str], env: dict[str, str], message: str, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    monkeypatch.setenv("REGISTRY_GENERAL_DATA_DIR", str(tmp_path))
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "configuration error" in err and message in err and "Traceback" not in err


async def test_a_verification_commits_its_row_then_queues_one_job(queue: EmbeddedQueue) -> None:
    verifier = QueueVerifier(queue.db.sessions, queue)
    async with queue.db.sessions() as session, session.begin():
        repo = Repo(repo_id="org/a")
        session.add(repo)
        await session.flush()
        artifact = Artifact(repo_pk=repo.id, path="a.gguf", status="indexed", sort_name="a")
        session.add(artifact)
        await session.flush()
        artifact_id = artifact.id
    verification_id = await verifier.enqueue(artifact_id)
    jobs = await queue.list_jobs()
    assert [(j.kind, j.queue, j.args) for j in jobs] == [
        ("verify", "verify", {"verification_id": verification_id})
    ]
    async with queue.db.sessions() as session:
        row = await session.get_one(Verification, verification_id)
        assert row.status == "queued"
    await queue.db.dispose()


@pytest.mark.parametrize("retry_wait", [0, 1, 5, 30])
def test_distributed_retries_wait_as_the_embedded_ones(retry_wait: int) -> None:
    """jobs.retry_wait seconds before the first retry, doubling after: 30 s used to become
    30, 900, 27000 s in the distributed mode, and 0 or 1 became 2, 4, 8."""
    from datetime import UTC, datetime
    from types import SimpleNamespace
    from typing import Any, cast

    from workers.queue_procrastinate import build_app

    settings = load_settings(env={"REGISTRY_CONFIG": "", "REGISTRY_JOBS_MODE": "distributed",
                                  "REGISTRY_DATABASE_URL": "postgresql+asyncpg://nobody@127.0.0.1:1/none",
                                  "REGISTRY_JOBS_RETRY_WAIT": str(retry_wait), "REGISTRY_JOBS_MAX_ATTEMPTS": "4"})  # fmt: skip
    strategy = build_app(settings).tasks["registry.index_repo"].retry_strategy
    assert strategy is not None
    waits = []
    for attempts in range(4):  # procrastinate's attempts: earlier runs of the job
        job = cast(Any, SimpleNamespace(attempts=attempts))
        decision = strategy.get_retry_decision(exception=TransientJobError("429"), job=job)
        if decision is None:
            waits.append(None)
        else:
            assert decision.retry_at is not None
            waits.append(round((decision.retry_at - datetime.now(UTC)).total_seconds()))
    embedded = [retry_wait * 2 ** (run - 1) for run in (1, 2, 3)]  # queue_embedded's wait before run + 1
    assert waits == [*embedded, None]
