"""The verifier's per-tensor statistics are the same whether its chunks go to fresh arrays
or to the buffers it keeps for the whole dequantize stage, and on any number of threads."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from registry.quant import TensorRows, dequantize_chunks, parallel
from registry.runner import ModelFile
from tests.verify.conftest import header_of, offset_field, patch, write_tiny
from workers.verify_checks import (
    CheckFailed,
    CheckOptions,
    Reason,
    TensorStats,
    _merged,
    _part,
    dequantize_threads,
    open_model_file,
    weight_stats,
)


def _one_pass(mf: ModelFile, piece_bytes: int) -> list[dict[str, object]]:
    """Each tensor's statistics in one pass on one thread over fresh arrays, with the pieces
    weight_stats makes for `piece_bytes`: what every way of running it must give."""
    out = []
    for t in mf.header.tensors:
        raw = mf._data[t.file_offset : t.file_offset + t.n_bytes]
        pieces = dequantize_chunks(raw, t.type, t.shape, max_bytes=piece_bytes, threads=1)
        stats = _merged(TensorStats(t.name, t.type.name, t.n_elements), (_part(p.reshape(-1)) for _, p in pieces))
        out.append(dataclasses.asdict(stats))
    return out


def _spy_on_outputs(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Records, for every piece the verifier dequantizes, whether it went into a buffer."""
    into_buffer: list[bool] = []
    real = TensorRows.dequantize

    def spy(self: TensorRows, first: int, count: int, **kw: object) -> np.ndarray:
        into_buffer.append(kw.get("out") is not None)
        return real(self, first, count, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(TensorRows, "dequantize", spy)
    return into_buffer


def test_stats_through_the_buffers_equal_stats_through_fresh_arrays(
    smollm2_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mf = open_model_file(smollm2_path)
    assert {t.type.name for t in mf.header.tensors} >= {"Q4_1", "Q8_0", "F32"}
    chunk = 8 << 20  # pieces of 1 MiB: the big tensors are cut into several
    want = _one_pass(mf, chunk // parallel.MAX_THREADS)
    into_buffer = _spy_on_outputs(monkeypatch)
    got = weight_stats([mf], CheckOptions(chunk_bytes=chunk, threads=2))
    assert [dataclasses.asdict(t) for t in got] == want
    assert into_buffer and all(into_buffer)  # every piece really went through a buffer
    assert all(t.mean is not None and t.std is not None and t.std > 0 for t in got if t.n_elements > 1)


def test_rows_longer_than_a_piece_get_arrays_of_their_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mf = open_model_file(write_tiny(tmp_path / "tiny.gguf"))
    assert {t.shape[0] for t in mf.header.tensors} == {32}
    chunk = 8 * 64  # pieces of 64 bytes: 16 values, half a row
    want = _one_pass(mf, chunk // parallel.MAX_THREADS)
    into_buffer = _spy_on_outputs(monkeypatch)
    got = weight_stats([mf], CheckOptions(chunk_bytes=chunk, threads=2))
    assert [dataclasses.asdict(t) for t in got] == want
    assert len(into_buffer) == 64 + 64 + 1 and not any(into_buffer)  # a piece per row, none in a buffer
    assert all(t.std is not None for t in got)


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_weight_stats_are_the_same_on_any_thread_count(smollm2_path: Path, threads: int) -> None:
    mf = open_model_file(smollm2_path)
    chunk = 8 << 20  # pieces of 1 MiB: the big tensors are cut into several
    got = weight_stats([mf], CheckOptions(chunk_bytes=chunk, threads=threads))
    # Each tensor's pieces are merged in order: exactly what one pass over the same pieces
    # gives, and the pieces do not depend on the thread count.
    piece = chunk // parallel.MAX_THREADS
    assert [t.name for t in got] == [t.name for t in mf.header.tensors]
    assert [dataclasses.asdict(t) for t in got] == _one_pass(mf, piece)
    big = max(mf.header.tensors, key=lambda t: t.n_elements)
    assert big.n_elements * 4 > 4 * piece  # so the biggest tensor was really cut
    assert all(t.std is not None and t.std > 0 for t in got if t.n_elements > 1)


@pytest.mark.parametrize("threads", [1, 2])
def test_weight_stats_names_the_first_bad_tensor_in_file_order(tmp_path: Path, threads: int) -> None:
    path = write_tiny(tmp_path / "bad.gguf")
    tensors = header_of(path).tensors
    for info in tensors[1:]:  # ggml type 4, Q4_2, long removed
        patch(path, offset_field(info) - 4, (4).to_bytes(4, "little"))
    with pytest.raises(CheckFailed) as caught:
        weight_stats([open_model_file(path)], CheckOptions(threads=threads))
    assert caught.value.reason == Reason.UNSUPPORTED_TYPE
    assert repr(tensors[1].name) in caught.value.message


def test_weight_stats_thread_count() -> None:
    cpus = parallel.available_cpus()
    assert dequantize_threads(0, 1000) == min(cpus, parallel.MAX_THREADS)
    assert dequantize_threads(3, 1000) == 3
    assert dequantize_threads(5, 2) == 2  # never more threads than pieces
    assert dequantize_threads(64, 1000) == parallel.MAX_THREADS
    with pytest.raises(ValueError, match="positive"):
        dequantize_threads(-1, 10)
