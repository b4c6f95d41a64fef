"""Reading headers of local files: windows, retries on NeedMoreData, bounds and read errors."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import pytest

from registry.gguf.errors import GGUFError, LimitExceeded, TruncatedFile
from registry.gguf.limits import Limits
from registry.hub.local import (
    LocalReadError,
    read_artifact_headers,
    read_header,
    read_header_async,
    shard_paths,
)
from tests.gguf.gguf_py import gguf_reader


def test_whole_header_in_first_window(smollm2_path: Path) -> None:
    local = read_header(smollm2_path)
    ref = gguf_reader(smollm2_path)
    assert local.reads == 1
    assert local.file_size == smollm2_path.stat().st_size
    assert local.header.data_offset == ref.data_offset
    assert local.header.tensor_count == len(ref.tensors)
    # only the first window was read, not the 94 MiB of tensor data
    assert local.bytes_read == 2 * 1024 * 1024


def test_small_first_window_reads_more(gemma3_path: Path) -> None:
    local = read_header(gemma3_path, first_window=4096)
    whole = read_header(gemma3_path, first_window=16 << 20)
    assert whole.reads == 1
    assert local.header.data_offset == whole.header.data_offset == 6_525_120
    assert local.header.tensors == whole.header.tensors
    assert len(local.header.get("tokenizer.ggml.tokens")) == 262144
    assert 2 <= local.reads <= 4  # the parser's estimate saves most round trips
    assert local.header.data_offset <= local.bytes_read < local.file_size


def test_header_larger_than_allowed(gemma3_path: Path) -> None:
    # gemma's header is 6.2 MiB; allow 1 MiB.
    with pytest.raises(LimitExceeded) as exc:
        read_header(gemma3_path, first_window=4096, limits=Limits(max_header_bytes=1 << 20))
    assert isinstance(exc.value, GGUFError)


def test_truncated_header(tmp_path: Path, gemma3_path: Path) -> None:
    cut = tmp_path / "cut.gguf"
    with gemma3_path.open("rb") as f:
        cut.write_bytes(f.read(3_000_000))
    with pytest.raises(TruncatedFile):
        read_header(cut, first_window=1024)


@pytest.mark.parametrize(
    ("kind", "message"),
    [
        ("missing", "no such file"),
        ("directory", "is a directory, not a file"),
        ("fifo", "not a regular file"),
    ],
)
def test_unreadable(tmp_path: Path, kind: str, message: str) -> None:
    path = tmp_path / "x.gguf"
    if kind == "directory":
        path.mkdir()
    elif kind == "fifo":
        os.mkfifo(path)  # opening it would block forever: it must not be opened
    with pytest.raises(LocalReadError) as exc:
        read_header(path)
    err = exc.value
    assert err.code == "read_error" and err.path == str(path)
    assert err.to_dict()["message"] == message


async def test_async_wrapper(smollm2_path: Path) -> None:
    local = await read_header_async(smollm2_path, first_window=1 << 16)
    assert local.header.get("general.architecture") == "llama"
    assert local.reads >= 2


def test_shard_paths(tmp_path: Path) -> None:
    single = tmp_path / "m.gguf"
    assert shard_paths(single) == [single]
    names = [f"m-0000{i}-of-00003.gguf" for i in (1, 2, 3)]
    for n in names[:2]:
        (tmp_path / n).write_bytes(b"")
    with pytest.raises(LocalReadError, match=r"1 of 3 shards missing: m-00003-of-00003\.gguf"):
        shard_paths(tmp_path / names[1])
    (tmp_path / names[2]).write_bytes(b"")
    assert shard_paths(tmp_path / names[2]) == [tmp_path / n for n in names]
    # empty shard files are found, then fail as GGUF files, not as missing ones
    with pytest.raises(GGUFError) as exc:
        read_artifact_headers(tmp_path / names[0])
    assert not isinstance(exc.value, LocalReadError)


def test_file_shrinking_while_read(
    tmp_path: Path, gemma3_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The size measured at open says 253 MB but only 3 MB are there by the time of reading.
    cut = tmp_path / "cut.gguf"
    with gemma3_path.open("rb") as f:
        cut.write_bytes(f.read(3_000_000))
    real_fstat = os.fstat

    def stale_fstat(fd: int) -> os.stat_result:
        st = real_fstat(fd)
        return os.stat_result((st.st_mode, st.st_ino, st.st_dev, st.st_nlink, st.st_uid, st.st_gid,
                               gemma3_path.stat().st_size, 0, 0, 0))  # fmt: skip

    monkeypatch.setattr(os, "fstat", stale_fstat)
    with pytest.raises(TruncatedFile, match="ended at byte 3000000 while being read"):
        read_header(cut, first_window=1 << 20)


def test_fifo_swapped_in_after_the_stat(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A regular file when measured, a FIFO by the time it is opened: a plain open blocks
    until some writer comes, for ever in an indexing run."""
    regular = tmp_path / "regular.gguf"
    regular.write_bytes(b"")
    fifo = tmp_path / "x.gguf"
    os.mkfifo(fifo)
    real_stat = os.stat

    def stale_stat(path: str, *args: Any, **kwargs: Any) -> os.stat_result:
        return real_stat(regular if path == str(fifo) else path, *args, **kwargs)

    # A writer that comes once any reader opens, so that without the fix the read ends
    # (at end of file, with the wrong error) instead of hanging the suite.
    writer = threading.Thread(target=lambda: open(fifo, "wb").close(), daemon=True)
    writer.start()
    monkeypatch.setattr(os, "stat", stale_stat)
    try:
        with pytest.raises(LocalReadError, match="not a regular file"):
            read_header(fifo)
    finally:
        monkeypatch.undo()
        reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # held until the writer got its open
        writer.join()
        os.close(reader)
