"""The sha256 of local files kept between runs (`workers.hashes`), on real files and a real
SQLite file; the hasher is the real one, wrapped to count the files it reads."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from workers.cache import sha256_file
from workers.hashes import FileHashes


class CountingHasher:
    def __init__(self) -> None:
        self.read: list[Path] = []

    async def __call__(self, path: Path) -> str:
        self.read.append(path)
        return await sha256_file(path)


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def hasher() -> CountingHasher:
    return CountingHasher()


async def test_an_unchanged_file_is_read_once(tmp_path: Path, hasher: CountingHasher) -> None:
    f = tmp_path / "model.gguf"
    f.write_bytes(b"GGUF one")
    hashes = FileHashes(tmp_path / "hashes.sqlite", hasher=hasher)
    assert await hashes.sha256(f) == _sha(b"GGUF one")
    assert await hashes.sha256(f) == _sha(b"GGUF one")
    hashes.close()
    # another run, through a link to it: the same file
    link = tmp_path / "link.gguf"
    link.symlink_to(f)
    again = FileHashes(tmp_path / "hashes.sqlite", hasher=hasher)
    assert await again.sha256(link) == _sha(b"GGUF one")
    assert hasher.read == [f]
    assert await again.sha256(f, fresh=True) == _sha(b"GGUF one")
    assert hasher.read == [f, f]


async def test_a_file_written_again_is_hashed_again(tmp_path: Path, hasher: CountingHasher) -> None:
    f = tmp_path / "model.gguf"
    f.write_bytes(b"GGUF one")
    hashes = FileHashes(tmp_path / "hashes.sqlite", hasher=hasher)
    await hashes.sha256(f)
    st = f.stat()
    f.write_bytes(b"GGUF two")  # the same size, in place
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))  # its modification time set back, as cp -p would
    assert f.stat().st_mtime_ns == st.st_mtime_ns and f.stat().st_ino == st.st_ino
    assert await hashes.sha256(f) == _sha(b"GGUF two")
    # replaced by another file (a new inode) with the old stamps
    other = tmp_path / "other"
    other.write_bytes(b"GGUF 333")
    os.utime(other, ns=(st.st_atime_ns, st.st_mtime_ns))
    other.replace(f)
    assert await hashes.sha256(f) == _sha(b"GGUF 333")
    assert len(hasher.read) == 3


async def test_a_file_that_changes_while_it_is_read_is_not_kept(tmp_path: Path) -> None:
    f = tmp_path / "model.gguf"
    f.write_bytes(b"GGUF growing")
    reads = 0

    async def appending(path: Path) -> str:
        nonlocal reads
        reads += 1
        digest = await sha256_file(path)
        if reads == 1:
            with path.open("ab") as out:  # a download still writing it
                out.write(b" more")
        return digest

    hashes = FileHashes(tmp_path / "hashes.sqlite", hasher=appending)
    assert await hashes.sha256(f) == _sha(b"GGUF growing")
    assert hashes.remembered(f) is None
    assert await hashes.sha256(f) == _sha(b"GGUF growing more")
    assert hashes.remembered(f) == _sha(b"GGUF growing more") and reads == 2


async def test_the_least_recently_used_are_dropped_beyond_the_cap(tmp_path: Path, hasher: CountingHasher) -> None:
    files = []
    for i in range(3):
        files.append(tmp_path / f"m{i}.gguf")
        files[-1].write_bytes(b"GGUF %d" % i)
    hashes = FileHashes(tmp_path / "hashes.sqlite", max_hashes=2, hasher=hasher)
    for f in files:
        await hashes.sha256(f)
    assert [hashes.remembered(f) is not None for f in files] == [False, True, True]
    hashes.remembered(files[1])  # used: files[2] is now the oldest
    await hashes.sha256(files[0])
    assert [hashes.remembered(f) is not None for f in files] == [True, True, False]
    assert len(hasher.read) == 4


async def test_a_damaged_or_unwritable_store_costs_only_the_memory(tmp_path: Path, hasher: CountingHasher) -> None:
    f = tmp_path / "model.gguf"
    f.write_bytes(b"GGUF one")
    damaged = tmp_path / "damaged.sqlite"
    damaged.write_bytes(b"not a database" * 100)
    blocked = tmp_path / "a-file"
    blocked.write_bytes(b"")
    for store in (damaged, blocked / "hashes.sqlite", None):
        hashes = FileHashes(store, hasher=hasher)
        for _ in range(2):
            assert await hashes.sha256(f) == _sha(b"GGUF one")
        assert hashes.remembered(f) is None
        hashes.close()
    assert len(hasher.read) == 6
    assert damaged.read_bytes() == b"not a database" * 100  # left as it was
    with pytest.raises(FileNotFoundError):
        await FileHashes(tmp_path / "hashes.sqlite").sha256(tmp_path / "absent.gguf")


async def test_a_hash_taken_before_a_rename_is_kept_for_the_new_name(tmp_path: Path) -> None:
    part = tmp_path / "model.gguf.partial"
    part.write_bytes(b"GGUF whole")
    hashed = part.stat()
    digest = await sha256_file(part)
    dest = tmp_path / "model.gguf"
    part.replace(dest)
    hashes = FileHashes(tmp_path / "hashes.sqlite")
    hashes.remember(dest, digest, hashed)
    assert hashes.remembered(dest) == _sha(b"GGUF whole")
    # not for a file that is not the one hashed
    other = tmp_path / "other.gguf"
    other.write_bytes(b"GGUF whole")
    hashes.remember(other, digest, hashed)
    assert hashes.remembered(other) is None
