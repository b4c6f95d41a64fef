"""`registry download` against the fake hub over loopback, as a user runs it: every shard of
a split model written by gguf-py, checked by sha256, continued after an interruption, never
overwriting a file; by REPO[:PATH] and by catalog id."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest

from registry.cli.common import file_size
from registry.cli.models import ProgressLine
from registry.config import HubSettings, Settings
from tests.fakehub import FakeHub
from tests.fakehub.corpus import BytesBlob, Corpus, LocalBlob, RepoFile
from tests.fakehub.corpus import Repo as HubRepo
from tests.fakehub.testing import TOKEN
from tests.gguf.gguf_py import write_gguf
from tests.models import GEMMA3, sha256_file
from tests.workers.test_cli_crawl import _registry
from workers.download import DownloadError, destination, download_shards
from workers.hashes import FileHashes
from workers.verify import ShardSource, hub_artifact

SPLIT = "org/tiny-split-GGUF"


def _repo(tmp_path: Path, repo_id: str = SPLIT) -> tuple[HubRepo, dict[str, bytes]]:
    """A repo holding one model in three shards and one single-file model, real bytes."""
    src = tmp_path / "src"
    src.mkdir(exist_ok=True)
    tensors = [(f"blk.{i}.w", np.full((64, 64), i, dtype=np.float32)) for i in range(3)]
    paths = write_gguf(src / "tiny.gguf", kv={"general.name": "tiny"}, tensors=tensors, split_max_tensors=1)
    paths += write_gguf(src / "other-Q8_0.gguf", tensors=tensors[:1])
    data = {p.name: p.read_bytes() for p in paths}
    return HubRepo(repo_id, [RepoFile(name, BytesBlob(b, lfs=True)) for name, b in data.items()]), data


SHARDS = [f"tiny-{i:05d}-of-00003.gguf" for i in range(1, 4)]


async def test_download_writes_every_shard_and_skips_them_the_next_time(tmp_path: Path) -> None:
    repo, data = _repo(tmp_path)
    out = tmp_path / "out"
    async with FakeHub(Corpus([repo]), tokens={TOKEN}) as hub:
        code, stdout, err = await _registry(
            tmp_path, hub, "download", f"{SPLIT}:{SHARDS[1]}", "--to", str(out), "--json"
        )
        assert code == 0, err
        files = json.loads(stdout)
        assert [Path(f["path"]).name for f in files] == SHARDS  # any shard names the whole model
        assert all(f["fetched"] == f["size"] == len(data[Path(f["path"]).name]) for f in files)
        for name in SHARDS:
            assert (out / name).read_bytes() == data[name]
        assert sorted(p.name for p in out.iterdir()) == SHARDS  # no partial file left
        fetched = len(hub.requests_to("cdn"))

        # each file's hash is kept, so the next run does not read it again
        hashes = FileHashes(tmp_path / "hashes.sqlite")
        assert [hashes.remembered(out / name) for name in SHARDS] == [sha256_file(out / name) for name in SHARDS]
        hashes.close()

        code, stdout, err = await _registry(tmp_path, hub, "download", f"{SPLIT}:{SHARDS[0]}", "--to", str(out))
        assert code == 0, err
        assert stdout.count("in place already") == 3
        assert len(hub.requests_to("cdn")) == fetched  # nothing fetched again

        # A repo of two artifacts: naming none is an error that lists them.
        code, stdout, err = await _registry(tmp_path, hub, "download", SPLIT, "--to", str(out))
        assert code == 1 and "2 GGUF artifacts" in err and "name one as REPO:PATH or REPO:TAG (Q8_0)" in err


async def test_download_by_quantization_tag(tmp_path: Path) -> None:
    repo, data = _repo(tmp_path)
    out = tmp_path / "out"
    async with FakeHub(Corpus([repo]), tokens={TOKEN}) as hub:
        code, stdout, err = await _registry(tmp_path, hub, "download", f"{SPLIT}:q8_0", "--to", str(out), "--json")
        assert code == 0, err
        assert [Path(f["path"]).name for f in json.loads(stdout)] == ["other-Q8_0.gguf"]
        assert (out / "other-Q8_0.gguf").read_bytes() == data["other-Q8_0.gguf"]
        fetched = len(hub.requests_to("cdn"))

        code, _, err = await _registry(tmp_path, hub, "download", f"{SPLIT}:Q4_K_M", "--to", str(out))
        assert code == 1 and "no model tagged Q4_K_M; its tags: Q8_0" in err
        assert len(hub.requests_to("cdn")) == fetched  # an unknown tag fetches nothing
    assert sorted(p.name for p in out.iterdir()) == ["other-Q8_0.gguf"]


async def test_an_interrupted_download_continues_where_it_stopped(tmp_path: Path) -> None:
    repo, data = _repo(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    first = data[SHARDS[0]]
    (out / f"{SHARDS[0]}.partial").write_bytes(first[: len(first) // 2])
    async with FakeHub(Corpus([repo]), tokens={TOKEN}) as hub:
        settings = Settings(hub=HubSettings(endpoint=hub.endpoint, token=TOKEN))
        shards = await hub_artifact(SPLIT, SHARDS[0], settings, None)
        files = await download_shards(shards, out, settings)
        ranges = [r.headers.get("Range") for r in hub.requests_to("cdn") if r.file == SHARDS[0]]
    assert ranges == [f"bytes={len(first) // 2}-"]
    assert files[0].fetched == len(first) - len(first) // 2
    assert (out / SHARDS[0]).read_bytes() == first


async def test_bytes_that_do_not_match_the_hash_are_deleted(tmp_path: Path) -> None:
    repo, _ = _repo(tmp_path)
    blob = next(f.blob for f in repo.files if f.path == "other-Q8_0.gguf")
    blob.data = blob.data[:-1] + bytes([blob.data[-1] ^ 1])  # the hub serves other bytes than it hashed
    out = tmp_path / "out"
    async with FakeHub(Corpus([repo]), tokens={TOKEN}) as hub:
        code, _, err = await _registry(tmp_path, hub, "download", f"{SPLIT}:other-Q8_0.gguf", "--to", str(out))
    assert code == 1 and "sha256" in err and "deleted" in err
    assert list(out.iterdir()) == []


async def test_a_file_in_place_with_other_bytes_is_left_alone(tmp_path: Path) -> None:
    repo, _ = _repo(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    mine = out / "other-Q8_0.gguf"
    mine.write_bytes(b"my own file")
    async with FakeHub(Corpus([repo]), tokens={TOKEN}) as hub:
        code, _, err = await _registry(tmp_path, hub, "download", f"{SPLIT}:other-Q8_0.gguf", "--to", str(out))
        assert not hub.requests_to("cdn")
    assert code == 1 and "move it away" in err
    assert mine.read_bytes() == b"my own file"


@pytest.mark.parametrize("name", ["../x.gguf", "/etc/x.gguf", "a//b.gguf", "a/./b.gguf", "a\\b.gguf", ""])
def test_a_path_that_is_not_plainly_relative_is_refused(tmp_path: Path, name: str) -> None:
    with pytest.raises(DownloadError):
        destination(tmp_path, name)
    assert destination(tmp_path, "sub/dir/m.gguf") == tmp_path / "sub" / "dir" / "m.gguf"


async def test_download_by_catalog_id(tmp_path: Path) -> None:
    repo, data = _repo(tmp_path)
    out = tmp_path / "out"
    async with FakeHub(Corpus([repo]), tokens={TOKEN}) as hub:
        code, _, err = await _registry(tmp_path, hub, "crawl", SPLIT)
        assert code == 0, err
        code, stdout, err = await _registry(tmp_path, hub, "search", "--repo", SPLIT, "--json", "--sort", "name")
        assert code == 0, err
        items = {i["path"]: i["id"] for i in json.loads(stdout)["items"]}
        code, stdout, err = await _registry(tmp_path, hub, "download", str(items[SHARDS[0]]), "--to", str(out))
        assert code == 0, err
        pinned = [r.path for r in hub.requests_to("resolve")]
        for absent in ("987654", str(2**63), "9" * 30):  # beyond what a database column holds too
            code, stdout, err = await _registry(tmp_path, hub, "download", absent, "--to", str(out))
            assert (code, stdout, err) == (1, "", f"registry: download: {absent}: no artifact with id {absent}\n")
    assert {p.name: p.read_bytes() for p in out.iterdir()} == {name: data[name] for name in SHARDS}
    assert all(f"/{repo.sha}/" in p for p in pinned)  # at the commit the catalog read
    code, _, err = await _registry(tmp_path, hub, "download", "999999", "--to", str(out))
    assert code == 1 and "no artifact with id 999999" in err


async def test_a_local_folders_artifact_is_on_disk_already(tmp_path: Path, smollm2_path: Path) -> None:
    folder = tmp_path / "models"
    folder.mkdir()
    (folder / "m.gguf").symlink_to(smollm2_path)
    async with FakeHub(Corpus([]), tokens={TOKEN}) as hub:
        code, _, err = await _registry(tmp_path, hub, "index", str(folder))
        assert code == 0, err
        code, stdout, err = await _registry(tmp_path, hub, "search", "--author", "local", "--json")
        [item] = json.loads(stdout)["items"]
        code, _, err = await _registry(tmp_path, hub, "download", str(item["id"]), "--to", str(tmp_path / "out"))
    assert code == 1 and "local folder's file, on disk already" in err and str(folder / "m.gguf") in err
    assert not (tmp_path / "out").exists()


async def test_progress_shows_each_file_to_its_end(tmp_path: Path) -> None:
    repo, data = _repo(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    first = data[SHARDS[0]]
    half = len(first) // 2
    (out / f"{SHARDS[0]}.partial").write_bytes(first[:half])
    async with FakeHub(Corpus([repo]), tokens={TOKEN}) as hub:
        code, stdout, err = await _registry(tmp_path, hub, "download", f"{SPLIT}:{SHARDS[0]}", "--to", str(out),
                                            "--progress")  # fmt: skip
        assert code == 0, err
        lines = err.splitlines()
        for name in SHARDS:  # stderr is no terminal here: whole lines, each file's last one at 100%
            size = file_size(len(data[name]))
            assert any(line.startswith(f"{name}  {size} of {size} (100%)") for line in lines), err
        assert "\r" not in err and "in place" not in err  # the results go to stdout
        assert stdout.count("bytes fetched") == 3

        code, _, err = await _registry(tmp_path, hub, "download", f"{SPLIT}:other-Q8_0.gguf", "--to", str(out))
        assert code == 0 and err == ""  # not a terminal: no progress unless asked


async def test_verify_shows_its_download_progress_too(tmp_path: Path) -> None:
    repo, data = _repo(tmp_path)
    async with FakeHub(Corpus([repo]), tokens={TOKEN}) as hub:
        code, stdout, err = await _registry(tmp_path, hub, "verify", f"{SPLIT}:Q8_0", "--progress", "--json")
        assert code in (0, 1, 3), err  # a toy model: the verdict is not the point here
        assert json.loads(stdout)["bytes_downloaded"] == len(data["other-Q8_0.gguf"])
        size = file_size(len(data["other-Q8_0.gguf"]))
        assert f"other-Q8_0.gguf  {size} of {size} (100%)" in err
        code, _, err = await _registry(tmp_path, hub, "verify", f"{SPLIT}:Q8_0", "--json")
        assert "%)" not in err  # cached now, and no progress asked for off a terminal


def test_progress_line_rewrites_one_terminal_line() -> None:
    stream = io.StringIO()
    now = [10.0]
    line = ProgressLine(stream, tty=True, every_s=0.2, clock=lambda: now[0])
    shard = ShardSource("m.gguf")
    line(shard, 500_000, 4_000_000)  # resumed at 0.5 MB: the rate counts this run's bytes only
    now[0] = 10.1
    line(shard, 1_000_000, 4_000_000)  # within 0.2 s of the last: not shown
    now[0] = 11.0
    line(shard, 2_500_000, 4_000_000)
    now[0] = 11.05
    line(shard, 4_000_000, 4_000_000)  # the end is always shown
    line.clear()
    assert stream.getvalue().split("\r\x1b[K") == [
        "",
        "m.gguf  500 kB of 4.00 MB (12%)",
        "m.gguf  2.50 MB of 4.00 MB (62%)  2.00 MB/s",
        "m.gguf  4.00 MB of 4.00 MB (100%)  3.33 MB/s",
        "",
    ]
    line.clear()  # nothing shown since: nothing written
    assert stream.getvalue().endswith("(100%)  3.33 MB/s\r\x1b[K")


def test_progress_without_a_size_shows_bytes_and_rate() -> None:
    stream = io.StringIO()
    now = [0.0]
    line = ProgressLine(stream, tty=False, every_s=0.1, clock=lambda: now[0])
    for i in range(1, 6):
        now[0] = i * 0.5  # a log gets a line per second at most (every_s * 10)
        line(ShardSource("x.gguf"), i * 1000, None)
    assert stream.getvalue().splitlines() == ["x.gguf  1.00 kB", "x.gguf  3.00 kB  2.00 kB/s", "x.gguf  5.00 kB  2.00 kB/s"]


async def test_download_the_largest_model_that_fits(tmp_path: Path, smollm2_path: Path, gemma3_path: Path) -> None:
    # What llama.cpp allocates on a CPU: at 4K tokens SmolLM2 295.4 MB, gemma 3 830.0 MB (a
    # 262k-token vocabulary's logits take 512 MiB); at 32K SmolLM2 stops at its own 8K
    # (460.0 MB), gemma 3 needs 918.1 MB.
    pair = "org/pair-GGUF"
    files = [RepoFile(smollm2_path.name, LocalBlob(smollm2_path, sha256_file(smollm2_path))),
             RepoFile(gemma3_path.name, LocalBlob(gemma3_path, GEMMA3.sha256))]  # fmt: skip
    out = tmp_path / "out"
    async with FakeHub(Corpus([HubRepo(pair, files)]), tokens={TOKEN}) as hub:
        code, _, err = await _registry(tmp_path, hub, "crawl", pair)
        assert code == 0, err
        for memory, context, picked in [("296MB", None, smollm2_path), ("831MB", None, gemma3_path),
                                        ("831MB", "32K", smollm2_path)]:  # fmt: skip
            argv = ["download", "ORG/pair-gguf", "--max-memory", memory, "--to", str(out), "--json"]
            code, stdout, err = await _registry(tmp_path, hub, *argv, *(["--memory-context", context] if context else []))
            assert code == 0, err
            assert f"org/pair-GGUF: picked {picked.name} (id " in err
            [got] = json.loads(stdout)
            assert Path(got["path"]) == out / picked.name and got["sha256"] == sha256_file(picked)

        code, _, err = await _registry(tmp_path, hub, "download", pair, "--max-memory", "150MB", "--to", str(out))
        assert code == 1
        assert f"no model file of {pair} fits in 150 MB; the smallest, {smollm2_path.name} (id " in err
        assert "98.4 MB), needs 295MB@4K" in err
        code, _, err = await _registry(tmp_path, hub, "download", "org/none-GGUF", "--max-memory", "1GB")
        assert code == 1 and "the catalog has no model file of org/none-GGUF: crawl it first" in err
        for argv in (["1", "--max-memory", "1GB"], [f"{pair}:Q4_1", "--max-memory", "1GB"],
                     [pair, "--memory-context", "8K"], [pair, "--max-memory", "1GB", "--revision", "main"],
                     ["1", "--revision", "main"]):  # fmt: skip
            code, _, err = await _registry(tmp_path, hub, "download", *argv, "--to", str(out))
            assert code == 2, (argv, err)
    assert sorted(p.name for p in out.iterdir()) == sorted([smollm2_path.name, gemma3_path.name])
