"""Which files of the catalog hold given bytes: `GET /v1/files/{sha256}` and `registry
identify`, on both databases; oids are stored in lower case, and the migration that
indexes them lower-cases the ones written before."""

from __future__ import annotations

import json
from pathlib import Path

from sqlalchemy import select

from registry.api import reads
from registry.catalog.db import Database
from registry.catalog.models import Shard
from registry.catalog.services import mark_repo_deleted, upsert_repo_snapshot
from registry.catalog.snapshot import ArtifactRecord, ShardRecord
from tests.api.conftest import MakeApi
from tests.catalog.conftest import empty_db_url, empty_tables, temp_databases
from tests.catalog.factories import make_facts, make_snapshot
from tests.fakehub import FakeHub
from tests.fakehub.corpus import Corpus, LocalBlob, RepoFile
from tests.fakehub.corpus import Repo as HubRepo
from tests.fakehub.testing import TOKEN
from tests.models import sha256_file
from tests.workers.test_cli_crawl import _registry

__all__ = ["empty_db_url", "temp_databases"]  # fixtures used here

X, Y = "0f" * 32, "a1" * 32  # two oids


def _file(path: str, sha: str, *, shards: tuple[str, ...] = ()) -> ArtifactRecord:
    names = shards or (path,)
    records = tuple(ShardRecord(n, size=1000 + i, sha256=s, split_no=i)
                    for i, (n, s) in enumerate(zip(names, sha.split(","), strict=True)))  # fmt: skip
    return ArtifactRecord(names[0], records, facts=make_facts())


async def _catalog(db: Database) -> None:
    await empty_tables(db)
    async with db.sessions() as session, session.begin():
        for repo_id, downloads, record in [
            ("org/a-GGUF", 100, _file("m-Q4_K_M.gguf", X.upper())),  # written in upper case: stored lower
            ("mirror/b-GGUF", 900, _file("copy.gguf", X)),
            ("org/split-GGUF", 50, _file("", f"{Y},{X}", shards=("s-00001-of-00002.gguf", "s-00002-of-00002.gguf"))),
            ("old/gone-GGUF", 5000, _file("m.gguf", X)),
            ("org/other-GGUF", 10, _file("o.gguf", Y)),
        ]:
            snap = make_snapshot(repo_id, revision="c0ffee", artifacts=(record,), downloads=downloads)
            await upsert_repo_snapshot(session, snap, hub_answered=True)
        await mark_repo_deleted(session, "old/gone-GGUF")


async def test_files_by_sha256(db: Database, make_api: MakeApi) -> None:
    await _catalog(db)
    api = await make_api()
    for asked in (X, X.upper()):
        page = await api.get(f"/v1/files/{asked}")
        assert page.status == 200, page.body
        assert page.body["sha256"] == X and page.body["count"] == 4
        files = page.body["files"]
        # indexed artifacts first, by their repo's downloads; a gone one last
        assert [(f["repo"], f["path"], f["split_no"], f["artifact"]["status"]) for f in files] == [
            ("mirror/b-GGUF", "copy.gguf", 0, "indexed"),
            ("org/a-GGUF", "m-Q4_K_M.gguf", 0, "indexed"),
            ("org/split-GGUF", "s-00002-of-00002.gguf", 1, "indexed"),
            ("old/gone-GGUF", "m.gguf", 0, "gone"),
        ]
        assert files[2]["artifact"]["path"] == "s-00001-of-00002.gguf"  # the artifact the shard belongs to
        assert all(f["url"].endswith(f"/{f['repo']}/resolve/c0ffee/{f['path']}") for f in files)
        for f in files:
            detail = await api.get(f"/v1/artifacts/{f['artifact']['id']}")
            assert detail.body["repo"] == f["repo"] and f["path"] in [s["path"] for s in detail.body["shards"]]
            assert X in [s["sha256"] for s in detail.body["shards"]]
    assert [f["repo"] for f in (await api.get(f"/v1/files/{Y}")).body["files"]] == ["org/split-GGUF", "org/other-GGUF"]

    missing = await api.get(f"/v1/files/{'e' * 64}")
    assert missing.status == 404 and missing.body["error"]["details"]["sha256"] == "e" * 64
    for bad in ("e" * 63, "e" * 65, "g" * 64, "%20" + "e" * 61):
        reply = await api.get(f"/v1/files/{bad}")
        assert reply.status == 400 and reply.body["error"]["details"]["parameter"] == "sha256", bad
    assert (await api.get(f"/v1/files/{X}?limit=1")).status == 400  # it takes no parameters

    async with db.sessions() as session:
        rows, count = await reads.files_with_sha256(session, X, limit=2)
        assert count == 4 and [r.repo_id for r in rows] == ["mirror/b-GGUF", "org/a-GGUF"]
        assert set((await session.scalars(select(Shard.sha256))).all()) == {X, Y}


async def test_identify_names_the_repos_that_hold_a_local_file(tmp_path: Path, smollm2_path: Path) -> None:
    sha = sha256_file(smollm2_path)
    repos = [HubRepo(repo_id, [RepoFile(smollm2_path.name, LocalBlob(smollm2_path, sha))])
             for repo_id in ("org/smol-GGUF", "mirror/smol-copy-GGUF")]  # fmt: skip
    unknown = tmp_path / "mine.gguf"
    unknown.write_bytes(b"GGUF not from any hub")
    older = tmp_path / "older" / "sub" / smollm2_path.name.upper()  # other bytes under the hub's name, any case
    older.parent.mkdir(parents=True)
    (older.parent / "notes.txt").write_text("not a model")
    older.write_bytes(b"GGUF an older download")
    async with FakeHub(Corpus(repos), tokens={TOKEN}) as hub:
        code, _, err = await _registry(tmp_path, hub, "crawl", "org/smol-GGUF", "mirror/smol-copy-GGUF")
        assert code == 0, err
        code, out, err = await _registry(tmp_path, hub, "identify", str(smollm2_path))
        assert code == 0, err
        lines = out.splitlines()
        assert lines[0] == f"{smollm2_path}  sha256 {sha}"
        assert sorted(line.split()[0] for line in lines[1:]) == ["mirror/smol-copy-GGUF", "org/smol-GGUF"]
        assert all(f"  {smollm2_path.name}  (artifact " in line and line.endswith(", indexed)") for line in lines[1:])

        # a folder: the .gguf files in it and its subfolders
        code, out, err = await _registry(tmp_path, hub, "identify", str(tmp_path / "older"))
        assert code == 1 and out.startswith(f"{older}  sha256 {sha256_file(older)}: not in the catalog\n")
        assert sorted(out.splitlines()[1:]) == sorted(
            f"  same name: {r}  {smollm2_path.name}  (artifact {i})" for r, i in await _ids(tmp_path, hub)
        )
        empty = tmp_path / "empty"
        empty.mkdir()
        code, out, err = await _registry(tmp_path, hub, "identify", str(empty))
        assert code == 1 and out == "" and f"{empty}: Is a directory" in err  # no .gguf file under it

        argv = ["identify", str(smollm2_path), str(unknown), str(tmp_path / "absent.gguf"), "--json"]
        code, out, err = await _registry(tmp_path, hub, *argv)
    assert code == 1  # one file not in the catalog, one not there at all
    assert "absent.gguf: No such file or directory" in err
    found, mine = json.loads(out)
    assert found["same_name"] == []  # looked for only when the bytes are unknown
    assert found["sha256"] == sha and found["count"] == 2
    assert {f["repo"] for f in found["files"]} == {"org/smol-GGUF", "mirror/smol-copy-GGUF"}
    assert all(f["url"].startswith(hub.endpoint) for f in found["files"])
    assert mine == {"path": str(unknown), "sha256": sha256_file(unknown), "count": 0, "files": [], "same_name": []}


async def test_identify_keeps_each_files_hash_for_the_next_run(tmp_path: Path, smollm2_path: Path) -> None:
    """A second run takes the hash kept for the unchanged file (here one put there by hand,
    which it then prints) instead of reading 98 MB again; `--rehash` reads it again."""
    import sqlite3

    sha = sha256_file(smollm2_path)
    repos = [HubRepo("org/smol-GGUF", [RepoFile(smollm2_path.name, LocalBlob(smollm2_path, sha))])]
    async with FakeHub(Corpus(repos), tokens={TOKEN}) as hub:
        assert (await _registry(tmp_path, hub, "crawl", "org/smol-GGUF"))[0] == 0
        code, out, err = await _registry(tmp_path, hub, "identify", str(smollm2_path))
        assert code == 0 and out.startswith(f"{smollm2_path}  sha256 {sha}\n"), err
        with sqlite3.connect(tmp_path / "hashes.sqlite") as kept:
            rows = kept.execute("SELECT path, sha256 FROM hashes").fetchall()
            assert rows == [(str(smollm2_path.resolve()), sha)]
            kept.execute("UPDATE hashes SET sha256 = ?", ("0" * 64,))
        kept.close()
        code, out, _ = await _registry(tmp_path, hub, "identify", str(smollm2_path))
        assert code == 1 and out.startswith(f"{smollm2_path}  sha256 {'0' * 64}: not in the catalog")
        code, out, _ = await _registry(tmp_path, hub, "identify", str(smollm2_path), "--rehash")
        assert code == 0 and out.startswith(f"{smollm2_path}  sha256 {sha}\n")
        code, out, _ = await _registry(tmp_path, hub, "identify", str(smollm2_path))
        assert code == 0 and out.startswith(f"{smollm2_path}  sha256 {sha}\n")  # --rehash kept the new one


async def _ids(tmp_path: Path, hub: FakeHub) -> list[tuple[str, int]]:
    code, out, err = await _registry(tmp_path, hub, "search", "--json")
    assert code == 0, err
    return [(i["repo"], i["id"]) for i in json.loads(out)["items"]]
