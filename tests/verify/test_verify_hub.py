"""Verification of hub files through the fake hub and CDN: download, resume, cache, sha256."""

from __future__ import annotations

import asyncio
import fcntl
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from registry.config import Settings
from registry.hub.client import RepoFile as RepoFileInfo
from registry.hub.client import RepoInfo
from registry.hub.http import HttpOptions
from tests.fakehub import FakeHub, Fault
from tests.fakehub.corpus import BytesBlob, Corpus, LocalBlob, Repo, RepoFile
from tests.fakehub.testing import TOKEN
from tests.jobs.conftest import wait_for
from tests.models import GEMMA3, sha256_file
from tests.verify.conftest import make_settings, write_tiny
from workers.cache import DownloadCache, Downloader, _flocked, cache_key
from workers.verify import ShardSource, TargetError, pick_artifact, verify_hub, verify_shards

REPO = "test/models-GGUF"


@pytest.fixture
async def hub() -> AsyncIterator[FakeHub]:
    async with FakeHub(Corpus(), tokens={TOKEN}) as h:
        yield h


def _add(hub: FakeHub, repo_id: str, *files: RepoFile) -> None:
    hub.corpus.add(Repo(repo_id, list(files)))


def _settings(hub: FakeHub, tmp_path: Path, **verify: object) -> Settings:
    return make_settings(tmp_path, hub.endpoint, **verify)


async def test_gemma3_passes_with_download_and_sha256(
    gemma3_path: Path, hub: FakeHub, tmp_path: Path
) -> None:
    assert GEMMA3.sha256 is not None
    _add(hub, REPO, RepoFile(gemma3_path.name, LocalBlob(gemma3_path, GEMMA3.sha256)))
    settings = _settings(hub, tmp_path)
    r = await verify_hub(REPO, None, settings)
    assert (r.status, r.reason) == ("passed", None), r.message
    d = r.to_dict()
    assert d["sha256"] == [GEMMA3.sha256]
    assert d["bytes_downloaded"] == gemma3_path.stat().st_size
    assert d["architecture"] == "gemma3" and d["nonfinite_values"] == 0
    assert d["tensors_checked"] == 236 and d["perplexity"] < 20 and d["generated_tokens"]
    cached = settings.cache_dir / "blobs" / GEMMA3.sha256
    assert cached.stat().st_size == gemma3_path.stat().st_size
    cdn = hub.requests_to("cdn")
    assert cdn and not any(req.authorization for req in cdn)  # the token stays with the hub
    assert all(req.authorization for req in hub.requests_to("resolve"))


async def test_hash_mismatch_stops_before_the_checks(
    smollm2_path: Path, hub: FakeHub, tmp_path: Path
) -> None:
    wrong = "0" * 63 + "1"
    _add(hub, REPO, RepoFile(smollm2_path.name, LocalBlob(smollm2_path, wrong)))
    settings = _settings(hub, tmp_path)
    r = await verify_hub(REPO, smollm2_path.name, settings)
    assert (r.status, r.reason) == ("failed", "hash_mismatch"), r.message
    assert r.sha256 == [sha256_file(smollm2_path)]
    assert "checks" not in r.timings and r.report is None
    assert not (settings.cache_dir / "blobs" / wrong).exists()  # bad bytes are not kept


async def test_download_resumes_after_a_reset(hub: FakeHub, tmp_path: Path) -> None:
    data = write_tiny(tmp_path / "tiny.gguf", rows=40_000).read_bytes()  # 5 MB
    blob = BytesBlob(data, lfs=True)
    _add(hub, REPO, RepoFile("tiny.gguf", blob))
    hub.faults.add(Fault("reset", route="cdn", after_bytes=3 << 20))
    settings = _settings(hub, tmp_path)
    r = await verify_hub(REPO, "tiny.gguf", settings)
    assert (r.status, r.reason) == ("skipped", "unsupported_architecture"), r.message
    assert r.sha256 == [blob.sha256]
    first, second = hub.requests_to("cdn")
    assert first.range is None and second.range is not None
    resumed_at = int(second.range.removeprefix("bytes=").rstrip("-"))
    assert 0 < resumed_at <= 3 << 20  # what arrived before the reset is kept
    assert r.bytes_downloaded == len(data) == resumed_at + second.bytes_sent


async def test_bytes_received_before_a_reset_are_kept_however_few(hub: FakeHub, tmp_path: Path) -> None:
    # A link that drops every connection after 64 KiB: the bytes of each body arrive all at
    # once with the end of the connection, before the reader has read any of them.
    data = os.urandom(1 << 20)
    blob = BytesBlob(data, lfs=True)
    _add(hub, REPO, RepoFile("big.bin", blob))
    resets = 10  # twice the downloader's attempts without progress
    hub.faults.add(Fault("reset", route="cdn", after_bytes=64 << 10, times=resets))
    cache = DownloadCache(tmp_path / "cache", max_bytes=4 << 20)

    async def no_wait(_: float) -> None:
        pass

    async with Downloader(HttpOptions(endpoint=hub.endpoint, token=TOKEN), sleep=no_wait) as dl:
        got = await cache.fetch(dl, hub.resolve_url(REPO, "big.bin"), blob.sha256, len(data))
    assert got.path.read_bytes() == data and got.bytes_downloaded == len(data)
    cdn = hub.requests_to("cdn")
    assert len(cdn) == resets + 1
    served = 0
    for req in cdn:  # each request asks for the bytes after those served before it
        assert req.range == (f"bytes={served}-" if served else None)
        served += req.bytes_sent
    assert served == len(data)  # not a byte sent twice


async def test_partial_file_is_continued_and_cache_hits_download_nothing(
    hub: FakeHub, tmp_path: Path
) -> None:
    data = write_tiny(tmp_path / "tiny.gguf").read_bytes()
    blob = BytesBlob(data, lfs=True)
    _add(hub, REPO, RepoFile("tiny.gguf", blob))
    settings = _settings(hub, tmp_path)
    partial = settings.cache_dir / "partial" / blob.sha256
    partial.parent.mkdir(parents=True)
    partial.write_bytes(data[:1000])  # what a killed worker left behind
    first = await verify_hub(REPO, None, settings)
    assert first.bytes_downloaded == len(data) - 1000
    assert [req.range for req in hub.requests_to("cdn")] == ["bytes=1000-"]
    again = await verify_hub(REPO, None, settings)
    assert again.bytes_downloaded == 0 and again.sha256 == first.sha256 == [blob.sha256]
    assert len(hub.requests_to("cdn")) == 1


async def test_short_file_on_the_server_is_truncated(hub: FakeHub, tmp_path: Path) -> None:
    data = write_tiny(tmp_path / "tiny.gguf").read_bytes()
    blob = BytesBlob(data, lfs=True)
    _add(hub, REPO, RepoFile("tiny.gguf", blob))
    settings = _settings(hub, tmp_path)
    url = f"{hub.endpoint}/{REPO}/resolve/main/tiny.gguf"
    listed = ShardSource("tiny.gguf", url=url, size=len(data) + 4096, sha256=blob.sha256, key=blob.sha256)
    r = await verify_shards([listed], settings)
    assert (r.status, r.reason) == ("failed", "truncated"), r.message


async def test_target_errors(hub: FakeHub, tmp_path: Path) -> None:
    data = write_tiny(tmp_path / "tiny.gguf").read_bytes()
    _add(
        hub,
        REPO,
        RepoFile("a.gguf", BytesBlob(data, lfs=True)),
        RepoFile("b.gguf", BytesBlob(data + b"x", lfs=True)),
    )
    settings = _settings(hub, tmp_path)
    with pytest.raises(TargetError, match="2 GGUF artifacts"):
        await verify_hub(REPO, None, settings)
    with pytest.raises(TargetError, match="no GGUF file"):
        await verify_hub(REPO, "c.gguf", settings)


async def test_cache_evicts_least_recently_used(hub: FakeHub, tmp_path: Path) -> None:
    blobs = [BytesBlob(bytes([i]) * 1000, lfs=True) for i in range(3)]
    _add(hub, REPO, *(RepoFile(f"f{i}.bin", b) for i, b in enumerate(blobs)))
    cache = DownloadCache(tmp_path / "cache", max_bytes=2500)
    async with Downloader(HttpOptions(endpoint=hub.endpoint, token=TOKEN)) as dl:
        for i in (0, 1):
            await cache.fetch(dl, hub.resolve_url(REPO, f"f{i}.bin"), blobs[i].sha256, 1000)
        os.utime(cache.path_for(blobs[0].sha256), (1, 1))  # f0 used long ago, f1 recently
        got = await cache.fetch(dl, hub.resolve_url(REPO, "f2.bin"), blobs[2].sha256, 1000)
    assert got.bytes_downloaded == 1000 and not got.hit
    assert sorted(p.name for p in cache.blobs.iterdir()) == sorted([blobs[1].sha256, blobs[2].sha256])
    assert cache.usage() == 2000


def test_cache_keys() -> None:
    oid = "A" * 64
    assert cache_key(oid, repo_id="r/x", revision=None, path="p") == oid.lower()
    plain = cache_key(None, repo_id="r/x", revision="abc", path="p")
    assert len(plain) == 64 and plain != cache_key(None, repo_id="r/x", revision="abd", path="p")


def test_pick_artifact_finds_every_shard() -> None:
    files = tuple(
        RepoFileInfo(p, 10, None)
        for p in ("q/m-Q8_0-00002-of-00002.gguf", "q/m-Q8_0-00001-of-00002.gguf", "README.md")
    )
    info = RepoInfo("org/m", "abc", files=files)
    want = ["q/m-Q8_0-00001-of-00002.gguf", "q/m-Q8_0-00002-of-00002.gguf"]
    assert pick_artifact(info, None) == want
    assert pick_artifact(info, "q/m-Q8_0-00002-of-00002.gguf") == want
    broken = RepoInfo("org/m", "abc", files=files[1:])
    with pytest.raises(TargetError, match="1 of 2 shards missing"):
        pick_artifact(broken, None)


def _info(*paths: str) -> RepoInfo:
    return RepoInfo("org/m", "abc", files=tuple(RepoFileInfo(p, 10, None) for p in paths))


def test_pick_artifact_by_quantization_tag() -> None:
    info = _info(
        "m-Q4_K_M.gguf",
        "m-UD-Q4_K_XL.gguf",
        "Q8_0/m-Q8_0-00002-of-00002.gguf",
        "Q8_0/m-Q8_0-00001-of-00002.gguf",
        "mmproj-m-Q8_0.gguf",  # a projector carries the model's label: a tag picks the model
        "m.F16.gguf",
    )
    assert pick_artifact(info, "Q4_K_M") == ["m-Q4_K_M.gguf"]
    assert pick_artifact(info, "q4_k_m") == ["m-Q4_K_M.gguf"]  # any case
    assert pick_artifact(info, "q8_0") == ["Q8_0/m-Q8_0-00001-of-00002.gguf", "Q8_0/m-Q8_0-00002-of-00002.gguf"]
    assert pick_artifact(info, "F16") == pick_artifact(info, "fp16") == ["m.F16.gguf"]
    assert pick_artifact(info, "UD-Q4_K_XL") == pick_artifact(info, "Q4_K_XL") == ["m-UD-Q4_K_XL.gguf"]
    assert pick_artifact(info, "mmproj-m-Q8_0.gguf") == ["mmproj-m-Q8_0.gguf"]  # a path still names it
    with pytest.raises(TargetError, match=r"no model tagged Q2_K; its tags: F16, Q4_K_M, Q8_0, UD-Q4_K_XL$"):
        pick_artifact(info, "Q2_K")
    with pytest.raises(TargetError, match=r"5 GGUF artifacts .*REPO:TAG \(F16, Q4_K_M, Q8_0, UD-Q4_K_XL\)"):
        pick_artifact(info, None)
    with pytest.raises(TargetError, match=r"no GGUF file 'm-Q2_K\.gguf'"):  # a .gguf name is a path, not a tag
        pick_artifact(info, "m-Q2_K.gguf")


def test_a_tag_that_two_models_carry_is_ambiguous() -> None:
    info = _info("a/m-Q4_0.gguf", "b/m-Q4_0.gguf", "c/m-Q4_K_XL.gguf", "d/m-UD-Q4_K_XL.gguf")
    with pytest.raises(TargetError, match=r"2 GGUF models tagged Q4_0 \(a/m-Q4_0.gguf, b/m-Q4_0.gguf\)"):
        pick_artifact(info, "q4_0")
    assert pick_artifact(info, "Q4_K_XL") == ["c/m-Q4_K_XL.gguf"]  # the exact label before a prefixed one
    with pytest.raises(TargetError, match="its file names carry no quantization tags"):
        pick_artifact(_info("model.gguf"), "Q4_0")
    # A split model missing its first shard is still the one a tag (or the repo alone) names.
    partial = _info("m-Q8_0-00002-of-00003.gguf", "m-Q8_0-00003-of-00003.gguf")
    for name in ("Q8_0", None):
        with pytest.raises(TargetError, match=r"1 of 3 shards missing, first 'm-Q8_0-00001-of-00003\.gguf'"):
            pick_artifact(partial, name)


async def test_two_verifications_of_one_file_at_once_share_one_download(hub: FakeHub, tmp_path: Path) -> None:
    # Each verification opens a cache of its own over the same folder (as two jobs, or two
    # worker processes on one machine, do): the download must still happen once, whole.
    data = write_tiny(tmp_path / "tiny.gguf", rows=40_000).read_bytes()
    blob = BytesBlob(data, lfs=True)
    _add(hub, REPO, RepoFile("tiny.gguf", blob))
    hub.faults.add(Fault("latency", route="cdn", delay=0.3, times=None))  # both start before either ends
    settings = _settings(hub, tmp_path)
    results = await asyncio.gather(*(verify_hub(REPO, None, settings) for _ in range(2)))
    for r in results:
        assert (r.status, r.reason) == ("skipped", "unsupported_architecture"), r.message
        assert r.sha256 == [blob.sha256]
    assert sorted(r.bytes_downloaded for r in results) == [0, len(data)]
    assert (settings.cache_dir / "blobs" / blob.sha256).read_bytes() == data


async def test_eviction_spares_a_file_in_use(hub: FakeHub, tmp_path: Path) -> None:
    blobs = [BytesBlob(bytes([i]) * 1000, lfs=True) for i in range(2)]
    _add(hub, REPO, *(RepoFile(f"f{i}.bin", b) for i, b in enumerate(blobs)))
    root = tmp_path / "cache"
    async with Downloader(HttpOptions(endpoint=hub.endpoint, token=TOKEN)) as dl:
        first = DownloadCache(root, max_bytes=1500)
        async with first.using([blobs[0].sha256]):  # a verification hashing or checking f0
            await first.fetch(dl, hub.resolve_url(REPO, "f0.bin"), blobs[0].sha256, 1000)
            other = DownloadCache(root, max_bytes=1500)  # another job's cache over the same folder
            await other.fetch(dl, hub.resolve_url(REPO, "f1.bin"), blobs[1].sha256, 1000)
            assert first.path_for(blobs[0].sha256).read_bytes() == bytes([0]) * 1000
    # Out of use, f0 (the least recently used) is the first to go.
    os.utime(first.path_for(blobs[0].sha256), (1, 1))
    assert other.evict(0) == [blobs[0].sha256]


def _abandoned_partial(cache: DownloadCache, key: str, size: int, *, mtime: float = 1.0) -> Path:
    """What a worker killed mid-download (or a download that failed for good) leaves."""
    cache.partial.mkdir(parents=True, exist_ok=True)
    part = cache.partial / key
    part.write_bytes(b"p" * size)
    os.utime(part, (mtime, mtime))
    return part


async def test_eviction_deletes_an_abandoned_partial_when_space_is_needed(
    hub: FakeHub, tmp_path: Path
) -> None:
    blobs = [BytesBlob(bytes([i]) * 1000, lfs=True) for i in range(2)]
    _add(hub, REPO, *(RepoFile(f"f{i}.bin", b) for i, b in enumerate(blobs)))
    cache = DownloadCache(tmp_path / "cache", max_bytes=2500)
    abandoned = _abandoned_partial(cache, "a" * 64, 1000)
    async with Downloader(HttpOptions(endpoint=hub.endpoint, token=TOKEN)) as dl:
        # Room for it: a partial is kept while there is room (the next attempt continues it).
        await cache.fetch(dl, hub.resolve_url(REPO, "f0.bin"), blobs[0].sha256, 1000)
        assert abandoned.exists()
        async with cache.using([blobs[0].sha256]):  # f0 cannot go: the partial must
            await cache.fetch(dl, hub.resolve_url(REPO, "f1.bin"), blobs[1].sha256, 1000)
    assert not abandoned.exists()
    assert cache.usage() == 2000 <= cache.max_bytes
    assert sorted(p.name for p in cache.blobs.iterdir()) == sorted(b.sha256 for b in blobs)


async def test_eviction_deletes_complete_files_before_partials(hub: FakeHub, tmp_path: Path) -> None:
    blobs = [BytesBlob(bytes([i]) * 1000, lfs=True) for i in range(2)]
    _add(hub, REPO, *(RepoFile(f"f{i}.bin", b) for i, b in enumerate(blobs)))
    cache = DownloadCache(tmp_path / "cache", max_bytes=2500)
    async with Downloader(HttpOptions(endpoint=hub.endpoint, token=TOKEN)) as dl:
        await cache.fetch(dl, hub.resolve_url(REPO, "f0.bin"), blobs[0].sha256, 1000)
        partial = _abandoned_partial(cache, "a" * 64, 1000, mtime=1.0)  # older than f0 even
        await cache.fetch(dl, hub.resolve_url(REPO, "f1.bin"), blobs[1].sha256, 1000)
    assert partial.exists()
    assert [p.name for p in cache.blobs.iterdir()] == [blobs[1].sha256]


def test_eviction_spares_a_partial_being_downloaded(tmp_path: Path) -> None:
    cache = DownloadCache(tmp_path / "cache", max_bytes=1000)
    busy = _abandoned_partial(cache, "b" * 64, 800)
    idle = _abandoned_partial(cache, "c" * 64, 800, mtime=2.0)
    cache.locks.mkdir()
    # Another worker is downloading `busy` (its fetch lock held), older though it is.
    fd = os.open(cache.locks / f"{busy.name}.fetch", os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        assert cache.evict(1000) == [idle.name]
    finally:
        os.close(fd)
    assert busy.exists() and not idle.exists()


async def test_lock_files_of_evicted_keys_do_not_pile_up(hub: FakeHub, tmp_path: Path) -> None:
    blobs = [BytesBlob(bytes([i]) * 1000, lfs=True) for i in range(5)]
    _add(hub, REPO, *(RepoFile(f"f{i}.bin", b) for i, b in enumerate(blobs)))
    cache = DownloadCache(tmp_path / "cache", max_bytes=1500)
    async with Downloader(HttpOptions(endpoint=hub.endpoint, token=TOKEN)) as dl:
        for i, blob in enumerate(blobs):
            async with cache.using([blob.sha256]):
                await cache.fetch(dl, hub.resolve_url(REPO, f"f{i}.bin"), blob.sha256, 1000)
    kept = {p.name for p in cache.blobs.iterdir()}
    assert kept == {blobs[-1].sha256}
    # Only the files still cached (and the last one fetched) keep lock files.
    assert {p.name.rpartition(".")[0] for p in cache.locks.iterdir()} == kept


async def test_a_lock_file_deleted_while_waited_for_is_not_locked(tmp_path: Path) -> None:
    # A lock file goes (under its lock) once its key has no file left; someone who opened it
    # just before and was waiting must then lock the file at the path, not the deleted one.
    path = tmp_path / "locks" / f"{'d' * 64}.fetch"
    path.parent.mkdir()
    holder = os.open(path, os.O_RDWR | os.O_CREAT)
    fcntl.flock(holder, fcntl.LOCK_EX)
    got = asyncio.Event()
    release = asyncio.Event()

    async def waiter() -> None:
        async with _flocked(path, fcntl.LOCK_EX):
            got.set()
            await release.wait()

    async def opened() -> bool:  # the waiter has a descriptor of its own on the file
        return any(_link(f) == str(path) for f in Path("/proc/self/fd").iterdir() if int(f.name) != holder)

    task = asyncio.create_task(waiter())
    await wait_for(opened, 10, "the waiter to open the lock file", every=0.01)
    path.unlink()
    os.close(holder)
    await asyncio.wait_for(got.wait(), 10)
    other = os.open(path, os.O_RDWR | os.O_CREAT)
    try:
        with pytest.raises(BlockingIOError):
            fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
    finally:
        os.close(other)
        release.set()
        await task


def _link(fd: Path) -> str | None:
    try:
        return os.readlink(fd)
    except OSError:
        return None


def test_usage_and_eviction_skip_a_file_that_vanished_after_the_listing(tmp_path: Path) -> None:
    # Another worker's eviction deletes a partial, or its download renames one into place,
    # between our listing of the folder and our stat of the entry. A dangling symlink is
    # exactly that entry: listed, and gone when stat looks for it.
    cache = DownloadCache(tmp_path / "cache", max_bytes=1500)
    kept = _abandoned_partial(cache, "e" * 64, 1000, mtime=1.0)
    (cache.partial / ("f" * 64)).symlink_to(cache.partial / "deleted-meanwhile")
    cache.blobs.mkdir()
    (cache.blobs / ("0" * 64)).symlink_to(cache.blobs / "renamed-meanwhile")
    assert cache.usage() == 1000
    assert cache.evict(1000) == [kept.name]
    assert cache.usage() == 0
