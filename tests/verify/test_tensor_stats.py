"""The verifier's per-tensor statistics are the same whether its chunks go to fresh arrays
or to the buffers it keeps for the whole dequantize stage, and on any number of threads."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from registry.quant import parallel
from tests.quant.test_models import read_header
from tests.verify.conftest import header_of, offset_field, patch, write_tiny
from workers.verify_checks import (
    CheckFailed,
    CheckOptions,
    Reason,
    dequantize_threads,
    open_model_file,
    tensor_stats,
    weight_stats,
)


def test_stats_through_one_buffer_equal_stats_through_fresh_arrays(smollm2_path: Path) -> None:
    header = read_header(smollm2_path)
    mm = np.memmap(smollm2_path, dtype=np.uint8, mode="r")
    chunk = 1 << 20  # several chunks for the big tensors
    buffer = np.full(chunk // 4, np.nan, dtype=np.float32)
    tiny = np.empty(100, dtype=np.float32)  # smaller than any row: fresh arrays are used
    tensors = header.tensors[:12]
    assert {t.type.name for t in tensors} >= {"Q8_0", "F32"}
    for t in tensors:
        fresh = tensor_stats(t, mm, big_endian=False, chunk_bytes=chunk)
        shared = tensor_stats(t, mm, big_endian=False, chunk_bytes=chunk, buffer=buffer)
        fallback = tensor_stats(t, mm, big_endian=False, chunk_bytes=chunk, buffer=tiny)
        assert dataclasses.asdict(shared) == dataclasses.asdict(fresh) == dataclasses.asdict(fallback)
        assert fresh.mean is not None and fresh.std is not None and fresh.std > 0
    assert np.isfinite(buffer).any()  # the chunks really went through the buffer


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_weight_stats_are_the_same_on_any_thread_count(smollm2_path: Path, threads: int) -> None:
    mf = open_model_file(smollm2_path)
    chunk = 8 << 20  # pieces of 1 MiB: the big tensors are cut into several
    got = weight_stats([mf], CheckOptions(chunk_bytes=chunk, threads=threads))
    # Each tensor's pieces are merged in order: exactly what one pass over the same pieces
    # gives, and the pieces do not depend on the thread count.
    piece = chunk // parallel.MAX_THREADS
    want = [tensor_stats(t, mf._data, big_endian=False, chunk_bytes=piece) for t in mf.header.tensors]
    assert [t.name for t in got] == [t.name for t in mf.header.tensors]
    assert [dataclasses.asdict(t) for t in got] == [dataclasses.asdict(t) for t in want]
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
