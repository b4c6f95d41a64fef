"""`registry inspect URL|org/name/file.gguf` and `registry crawl` against the fake hub, as a user runs them."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import sys
from pathlib import Path

from tests.fakehub import FakeHub, sample_corpus
from tests.fakehub.testing import TOKEN

ROOT = Path(__file__).resolve().parents[2]


async def _registry(tmp_path: Path, hub: FakeHub, *args: str, **settings: str) -> tuple[int, str, str]:
    env = {
        **os.environ,
        "REGISTRY_GENERAL_DATA_DIR": str(tmp_path),
        "REGISTRY_HUB_ENDPOINT": hub.endpoint,
        "REGISTRY_HUB_TOKEN": TOKEN,
        "REGISTRY_HUB_BACKOFF_BASE": "0.01",
        "REGISTRY_HUB_MAX_ATTEMPTS": "2",
        **settings,
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "registry.cli", *args, cwd=ROOT, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_inspect_remote_file_reports_what_it_fetched(tmp_path: Path) -> None:
    async with FakeHub(sample_corpus(real=False), tokens={TOKEN}) as hub:
        code, out, err = await _registry(
            tmp_path, hub, "inspect", "synth/split-moe-GGUF/split-moe-Q8_0-00002-of-00003.gguf", "--json"
        )
        assert code == 0, err
        doc = json.loads(out)
        assert doc["fetched"]["files"] == 3 and doc["fetched"]["requests"] >= 3
        assert doc["fetched"]["bytes"] < 3 * 1024 * 1024

        url = hub.resolve_url("synth/tiny-llama-GGUF", "tiny-llama-Q8_0.gguf")
        code, out, err = await _registry(tmp_path, hub, "inspect", url)
        assert code == 0, err
        assert "fetched" in out.splitlines()[-1] and "1 request(s)" in out

        code, out, err = await _registry(
            tmp_path, hub, "inspect", "synth/nope-GGUF/x.gguf", "--revision", "v1", "--json"
        )
        assert code == 1 and json.loads(out)["error"]["code"] == "repo_not_found"
        assert "Traceback" not in err and len(err.strip().splitlines()) == 1
        assert not any(r.authorization for r in hub.requests_to("cdn"))


async def test_crawl_command_prints_a_summary_and_skips_unchanged(tmp_path: Path) -> None:
    async with FakeHub(sample_corpus(real=False), tokens={TOKEN}) as hub:
        code, out, err = await _registry(tmp_path, hub, "crawl", "--author", "synth", "--json")
        assert code == 0, err
        first = json.loads(out)
        assert first["status"] == "finished" and first["counters"]["indexed"] == 3
        assert "repos 3 seen" in err or err == ""  # plain progress lines on a pipe, at most every 10 s

        code, out, err = await _registry(tmp_path, hub, "crawl", "--author", "synth")
        assert code == 0, err
        assert "3 seen, 0 indexed, 3 unchanged, 0 failed" in out

        # A repo as a release before the derivation number left it: read and written again.
        with sqlite3.connect(tmp_path / "registry.db") as conn:
            conn.execute("UPDATE repos SET derivation = NULL WHERE repo_id = 'synth/tiny-llama-GGUF'")
        conn.close()
        code, out, err = await _registry(tmp_path, hub, "crawl", "--author", "synth")
        assert code == 0, err
        assert ("3 seen, 1 indexed, 1 of them at the same revision (an older release wrote them), "
                "2 unchanged, 0 failed") in out  # fmt: skip


async def test_crawl_command_marks_repos_the_hub_deleted_but_not_on_another_hub(tmp_path: Path) -> None:
    async with FakeHub(sample_corpus(real=False), tokens={TOKEN}) as hub:
        code, out, err = await _registry(tmp_path, hub, "crawl", "--json")
        assert code == 0 and json.loads(out)["counters"]["indexed"] == len(hub.corpus), err
        hub.corpus.repos.pop("synth/tiny-llama-GGUF")
        # Another hub than the configured one (here the same server under another name)
        # knows nothing of the catalog's repos: nothing is marked.
        elsewhere = hub.endpoint.replace("127.0.0.1", "localhost")
        code, out, err = await _registry(tmp_path, hub, "crawl", "--endpoint", elsewhere, "--json")
        assert code == 0 and json.loads(out)["counters"]["deleted"] == 0, err
        code, out, err = await _registry(tmp_path, hub, "crawl")
        assert code == 0, err
        assert "1 deleted (the hub no longer has them)" in out and "0 failed" in out
        code, out, err = await _registry(tmp_path, hub, "search", "--status", "gone", "--json")
        assert code == 0 and {i["repo"] for i in json.loads(out)["items"]} == {"synth/tiny-llama-GGUF"}, err


async def test_crawl_command_counts_repos_the_hub_moved(tmp_path: Path) -> None:
    async with FakeHub(sample_corpus(real=False), tokens={TOKEN}) as hub:
        code, out, err = await _registry(tmp_path, hub, "crawl", "--json")
        assert code == 0, err
        hub.corpus.rename("synth/tiny-llama-GGUF", "new-owner/tiny-llama-GGUF")
        code, out, err = await _registry(tmp_path, hub, "crawl")  # asks for the unlisted old id
        assert code == 0, err
        assert " 1 indexed, " in out and "unchanged, 1 moved (the hub has them under another id), 0 failed" in out
        code, out, err = await _registry(tmp_path, hub, "search", "--json", "tiny-llama")
        assert code == 0, err
        repos = {i["repo"] for i in json.loads(out)["items"]}
        assert "new-owner/tiny-llama-GGUF" in repos and "synth/tiny-llama-GGUF" not in repos


async def test_crawl_command_takes_repo_ids(tmp_path: Path) -> None:
    """`registry crawl ORG/NAME ...` looks at those repos only: each is indexed, a repo
    without a GGUF file is counted and not catalogued, one the hub lacks is an error."""
    from tests.fakehub.corpus import BytesBlob, RepoFile
    from tests.fakehub.corpus import Repo as HubRepo

    async with FakeHub(sample_corpus(real=False), tokens={TOKEN}) as hub:
        hub.corpus.add(HubRepo("someone/weights-only", [RepoFile("model.safetensors", BytesBlob(b"\0" * 64))]))
        code, out, err = await _registry(
            tmp_path, hub, "crawl", "synth/tiny-llama-GGUF", "someone/weights-only", "nobody/missing", "--json"
        )
        assert code == 0, err
        doc = json.loads(out)
        counters = doc["counters"]
        assert (counters["listed"], counters["indexed"], counters["not_gguf"], counters["failed"]) == (3, 1, 1, 1)
        assert [e["repo"] for e in doc["errors"]] == ["nobody/missing"]
        assert not [r for r in hub.requests_to("api") if not r.repo]  # no listing asked for

        code, out, err = await _registry(tmp_path, hub, "crawl", "someone/weights-only")
        assert code == 0 and "1 without a GGUF file (not catalogued)" in out, err
        code, out, err = await _registry(tmp_path, hub, "crawl", "synth/tiny-llama-GGUF", "--author", "synth")
        assert code == 2 and "not both" in err
        code, out, err = await _registry(tmp_path, hub, "crawl", "https://evil.example/x")
        assert code == 2 and "not an org/name repo id" in err


async def test_crawl_cancel_stops_a_crawl_another_process_runs(tmp_path: Path) -> None:
    """`registry crawl --cancel ID` from a second shell: the running `registry crawl` reads
    no more repos, keeps the ones it wrote and exits 1 saying it was cancelled."""
    from sqlalchemy import text

    from registry.catalog.db import Database
    from tests.fakehub import Fault, synthetic_corpus

    latency = Fault("latency", route="*", delay=0.1, times=None)
    async with FakeHub(synthetic_corpus(10, seed=5), tokens={TOKEN}, faults=[latency]) as hub:
        one_at_a_time = {"REGISTRY_HUB_CRAWL_CONCURRENCY": "1"}
        running = asyncio.create_task(_registry(tmp_path, hub, "crawl", "--json", **one_at_a_time))
        db = Database.from_url(f"sqlite+aiosqlite:///{tmp_path / 'registry.db'}")
        try:
            for _ in range(600):
                await asyncio.sleep(0.05)
                assert not running.done(), running.result()
                try:
                    async with db.engine.connect() as conn:
                        repos = (await conn.execute(text("SELECT count(*) FROM repos"))).scalar_one()
                except Exception:
                    continue  # the schema is not there yet
                if repos >= 1:
                    break
        finally:
            await db.dispose()
        code, out, err = await _registry(tmp_path, hub, "crawl", "--cancel", "1")
        assert (code, out) == (0, "crawl 1 cancelled\n"), err
        code, out, err = await _registry(tmp_path, hub, "crawl", "--cancel", "1", "--json")
        assert code == 0 and json.loads(out)["status"] == "cancelled", err
        code, out, err = await running
        assert code == 1, err
        doc = json.loads(out)
        c = doc["counters"]
        assert (doc["id"], doc["status"], c["listed"], doc["url"]) == (1, "cancelled", 10, "/v1/crawls/1")
        assert c["indexed"] >= 1 and c["cancelled"] >= 1 and c["indexed"] + c["cancelled"] == 10

        code, out, err = await _registry(tmp_path, hub, "crawl", "--cancel", "2")
        assert code == 1 and "no crawl with id 2" in err
        code, out, err = await _registry(tmp_path, hub, "crawl", "--limit", "1")
        assert code == 0, err
        code, out, err = await _registry(tmp_path, hub, "crawl", "--cancel", "2")
        assert code == 1 and "crawl 2 has already ended: finished" in err
        code, out, err = await _registry(tmp_path, hub, "crawl", "--cancel", "2", "org/name")
        assert code == 2 and "--cancel ID takes no REPO ids" in err
