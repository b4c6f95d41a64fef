"""`registry show`: the API's artifact and repo pages from the catalog, on SQLite and PostgreSQL.

The CLI runs in a thread of its own (it runs its own event loop) against the database the
API fixture serves, so every page can be compared with what the API answers for it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest

from registry.catalog.db import Database
from registry.catalog.models import Verification
from registry.catalog.snapshot import RepoSnapshot
from registry.cli import main
from tests.api.conftest import ApiClient
from tests.api.data import TEMPLATE
from tests.catalog.factories import artifact, make_facts, make_snapshot

pytestmark = pytest.mark.usefixtures("catalog")

Insert = Callable[..., Awaitable[None]]


@pytest.fixture
def cli_env(db_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("REGISTRY_DATABASE_URL", db_url)
    monkeypatch.chdir(tmp_path)  # no config/registry.toml from the checkout


async def show(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = await asyncio.to_thread(main, ["show", *argv])
    out, err = capsys.readouterr()
    return code, out, err


async def _ids(api: ApiClient) -> dict[str, int]:
    """`repo/path` -> id of every artifact, whatever its status."""
    body = (await api.get("/v1/artifacts?status=all&limit=100")).body
    return {f"{i['repo']}/{i['path']}": i["id"] for i in body["items"]}


def _squeezed(out: str) -> list[str]:
    """The lines of `out`, each with its runs of spaces as one and no indent."""
    return [" ".join(line.split()) for line in out.splitlines()]


def _vision_repo() -> RepoSnapshot:
    projector = make_facts(architecture="clip", kind="mmproj", modalities={"vision": "gemma3"}, quant_mix={})
    return make_snapshot("google/gemma-3-4b-it-GGUF", artifacts=(
        artifact("gemma-3-4b-it-Q4_K_M.gguf", make_facts(architecture="gemma3", file_type="Q4_K_M")),
        artifact("mmproj-model-f16.gguf", projector, size=800),
    ))  # fmt: skip


F16 = "meta-llama/Llama-3-8B/llama-3-8b-f16.gguf"


async def _with_projector_and_verification(api: ApiClient, db: Database, insert: Insert) -> dict[str, int]:
    """The sample catalog plus a repo with a projector, and a passed verification of F16."""
    await insert(_vision_repo())
    ids = await _ids(api)
    async with db.sessions.begin() as session:
        session.add(Verification(artifact_id=ids[F16], status="passed", tensors_checked=200, perplexity=7.25,
                                 finished_at=datetime(2026, 1, 2, 3, 4, tzinfo=UTC)))  # fmt: skip
    return ids


@pytest.mark.usefixtures("cli_env")
async def test_json_is_the_api_page_of_every_artifact_and_repo(
    api: ApiClient, db: Database, insert: Insert, capsys: pytest.CaptureFixture[str]
) -> None:
    ids = await _with_projector_and_verification(api, db, insert)
    assert len(ids) >= 9
    for artifact_id in ids.values():
        for context in (None, 1000):
            extra = () if context is None else ("--context", str(context))
            code, out, err = await show(capsys, str(artifact_id), "--json", *extra)
            query = "" if context is None else f"?context={context}"
            assert code == 0, err
            assert json.loads(out) == (await api.get(f"/v1/artifacts/{artifact_id}{query}")).body
    repos = {name.rsplit("/", 1)[0] for name in ids}
    for repo in repos:
        code, out, err = await show(capsys, repo, "--json")
        assert code == 0, err
        assert json.loads(out) == (await api.get(f"/v1/repos/{repo}")).body
    # the pages hold what the text below is made from
    page = json.loads((await show(capsys, str(ids[F16]), "--json"))[1])
    assert page["latest_verification"]["status"] == "passed"
    gemma = json.loads((await show(capsys, str(ids["google/gemma-3-4b-it-GGUF/gemma-3-4b-it-Q4_K_M.gguf"]), "--json"))[1])
    assert [p["path"] for p in gemma["projectors"]] == ["mmproj-model-f16.gguf"]


@pytest.mark.usefixtures("cli_env")
async def test_text_of_an_artifact(
    api: ApiClient, db: Database, insert: Insert, capsys: pytest.CaptureFixture[str]
) -> None:
    ids = await _with_projector_and_verification(api, db, insert)
    f16 = ids[F16]
    code, out, err = await show(capsys, str(f16), "--context", "1K")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == f"{f16}  meta-llama/Llama-3-8B/llama-3-8b-f16.gguf"
    labels = {line[2:].split("  ", 1)[0]: line.split("  ", 2)[-1].strip() for line in lines[1:] if line.startswith("  ")}
    assert labels["name"] == "Llama 3 8B"
    assert labels["size"] == "8B, 8,000,000,000 parameters"
    assert labels["file type"].startswith("F16")
    assert labels["context"] == "8,192 tokens"
    # the KV cache at the context asked for, then at the model's own
    assert labels["KV cache"] == "f16, 128.0 KiB per token in 32 layers; 128.0 MiB at 1,024 tokens; 1.0 GiB at 8,192 tokens"
    # 16,000 + 1,024 x 131,072: a row without the memory line, sized as an older release did
    assert labels["memory"] == ("134 MB at 1,024 tokens (the file and its f16 KV cache; the next crawl or index sizes "
                                "it as llama.cpp does)")
    assert labels["status"] == "indexed at revision rev1"
    assert labels["pick with"] == "meta-llama/Llama-3-8B:F16 (registry download; llama.cpp -hf)"
    assert labels["popularity"] == "1,000 downloads, 50 likes; modified 2024-05-01"
    assert labels["verified"].startswith("passed, 2026-01-02 03:04, 200 tensors, perplexity 7.25 (verification ")
    assert labels["chat template"] == f"sha256 {'cd' * 32} ({len(TEMPLATE)} chars)"
    assert "quant mix" in lines and "files" in lines
    url = "https://huggingface.co/meta-llama/Llama-3-8B/resolve/rev1/llama-3-8b-f16.gguf"
    assert f"  {url}" in lines
    assert any(line.split() == ["llama-3-8b-f16.gguf", "16,000", "ab" * 32] for line in lines)

    gemma = ids["google/gemma-3-4b-it-GGUF/gemma-3-4b-it-Q4_K_M.gguf"]
    out = (await show(capsys, str(gemma)))[1]
    projector = ids["google/gemma-3-4b-it-GGUF/mmproj-model-f16.gguf"]
    assert f"projectors mmproj-model-f16.gguf (id {projector}, 800 B, vision)" in _squeezed(out)
    assert "verified never" in _squeezed(out)
    assert "pick with google/gemma-3-4b-it-GGUF:Q4_K_M (registry download; llama.cpp -hf)" in _squeezed(out)
    # a tag never picks a projector, and a tag two files carry picks neither
    assert "pick with" not in (await show(capsys, str(projector)))[1]
    mmproj = make_facts(architecture="clip", kind="mmproj", modalities={"vision": None}, quant_mix={})
    await insert(make_snapshot("org/twice-GGUF", artifacts=(artifact("a-Q8_0.gguf"), artifact("b-Q8_0.gguf"))),
                 make_snapshot("org/seeing-GGUF", artifacts=(artifact("m-Q8_0.gguf"), artifact("mmproj-m-Q8_0.gguf", mmproj))),
                 make_snapshot("local/folder", source="local", local_path="/srv/models",
                               artifacts=(artifact("m-Q8_0.gguf"),)))  # fmt: skip
    ids = await _ids(api)
    for name in ("org/twice-GGUF/a-Q8_0.gguf", "local/folder/m-Q8_0.gguf", "org/seeing-GGUF/mmproj-m-Q8_0.gguf"):
        code, out, err = await show(capsys, str(ids[name]))
        assert code == 0 and "pick with" not in out and "Q8_0" in out, (name, err)
    out = (await show(capsys, str(ids["org/seeing-GGUF/m-Q8_0.gguf"])))[1]
    assert "pick with org/seeing-GGUF:Q8_0 (registry download; llama.cpp -hf)" in _squeezed(out)

    # an artifact whose header could not be read: its error, no facts
    broken = ids["bartowski/Llama-3-8B-GGUF/broken.gguf"]
    code, out, _ = await show(capsys, str(broken))
    assert code == 0
    assert "status error at revision rev1: bad_magic: not a GGUF file" in _squeezed(out)
    assert "pick with" not in out
    assert "architecture" not in out and "quant mix" not in out


@pytest.mark.usefixtures("cli_env")
async def test_text_of_a_repo(
    api: ApiClient, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    code, out, err = await show(capsys, "BARTOWSKI/llama-3-8b-gguf")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == "bartowski/Llama-3-8B-GGUF  (hub, revision rev1)"
    squeezed = _squeezed(out)
    assert "card license llama3" in squeezed
    assert "card base model meta-llama/Llama-3-8B (quantized)" in squeezed
    assert any(line.startswith("made from meta-llama/Llama-3-8B (") for line in squeezed)
    assert any(line.startswith("made from it someone/llama-3-8b-finetune-GGUF (finetune") for line in squeezed)
    at = lines.index("artifacts (4)")
    assert lines[at + 1].split() == ["ID", "PATH", "TYPE", "LABEL", "FILESIZE", "MEMORY", "SHARDS", "VERIFIED", "STATUS"]
    rows = [line.split() for line in lines[at + 2 :]]
    assert (await api.get("/v1/repos/bartowski/Llama-3-8B-GGUF")).body["artifact_count"] == len(rows)
    assert [r[1] for r in rows] == ["Llama-3-8B-IQ2_XS.gguf", "Llama-3-8B-Q4_K_M.gguf", "Llama-3-8B-Q8_0.gguf", "broken.gguf"]
    assert rows[1][2:5] == ["Q4_K_M", "8B", "4.80"] and rows[3][-2:] == ["error:", "bad_magic"]
    from registry.api import reads

    monkeypatch.setattr(reads, "MAX_REPO_ARTIFACTS", 2)
    lines = (await show(capsys, "bartowski/Llama-3-8B-GGUF"))[1].splitlines()
    at = lines.index("artifacts (the first 2 of 4 by path; all: "
                     "`registry search --repo bartowski/Llama-3-8B-GGUF --sort name`)")  # fmt: skip
    assert len(lines) == at + 4


@pytest.mark.usefixtures("cli_env")
async def test_a_file_of_a_repo_by_path_or_tag(
    api: ApiClient, insert: Insert, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from registry.api import reads

    monkeypatch.setattr(reads, "MAX_REPO_ARTIFACTS", 1)  # what a page lists does not limit what a name finds
    await insert(_vision_repo())
    ids = await _ids(api)
    for target, name in (
        ("bartowski/Llama-3-8B-GGUF:q4_k_m", "bartowski/Llama-3-8B-GGUF/Llama-3-8B-Q4_K_M.gguf"),
        ("bartowski/llama-3-8b-gguf:Llama-3-8B-IQ2_XS.gguf", "bartowski/Llama-3-8B-GGUF/Llama-3-8B-IQ2_XS.gguf"),
        # any shard names its model
        ("mistralai/Mixtral-8x7B-GGUF:mixtral-00002-of-00002.gguf", "mistralai/Mixtral-8x7B-GGUF/mixtral-00001-of-00002.gguf"),
        # a tag picks the model, never the projector beside it
        ("google/gemma-3-4b-it-GGUF:F16", None),
        ("google/gemma-3-4b-it-GGUF:Q4_K_M", "google/gemma-3-4b-it-GGUF/gemma-3-4b-it-Q4_K_M.gguf"),
    ):
        code, out, err = await show(capsys, target, "--json")
        if name is None:
            assert code == 1 and "no model tagged F16" in err and not out, target
        else:
            assert code == 0, err
            assert json.loads(out)["id"] == ids[name], target
    code, _, err = await show(capsys, "bartowski/Llama-3-8B-GGUF:Q5_K_M")
    assert code == 1 and "its tags: IQ2_XS, Q4_K_M, Q8_0" in err
    code, _, err = await show(capsys, "bartowski/Llama-3-8B-GGUF:other.gguf")
    assert code == 1 and "has no GGUF file 'other.gguf' in the catalog" in err


@pytest.mark.usefixtures("cli_env")
async def test_not_in_the_catalog_and_usage_errors(api: ApiClient, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = await show(capsys, "987654")
    assert (code, out) == (1, "") and err == "registry: show: 987654: no artifact with id 987654\n"
    for absent in (str(2**63), "9" * 30, "0"):  # beyond what a database column holds too
        code, out, err = await show(capsys, absent)
        assert (code, out, err) == (1, "", f"registry: show: {absent}: no artifact with id {absent}\n")
    code, out, err = await show(capsys, "\u0661\u0662")  # digits, but not ASCII ones: a name
    assert (code, out) == (1, "") and err == "registry: show: \u0661\u0662: no repo \u0661\u0662 in the catalog\n"
    code, out, err = await show(capsys, "nobody/nothing")
    assert (code, out) == (1, "") and err == "registry: show: nobody/nothing: no repo nobody/nothing in the catalog\n"
    code, _, err = await show(capsys, "bartowski/Llama-3-8B-GGUF", "--context", "8K")
    assert code == 2 and "--context sizes an artifact" in err
    for bad in ("0", "-1", "lots"):
        with pytest.raises(SystemExit) as stop:
            await show(capsys, "1", "--context", bad)
        assert stop.value.code == 2


@pytest.mark.usefixtures("cli_env")
async def test_an_id_the_hub_moved_shows_the_repo_it_moved_to(
    api: ApiClient, db: Database, capsys: pytest.CaptureFixture[str]
) -> None:
    from registry.catalog.services import repo_moved

    async with db.sessions() as session, session.begin():
        assert await repo_moved(session, "bartowski/Llama-3-8B-GGUF", "lmstudio/Llama-3-8B-GGUF") == "renamed"
    code, out, err = await show(capsys, "bartowski/llama-3-8b-gguf", "--json")
    assert code == 0 and err == "registry: show: the hub has moved bartowski/llama-3-8b-gguf to lmstudio/Llama-3-8B-GGUF\n"
    body = json.loads(out)
    assert body == (await api.get("/v1/repos/lmstudio/Llama-3-8B-GGUF")).body
    assert body["moved_from"] == ["bartowski/Llama-3-8B-GGUF"]
    code, out, _ = await show(capsys, "bartowski/Llama-3-8B-GGUF:Q8_0", "--json")
    assert code == 0 and json.loads(out)["repo"] == "lmstudio/Llama-3-8B-GGUF"


@pytest.mark.usefixtures("cli_env")
async def test_control_characters_from_a_hub_are_shown_escaped(
    api: ApiClient, insert: Insert, capsys: pytest.CaptureFixture[str]
) -> None:
    """A repo's file names and a file's strings reach a terminal: escapes are written out,
    so they can neither forge lines nor erase the ones above."""
    evil = "\x1b[1A\x1b[2K"
    facts = make_facts(name=f"name{evil}", file_type="Q4_K_M", tags=(f"tag{evil}",))
    await insert(make_snapshot("org/evil-GGUF", description=f"d{evil}", tags=(f"t{evil}",),
                               artifacts=(artifact(f"m{evil}\nforged-Q4_K_M.gguf", facts),)))  # fmt: skip
    [artifact_id] = [i for name, i in (await _ids(api)).items() if name.startswith("org/evil-GGUF/")]
    for argv in ((str(artifact_id),), ("org/evil-GGUF",), ("org/evil-GGUF:Q4_K_M",)):
        code, out, err = await show(capsys, *argv)
        assert code == 0, err
        assert "\x1b" not in out and "\\x1b[1A\\x1b[2K" in out, argv
        assert not any(line.startswith("forged") for line in out.splitlines())
