"""The checks of a verification that need the whole file: bounds, weights, smoke inference.

`check_files` runs synchronously over local files (every shard of one artifact) and never
raises for anything wrong with them: the verdict is a `CheckReport` with a typed
`Reason`. It is what the child process of `workers.verify_child` runs, under a memory cap
and a wall-clock limit, so that a hostile file costs a failed row and nothing else.

Stages, each timed: `header` (parse, every tensor inside its file), `dequantize` (every
tensor in bounded row chunks, with per-tensor min/max/mean/std and NaN/Inf counts),
`load` (architecture, tokenizer, weights), `perplexity` and `generate`.
"""

from __future__ import annotations

import enum
import math
import os
import resource
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from registry.gguf.errors import GGUFError, InvalidTensor, NeedMoreData, TruncatedFile, UnknownTensorType
from registry.gguf.limits import Limits
from registry.gguf.model import GGUFHeader, TensorInfo
from registry.gguf.reader import next_window, parse_header
from registry.hub.local import shard_paths
from registry.quant import TensorRows, parallel, tensor_rows
from registry.quant.base import DequantError, UnsupportedType
from registry.runner import (
    SMOKE_PROMPT,
    SMOKE_TEXT,
    ModelFile,
    NonFiniteLogits,
    RunnerError,
    TokenizerUnsupported,
    UnsupportedArchitecture,
    load_model,
    load_tokenizer,
    run_smoke,
)


class Reason(enum.StrEnum):
    """Why a verification did not pass. The first ten are the issue's; the rest cover
    what else can go wrong with a file or a run."""

    HASH_MISMATCH = "hash_mismatch"
    TRUNCATED = "truncated"
    TENSOR_OUT_OF_BOUNDS = "tensor_out_of_bounds"
    NONFINITE_WEIGHTS = "nonfinite_weights"
    UNSUPPORTED_TYPE = "unsupported_type"
    UNSUPPORTED_ARCHITECTURE = "unsupported_architecture"
    TOKENIZER_UNSUPPORTED = "tokenizer_unsupported"
    INFERENCE_NONFINITE = "inference_nonfinite"
    PERPLEXITY_TOO_HIGH = "perplexity_too_high"
    TIMEOUT = "timeout"
    INVALID_HEADER = "invalid_header"  # any other format error of the header
    INVALID_MODEL = "invalid_model"  # keys or tensors the architecture needs are missing or wrong
    MEMORY_EXCEEDED = "memory_exceeded"
    DOWNLOAD_FAILED = "download_failed"
    CRASHED = "crashed"  # the child process (or, jobs.max_attempts times, the worker) died without a verdict
    CANCELLED = "cancelled"  # the run was stopped (worker shutdown, job cancelled): no verdict
    HEADER_MISMATCH = "header_mismatch"  # the whole file's header facts differ from the catalog's


# Reasons that say "this registry cannot judge the file", not "the file is bad".
SKIP_REASONS = frozenset(
    {Reason.UNSUPPORTED_TYPE, Reason.UNSUPPORTED_ARCHITECTURE, Reason.TOKENIZER_UNSUPPORTED}
)


def status_for(reason: Reason | None) -> str:
    if reason is None:
        return "passed"
    return "skipped" if reason in SKIP_REASONS else "failed"


class CheckFailed(Exception):
    def __init__(self, reason: Reason, message: str) -> None:
        self.reason = reason
        self.message = message
        super().__init__(f"{reason}: {message}")


@dataclass(frozen=True)
class CheckOptions:
    perplexity_threshold: float = 100.0
    n_generate: int = 8
    chunk_bytes: int = 64 * 1024 * 1024
    # Threads dequantizing tensors at once; 0: one per CPU this process may use (at most
    # parallel.MAX_THREADS).
    threads: int = 0
    # The address-space cap the checks run under (0: none, physical memory bounds them):
    # what decides how many weight matrices the forward pass may hold as float32.
    memory_cap_bytes: int = 0
    limits: Limits = field(default_factory=Limits)
    text: str = SMOKE_TEXT
    prompt: str = SMOKE_PROMPT


@dataclass
class TensorStats:
    name: str
    type: str
    n_elements: int
    min: float | None = None  # over the finite values; None when there are none
    max: float | None = None
    mean: float | None = None
    std: float | None = None
    nan: int = 0
    inf: int = 0


@dataclass
class CheckReport:
    status: str = "passed"
    reason: str | None = None
    message: str | None = None
    architecture: str | None = None
    tensors_checked: int = 0
    nonfinite_values: int = 0
    tensors: list[TensorStats] = field(default_factory=list)
    perplexity: float | None = None
    text_tokens: int | None = None
    prompt: str | None = None
    generated_tokens: list[int] = field(default_factory=list)
    generated_text: str | None = None
    prompt_tokens_per_second: float | None = None
    tokens_per_second: float | None = None
    timings: dict[str, float] = field(default_factory=dict)
    peak_rss_bytes: int | None = None
    # Weight matrices the forward pass kept quantized, dequantizing them at each use,
    # because their float32 did not fit in weight_budget (0: all held as float32).
    kept_matrices: int = 0

    def fail(self, reason: Reason, message: str) -> None:
        self.status, self.reason, self.message = status_for(reason), str(reason), message

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CheckReport:
        tensors = [TensorStats(**t) for t in data.get("tensors", [])]
        return cls(**{**data, "tensors": tensors})


@contextmanager
def _stage(report: CheckReport, name: str) -> Iterator[None]:
    t0 = time.perf_counter()
    try:
        yield
    finally:
        report.timings[name] = round(time.perf_counter() - t0, 4)


# -- header and bounds ------------------------------------------------------------------

_FIRST_WINDOW = 1 << 20
_MARGIN = 64 * 1024


def read_header(data: np.ndarray, limits: Limits) -> GGUFHeader:
    """Parse the header of a memory-mapped file from growing prefixes.

    The file size is withheld from the parser on purpose: with it, a tensor reaching past
    the end is a parse error, and the bounds check below tells a truncated file from a
    tensor offset pointing outside it.
    """
    size = int(data.size)
    window = min(_FIRST_WINDOW, size)
    while True:
        try:
            return parse_header(data[:window].tobytes(), limits=limits)
        except NeedMoreData as exc:
            if window >= size:
                raise CheckFailed(
                    Reason.TRUNCATED, f"the file ends at {size} bytes, inside its header"
                ) from None
            window = min(next_window(exc, margin=_MARGIN), size)


def check_bounds(header: GGUFHeader, size: int, name: str) -> None:
    """Every tensor's bytes inside the file, telling truncation from a bad offset.

    Writers (llama.cpp, gguf-py) pack tensors back to back, each padded to the alignment.
    A tensor that starts where packing puts it but ends past the file means the file was
    cut short; one that starts anywhere else and ends past the file has a bad offset.
    """
    if header.data_offset > size and header.tensors:
        raise CheckFailed(
            Reason.TRUNCATED, f"{name}: {size} bytes, the header says data starts at {header.data_offset}"
        )
    packed_at = header.data_offset
    for t in header.tensors:
        end = t.file_offset + t.n_bytes
        if end > size:
            if t.file_offset == packed_at:
                raise CheckFailed(
                    Reason.TRUNCATED,
                    f"{name}: {size} bytes, tensor {t.name!r} needs {end}; the file was cut short",
                )
            raise CheckFailed(
                Reason.TENSOR_OUT_OF_BOUNDS,
                f"{name}: tensor {t.name!r} at bytes {t.file_offset}..{end} lies outside the {size}-byte file",
            )
        packed_at = -(-end // header.alignment) * header.alignment


def _header_failure(exc: GGUFError, name: str) -> CheckFailed:
    if isinstance(exc, TruncatedFile):
        return CheckFailed(Reason.TRUNCATED, f"{name}: {exc}")
    if isinstance(exc, UnknownTensorType):
        return CheckFailed(Reason.UNSUPPORTED_TYPE, f"{name}: {exc}")
    if isinstance(exc, InvalidTensor) and (exc.field or "").endswith(".offset"):
        return CheckFailed(Reason.TENSOR_OUT_OF_BOUNDS, f"{name}: {exc}")
    return CheckFailed(Reason.INVALID_HEADER, f"{name}: {exc.code}: {exc}")


# -- weights ----------------------------------------------------------------------------


@dataclass
class _Part:
    """Statistics of one piece of a tensor: count, mean and sum of squared deviations of
    its finite values, their extremes, and its NaN and Inf counts."""

    n: int = 0
    mean: float = 0.0
    m2: float = 0.0
    lo: float = math.inf
    hi: float = -math.inf
    nan: int = 0
    inf: int = 0


def _part(x: np.ndarray) -> _Part:
    """The statistics of the flat float32 values `x`."""
    part = _Part()
    total = float(x.sum(dtype=np.float64))
    if not math.isfinite(total):  # only then can there be NaN or Inf: count them
        part.nan, part.inf = int(np.isnan(x).sum()), int(np.isinf(x).sum())
        if part.nan or part.inf:
            x = x[np.isfinite(x)]
            total = float(x.sum(dtype=np.float64))
    if x.size:
        part.n, part.mean = x.size, total / x.size
        d = x - np.float32(part.mean)
        part.m2 = float(np.dot(d, d))
        part.lo, part.hi = float(x.min()), float(x.max())
    return part


def _merged(stats: TensorStats, parts: Iterable[_Part]) -> TensorStats:
    """`stats` filled from its pieces' statistics, merged in order with Chan's formula."""
    n, mean, m2 = 0, 0.0, 0.0
    lo, hi = math.inf, -math.inf
    for p in parts:
        stats.nan += p.nan
        stats.inf += p.inf
        if not p.n:
            continue
        lo, hi = min(lo, p.lo), max(hi, p.hi)
        delta = p.mean - mean
        k = n + p.n
        mean += delta * p.n / k
        m2 += p.m2 + delta * delta * n * p.n / k
        n = k
    if n:
        stats.min, stats.max, stats.mean, stats.std = lo, hi, mean, math.sqrt(m2 / n)
    return stats


def dequantize_threads(requested: int, n_pieces: int) -> int:
    """Threads for the dequantize stage: `requested`, or one per available CPU if 0; at
    most parallel.MAX_THREADS and at most one per piece of work."""
    if requested < 0:
        raise ValueError(f"threads must be 0 (one per CPU) or positive, got {requested}")
    wanted = requested or parallel.available_cpus()
    return max(1, min(wanted, parallel.MAX_THREADS, n_pieces))


@dataclass(frozen=True)
class _Piece:
    tensor: int  # index in the stage's tensor list
    first_row: int
    rows: int


def weight_stats(files: Sequence[ModelFile], opts: CheckOptions) -> list[TensorStats]:
    """Every tensor of every shard dequantized, and its statistics, in file order.

    Tensors are cut into pieces of whole rows, at most chunk_bytes / parallel.MAX_THREADS
    of float32 each, and the pieces go to `opts.threads` threads (numpy releases the GIL in
    its loops). Most of a model's tensors are too small to be worth splitting between
    threads by registry.quant, and one tensor (the token embedding) can hold most of the
    weights: cutting both kinds into pieces keeps every CPU busy to the end. Each thread
    has one float32 buffer, faulted in once and reused for every piece it takes, so the
    stage holds at most `chunk_bytes` of float32 (a single row bigger than a piece is
    the exception: it gets an array of its own).

    The piece size does not depend on the thread count, and each tensor's pieces are merged
    in order, so the statistics are the same, bit for bit, on any number of threads. Every
    tensor is checked (type, size, row length) before any is dequantized: the error raised
    is that of the first bad tensor in file order.
    """
    tensors = [(mf, info) for mf in files for info in mf.header.tensors]
    piece_bytes = max(4, opts.chunk_bytes // parallel.MAX_THREADS)
    rows: list[TensorRows] = []
    pieces: list[_Piece] = []
    for index, (mf, info) in enumerate(tensors):
        try:  # every check now; nothing is dequantized yet
            tr = tensor_rows(mf._data[info.file_offset : info.file_offset + info.n_bytes], info.type, info.shape)
        except UnsupportedType as exc:
            raise CheckFailed(Reason.UNSUPPORTED_TYPE, f"tensor {info.name!r}: {exc}") from None
        except DequantError as exc:
            raise CheckFailed(Reason.INVALID_HEADER, f"tensor {info.name!r}: {exc}") from None
        rows.append(tr)
        starts = tr.pieces(piece_bytes)
        pieces += [_Piece(index, r, min(starts.step, tr.n_rows - r)) for r in starts]

    threads = dequantize_threads(opts.threads, len(pieces))
    # One thread alone may still split a big piece (registry.quant's own default), unless
    # one thread was asked for.
    inner = None if threads == 1 and opts.threads == 0 else 1
    largest = max((p.rows * rows[p.tensor].row_len for p in pieces), default=1)
    buffers = [np.empty(min(largest, piece_bytes // 4), dtype=np.float32) for _ in range(threads)]
    parts: list[_Part | None] = [None] * len(pieces)
    lock = threading.Lock()

    def work(start: int, stop: int) -> None:
        with lock:
            buffer = buffers.pop()
        try:
            for k in range(start, stop):
                piece = pieces[k]
                tr = rows[piece.tensor]
                n = piece.rows * tr.row_len
                values = tr.dequantize(
                    piece.first_row,
                    piece.rows,
                    big_endian=tensors[piece.tensor][0].header.endianness == "big",
                    threads=inner,
                    out=buffer[:n] if n <= buffer.size else None,
                )
                parts[k] = _part(values.reshape(-1))
        finally:
            with lock:
                buffers.append(buffer)

    parallel.run_tasks(work, [(k, k + 1) for k in range(len(pieces))], threads)
    by_tensor: list[list[_Part]] = [[] for _ in tensors]
    for piece, part in zip(pieces, parts, strict=True):
        assert part is not None  # every task ran, or run_tasks raised
        by_tensor[piece.tensor].append(part)
    return [
        _merged(TensorStats(info.name, info.type.name, info.n_elements), by_tensor[i])
        for i, (_, info) in enumerate(tensors)
    ]


# -- the model --------------------------------------------------------------------------


class ShardedModelFile(ModelFile):
    """The runner's view of a split model: metadata from shard 1, tensors from any shard."""

    def __init__(self, files: Sequence[ModelFile]) -> None:
        super().__init__(files[0].header, files[0]._data)
        self._files = {t.name: f for f in files for t in f.header.tensors}

    def has_tensor(self, name: str) -> bool:
        return name in self._files

    def tensor_info(self, name: str) -> TensorInfo:
        f = self._files.get(name)
        return f.tensor_info(name) if f is not None else super().tensor_info(name)

    def tensor_infos(self) -> list[TensorInfo]:
        return [f.tensor_info(name) for name, f in self._files.items()]

    def _tensor_bytes(self, name: str, shape: tuple[int, ...] | None) -> tuple[TensorInfo, np.ndarray, bool]:
        f = self._files.get(name)
        return f._tensor_bytes(name, shape) if f is not None else super()._tensor_bytes(name, shape)


def _open(path: Path, limits: Limits) -> ModelFile:
    data = np.memmap(path, dtype=np.uint8, mode="r") if path.stat().st_size else np.zeros(0, np.uint8)
    try:
        header = read_header(data, limits)
    except GGUFError as exc:
        raise _header_failure(exc, path.name) from None
    check_bounds(header, int(data.size), path.name)
    return ModelFile(header, data)


def open_model_file(path: str | Path, limits: Limits | None = None) -> ModelFile:
    """The runner's view of a local model (all shards of a split one), bounds checked."""
    files = [_open(p, limits or Limits()) for p in shard_paths(path)]
    return files[0] if len(files) == 1 else ShardedModelFile(files)


# Memory the forward pass leaves to everything but its float32 weights (the interpreter,
# numpy and BLAS, activations, logits, the KV cache): a quarter of the limit, at least this.
MIN_RESERVE = 1 << 30


def physical_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):  # not reported: assume a small machine
        return 4 << 30


def weight_budget(memory_cap: int, mapped_bytes: int) -> int:
    """Float32 bytes of weight matrices the forward pass may hold (load_model's
    max_weight_bytes): the cap (or, without one, physical memory) less the mapped model
    files and a reserve; the matrices beyond it stay quantized and are dequantized at each
    use, so that a model whose float32 weights are larger than memory still runs."""
    limit = memory_cap if memory_cap > 0 else physical_memory()
    return max(0, limit - mapped_bytes - max(MIN_RESERVE, limit // 4))


def mapped_bytes(paths: Sequence[str | Path]) -> int:
    return sum(Path(p).stat().st_size for p in paths)


def _smoke(files: list[ModelFile], opts: CheckOptions, report: CheckReport, mapped: int) -> None:
    with _stage(report, "load"):
        mf = files[0] if len(files) == 1 else ShardedModelFile(files)
        # architecture first: an unknown one is skipped, whatever the tokenizer
        model = load_model(mf, max_weight_bytes=weight_budget(opts.memory_cap_bytes, mapped))
        report.kept_matrices = model.kept_matrices
        tokenizer = load_tokenizer(mf)
    smoke = run_smoke(model, tokenizer, text=opts.text, prompt=opts.prompt, n_generate=opts.n_generate)
    report.timings["perplexity"] = round(smoke.perplexity_seconds, 4)
    report.timings["generate"] = round(smoke.generate_seconds, 4)
    report.perplexity = smoke.perplexity
    report.text_tokens = smoke.n_text_tokens
    report.prompt = smoke.prompt
    report.generated_tokens = smoke.generated_tokens
    report.generated_text = smoke.generated_text
    if smoke.perplexity_seconds > 0:
        report.prompt_tokens_per_second = smoke.n_text_tokens / smoke.perplexity_seconds
    if smoke.generate_seconds > 0 and smoke.generated_tokens:
        report.tokens_per_second = len(smoke.generated_tokens) / smoke.generate_seconds
    if not math.isfinite(smoke.perplexity) or smoke.perplexity > opts.perplexity_threshold:
        raise CheckFailed(
            Reason.PERPLEXITY_TOO_HIGH,
            f"perplexity {smoke.perplexity:.2f} on the smoke text is above {opts.perplexity_threshold}",
        )


def _runner_failure(exc: RunnerError) -> CheckFailed:
    if isinstance(exc, UnsupportedArchitecture):
        return CheckFailed(Reason.UNSUPPORTED_ARCHITECTURE, str(exc))
    if isinstance(exc, TokenizerUnsupported):
        return CheckFailed(Reason.TOKENIZER_UNSUPPORTED, str(exc))
    if isinstance(exc, NonFiniteLogits):
        return CheckFailed(Reason.INFERENCE_NONFINITE, str(exc))
    return CheckFailed(Reason.INVALID_MODEL, f"{exc.code}: {exc}")


def _check(paths: Sequence[Path], opts: CheckOptions, report: CheckReport) -> None:
    files: list[ModelFile] = []
    with _stage(report, "header"):
        files = [_open(path, opts.limits) for path in paths]
        arch = files[0].header.get("general.architecture")
        # Anything else is the runner's bad_metadata below; the report must stay JSON.
        report.architecture = arch if isinstance(arch, str) else None
    with _stage(report, "dequantize"):
        report.tensors = weight_stats(files, opts)  # its buffers are freed: the forward pass needs the memory
        report.tensors_checked = len(report.tensors)
        report.nonfinite_values = sum(t.nan + t.inf for t in report.tensors)
    if report.nonfinite_values:
        bad = [t.name for t in report.tensors if t.nan or t.inf]
        raise CheckFailed(
            Reason.NONFINITE_WEIGHTS,
            f"{report.nonfinite_values} NaN/Inf weights in {len(bad)} tensors, first {bad[0]!r}",
        )
    try:
        _smoke(files, opts, report, mapped_bytes(paths))
    except RunnerError as exc:
        raise _runner_failure(exc) from None


def check_files(paths: Sequence[Path], opts: CheckOptions | None = None) -> CheckReport:
    """Check every shard of one artifact and smoke-run it; the verdict, never an exception
    for a bad file (a MemoryError under the child's cap becomes `memory_exceeded`)."""
    opts = opts or CheckOptions()
    report = CheckReport()
    try:
        _check([Path(p) for p in paths], opts, report)
    except CheckFailed as exc:
        report.fail(exc.reason, exc.message)
    except MemoryError:
        report.fail(Reason.MEMORY_EXCEEDED, "the memory cap was reached")
    report.peak_rss_bytes = peak_rss_bytes()
    return report


def peak_rss_bytes() -> int:
    """This process's peak resident memory.

    VmHWM belongs to the address space created at exec; ru_maxrss is carried across
    execve on Linux, so a child forked from a large parent would report the parent's peak.
    """
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
