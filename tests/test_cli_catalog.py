"""`registry db`, `registry index` and `registry search`, run in-process on SQLite and PostgreSQL."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
from alembic.script import ScriptDirectory

from registry.catalog import migrate
from registry.catalog.search import encode_cursor
from registry.cli import main
from tests.catalog.conftest import empty_db_url, postgresql_url, sqlite_url, temp_databases
from tests.filemodes import file_modes_enforced

__all__ = ["empty_db_url", "postgresql_url", "sqlite_url", "temp_databases"]  # fixtures used here


@pytest.fixture
def url(cli_db_url: str) -> str:
    return cli_db_url


@pytest.fixture
def models(tmp_path: Path, smollm2_path: Path, gemma3_path: Path) -> Path:
    folder = tmp_path / "models"
    folder.mkdir()
    os.symlink(smollm2_path, folder / smollm2_path.name)
    os.symlink(gemma3_path, folder / gemma3_path.name)
    (folder / "hostile.gguf").write_bytes(b"GGUF\x03\x00\x00\x00" + b"\xff" * 24)
    return folder


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_db_commands(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "db", "current")[1].startswith("base (empty)")
    code, out, _ = run(capsys, "db", "upgrade")
    head = migrate.head_revision()
    assert code == 0 and out.strip() == f"{head} (head)"
    below = ScriptDirectory.from_config(migrate.alembic_config()).get_revision(head).down_revision
    assert run(capsys, "db", "downgrade", "-1")[1].startswith(str(below) if below else "base (empty)")
    assert run(capsys, "db", "upgrade")[1].strip() == f"{head} (head)"
    assert run(capsys, "db", "downgrade", "base")[1].startswith("base (empty)")
    assert run(capsys, "db", "downgrade")[0] == 2


def test_index_says_when_it_wrote_again_what_an_older_release_wrote(
    url: str, models: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import asyncio

    from sqlalchemy import update

    from registry.catalog.db import Database
    from registry.catalog.models import Repo

    async def as_an_older_release_left_it() -> None:  # before the derivation number
        async with Database.from_url(url) as db, db.sessions() as session, session.begin():
            await session.execute(update(Repo).values(derivation=None))

    assert run(capsys, "index", str(models))[0] == 0
    asyncio.run(as_an_older_release_left_it())
    code, _, err = run(capsys, "index", str(models))
    assert code == 0 and "1 repo(s) an older release wrote, written again" in err
    code, _, err = run(capsys, "index", str(models))
    assert code == 0 and "older release" not in err


def test_index_then_search(url: str, models: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "index", str(models))  # migrates the empty database itself
    assert code == 0, err
    assert out.count("indexed ") == 2 and out.count("error ") == 1
    assert "3 artifact(s) in 1 repo(s), 1 with errors" in err

    code, out, _ = run(capsys, "search", "--json")
    page = json.loads(out)
    assert page["next"] is None
    assert {i["architecture"] for i in page["items"]} == {"llama", "gemma3"}
    for key in ("repo", "path", "architecture", "parameter_count", "file_type", "size_label", "license",
                "shard_count", "status", "error", "verification_status", "url"):  # fmt: skip
        assert key in page["items"][0]

    [error_row] = json.loads(run(capsys, "search", "--status", "error", "--json")[1])["items"]
    assert error_row["path"] == "hostile.gguf" and error_row["error"]

    [gemma] = json.loads(run(capsys, "search", "--tensor-type", "Q6_K", "--json")[1])["items"]
    assert gemma["file_type"] == "Q4_K_M"
    assert json.loads(run(capsys, "search", "smollm2", "--json")[1])["items"][0]["architecture"] == "llama"

    first = json.loads(run(capsys, "search", "--sort", "name", "--limit", "1", "--json")[1])
    second = json.loads(
        run(capsys, "search", "--sort", "name", "--limit", "1", "--cursor", first["next"], "--json")[1]
    )
    assert first["items"][0]["path"] != second["items"][0]["path"] and second["next"] is None

    code, out, _ = run(capsys, "search", "--max-params", "200000000")
    assert code == 0 and "REPO" in out.splitlines()[0] and "SmolLM2" in out and "gemma" not in out
    head, row = out.splitlines()
    # the file size in the decimal units of --max-size (98,362,432 bytes), beside the size label
    assert head.split()[4:8] == ["PARAMS", "LABEL", "TYPE", "FILESIZE"]
    assert row.split()[4:9] == ["134,515,008", "135M", "Q4_1", "98.4", "MB"]
    # led by the id that `registry download` and /v1/artifacts/ID take
    [smollm2] = [i for i in page["items"] if i["architecture"] == "llama"]
    assert head.split()[0] == "ID" and row.split()[0] == str(smollm2["id"])

    # SmolLM2 is 98 MB (93.8 MiB), gemma 3 253 MB.
    for argv, paths in [
        (("--max-size", "100MB"), ["SmolLM2-135M-Instruct.Q4_1.gguf"]),
        (("--max-size", "93MiB"), []),
        (("--min-size", "0.2GB"), ["gemma-3-270m-q4_k_m.gguf"]),
        (("--min-size", "90mib", "--max-size", "2.6e8", "--sort", "size:asc"),
         ["SmolLM2-135M-Instruct.Q4_1.gguf", "gemma-3-270m-q4_k_m.gguf"]),
    ]:
        code, out, err = run(capsys, "search", *argv, "--json")
        assert code == 0, err
        assert [i["path"] for i in json.loads(out)["items"]] == paths, argv

    # What llama.cpp allocates on a CPU (registry/gguf/memory.py): SmolLM2 295.4 MB at 4K tokens,
    # 460.0 MB capped at its own 8K context; gemma 3 830.0 MB at 4K (a 262k-token vocabulary's
    # logits take 512 MiB of compute buffer), 918.1 MB at its 32K.
    for argv, paths in [
        (("--max-memory", "296MB"), ["SmolLM2-135M-Instruct.Q4_1.gguf"]),
        (("--max-memory", "295.3MB"), []),
        (("--max-memory", "831MB", "--sort", "size:asc"),
         ["SmolLM2-135M-Instruct.Q4_1.gguf", "gemma-3-270m-q4_k_m.gguf"]),
        (("--max-memory", "831MB", "--memory-context", "32K"), ["SmolLM2-135M-Instruct.Q4_1.gguf"]),
        (("--max-memory", "460MB", "--memory-context", "1M"), ["SmolLM2-135M-Instruct.Q4_1.gguf"]),
        (("--max-memory", "1TB", "--memory-context", "32K", "--sort", "size:asc"),
         ["SmolLM2-135M-Instruct.Q4_1.gguf", "gemma-3-270m-q4_k_m.gguf"]),
    ]:  # fmt: skip
        code, out, err = run(capsys, "search", *argv, "--json")
        assert code == 0, err
        assert [i["path"] for i in json.loads(out)["items"]] == paths, argv
    code, out, _ = run(capsys, "search", "--sort", "name", "--memory-context", "8K")
    head, *rows = out.splitlines()
    assert head.split()[7:10] == ["FILESIZE", "MEMORY", "LICENSE"]
    # llama.cpp on a CPU at 8K tokens: gemma 3 843 MB, SmolLM2 460 MB (its own 8K)
    assert [r.split()[9] for r in rows] == ["843MB@8K", "460MB@8K"]
    code, out, _ = run(capsys, "search", "--sort", "name", "--memory-context", "1000", "--json")
    assert [i["memory"]["tokens"] for i in json.loads(out)["items"]] == [1000, 1000]


def test_search_all_prints_every_page_as_json_lines(url: str, models: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "index", str(models))[0] == 0
    whole = json.loads(run(capsys, "search", "--status", "all", "--sort", "name", "--json")[1])["items"]
    assert len(whole) == 3
    for limit in ("1", "2", "3", "200"):
        code, out, err = run(capsys, "search", "--status", "all", "--sort", "name", "--all", "--limit", limit)
        assert code == 0, err
        assert [json.loads(line) for line in out.splitlines()] == whole, limit
    # from a cursor on, with filters
    first = json.loads(run(capsys, "search", "--sort", "name", "--limit", "1", "--json")[1])
    code, out, _ = run(capsys, "search", "--sort", "name", "--limit", "1", "--cursor", first["next"], "--all", "--json")
    assert first["items"][0]["path"] == "gemma-3-270m-q4_k_m.gguf"  # names sort in any case
    assert [json.loads(line)["path"] for line in out.splitlines()] == ["SmolLM2-135M-Instruct.Q4_1.gguf"]
    code, out, _ = run(capsys, "search", "--all", "--architecture", "nothing")
    assert (code, out) == (0, "")


def test_search_filters_match_in_any_case(url: str, models: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The sample models: SmolLM2 (llama, apache-2.0, Q4_1, 135M), gemma 3 (gemma3, gemma, Q4_K_M, 270M)."""
    run(capsys, "index", str(models))
    for argv, path in [
        (("--file-type", "q4_k_m"), "gemma-3-270m-q4_k_m.gguf"),
        (("--file-type", "Q4_k_M"), "gemma-3-270m-q4_k_m.gguf"),
        (("--architecture", "LLAMA"), "SmolLM2-135M-Instruct.Q4_1.gguf"),
        (("--architecture", "Gemma3"), "gemma-3-270m-q4_k_m.gguf"),
        (("--size-label", "135m"), "SmolLM2-135M-Instruct.Q4_1.gguf"),
        (("--license", "APACHE-2.0"), "SmolLM2-135M-Instruct.Q4_1.gguf"),
        (("--license", "Gemma", "--file-type", "q4_k_m", "--size-label", "270m"), "gemma-3-270m-q4_k_m.gguf"),
    ]:
        code, out, err = run(capsys, "search", *argv, "--json")
        assert code == 0, err
        assert [i["path"] for i in json.loads(out)["items"]] == [path], argv
    code, out, _ = run(capsys, "search", "--license", "apache-2.0")
    assert code == 0 and "apache-2.0" in out and "SmolLM2" in out


def test_search_facets(url: str, models: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The sample models: SmolLM2 (llama, apache-2.0, Q4_1, 135M), gemma 3 (gemma3, gemma, Q4_K_M, 270M)."""
    run(capsys, "index", str(models))
    code, out, err = run(capsys, "search", "--facets")
    assert code == 0, err
    assert out.splitlines()[:3] == ["ARCHITECTURE", "  gemma3          1", "  llama           1"]
    assert [line for line in out.splitlines() if not line.startswith(" ")] == [
        "ARCHITECTURE", "LICENSE", "FILE_TYPE", "SIZE_BUCKET"]  # fmt: skip
    code, out, _ = run(capsys, "search", "--facets", "kind,file_type", "--status", "all", "--json")
    assert code == 0
    assert json.loads(out) == {"facets": {"kind": {"model": 2, "unknown": 1}, "file_type": {
        "Q4_1": 1, "Q4_K_M": 1, "unknown": 1}}, "filters": {"status": "all"}}  # fmt: skip
    code, out, _ = run(capsys, "search", "--facets", "license", "--architecture", "LLAMA", "--json")
    assert json.loads(out) == {"facets": {"license": {"apache-2.0": 1}},
                               "filters": {"architecture": "llama", "status": "indexed"}}  # fmt: skip
    code, out, _ = run(capsys, "search", "--facets", "verification,capability", "--kind", "vocab")
    assert out == "VERIFICATION\n  (none)\nCAPABILITY\n  (none)\n"
    with pytest.raises(SystemExit) as stop:
        run(capsys, "search", "--facets", "kind,sizes")
    assert stop.value.code == 2 and "argument --facets: unknown facet 'sizes'" in capsys.readouterr().err
    code, _, err = run(capsys, "search", "--facets", "--all")
    assert code == 2 and "--facets" in err


def test_search_errors(url: str, models: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "search")
    assert code == 1 and "registry db upgrade" in err
    run(capsys, "index", str(models))
    code, _, err = run(capsys, "search", "--cursor", "garbage!")
    assert code == 2 and "invalid_cursor" in err
    code, _, err = run(capsys, "search", "--cursor", encode_cursor("likes:desc", 1, 1))
    assert code == 2 and "invalid_cursor" in err
    with pytest.raises(SystemExit) as stop:
        run(capsys, "search", "--sort", "nope")
    err = capsys.readouterr().err
    # the keys it takes, as the API's 400 lists them
    assert stop.value.code == 2 and "argument --sort: sort must be one of downloads, likes" in err
    assert "parameter_count (or params)" in err and "memory, optionally with :asc or :desc" in err
    code, _, err = run(capsys, "index", str(models / "missing"))
    assert code == 1 and "no such file or folder" in err


def test_search_for_drafts(url: str, models: Path, smollm2_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tests.catalog.draft_family import write_family

    write_family(smollm2_path, models / "drafts")
    code, out, err = run(capsys, "index", str(models))
    assert code == 0, err
    code, out, _ = run(capsys, "search", "SmolLM2-135M", "--json")
    [target] = json.loads(out)["items"]
    code, out, err = run(capsys, "search", "--draft-for", str(target["id"]), "--sort", "params:asc", "--json")
    assert code == 0, err
    paths = [Path(i["path"]).name for i in json.loads(out)["items"]]
    assert paths[0] == "early.gguf" and sorted(paths[1:]) == ["padded.gguf", "same.gguf"]
    code, _, err = run(capsys, "search", "--draft-for", "123456789")
    assert code == 1 and "artifact_not_found: no artifact 123456789" in err
    code, out, _ = run(capsys, "inspect", str(smollm2_path))
    assert re.search(r"^  vocab key +sha256 [0-9a-f]{64} \(draft models share it\)$", out, re.M)


def test_index_full_writes_unchanged_models_again(url: str, models: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "index", str(models))[0] == 0
    code, out, err = run(capsys, "index", "--full", str(models))
    assert code == 0, err
    assert out.count("indexed ") == 2 and "3 artifact(s) in 1 repo(s), 1 with errors" in err


def test_index_says_which_folder_it_could_not_read(
    url: str, models: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (models / "locked").mkdir(mode=0)
    try:
        with file_modes_enforced():
            code, out, err = run(capsys, "index", str(models))
    finally:
        (models / "locked").chmod(0o755)
    assert code == 1 and f"{models / 'locked'}: folder not read: Permission denied" in err
    assert out.count("indexed ") == 2  # the rest of the folder is indexed all the same


def _option(name: str) -> Any:
    """The command line's reader of the search parameter `name`."""
    from registry.cli.common import value_of
    from registry.responses.params import filter_param

    return value_of(filter_param(name))


@pytest.mark.parametrize(
    ("text", "count"),
    [("7000000000", 7_000_000_000), ("7e9", 7_000_000_000), ("7B", 7_000_000_000), ("1.5b", 1_500_000_000),
     ("500M", 500_000_000), ("135m", 135_000_000), ("2T", 2_000_000_000_000), ("0", 0),
     ("123456789012345678", 123_456_789_012_345_678), ("1e30", 2**63 - 1)],
)
def test_param_count_arguments(text: str, count: int) -> None:
    assert _option("min_params")(text) == count


@pytest.mark.parametrize(
    ("text", "size"),
    [("8000000000", 8 * 10**9), ("7.5e9", 7_500_000_000), ("8GB", 8 * 10**9), ("8g", 8 * 10**9),
     ("6GiB", 6 * 2**30), ("500 MB", 500 * 10**6), ("512kib", 512 * 1024), ("1T", 10**12), ("0", 0),
     ("100B", 100), ("1e30", 2**63 - 1), (".5K", 500)],
)  # fmt: skip
def test_byte_size_arguments(text: str, size: int) -> None:
    from registry.cli.common import byte_size

    assert byte_size(text) == size


@pytest.mark.parametrize(
    ("n_bytes", "shown"),
    [(None, "-"), (0, "0 B"), (999, "999 B"), (1000, "1.00 kB"), (98_362_432, "98.4 MB"), (253_113_024, "253 MB"),
     (4_920_000_000, "4.92 GB"), (999_999_999, "1000 MB"), (47_000_000_000_000, "47.0 TB")],
)
def test_search_table_file_sizes(n_bytes: int | None, shown: str) -> None:
    from registry.cli.common import file_size

    assert file_size(n_bytes) == shown


@pytest.mark.parametrize("text", ["", "GB", "abc", "8X", "8BB", "8GIBB", "8Ki", "-1GB", "nan", "inf", "1_000", "\uff18GB"])
def test_bad_byte_size_arguments(text: str) -> None:
    import argparse

    from registry.cli.common import byte_size

    with pytest.raises(argparse.ArgumentTypeError):
        byte_size(text)


@pytest.mark.parametrize("text", ["", "abc", "7X", "-1B", "nan", "7BB", "1e1000", " 7B "])
def test_bad_param_count_arguments(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        _option("min_params")(text)


@pytest.mark.parametrize(
    ("name", "text"),
    [("memory_context", "32K"), ("memory_context", "1m"), ("max_memory", "8GiB"), ("min_params", "1.5B"),
     ("max_size", "7.5e9"), ("capability", "tools,system"), ("sort", "params:asc"), ("with_projector", "off")],
)  # fmt: skip
def test_the_command_line_reads_a_parameter_as_the_api_reads_it(name: str, text: str) -> None:
    """One declaration per parameter: the command line's option and the API's query parameter
    read the same text to the same value."""
    from registry.cli import build_parser
    from registry.responses.params import search_params

    [param] = [p for p in search_params() if p.name == name]
    parser, _ = build_parser()
    option = f"--{name.replace('_', '-')}"
    argv = ["search", option if name != "with_projector" else "--no-with-projector"]
    given = getattr(parser.parse_args([*argv, text] if name != "with_projector" else argv), name)
    assert (given[0] if name == "capability" else given) == param.read(text)


def test_search_by_expert_count_and_verification(
    url: str, models: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The two filters the API has beside the others reach the catalog from the command line too."""
    import asyncio

    from sqlalchemy import update

    from registry.catalog.db import Database
    from registry.catalog.models import Artifact

    assert run(capsys, "index", str(models))[0] == 0

    async def mark() -> None:
        async with Database.from_url(url) as db, db.sessions() as session, session.begin():
            await session.execute(
                update(Artifact).where(Artifact.path.like("gemma%")).values(expert_count=8, verification_status="passed")
            )

    def paths(*argv: str) -> list[str]:
        code, out, err = run(capsys, "search", *argv, "--json")
        assert code == 0, err
        return [item["path"] for item in json.loads(out)["items"]]

    assert paths("--expert-count", "8") == [] and paths("--verification", "passed") == []
    asyncio.run(mark())
    assert paths("--expert-count", "8") == ["gemma-3-270m-q4_k_m.gguf"]
    assert paths("--verification", "passed") == ["gemma-3-270m-q4_k_m.gguf"]
    assert paths("--verification", "failed") == []
    for bad in (["--verification", "maybe"], ["--expert-count", "-1"]):
        with pytest.raises(SystemExit) as exit_:
            main(["search", *bad])
        assert exit_.value.code == 2 and bad[0] in capsys.readouterr().err


def test_search_offers_every_verification_status() -> None:
    from registry.catalog.models import VERIFICATION_STATUSES
    from registry.cli import build_parser

    parser, _ = build_parser()
    for status in VERIFICATION_STATUSES:
        assert parser.parse_args(["search", "--verification", status]).verification == status
    with pytest.raises(SystemExit):
        parser.parse_args(["search", "--verification", "great"])


def _write_catalog(url: str, repos: dict[str, tuple[tuple[str, str, str], ...]],
                   moves: tuple[tuple[str, str], ...] = ()) -> None:  # fmt: skip
    """Migrate the database, write a repo (one artifact) per id naming these (parent,
    relation, source), then tell the catalog the hub moved each (old, new) id."""
    from registry.catalog.db import Database
    from registry.catalog.services import repo_moved, upsert_repo_snapshot
    from registry.catalog.snapshot import LineageRecord
    from tests.catalog.factories import make_snapshot

    async def write() -> None:
        async with Database.from_url(url) as db:
            await migrate.ensure_schema(db.engine)
            for repo_id, parents in repos.items():
                snap = make_snapshot(repo_id, lineage=tuple(LineageRecord(*p) for p in parents))
                async with db.sessions() as session, session.begin():
                    await upsert_repo_snapshot(session, snap)
            for old, new in moves:
                async with db.sessions() as session, session.begin():
                    assert await repo_moved(session, old, new) == "renamed"

    asyncio.run(write())


def test_tree_draws_the_model_tree(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    """org/base <- q/base-GGUF (quantized: card; unknown: gguf), org/base <- ft/tuned <-
    q/tuned-GGUF, which is also a merge with q/base-GGUF (two ways down to it); q/base-GGUF
    was first indexed as old/base-GGUF, which the hub then moved."""
    repos = {
        "org/base": (),
        "old/base-GGUF": (("org/base", "quantized", "card"), ("Org/Base", "unknown", "gguf")),
        "ft/tuned": (("org/base", "finetune", "card"),),
        "q/tuned-GGUF": (("ft/tuned", "quantized", "card"), ("old/base-GGUF", "merge", "card")),
    }
    _write_catalog(url, repos, moves=(("old/base-GGUF", "q/base-GGUF"),))
    code, out, err = run(capsys, "tree", "ORG/BASE", "--direction", "descendants")
    assert (code, err) == (0, "")
    assert out.splitlines() == [
        "made from it (descendants, depth 3):",
        "  org/base",
        "  |-- ft/tuned  finetune (card)",
        "  |   `-- q/tuned-GGUF  quantized (card)",
        "  `-- q/base-GGUF  quantized (card), unknown (gguf)",
        "      `-- q/tuned-GGUF  merge (card)  (above)",
    ]
    code, out, _ = run(capsys, "tree", "q/tuned-GGUF", "--direction", "ancestors", "--depth", "1")
    assert out.splitlines() == [
        "made from (ancestors, depth 1):",
        "  q/tuned-GGUF",
        "  |-- ft/tuned  quantized (card)",
        "  `-- q/base-GGUF  merge (card)",
    ]
    # the old id: the repo it moved to, which its children name by the old id
    code, out, _ = run(capsys, "tree", "old/base-GGUF")
    assert code == 0 and out.splitlines() == [
        "old/base-GGUF: the hub has moved it to q/base-GGUF",
        "made from (ancestors, depth 3):",
        "  q/base-GGUF",
        "  `-- org/base  quantized (card), unknown (gguf)",
        "made from it (descendants, depth 3):",
        "  q/base-GGUF",
        "  `-- q/tuned-GGUF  merge (card)",
    ]
    code, out, _ = run(capsys, "tree", "q/base-gguf", "--direction", "ancestors", "--depth", "1")
    assert out.splitlines()[0] == "q/base-GGUF: the hub has moved it from old/base-GGUF"
    code, out, _ = run(capsys, "tree", "old/base-GGUF", "--json", "--depth", "1")
    body = json.loads(out)
    assert (body["repo"], body["moved_from"], body["in_catalog"], body["truncated"]) == (
        "q/base-GGUF", ["old/base-GGUF"], True, False)  # fmt: skip
    assert {(e["parent"], e["relation"], e["source"], e["depth"]) for e in body["ancestors"]} == {
        ("org/base", "quantized", "card", 1), ("org/base", "unknown", "gguf", 1)}  # fmt: skip
    assert [(e["child"], e["parent"]) for e in body["descendants"]] == [("q/tuned-GGUF", "q/base-GGUF")]


def test_tree_of_a_repo_only_its_children_name(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    """A base model the catalog has not indexed is still a node of the tree, spelled as its
    children's sources spell it; an id nothing names is an error."""
    _write_catalog(url, {"q/llama-GGUF": (("Meta-Llama/Llama-3.1-8B", "quantized", "gguf"),)})
    code, out, _ = run(capsys, "tree", "meta-llama/llama-3.1-8b")
    assert code == 0 and out.splitlines() == [
        "made from (ancestors, depth 3):",
        "  none known",
        "made from it (descendants, depth 3):",
        "  Meta-Llama/Llama-3.1-8B  (not in catalog)",
        "  `-- q/llama-GGUF  quantized (gguf)",
    ]
    code, out, _ = run(capsys, "tree", "q/llama-gguf", "--direction", "ancestors")
    assert out.splitlines()[1:] == ["  q/llama-GGUF", "  `-- Meta-Llama/Llama-3.1-8B  quantized (gguf)  (not in catalog)"]
    code, out, err = run(capsys, "tree", "nobody/nothing")
    assert (code, out) == (1, "") and "no repo nobody/nothing in the catalog or its lineage" in err


def test_search_help_states_the_catalogs_constants(capsys: pytest.CaptureFixture[str]) -> None:
    # The options' help is the API's parameter descriptions, its numbers the catalog's.
    from registry.catalog.search import MEMORY_CONTEXT
    from registry.gguf.facts_model import KINDS, MODALITIES
    from registry.gguf.vocab import MAX_SIZE_DIFFERENCE
    from registry.safety.capabilities import CAPABILITIES

    with pytest.raises(SystemExit) as stop:
        main(["search", "--help"])
    assert stop.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert f"at most {MAX_SIZE_DIFFERENCE} tokens more or fewer" in text
    assert f"--max-memory, the sort by memory and each hit's `memory` size the KV cache for (default: {MEMORY_CONTEXT}" in text
    assert f"chat templates can do all of these, comma-separated: {', '.join(CAPABILITIES)} " in text
    assert f"--kind {{{','.join(KINDS)}}}" in text
    assert f"takes all of these, comma-separated: {', '.join(MODALITIES)} " in text
    assert "`memory_context`" not in text  # another option is named as the command line spells it


def test_index_again_says_unchanged(url: str, models: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "index", str(models))[0] == 0
    code, out, err = run(capsys, "index", str(models))
    assert code == 0, err
    assert sorted(line.split()[0] for line in out.splitlines()) == ["error", "unchanged", "unchanged"]
    assert "3 artifact(s) in 1 repo(s), 2 unchanged, 1 with errors" in err
    # A file alone is written again when the folder wrote it (another view of the folder), then unchanged.
    for status in ("indexed", "unchanged"):
        code, out, _ = run(capsys, "index", str(models / "gemma-3-270m-q4_k_m.gguf"), "--json")
        assert [json.loads(line) for line in out.splitlines()] == [
            {"repo": "local/models", "path": "gemma-3-270m-q4_k_m.gguf", "status": status, "error": None}]  # fmt: skip
    code, out, _ = run(capsys, "index", "--full", str(models))
    assert out.count("indexed ") == 2 and "unchanged" not in out


def test_identify_finds_the_files_index_read(
    url: str, models: Path, smollm2_path: Path, gemma3_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`registry index` keeps each file's sha256, so the files it read are known by their bytes,
    under any path (here the files the folder's links point to)."""
    assert run(capsys, "index", str(models))[0] == 0
    ids = {i["path"]: i["id"] for i in json.loads(run(capsys, "search", "--json")[1])["items"]}
    code, out, err = run(capsys, "identify", str(smollm2_path), str(gemma3_path), "--json")
    assert code == 0, err
    found = {Path(f["path"]).name: f for f in json.loads(out)}
    for path in (smollm2_path, gemma3_path):
        [match] = found[path.name]["files"]
        assert (match["repo"], match["path"], match["artifact"]["id"]) == ("local/models", path.name, ids[path.name])
        assert match["url"] is None  # a local folder's file: nothing to download
    shown = json.loads(run(capsys, "show", str(ids[smollm2_path.name]), "--json")[1])
    assert shown["shards"][0]["sha256"] == found[smollm2_path.name]["sha256"]


def test_the_template_column_tells_clean_from_none_and_not_scanned(
    url: str, models: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """SmolLM2 has a chat template with no finding, gemma 3's sample none; an error row has no facts."""
    from sqlalchemy import null, update

    from registry.catalog.db import Database
    from registry.catalog.models import Artifact

    def column(*argv: str) -> dict[str, str]:
        code, out, err = run(capsys, "search", "--sort", "name", *argv)
        assert code == 0, err
        head, *rows = out.splitlines()
        at = head.split().index("TEMPLATE")
        return {row.split()[2]: row.split()[at + 1] for row in rows}  # after the two words of FILESIZE

    assert run(capsys, "index", str(models))[0] == 0
    assert column() == {"gemma-3-270m-q4_k_m.gguf": "none", "SmolLM2-135M-Instruct.Q4_1.gguf": "clean"}
    assert column("--status", "error") == {"hostile.gguf": "-"}

    async def not_scanned() -> None:  # as when the sandbox could not start
        async with Database.from_url(url) as db, db.sessions.begin() as session:
            await session.execute(update(Artifact).where(Artifact.path.like("SmolLM2%"))
                                  .values(chat_template_findings=null(), chat_template_capabilities=None))  # fmt: skip

    asyncio.run(not_scanned())
    assert column()["SmolLM2-135M-Instruct.Q4_1.gguf"] == "unscanned"
