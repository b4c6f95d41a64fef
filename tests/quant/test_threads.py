"""Dequantizing on several threads: the same bits as one thread, for every type and size."""

from __future__ import annotations

import itertools
import threading
import warnings

import numpy as np
import pytest

from registry.gguf.types import TENSOR_TYPES, GGMLType
from registry.quant import dequantize, dequantize_chunks, parallel, supported_types
from tests.quant.helpers import assert_same_bits
from tests.quant.refgen import random_blocks
from tests.quant.test_basic import BIG_ENDIAN_FIELDS, _swap

ALL = supported_types()


def _blocks(t: GGMLType, n_blocks: int, seed: int = 0) -> np.ndarray:
    return random_blocks(t, n_blocks, np.random.default_rng(seed))


def _n(t: GGMLType, n_blocks: int) -> int:
    return n_blocks * TENSOR_TYPES[t].block_size


@pytest.mark.parametrize("t", ALL, ids=lambda t: t.name)
@pytest.mark.parametrize("n_blocks", [1, 2, 3, 7, 65])
def test_threads_give_the_bits_of_one_thread(t: GGMLType, n_blocks: int) -> None:
    # Tasks of a few blocks each, so that even small tensors are split many ways and
    # task boundaries fall inside what one thread would do in one kernel call.
    step = 5 * TENSOR_TYPES[t].type_size
    blocks = _blocks(t, n_blocks, seed=n_blocks)
    n = _n(t, n_blocks)
    one = dequantize(blocks, t, n, threads=1)
    for threads in (2, 3, 4):
        assert_same_bits(dequantize(blocks, t, n, threads=threads, step_bytes=step), one, f"{t.name} x{threads}")


@pytest.mark.parametrize(
    "t", [GGMLType.Q4_0, GGMLType.Q8_0, GGMLType.Q4_K, GGMLType.F16], ids=lambda t: t.name
)
def test_threads_with_tasks_of_the_real_size(t: GGMLType) -> None:
    # A little over two tasks of STEP_BYTES input: an odd block count, uneven tasks.
    n_blocks = 2 * parallel.STEP_BYTES // TENSOR_TYPES[t].type_size + 37
    blocks = _blocks(t, n_blocks)
    n = _n(t, n_blocks)
    one = dequantize(blocks, t, n, threads=1)
    assert_same_bits(dequantize(blocks, t, n, threads=2), one, t.name)
    assert_same_bits(dequantize(blocks, t, n), one, f"{t.name} default threads")


@pytest.mark.parametrize("t", sorted(BIG_ENDIAN_FIELDS), ids=lambda t: t.name)
def test_threads_big_endian(t: GGMLType) -> None:
    blocks = _blocks(t, 29)
    big = _swap(blocks, BIG_ENDIAN_FIELDS[t])
    n = _n(t, 29)
    swapped = dequantize(big, t, n, big_endian=True, threads=3, step_bytes=3 * TENSOR_TYPES[t].type_size)
    assert_same_bits(swapped, dequantize(blocks, t, n, threads=1))


@pytest.mark.parametrize("t", [GGMLType.Q5_K, GGMLType.Q4_1, GGMLType.BF16], ids=lambda t: t.name)
@pytest.mark.parametrize("max_bytes", [1, 4096, 1 << 30])
def test_chunks_on_threads(t: GGMLType, max_bytes: int) -> None:
    row_len, n_rows = 512, 13
    n = row_len * n_rows
    blocks = _blocks(t, n // TENSOR_TYPES[t].block_size)
    whole = dequantize(blocks, t, n, threads=1)
    chunks = dequantize_chunks(blocks, t, (row_len, n_rows), max_bytes=max_bytes, threads=3,
                               step_bytes=2 * TENSOR_TYPES[t].type_size)  # fmt: skip
    pieces = [p for _, p in chunks]
    assert sum(p.shape[0] for p in pieces) == n_rows
    assert_same_bits(np.concatenate(pieces), whole)


@pytest.mark.parametrize("step_bytes", [0, -1, True, 1.5])
def test_bad_task_sizes_are_refused(step_bytes: object) -> None:
    blocks = _blocks(GGMLType.Q8_0, 4)
    with pytest.raises(ValueError, match="step_bytes"):
        dequantize(blocks, GGMLType.Q8_0, _n(GGMLType.Q8_0, 4), step_bytes=step_bytes)  # type: ignore[arg-type]


@pytest.mark.parametrize("threads", [0, -2, True, 1.5, "2"])
def test_bad_thread_counts_are_refused(threads: object) -> None:
    blocks = _blocks(GGMLType.Q8_0, 4)
    with pytest.raises(ValueError, match="threads"):
        dequantize(blocks, GGMLType.Q8_0, 128, threads=threads)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="threads"):
        dequantize_chunks(blocks, GGMLType.Q8_0, (128,), threads=threads)  # type: ignore[arg-type]


def test_more_threads_than_blocks() -> None:
    blocks = _blocks(GGMLType.Q6_K, 2)
    assert_same_bits(
        dequantize(blocks, GGMLType.Q6_K, 512, threads=64), dequantize(blocks, GGMLType.Q6_K, 512, threads=1)
    )


def test_default_is_one_thread_for_small_tensors_and_bounded_for_big_ones() -> None:
    assert parallel.default_threads(1) == 1
    assert parallel.default_threads(parallel.MIN_ELEMENTS_PER_THREAD - 1) == 1
    big = parallel.default_threads(1 << 40)
    assert 1 <= big <= min(parallel.MAX_THREADS, parallel.available_cpus())


@pytest.mark.parametrize("n_blocks", [1, 2, 5, 1000, 1 << 20])
@pytest.mark.parametrize("threads", [1, 2, 3, 8])
def test_block_ranges_cover_every_block_once(n_blocks: int, threads: int) -> None:
    type_size = 144
    ranges = parallel.block_ranges(n_blocks, type_size, threads)
    assert ranges[0][0] == 0 and ranges[-1][1] == n_blocks
    assert all(a[1] == b[0] for a, b in itertools.pairwise(ranges))
    assert all(
        stop > start and (stop - start) * type_size <= max(type_size, parallel.STEP_BYTES)
        for start, stop in ranges
    )
    assert len(ranges) % threads == 0 or len(ranges) == n_blocks


def test_a_failing_task_raises_in_the_caller_after_all_threads_end() -> None:
    done: list[int] = []

    def work(start: int, stop: int) -> None:
        if start == 3:
            raise RuntimeError("task 3 failed")
        done.append(start)

    before = threading.active_count()
    with pytest.raises(RuntimeError, match="task 3 failed"):
        parallel.run_tasks(work, [(i, i + 1) for i in range(8)], 3)
    assert threading.active_count() == before
    assert 3 not in done


def test_threads_that_cannot_start_leave_the_work_to_this_one(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(self: threading.Thread) -> None:
        raise RuntimeError("can't start new thread")

    t = GGMLType.Q4_K
    blocks = _blocks(t, 9)
    one = dequantize(blocks, t, _n(t, 9), threads=1)
    monkeypatch.setattr(threading.Thread, "start", refuse)
    assert_same_bits(dequantize(blocks, t, _n(t, 9), threads=4, step_bytes=TENSOR_TYPES[t].type_size), one)


def test_nan_scales_raise_no_warning_on_helper_threads() -> None:
    # numpy's error state is per thread: helpers must silence it themselves. A warning
    # turned into an error on a helper thread is raised here by run_tasks.
    t = GGMLType.Q4_0
    blocks = _blocks(t, 64)
    blocks[:, 0:2].view("<u2")[:, 0] = 0x7C00  # Inf scales: Inf * 0 is an invalid operation
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        values = dequantize(blocks, t, _n(t, 64), threads=4, step_bytes=4 * TENSOR_TYPES[t].type_size)
    assert np.isnan(values).any() and np.isinf(values).any()


def test_concurrent_calls_from_several_threads() -> None:
    # Callers on their own threads, each splitting its call again: no shared scratch state.
    types = [GGMLType.Q4_K, GGMLType.Q5_K, GGMLType.Q6_K, GGMLType.Q4_1, GGMLType.IQ4_XS, GGMLType.F16]
    inputs = [(t, _blocks(t, 301, seed=i)) for i, t in enumerate(types)]
    expected = [dequantize(b, t, _n(t, 301), threads=1) for t, b in inputs]
    results: list[list[np.ndarray]] = [[] for _ in inputs]

    def call(i: int) -> None:
        t, b = inputs[i]
        for _ in range(5):
            results[i].append(dequantize(b, t, _n(t, 301), threads=3, step_bytes=7 * 210))

    callers = [threading.Thread(target=call, args=(i,)) for i in range(len(inputs))]
    for c in callers:
        c.start()
    for c in callers:
        c.join()
    for (t, _), want, got in zip(inputs, expected, results, strict=True):
        assert len(got) == 5
        for values in got:
            assert_same_bits(values, want, t.name)


def test_steps_are_the_shared_ones_only_on_threads_of_a_run_on_several() -> None:
    seen: dict[tuple[int, int], int] = {}

    def work(start: int, stop: int) -> None:
        seen[(start, stop)] = parallel.step(10, 40)

    assert parallel.step(10, 40) == 10
    parallel.run_tasks(work, [(i, i + 1) for i in range(6)], 2)
    assert seen == {(i, i + 1): 40 for i in range(6)}
    assert parallel.step(10, 40) == 10  # this thread took tasks too, and is itself again
    seen.clear()
    parallel.run_tasks(work, [(i, i + 1) for i in range(3)], 1)
    assert seen == {(i, i + 1): 10 for i in range(3)}  # one thread: nothing runs beside it


@pytest.mark.parametrize(
    "t", [GGMLType.Q4_0, GGMLType.Q5_1, GGMLType.Q8_0, GGMLType.Q3_K, GGMLType.Q6_K, GGMLType.F16, GGMLType.BF16]
)
def test_shared_steps_give_the_bits_of_steps_alone(t: GGMLType) -> None:
    # More values than two of the longest steps and then some, so that every loop wraps.
    n_blocks = (1 << 21) // TENSOR_TYPES[t].block_size * 2 + 5
    blocks = _blocks(t, n_blocks)
    n = _n(t, n_blocks)
    alone = dequantize(blocks, t, n, threads=1)
    shared: list[np.ndarray] = []
    # Each task dequantizes the whole tensor on its own thread, with the shared steps.
    parallel.run_tasks(lambda a, b: shared.append(dequantize(blocks, t, n, threads=1)), [(0, 1), (1, 2)], 2)
    assert len(shared) == 2
    for values in shared:
        assert_same_bits(values, alone)
