"""`workers.index`: local folders into the catalog, hostile files as error rows, cache layouts."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sqlalchemy import func, select

from registry.api.present import search_hits
from registry.catalog.db import Database
from registry.catalog.models import Artifact, Crawl, Facts, QuantMix, Repo, Shard
from registry.catalog.search import SearchQuery, search
from registry.catalog.services import upsert_repo_snapshot
from tests.catalog.factories import artifact, make_snapshot
from tests.filemodes import file_modes_enforced
from workers import index as index_module
from workers.index import discover, index_paths

gguf = pytest.importorskip("gguf")


def write_gguf(path: Path, *, split: tuple[int, int, int] | None = None, name: str = "Tiny") -> Path:
    """A small valid GGUF file (one F32 tensor per file), optionally one shard of a split set."""
    path.parent.mkdir(parents=True, exist_ok=True)
    writer = gguf.GGUFWriter(str(path), "llama")
    if split is None or split[0] == 0:
        writer.add_name(name)
        writer.add_context_length(2048)
    if split is not None:
        no, count, tensors = split
        writer.add_uint16("split.no", no)
        writer.add_uint16("split.count", count)
        writer.add_int32("split.tensors.count", tensors)
    writer.add_tensor(f"blk.{split[0] if split else 0}.w", np.ones((4, 8), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def link(src: Path, dest: Path) -> Path:
    dest.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(src, dest)
    return dest


async def artifacts(db: Database) -> dict[tuple[str, str], Artifact]:
    async with db.sessions() as session:
        rows = await session.execute(select(Artifact, Repo.repo_id).join(Repo))
        return {(repo_id, a.path): a for a, repo_id in rows.all()}


async def test_real_models_and_a_hostile_file(
    db: Database, tmp_path: Path, smollm2_path: Path, gemma3_path: Path
) -> None:
    folder = tmp_path / "my-models"
    link(smollm2_path, folder / smollm2_path.name)
    link(gemma3_path, folder / "nested" / gemma3_path.name)
    (folder / "evil.gguf").write_bytes(b"GGUF" + b"\x03\x00\x00\x00" + b"\xff" * 16)
    (folder / "notes.txt").write_text("not a model")

    report = await index_paths(db, [folder])
    assert len(report.artifacts) == 3 and report.errors == 1

    rows = await artifacts(db)
    assert set(rows) == {
        ("local/my-models", smollm2_path.name),
        ("local/my-models", f"nested/{gemma3_path.name}"),
        ("local/my-models", "evil.gguf"),
    }
    smol = rows["local/my-models", smollm2_path.name]
    gemma = rows["local/my-models", f"nested/{gemma3_path.name}"]
    evil = rows["local/my-models", "evil.gguf"]
    assert (smol.status, smol.architecture, smol.file_type) == ("indexed", "llama", "Q4_1")
    assert (gemma.status, gemma.architecture, gemma.file_type) == ("indexed", "gemma3", "Q4_K_M")
    assert 100_000_000 < smol.parameter_count < 200_000_000
    assert 200_000_000 < gemma.parameter_count < 400_000_000
    assert smol.file_size == smollm2_path.stat().st_size
    assert evil.status == "error" and evil.error_code and evil.error_message
    async with db.sessions() as session:
        types = set(
            (
                await session.scalars(select(QuantMix.tensor_type).where(QuantMix.artifact_id == gemma.id))
            ).all()
        )
        assert {"Q4_K", "Q6_K", "F32"} <= types
        facts = await session.get_one(Facts, smol.id)
        assert facts.architecture == "llama" and facts.context_length
        [repo] = (await session.scalars(select(Repo))).all()
        assert (repo.source, repo.local_path) == ("local", str(folder.absolute()))
        page = await search(session, SearchQuery(tensor_type="Q6_K"))
        assert [i.path for i in search_hits(page)] == [f"nested/{gemma3_path.name}"]

    again = await index_paths(db, [folder])  # nothing changed: nothing written
    assert [r.unchanged for r in again.results] == [True]


async def test_split_model_and_missing_shards(db: Database, tmp_path: Path) -> None:
    folder = tmp_path / "split"
    for i in range(3):
        write_gguf(folder / f"big-{i + 1:05d}-of-00003.gguf", split=(i, 3, 3))
    write_gguf(folder / "half-00001-of-00002.gguf", split=(0, 2, 2))
    await index_paths(db, [folder])
    rows = await artifacts(db)
    big = rows["local/split", "big-00001-of-00003.gguf"]
    half = rows["local/split", "half-00001-of-00002.gguf"]
    assert (big.status, big.shard_count, big.parameter_count) == ("indexed", 3, 96)
    assert half.status == "error" and "missing" in (half.error_message or "")
    async with db.sessions() as session:
        assert (await session.execute(select(func.count()).select_from(Shard))).scalar_one() == 4


async def test_removed_file_is_gone_and_file_argument_is_partial(db: Database, tmp_path: Path) -> None:
    folder = tmp_path / "box"
    a = write_gguf(folder / "a.gguf")
    b = write_gguf(folder / "b.gguf")
    await index_paths(db, [folder])
    b.unlink()
    await index_paths(db, [folder])
    rows = await artifacts(db)
    assert (rows["local/box", "a.gguf"].status, rows["local/box", "b.gguf"].status) == ("indexed", "gone")
    c = write_gguf(folder / "c.gguf")
    await index_paths(db, [c])  # one file: a.gguf must not become gone
    rows = await artifacts(db)
    assert {p: r.status for (_, p), r in rows.items()} == {
        "a.gguf": "indexed",
        "b.gguf": "gone",
        "c.gguf": "indexed",
    }
    assert a.exists()


async def test_the_folders_are_walked_and_statted_off_the_event_loop(
    db: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under `registry serve` a local crawl shares the loop with the API: a walk of a big
    tree, or a stat of every file on a slow share, must not stall it."""
    write_gguf(tmp_path / "shelf" / "a.gguf")
    write_gguf(tmp_path / "shelf" / "deep" / "b.gguf")
    threads: dict[str, set[int]] = {}

    def spy(name: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            if name != "scandir" or str(args[0]).startswith(str(tmp_path)):  # not alembic's own
                threads.setdefault(name, set()).add(threading.get_ident())
            return real(*args, **kwargs)

        return call

    monkeypatch.setattr(os, "scandir", spy("scandir", os.scandir))
    for name in ("_fingerprint", "_newest_mtime"):
        monkeypatch.setattr(index_module, name, spy(name, getattr(index_module, name)))
    report = await index_paths(db, [tmp_path / "shelf"])
    assert sorted(a.path for a in report.artifacts) == ["a.gguf", "deep/b.gguf"]
    assert set(threads) == {"scandir", "_fingerprint", "_newest_mtime"}
    assert all(threading.get_ident() not in ids for ids in threads.values()), threads


async def test_an_unreadable_subfolder_marks_nothing_gone(db: Database, tmp_path: Path) -> None:
    """A subfolder the walk could not list was only logged, the folder still counted as a
    complete snapshot, and the models indexed from that subfolder before became gone."""
    folder = tmp_path / "shelf"
    write_gguf(folder / "top.gguf")
    write_gguf(folder / "sub" / "inner.gguf")
    await index_paths(db, [folder])
    (folder / "sub").chmod(0)
    try:
        with file_modes_enforced():
            report = await index_paths(db, [folder])
    finally:
        (folder / "sub").chmod(0o755)
    rows = await artifacts(db)
    assert {p: r.status for (_, p), r in rows.items()} == {"top.gguf": "indexed", "sub/inner.gguf": "indexed"}
    unread = {"path": str(folder / "sub"), "error": "folder not read: Permission denied"}
    assert report.unreadable == [unread]
    async with db.sessions() as session:
        crawl = (await session.scalars(select(Crawl).order_by(Crawl.id.desc()))).first()
    assert crawl is not None and crawl.status == "finished"
    assert crawl.errors == [{"repo": "", **unread}]
    assert crawl.counters["unreadable"] == 1
    # Read whole again, the folder is a complete snapshot once more: a removed file is gone.
    (folder / "top.gguf").unlink()
    await index_paths(db, [folder])
    rows = await artifacts(db)
    assert {p: r.status for (_, p), r in rows.items()} == {"top.gguf": "gone", "sub/inner.gguf": "indexed"}


async def test_unreadable_entries_do_not_stop_the_folder(db: Database, tmp_path: Path) -> None:
    folder = tmp_path / "mixed"
    write_gguf(folder / "ok.gguf")
    (folder / "empty.gguf").write_bytes(b"")
    os.symlink(folder / "nowhere.gguf", folder / "dangling.gguf")
    os.mkfifo(folder / "fifo.gguf")
    (folder / "dir.gguf").mkdir()
    report = await index_paths(db, [folder])
    by_path = {a.path: a for a in report.artifacts}
    assert by_path["ok.gguf"].status == "indexed"
    assert {p for p, a in by_path.items() if a.status == "error"} == {
        "empty.gguf",
        "dangling.gguf",
        "fifo.gguf",
    }


def test_cache_layouts(tmp_path: Path) -> None:
    hf = tmp_path / "hf" / "hub" / "models--TheOrg--Some-Model-GGUF"
    old, new = hf / "snapshots" / "aaa111", hf / "snapshots" / "bbb222"
    write_gguf(old / "m.gguf")
    write_gguf(new / "sub" / "m.gguf")
    (hf / "refs").mkdir()
    (hf / "refs" / "main").write_text("aaa111\n")
    lms = tmp_path / "home" / ".lmstudio" / "models" / "lmstudio-community" / "Qwen-GGUF"
    write_gguf(lms / "q.gguf")
    plain = write_gguf(tmp_path / "loose" / "x.gguf")

    repos, skipped, unreadable = discover([tmp_path / "hf", tmp_path / "home", plain, tmp_path / "nope"])
    by_id = {r.repo_id: r for r in repos}
    assert (skipped, unreadable) == ([str(tmp_path / "nope")], [])
    hub = by_id["TheOrg/Some-Model-GGUF"]
    assert (hub.revision, hub.files, hub.source, hub.complete) == ("aaa111", ["m.gguf"], "hub", False)
    lms_repo = by_id["lmstudio-community/Qwen-GGUF"]
    assert (lms_repo.files, lms_repo.complete, lms_repo.source) == (["q.gguf"], False, "hub")
    loose = by_id["local/loose"]
    assert (loose.files, loose.complete, loose.pseudo) == (["x.gguf"], False, True)


async def test_same_folder_name_elsewhere_gets_its_own_repo(db: Database, tmp_path: Path) -> None:
    write_gguf(tmp_path / "one" / "models" / "a.gguf")
    write_gguf(tmp_path / "two" / "models" / "b.gguf")
    await index_paths(db, [tmp_path / "one" / "models"])
    await index_paths(db, [tmp_path / "two" / "models"])
    repos = {repo for repo, _ in await artifacts(db)}
    assert len(repos) == 2 and "local/models" in repos


async def test_cache_index_keeps_what_the_hub_crawl_knows(db: Database, tmp_path: Path) -> None:
    """A HF cache holds files, not the repo card: indexing it after a hub crawl of the same
    repo must not wipe the repo's counters, tags, license or description (the next crawl sees
    the same revision and would never write them back)."""
    repo_id, revision = "TheOrg/Cached-GGUF", "abc123"
    crawled = make_snapshot(
        repo_id,
        revision,
        artifacts=(artifact("m.gguf"),),
        downloads=1234,
        likes=56,
        tags=("gguf", "base_model:quantized:TheOrg/Base"),
        card_license="mit",
        description="From the card",
    )
    async with db.sessions() as session, session.begin():
        await upsert_repo_snapshot(session, crawled)
    before = (await artifacts(db))[repo_id, "m.gguf"]

    snapshot = tmp_path / "hub" / "models--TheOrg--Cached-GGUF" / "snapshots" / revision
    write_gguf(snapshot / "m.gguf")
    write_gguf(snapshot / "extra.gguf")
    await index_paths(db, [tmp_path / "hub"])

    async with db.sessions() as session:
        [repo] = (await session.scalars(select(Repo))).all()
    assert (repo.downloads, repo.likes, repo.card_license) == (1234, 56, "mit")
    assert repo.description == "From the card"
    assert repo.tags == ["gguf", "base_model:quantized:TheOrg/Base"] and repo.revision == revision
    rows = await artifacts(db)
    assert rows[repo_id, "m.gguf"].updated_at == before.updated_at  # same revision: not rewritten
    added = rows[repo_id, "extra.gguf"]
    assert (added.status, added.downloads, added.likes, added.license) == ("indexed", 1234, 56, "mit")


@pytest.mark.parametrize("crawled_first", [True, False], ids=["crawl first", "cache first"])
async def test_a_cache_folder_in_another_letter_case_is_the_crawled_repo(
    db: Database, tmp_path: Path, crawled_first: bool
) -> None:
    """`hf_hub_download("theorg/cached-gguf", ...)` caches under the case it was asked with;
    the hub (and so the crawl) spells the repo `TheOrg/Cached-GGUF`. Either order, the
    catalog has one repo, in the hub's spelling, holding the files of both."""
    repo_id, revision = "TheOrg/Cached-GGUF", "abc123"
    crawled = make_snapshot(repo_id, revision, artifacts=(artifact("m.gguf"),), downloads=1234)
    snapshot = tmp_path / "hub" / "models--theorg--cached-gguf" / "snapshots" / revision
    write_gguf(snapshot / "m.gguf")
    write_gguf(snapshot / "extra.gguf")
    if crawled_first:
        async with db.sessions() as session, session.begin():
            await upsert_repo_snapshot(session, crawled)
    await index_paths(db, [tmp_path / "hub"])
    if not crawled_first:
        async with db.sessions() as session, session.begin():
            await upsert_repo_snapshot(session, crawled)
    async with db.sessions() as session:
        [repo] = (await session.scalars(select(Repo))).all()
    assert (repo.repo_id, repo.downloads) == (repo_id, 1234)
    assert set(await artifacts(db)) == {(repo_id, "m.gguf"), (repo_id, "extra.gguf")}


async def test_file_and_folder_names_that_are_not_utf8(db: Database, tmp_path: Path) -> None:
    """Linux names are bytes: Python hands undecodable ones over as lone surrogates, which
    neither database driver can encode. They are stored readable; the folder still indexes."""
    folder = Path(os.fsdecode(bytes(tmp_path) + b"/mod\xe9les"))
    write_gguf(Path(os.fsdecode(bytes(folder) + b"/caf\xe9.gguf")))
    write_gguf(folder / "ok.gguf")
    report = await index_paths(db, [folder])
    assert [a.status for a in report.artifacts] == ["indexed", "indexed"]
    again = await index_paths(db, [folder])
    assert [r.unchanged for r in again.results] == [True]
    rows = await artifacts(db)
    assert set(rows) == {("local/mod\\udce9les", "caf\\udce9.gguf"), ("local/mod\\udce9les", "ok.gguf")}
    async with db.sessions() as session:
        [crawl, _] = (await session.scalars(select(Crawl).order_by(Crawl.id))).all()
    assert crawl.status == "finished"


async def test_a_folder_deeper_than_the_recursion_limit(db: Database, tmp_path: Path) -> None:
    """A walk that recursed once per level raised RecursionError out of the whole run."""
    levels = [tmp_path / "deep"]
    for _ in range(1200):  # one mkdir at a time: os.makedirs recurses per level too
        levels.append(levels[-1] / "d")
    try:
        for level in levels:
            level.mkdir()
        write_gguf(levels[-1] / "bottom.gguf")
        write_gguf(levels[0] / "top.gguf")
        report = await index_paths(db, [levels[0]])
        paths = {a.path: a.status for a in report.artifacts}
        assert paths == {"d/" * 1200 + "bottom.gguf": "indexed", "top.gguf": "indexed"}
    finally:  # bottom up: pytest's own clean-up of tmp_path recurses too
        (levels[-1] / "bottom.gguf").unlink(missing_ok=True)
        for level in reversed(levels[1:]):
            level.rmdir()


async def test_hf_cache_no_exist_markers_are_not_models(db: Database, tmp_path: Path) -> None:
    """The HF cache records files the hub does not have as empty files under `.no_exist`;
    walking the cache made each one an error row of a pseudo-repo `local/<cache folder>`."""
    repo = tmp_path / "hub" / "models--TheOrg--Some-GGUF"
    write_gguf(repo / "snapshots" / "abc123" / "m.gguf")
    (repo / ".no_exist" / "abc123").mkdir(parents=True)
    (repo / ".no_exist" / "abc123" / "m-Q8_0.gguf").write_bytes(b"")
    report = await index_paths(db, [tmp_path / "hub"])
    assert [(a.repo, a.path, a.status) for a in report.artifacts] == [
        ("TheOrg/Some-GGUF", "m.gguf", "indexed")
    ]
    assert set(await artifacts(db)) == {("TheOrg/Some-GGUF", "m.gguf")}


async def test_hf_cache_and_lmstudio_copies_of_one_repo_are_both_indexed(
    db: Database, tmp_path: Path
) -> None:
    """Choosing one snapshot per repo id dropped every other folder of that org/name: the
    LM Studio file was not indexed and not reported."""
    hf = tmp_path / "hf" / "models--TheOrg--Some-GGUF"
    write_gguf(hf / "snapshots" / "aaa111" / "q4.gguf")
    write_gguf(hf / "snapshots" / "bbb222" / "old.gguf")  # not the revision refs/main names
    (hf / "refs").mkdir()
    (hf / "refs" / "main").write_text("aaa111")
    write_gguf(tmp_path / "home" / ".lmstudio" / "models" / "TheOrg" / "Some-GGUF" / "q8.gguf")
    report = await index_paths(db, [tmp_path / "hf", tmp_path / "home"])
    assert sorted((a.repo, a.path, a.status) for a in report.artifacts) == [
        ("TheOrg/Some-GGUF", "q4.gguf", "indexed"),
        ("TheOrg/Some-GGUF", "q8.gguf", "indexed"),
    ]
    assert set(await artifacts(db)) == {("TheOrg/Some-GGUF", "q4.gguf"), ("TheOrg/Some-GGUF", "q8.gguf")}


async def test_a_shard_announcing_a_huge_set_gets_a_short_error(db: Database, tmp_path: Path) -> None:
    """The error listed every missing shard number: 99998 of them, a 700 KB message stored
    in the row and printed by the CLI, for one file name."""
    write_gguf(tmp_path / "huge" / "m-00001-of-99999.gguf", split=(0, 2, 1))
    write_gguf(tmp_path / "huge" / "m-00002-of-00003.gguf", split=(1, 3, 1))
    report = await index_paths(db, [tmp_path / "huge"])
    errors = {a.path: a.error or "" for a in report.artifacts}
    assert errors["m-00001-of-99999.gguf"].endswith(
        "99998 of 99999 shards missing: 2, 3, 4, 5, 6 and 99993 more"
    )
    assert errors["m-00002-of-00003.gguf"].endswith("2 of 3 shards missing: 1, 3")
    row = (await artifacts(db))["local/huge", "m-00001-of-99999.gguf"]
    assert row.status == "error" and len(row.error_message or "") < 200


async def test_one_shard_given_by_name_brings_its_set(db: Database, tmp_path: Path) -> None:
    """`registry index big-00002-of-00003.gguf` stored an error row claiming shards 1 and 3
    missing, while they were next to it."""
    folder = tmp_path / "split"
    for i in range(3):
        write_gguf(folder / f"big-{i + 1:05d}-of-00003.gguf", split=(i, 3, 3))
    write_gguf(folder / "half-00001-of-00002.gguf", split=(0, 2, 2))
    report = await index_paths(db, [folder / "big-00002-of-00003.gguf", folder / "half-00001-of-00002.gguf"])
    assert [(a.path, a.status) for a in report.artifacts] == [
        ("big-00001-of-00003.gguf", "indexed"),
        ("half-00001-of-00002.gguf", "error"),
    ]
    big = (await artifacts(db))["local/split", "big-00001-of-00003.gguf"]
    assert (big.shard_count, big.parameter_count) == (3, 96)


async def test_an_unchanged_folder_an_older_release_wrote_is_written_again_once(db: Database, tmp_path: Path) -> None:
    """A folder written before this release derived chat template capabilities (no
    derivation number, NULL capabilities) gets them from the next plain `registry index`,
    and is found by the capability filter; the index after that writes nothing."""
    from sqlalchemy import update

    from registry.catalog.snapshot import DERIVATION
    from tests.gguf.gguf_py import write_gguf as write_with_kv

    template = "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
    (tmp_path / "shelf").mkdir()
    write_with_kv(tmp_path / "shelf" / "chat.gguf", kv={"tokenizer.chat_template": template})
    await index_paths(db, [tmp_path / "shelf"])

    async def state() -> tuple[int | None, str | None, int | None]:
        async with db.sessions() as session:
            row = (
                await session.execute(
                    select(Artifact.chat_template_capabilities, Facts.name, Repo.derivation)
                    .join(Facts, Facts.artifact_id == Artifact.id)
                    .join(Repo, Repo.id == Artifact.repo_pk)
                )
            ).one()
            return row[0], row[1], row[2]

    async def with_system() -> int:
        async with db.sessions() as session:
            return len((await search(session, SearchQuery(capability="system"))).rows)

    written, name, derivation = await state()
    assert written is not None and derivation == DERIVATION and await with_system() == 1
    async with db.sessions() as session, session.begin():  # as a release before capabilities left it
        await session.execute(update(Artifact).values(chat_template_capabilities=None))
        await session.execute(update(Repo).values(derivation=None))
    assert await with_system() == 0
    report = await index_paths(db, [tmp_path / "shelf"])
    assert [(r.unchanged, r.rederived) for r in report.results] == [(False, True)]
    assert await state() == (written, name, DERIVATION) and await with_system() == 1
    async with db.sessions() as session:
        crawl = (await session.scalars(select(Crawl).order_by(Crawl.id.desc()).limit(1))).one()
    assert crawl.counters["rederived"] == 1
    async with db.sessions() as session, session.begin():
        await session.execute(update(Facts).values(name="kept"))
    report = await index_paths(db, [tmp_path / "shelf"])
    assert [(r.unchanged, r.rederived) for r in report.results] == [(True, False)]
    assert (await state())[1] == "kept"  # at this release's number: not written again


async def test_a_file_argument_that_is_not_gguf_is_skipped(db: Database, tmp_path: Path) -> None:
    """`registry index notes.txt` stored an empty pseudo-repo `local/<folder>` and said nothing."""
    (tmp_path / "loose").mkdir()
    notes = tmp_path / "loose" / "notes.txt"
    notes.write_text("not a model")
    report = await index_paths(db, [notes])
    assert (report.artifacts, report.skipped) == ([], [str(notes)])
    async with db.sessions() as session:
        assert (await session.scalars(select(Repo))).all() == []


async def test_index_full_writes_unchanged_folders_again(db: Database, tmp_path: Path) -> None:
    """An unchanged folder writes nothing, so facts a new release derives reach it only
    with `full` (`registry index --full`)."""
    from sqlalchemy import update

    write_gguf(tmp_path / "shelf" / "a.gguf", name="Shelf")
    await index_paths(db, [tmp_path / "shelf"])
    async with db.sessions() as session, session.begin():
        await session.execute(update(Facts).values(name="stale"))

    async def names() -> list[str | None]:
        async with db.sessions() as session:
            return list((await session.scalars(select(Facts.name))).all())

    await index_paths(db, [tmp_path / "shelf"])
    assert await names() == ["stale"]
    report = await index_paths(db, [tmp_path / "shelf"], full=True)
    assert await names() == ["Shelf"] and [a.status for a in report.artifacts] == ["indexed"]
