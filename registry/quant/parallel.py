"""Running a kernel over the blocks of one tensor on several threads.

numpy releases the GIL inside its loops, so threads running kernels on different blocks
really do run at the same time. The blocks are cut into ranges (tasks) that the threads
take one after the other, each writing its own slice of the one output array: no copy of
the tensor per thread, temporaries bounded per task, and results identical to one
thread's, since every block is dequantized on its own.

Tasks are taken from a shared queue rather than dealt out in advance: when a big tensor
makes more tasks than threads, a thread slowed down by other load on the machine simply
takes fewer of them.
"""

from __future__ import annotations

import itertools
import operator
import os
import threading
from collections.abc import Callable

import numpy as np

# Input bytes per task at most: bounds each thread's temporaries (and the big-endian copy)
# and lets a memmap be read piece by piece.
STEP_BYTES = 8 << 20
# A cap: with more threads, writing the output to memory rather than the arithmetic sets
# the pace, and each thread holds its own temporaries.
MAX_THREADS = 8
# Below this many output values per thread, a second thread costs more than it saves.
# Measured on 2 CPUs shared with other work: starting and joining a thread that has to
# wait for a CPU took 0.1-0.5 ms, and two threads were still 5-15% slower than one up to
# 2 Mi values (with a CPU free, 1.7-1.8x faster at 16 Mi); a thread per 1 Mi values keeps
# small tensors, whose calls take a few ms at most, on one thread.
MIN_ELEMENTS_PER_THREAD = 1 << 20

# Per thread: `shared` is True while the thread is a worker of a run on several threads.
_local = threading.local()


def step(alone: int, shared: int) -> int:
    """How many blocks (or values) a kernel takes per numpy call on this thread: `alone`,
    or `shared` inside a run_tasks worker of a run on several threads.

    Short steps keep a step's temporaries in the core's own cache from one numpy pass to
    the next. But every numpy call ends by taking the GIL back, and while another thread
    is running kernels too that often means waiting for it: two processes, each
    dequantizing half of a tensor on one thread, got through 8% (Q8_0), 20% (Q4_0) and 42%
    (Q6_K) more values per second together than two threads of one process (a 2-CPU VM,
    one short run each). Longer steps mean fewer calls and fewer waits, so the kernels take
    longer ones when they share the process.
    """
    return shared if getattr(_local, "shared", False) else alone


def available_cpus() -> int:
    """CPUs this process may run on (its affinity mask where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def default_threads(n_elements: int) -> int:
    """Threads worth using for a tensor of `n_elements` values: one per available CPU, at
    most MAX_THREADS, and one per MIN_ELEMENTS_PER_THREAD values at most."""
    if n_elements < 2 * MIN_ELEMENTS_PER_THREAD:
        return 1  # no system call for the many small tensors of a model
    return max(1, min(available_cpus(), MAX_THREADS, n_elements // MIN_ELEMENTS_PER_THREAD))


def thread_count(threads: int | None, n_elements: int) -> int:
    """`threads` checked (a positive integer), or the default for `n_elements` if None."""
    if threads is None:
        return default_threads(n_elements)
    if isinstance(threads, bool):
        raise ValueError("threads must be a positive integer, not bool")
    try:
        value = operator.index(threads)
    except TypeError:
        raise ValueError(f"threads must be a positive integer, not {type(threads).__name__}") from None
    if value <= 0:
        raise ValueError(f"threads must be positive, got {value}")
    return value


def block_ranges(
    n_blocks: int, type_size: int, threads: int, step_bytes: int = STEP_BYTES
) -> list[tuple[int, int]]:
    """[start, stop) ranges of blocks covering all `n_blocks`, each at most `step_bytes` of
    input (one block at least), their count a multiple of `threads` (so that equal threads
    finish together) unless there are fewer blocks than that."""
    per_step = max(1, step_bytes // type_size)
    n_tasks = -(-n_blocks // per_step)
    n_tasks = min(n_blocks, -(-n_tasks // threads) * threads)
    bounds = [n_blocks * i // n_tasks for i in range(n_tasks + 1)]
    return list(itertools.pairwise(bounds))


def step_bytes_checked(step_bytes: int) -> int:
    """`step_bytes` if it is a positive integer, else ValueError."""
    if isinstance(step_bytes, bool) or not isinstance(step_bytes, int) or step_bytes <= 0:
        raise ValueError(f"step_bytes must be a positive integer, got {step_bytes!r}")
    return step_bytes


def run_blocks(
    work: Callable[[int, int], None], n_blocks: int, type_size: int, threads: int, step_bytes: int = STEP_BYTES
) -> None:
    """Call work(start, stop) over the `block_ranges` of `n_blocks` blocks, on up to
    `threads` threads (see run_tasks)."""
    if threads <= 1 and n_blocks * type_size <= step_bytes:  # the common small case, direct
        with np.errstate(all="ignore"):  # NaN/Inf scales are data, not errors
            work(0, n_blocks)
        return
    run_tasks(work, block_ranges(n_blocks, type_size, threads, step_bytes), threads)


def run_tasks(work: Callable[[int, int], None], tasks: list[tuple[int, int]], threads: int) -> None:
    """Call work(start, stop) for every task, on up to `threads` threads (this one among
    them). The first exception raised by a task is raised here, after every thread ended.

    If the OS refuses to start a thread (an address-space limit, say), the threads that did
    start, this one included, do all the work.
    """
    if threads <= 1 or len(tasks) <= 1:
        with np.errstate(all="ignore"):  # NaN/Inf scales are data, not errors
            for start, stop in tasks:
                work(start, stop)
        return
    queue = iter(tasks)
    lock = threading.Lock()
    errors: list[BaseException] = []

    def worker() -> None:
        shared = getattr(_local, "shared", False)
        _local.shared = True  # kernels on this thread take longer steps (see `step`)
        # numpy's error state is per thread: a new thread starts from the defaults
        try:
            with np.errstate(all="ignore"):
                while True:
                    with lock:
                        task = None if errors else next(queue, None)
                    if task is None:
                        return
                    try:
                        work(*task)
                    except BaseException as exc:  # handed to the caller's thread
                        with lock:
                            errors.append(exc)
                        return
        finally:
            _local.shared = shared

    helpers: list[threading.Thread] = []
    for _ in range(min(threads, len(tasks)) - 1):
        helper = threading.Thread(target=worker, name="dequantize", daemon=True)
        try:
            helper.start()
        except RuntimeError:
            break
        helpers.append(helper)
    try:
        worker()
    finally:
        for helper in helpers:
            helper.join()
    if errors:
        raise errors[0]


__all__ = [
    "MAX_THREADS",
    "MIN_ELEMENTS_PER_THREAD",
    "STEP_BYTES",
    "available_cpus",
    "block_ranges",
    "default_threads",
    "run_blocks",
    "run_tasks",
    "step",
    "thread_count",
]
