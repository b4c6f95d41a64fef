"""Memory: big results that would get fresh memory get it aligned to huge pages instead,
and the kernels keep their workspaces from one call to the next."""

from __future__ import annotations

import gc
import platform
import subprocess
import sys
import threading

import numpy as np
import pytest

from registry.gguf.types import GGMLType
from registry.quant import dequantize, dequantize_chunks, workspace
from tests.quant.helpers import assert_same_bits
from tests.quant.refgen import random_blocks

HUGE_PAGES = workspace._MADV_HUGEPAGE is not None and workspace._ANONYMOUS is not None


def test_small_results_are_numpy_arrays(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(workspace, "_freshly_mapped", lambda values: True)
    small = workspace.new_values(workspace.ALIGNED_BYTES // 4 - 1)
    assert small.flags.owndata and small.dtype == np.float32


def test_reused_memory_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(workspace, "_freshly_mapped", lambda values: False)
    big = workspace.new_values(workspace.ALIGNED_BYTES // 4)
    assert big.flags.owndata and big.size == workspace.ALIGNED_BYTES // 4


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="how glibc lays out its mappings")
def test_a_fresh_big_numpy_array_is_seen_as_freshly_mapped() -> None:
    # 256 MiB (never touched) is far above glibc's largest mmap threshold and bigger than
    # any free memory it keeps: a mapping of its own
    assert workspace._freshly_mapped(np.empty(64 << 20, dtype=np.float32))
    assert not workspace._freshly_mapped(np.empty(16, dtype=np.float32)[1:])


@pytest.mark.skipif(not HUGE_PAGES, reason=f"no MADV_HUGEPAGE or MAP_ANONYMOUS on {sys.platform}")
@pytest.mark.parametrize("n", [workspace.ALIGNED_BYTES // 4, workspace.ALIGNED_BYTES // 4 + 1234567])
def test_big_results_start_on_a_huge_page(n: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(workspace, "_freshly_mapped", lambda values: True)
    values = workspace.new_values(n)
    assert values.shape == (n,) and values.dtype == np.float32
    assert values.flags.c_contiguous and values.flags.writeable and not values.flags.owndata
    assert values.ctypes.data % workspace.HUGE_PAGE == 0
    values[:] = np.arange(n, dtype=np.float32)
    view = values[n // 2 :]
    del values
    gc.collect()  # the mapping lives on with its last view
    assert view[0] == np.float32(n // 2) and view[-1] == np.float32(n - 1)


@pytest.mark.parametrize(
    "t", [GGMLType.Q4_0, GGMLType.Q6_K, GGMLType.IQ4_NL, GGMLType.F16], ids=lambda t: t.name
)
def test_results_in_aligned_memory_are_the_same(t: GGMLType, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(int(t))
    blocks = random_blocks(t, 4096, rng)
    n = blocks.shape[0] * (256 if t == GGMLType.Q6_K else 32 if t != GGMLType.F16 else 1)
    plain = dequantize(blocks, t, n, threads=2)
    monkeypatch.setattr(workspace, "ALIGNED_BYTES", 0)  # every result through new_values' mapping
    monkeypatch.setattr(workspace, "_freshly_mapped", lambda values: True)
    aligned = dequantize(blocks, t, n, threads=2)
    assert_same_bits(aligned, plain)
    assert plain.flags.owndata and (not aligned.flags.owndata or not HUGE_PAGES)
    pieces = [piece.reshape(-1) for _, piece in dequantize_chunks(blocks, t, (n // 8, 8), max_bytes=n)]
    assert len(pieces) == 4
    assert_same_bits(np.concatenate(pieces), plain)


def test_failed_mapping_falls_back_to_numpy(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> object:
        raise OSError(12, "Cannot allocate memory")

    monkeypatch.setattr(workspace.mmap, "mmap", refuse)
    monkeypatch.setattr(workspace, "_freshly_mapped", lambda values: True)
    values = workspace.new_values(workspace.ALIGNED_BYTES // 4)
    assert values.flags.owndata and values.size == workspace.ALIGNED_BYTES // 4


def test_the_pool_lends_each_workspace_to_one_caller_and_keeps_a_few() -> None:
    pool = workspace._WorkspacePool(keep=2, max_bytes=1 << 20)
    with pool.lend() as a, pool.lend() as b, pool.lend() as c:
        assert len({id(a), id(b), id(c)}) == 3
    with pool.lend() as x, pool.lend() as y, pool.lend() as z:
        assert {id(x), id(y)} <= {id(a), id(b), id(c)}  # two were kept
        assert z not in (a, b, c)
    with pytest.raises(RuntimeError), pool.lend() as w:
        raise RuntimeError("a kernel failed")
    with pool.lend() as again:
        assert again is w  # returned even when the call failed
        again.get("big", (1 << 20,), np.uint8)
        again.get("more", (1,), np.uint8)
    with pool.lend() as fresh:
        assert fresh is not again and fresh.nbytes == 0  # grown past max_bytes: not kept


def test_workspace_buffers_are_reused_by_name_and_grow() -> None:
    ws = workspace.Workspace()
    a = ws.get("x", (4, 8), np.float32)
    b = ws.get("x", (2, 8), np.int32)
    assert b.ctypes.data == a.ctypes.data and b.shape == (2, 8) and b.dtype == np.int32
    c = ws.get("x", (16, 8), np.float32)
    assert c.shape == (16, 8) and ws.nbytes == 16 * 8 * 4
    assert ws.get("y", (3,), np.uint8).ctypes.data != c.ctypes.data


@pytest.mark.parametrize(("t", "name"), [(GGMLType.IQ4_NL, "rows"), (GGMLType.Q4_K, "d"), (GGMLType.Q6_K, "codes")])
def test_kernels_reuse_workspace_memory_across_calls_and_threads(
    t: GGMLType, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    pool = workspace._WorkspacePool(keep=1, max_bytes=workspace.MAX_KEPT_BYTES)
    monkeypatch.setattr(workspace, "_POOL", pool)
    n_blocks = 4096
    blocks = random_blocks(t, n_blocks, np.random.default_rng(3))
    n = n_blocks * (32 if t == GGMLType.IQ4_NL else 256)
    first = dequantize(blocks, t, n, threads=1)
    (ws,) = pool._free
    buffer = ws._buffers[name]
    results: list[np.ndarray] = []
    helper = threading.Thread(target=lambda: results.append(dequantize(blocks, t, n, threads=1)))
    helper.start()
    helper.join()
    assert pool._free == [ws] and ws._buffers[name] is buffer  # the same memory, on another thread
    assert_same_bits(results[0], first)


_FAULTS_SCRIPT = """
import resource, sys
import numpy as np
from registry.quant import workspace

def one_round():
    # a kernel's temporaries: several alive at once, the biggest 3 MiB (below numpy's
    # huge-page size), every page written, then all freed
    temporaries = [np.empty(size << 10, dtype=np.uint8) for size in (256, 512, 1024, 2048, 3072)]
    for a in temporaries:
        a[::4096] = 1

def faults_per_round():
    one_round()  # the first round after a change may grow the heap: steady state only
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(20):
        one_round()
    return (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 20

first = faults_per_round()
workspace.settle_allocator()
print(first, faults_per_round())
"""


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="tunes glibc's allocator only")
def test_settled_allocator_reuses_freed_temporaries() -> None:
    # a new interpreter: this one's allocator has long been settled by earlier tests
    done = subprocess.run(
        [sys.executable, "-c", _FAULTS_SCRIPT], capture_output=True, text=True, check=True, timeout=60
    )
    before, after = map(float, done.stdout.split())
    assert before >= 700  # the biggest one mapped afresh every round: 768 faults
    assert after < 8  # the same memory, reused
