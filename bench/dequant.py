"""Dequantization throughput, side by side: registry.quant, gguf-py and ggml's C code.

    python -m bench.dequant [--elements N] [--repeat R] [--types Q4_0,Q4_K] [--no-models]
                            [--threads T]

For the tensors of the two sample models (grouped by type) and for a synthetic tensor of
every supported type (16 Mi elements of random blocks with sane scales), prints the output
throughput in GB/s of float32 (best of R runs) in two settings:

new arrays (each call returns a fresh array, page faults included):
- ours-1t / ours-mt: `registry.quant.dequantize(..., threads=1 / threads=T)`
- gguf-py: `gguf.quants.dequantize`, on at most 16 Mi elements of a case (F32 is a
  zero-copy view there, shown as "view"); ours/gguf-py compares the two on exactly the
  same tensors. gguf-py has no way to write into a given array, so this is the setting of
  the gguf-py target.

into a reused buffer (already faulted in; the kernels alone):
- ours-1t / ours-mt: `dequantize(..., out=buf)`
- ggml: the type's C `to_float` from libggml-base (bench/ggml_ref.py), one thread: the
  setting of the ggml target. Timing ggml into new arrays measured anywhere from 2.9 to
  18.7 GB/s for the same Q4_K code on this machine, depending on whether the allocator
  handed back memory that was already faulted in; into a buffer it is stable.

ggml/py is what ggml's own C reaches against gguf-py: where it is under 5x, the gguf-py
target asks for more than compiled C does on one thread. mt is `threads=T` (default:
the library's own choice per tensor, one thread per CPU for big tensors and one for
small ones); ggml always runs on one thread, as the target is defined.

fill-1t / fill-mt (synthetic rows): the rate at which this machine hands out a fresh
float32 array of the same size and writes every value of it with no decoding at all
(allocated as `dequantize` allocates its results, then each thread fills its part with
zeros, numpy's fastest write), on one
thread and on ours-mt's threads, timed in the same interleaved rounds as the row's
contenders. A dequantizer that returns a new array does at least that work, so where 5x
gguf-py asks for more than the fill rate of the same thread setting the row says "MISS
above fill": the target asks for more than writing zeros reached in the same rounds.

arith (synthetic rows of the ggml-target types): the last stage of our kernel for the
type alone, one thread, into the same kind of buffer: codes already unpacked (one step's
worth, made once and reused, so they stay in cache) widened into the output and scaled by
the per-block or per-sub-block scale and min as the kernel does it (legacy._scale,
kquants._affine), over the same steps. Unpacking the quants and decoding the scales cost
nothing here, so no kernel built this way gets faster than this; where 0.5x ggml asks for
more, the row says "MISS above arith".

The runs of all contenders are interleaved round by round, so that load from other
processes hits them alike.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from registry.gguf.types import TENSOR_TYPES, GGMLType
from registry.quant import dequantize, kquants, legacy, parallel, supported_types, workspace

GGML_TARGETS = {"Q4_0", "Q4_1", "Q5_0", "Q8_0", "Q4_K", "Q5_K", "Q6_K"}
GGUF_PY_TARGET = 5.0
GGML_TARGET = 0.5
GGUF_PY_MAX_ELEMENTS = 1 << 24


@dataclass
class Case:
    source: str
    type: GGMLType
    tensors: list[np.ndarray]  # raw bytes of each tensor, in memory

    @property
    def n_elements(self) -> int:
        info = TENSOR_TYPES[self.type]
        return sum(t.size // info.type_size * info.block_size for t in self.tensors)


def _best_interleaved(runs: dict[str, Callable[[], object]], repeat: int) -> dict[str, float]:
    """Best time of each contender; rounds interleave them so that noise from other
    processes on the machine hits all of them alike."""
    for fn in runs.values():
        fn()  # warm-up: tables built, pages touched
    best = dict.fromkeys(runs, float("inf"))
    for _ in range(repeat):
        for name, fn in runs.items():
            t0 = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - t0)
    return best


def _gbps(n_elements: int, seconds: float) -> float:
    return n_elements * 4 / seconds / 1e9


def synthetic(t: GGMLType, n_elements: int, rng: np.random.Generator) -> np.ndarray:
    from tests.quant.refgen import set_scales

    info = TENSOR_TYPES[t]
    n_blocks = max(1, n_elements // info.block_size)
    blocks = rng.integers(0, 256, (n_blocks, info.type_size), dtype=np.uint8)
    if t in (GGMLType.F16, GGMLType.BF16, GGMLType.F32, GGMLType.F64):
        dtype = {GGMLType.F16: "<f2", GGMLType.F32: "<f4", GGMLType.F64: "<f8"}.get(t)
        if dtype is not None:
            blocks = rng.normal(size=n_blocks).astype(dtype).view(np.uint8).reshape(n_blocks, -1)
        else:  # bf16: the top halves of float32 normals
            blocks = (rng.normal(size=n_blocks).astype("<f4").view("<u4") >> 16).astype("<u2").view(np.uint8)
    return set_scales(blocks, t, rng, special_fraction=0.0).reshape(-1)


def model_cases(paths: list[Path]) -> list[Case]:
    from registry.gguf.errors import NeedMoreData
    from registry.gguf.reader import next_window, parse_header

    cases: dict[tuple[str, GGMLType], Case] = {}
    for path in paths:
        size = path.stat().st_size
        want = 1 << 20
        with path.open("rb") as f:
            while True:
                f.seek(0)
                try:
                    header = parse_header(f.read(want), file_size=size)
                    break
                except NeedMoreData as exc:
                    want = next_window(exc, margin=64 << 10)
        mm = np.memmap(path, dtype=np.uint8, mode="r")
        label = path.name.split(".")[0][:22]
        for t in header.tensors:
            raw = np.array(mm[t.file_offset : t.file_offset + t.n_bytes])  # in memory: no disk in timings
            cases.setdefault((label, t.type), Case(label, t.type, [])).tensors.append(raw)
    return sorted(cases.values(), key=lambda c: (c.source, int(c.type)))


def fresh_fill(n_elements: int, threads: int) -> Callable[[], object]:
    """A run that makes a new float32 array of `n_elements` the way `dequantize` makes its
    result (workspace.new_values) and fills it with zeros, split between `threads` threads
    (each faults in and writes its own part). Zeros, because numpy writes them fastest
    (measured against other constants and a plain copy)."""

    def run() -> None:
        out = workspace.new_values(n_elements)
        parallel.run_tasks(
            lambda a, b: out[a:b].fill(0.0), parallel.block_ranges(n_elements, 4, threads), threads
        )

    return run


# type -> (values per block, values per scale, code dtype, has a min): the final stage of
# the type's kernel, as `arith_only` runs it.
_ARITH: dict[GGMLType, tuple[int, int, type[np.integer], bool]] = {
    GGMLType.Q4_0: (32, 32, np.int8, False),
    GGMLType.Q4_1: (32, 32, np.uint8, True),
    GGMLType.Q5_0: (32, 32, np.int8, False),
    GGMLType.Q8_0: (32, 32, np.int8, False),
    GGMLType.Q4_K: (256, 32, np.uint8, True),
    GGMLType.Q5_K: (256, 32, np.uint8, True),
    GGMLType.Q6_K: (256, 16, np.int8, False),
}


def arith_only(t: GGMLType, n_elements: int, rng: np.random.Generator) -> Callable[[], object] | None:
    """A run of the type's widen-and-scale stage alone over `n_elements` values into one
    buffer, step by step as the kernel goes, on codes that are unpacked already (one
    step's worth, reused). None for a type without an entry in _ARITH."""
    if t not in _ARITH:
        return None
    block, per_scale, dtype, with_min = _ARITH[t]
    n_blocks = n_elements // block
    legacy_type = block == 32
    step = legacy.STEP if legacy_type else kquants.STEP
    lo, hi = np.iinfo(dtype).min, np.iinfo(dtype).max
    codes = rng.integers(lo, hi + 1, (step, block)).astype(dtype)
    scales_shape = (n_blocks,) if legacy_type else (n_blocks, block // per_scale)
    d = rng.random(scales_shape, dtype=np.float32)
    m = rng.random(scales_shape, dtype=np.float32) if with_min else None
    y = np.zeros((n_blocks, block), np.float32)  # faulted in before any timing
    y_sub = y.reshape(n_blocks, block // per_scale, per_scale)

    def run() -> None:
        for s in range(0, n_blocks, step):
            k = min(step, n_blocks - s)
            mk = None if m is None else m[s : s + k]
            if legacy_type:
                legacy._scale(y[s : s + k], codes[:k], d[s : s + k], mk)
            else:
                kquants._affine(codes[:k], d[s : s + k], mk, y_sub[s : s + k])

    return run


def _ggml_lib() -> tuple[object | None, str]:
    try:
        from bench.ggml_ref import GGMLUnavailable, library_version, load
    except ImportError as exc:
        return None, f"bench.ggml_ref not importable: {exc}"
    try:
        lib = load()
    except GGMLUnavailable as exc:
        return None, str(exc)
    return lib, f"{library_version(lib)} ({lib.path})"


def _gguf_py() -> tuple[Callable[[np.ndarray, GGMLType], np.ndarray] | None, str]:
    try:
        import gguf
        from gguf import quants
    except ImportError as exc:
        return None, f"gguf not installed: {exc}"

    def run(raw: np.ndarray, t: GGMLType) -> np.ndarray:
        return quants.dequantize(raw, gguf.GGMLQuantizationType(int(t)))

    version = getattr(gguf, "__version__", None)
    if version is None:
        from importlib.metadata import version as _v

        version = _v("gguf")
    return run, f"gguf-py {version}"


def _gguf_py_subset(case: Case, counts: list[int]) -> tuple[list[np.ndarray], list[int]]:
    """Whole tensors of the case up to GGUF_PY_MAX_ELEMENTS, or a prefix of the first."""
    info = TENSOR_TYPES[case.type]
    subset: list[np.ndarray] = []
    sub_counts: list[int] = []
    for raw, k in zip(case.tensors, counts, strict=True):
        room = GGUF_PY_MAX_ELEMENTS - sum(sub_counts)
        if room <= 0:
            break
        take = min(k, room) // info.block_size * info.block_size or k
        subset.append(raw[: take // info.block_size * info.type_size])
        sub_counts.append(take)
    return subset, sub_counts


def measure(
    case: Case,
    repeat: int,
    lib: object | None,
    gguf_py: Callable[..., np.ndarray] | None,
    threads: int | None,
    *,
    fill: bool = False,
    arith: Callable[[], object] | None = None,
) -> dict[str, object]:
    info = TENSOR_TYPES[case.type]
    t = case.type
    n = case.n_elements
    counts = [raw.size // info.type_size * info.block_size for raw in case.tensors]
    row: dict[str, object] = {
        "source": case.source,
        "type": t.name,
        "n": n,
        "gguf": "n/a",
        "ggml": "n/a",
        "fill": "-",
        "fill_mt": "-",
        "arith": "-",
    }
    sizes = {"ours": n, "ours_mt": n, "into": n, "into_mt": n}
    bufs = [np.zeros(k, np.float32) for k in counts]  # faulted in before any timing

    def ours(tensors: list[np.ndarray], ks: list[int], th: int | None) -> Callable[[], object]:
        return lambda: [dequantize(r, t, k, threads=th) for r, k in zip(tensors, ks, strict=True)]

    def into(th: int | None) -> Callable[[], object]:
        return lambda: [
            dequantize(r, t, k, threads=th, out=o) for r, k, o in zip(case.tensors, counts, bufs, strict=True)
        ]

    runs: dict[str, Callable[[], object]] = {
        "ours": ours(case.tensors, counts, 1),
        "ours_mt": ours(case.tensors, counts, threads),
        "into": into(1),
        "into_mt": into(threads),
    }

    if fill:
        sizes["fill"] = sizes["fill_mt"] = n
        runs["fill"] = fresh_fill(n, 1)
        runs["fill_mt"] = fresh_fill(n, threads or parallel.default_threads(n))
    if arith is not None:
        sizes["arith"] = n
        runs["arith"] = arith

    if gguf_py is not None and t is GGMLType.F32:
        row["gguf"] = "view"
    elif gguf_py is not None:
        subset, sub_counts = _gguf_py_subset(case, counts)
        try:
            with np.errstate(all="ignore"):
                gguf_py(subset[0][: info.type_size], t)
        except (NotImplementedError, ValueError):  # gguf-py lacks the newest types
            pass
        else:
            sizes["gguf"] = sizes["ours_sub"] = sizes["ours_mt_sub"] = sum(sub_counts)
            runs["gguf"] = lambda: [gguf_py(r, t) for r in subset]
            if sizes["gguf"] != n:  # ours on exactly what gguf-py gets, for the ratio
                runs["ours_sub"] = ours(subset, sub_counts, 1)
                runs["ours_mt_sub"] = ours(subset, sub_counts, threads)

    if lib is not None and lib.has_to_float(int(t)):  # type: ignore[attr-defined]
        to_float = lib.to_float  # type: ignore[attr-defined]
        sizes["ggml"] = n
        runs["ggml"] = lambda: [
            to_float(int(t), r, k, o) for r, k, o in zip(case.tensors, counts, bufs, strict=True)
        ]

    with np.errstate(all="ignore"):
        best = _best_interleaved(runs, repeat)
    for name, seconds in best.items():
        row[name] = _gbps(sizes[name], seconds)
    return row


def _fmt(v: object) -> str:
    return f"{v:7.2f}" if isinstance(v, float) else f"{v!s:>7}"


def _ratio(a: object, b: object) -> str:
    return f"{a / b:6.2f}x" if isinstance(a, float) and isinstance(b, float) and b > 0 else f"{'-':>7}"


def _verdicts(row: dict[str, object], synthetic: bool, misses: dict[str, list[str]]) -> list[str]:
    """The row's target notes ("gguf-py 1t MISS mt ok", ...). For a synthetic row
    misses are added to `misses` under "1t" and "mt"; a gguf-py target above the row's
    fill rate of the same thread setting is marked "MISS above fill" and also listed
    under "fill"; a one-thread ggml target above the row's arith rate is marked "MISS
    above arith" and listed under "arith"."""
    notes = []
    checks: list[tuple[str, str, str, str, float]] = []
    if isinstance(row["gguf"], float):
        checks += [
            ("gguf-py", "1t", "ours_sub", "gguf", GGUF_PY_TARGET),
            ("gguf-py", "mt", "ours_mt_sub", "gguf", GGUF_PY_TARGET),
        ]
    if row["type"] in GGML_TARGETS and isinstance(row["ggml"], float):
        checks += [
            ("ggml", "1t", "into", "ggml", GGML_TARGET),
            ("ggml", "mt", "into_mt", "ggml", GGML_TARGET),
        ]
    for peer in ("gguf-py", "ggml"):
        parts = []
        for who, config, key, theirs, target in checks:
            if who != peer:
                continue
            ours = row.get(key, row[key.removesuffix("_sub")])
            ratio = ours / row[theirs]  # type: ignore[operator]
            ok = ratio >= target
            needed = target * row[theirs]  # type: ignore[operator]
            fill = row["fill" if config == "1t" else "fill_mt"]
            above = not ok and peer == "gguf-py" and isinstance(fill, float) and needed > fill
            arith = row["arith"] if peer == "ggml" and config == "1t" else None
            beyond = not ok and isinstance(arith, float) and needed > arith
            verdict = "ok" if ok else "MISS above fill" if above else "MISS above arith" if beyond else "MISS"
            parts.append(f"{config} {verdict}")
            if not ok and synthetic:
                misses[config].append(f"{row['type']} vs {peer} {ratio:.2f}x")
            if above and synthetic:
                misses["fill"].append(f"{row['type']} {config} needs {needed:.1f} > {fill:.1f}")
            if beyond and synthetic:
                misses["arith"].append(f"{row['type']} needs {needed:.1f} > {arith:.1f}")
        if parts:
            notes.append(f"{peer} {' '.join(parts)}")
    return notes


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.dequant", description=__doc__.split("\n\n")[0])
    parser.add_argument("--elements", type=int, default=1 << 24, help="elements per synthetic tensor")
    parser.add_argument("--repeat", type=int, default=9)
    parser.add_argument("--types", default="", help="comma-separated type names (default: all supported)")
    parser.add_argument("--no-models", action="store_true", help="skip the sample models")
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="threads of ours-mt (default: the library's choice per tensor)",
    )
    args = parser.parse_args(argv)

    types = list(supported_types())
    if args.types:
        wanted = {name.strip().upper() for name in args.types.split(",")}
        types = [t for t in types if t.name in wanted]
    lib, lib_note = _ggml_lib()
    gguf_py, gguf_note = _gguf_py()
    if args.threads is None:
        mt_note = (
            f"threads=default: {parallel.default_threads(args.elements)} for the synthetic tensors"
            f" ({parallel.available_cpus()} CPUs available, at most {parallel.MAX_THREADS}; one per"
            f" {parallel.MIN_ELEMENTS_PER_THREAD} elements, so one below {2 * parallel.MIN_ELEMENTS_PER_THREAD})"
        )
    else:
        mt_note = f"threads={args.threads} on every tensor"
    print(f"ours-1t: registry.quant (numpy {np.__version__}), threads=1")
    print(f"ours-mt: registry.quant, {mt_note}")
    print(
        f"gguf-py: {gguf_note if gguf_py else 'n/a: ' + gguf_note} (up to {GGUF_PY_MAX_ELEMENTS} elements per case)"
    )
    print(
        f"ggml:    {lib_note if lib else 'n/a: ' + lib_note}, one thread (the targets are against one thread)"
    )
    print("GB/s of float32 output, best of", args.repeat, "\n")

    cases: list[Case] = []
    if not args.no_models:
        from tests.models import SAMPLES

        paths = [m.path for m in SAMPLES if m.path.exists()]
        missing = [m.filename for m in SAMPLES if not m.path.exists()]
        if missing:
            print(f"(sample models missing, run `python -m tests.models fetch`: {', '.join(missing)})")
        cases += [c for c in model_cases(paths) if c.type in types]
    rng = np.random.default_rng(0)
    cases += [Case("synthetic", t, [synthetic(t, args.elements, rng)]) for t in types]

    head = f"{'':22s} {'':8s} {'':>10s} {'new arrays':^39s}  {'into a buffer':^31s}"
    head += f"  {'ours/gguf-py':^15s} {'ours/ggml':^15s}"
    print(head)
    head = f"{'source':22s} {'type':8s} {'elements':>10s} {'ours-1t':>7s} {'ours-mt':>7s} {'gguf-py':>7s}"
    head += f" {'fill-1t':>7s} {'fill-mt':>7s}"
    head += f"  {'ours-1t':>7s} {'ours-mt':>7s} {'ggml':>7s} {'arith':>7s}  {'1t':>7s} {'mt':>7s} {'1t':>7s} {'mt':>7s}"
    head += f" {'ggml/py':>7s}  targets"
    print(head)
    print("-" * len(head))
    misses: dict[str, list[str]] = {"1t": [], "mt": [], "fill": [], "arith": []}
    for case in cases:
        made_up = case.source == "synthetic"
        arith = arith_only(case.type, case.n_elements, rng) if made_up else None
        row = measure(case, args.repeat, lib, gguf_py, args.threads, fill=made_up, arith=arith)
        notes = _verdicts(row, made_up, misses)
        py_1t = row.get("ours_sub", row["ours"])
        py_mt = row.get("ours_mt_sub", row["ours_mt"])
        print(
            f"{case.source:22s} {row['type']!s:8s} {row['n']:>10d} {_fmt(row['ours'])} {_fmt(row['ours_mt'])}"
            f" {_fmt(row['gguf'])} {_fmt(row['fill'])} {_fmt(row['fill_mt'])}  {_fmt(row['into'])} {_fmt(row['into_mt'])} {_fmt(row['ggml'])} {_fmt(row['arith'])}"
            f"  {_ratio(py_1t, row['gguf'])} {_ratio(py_mt, row['gguf'])}"
            f" {_ratio(row['into'], row['ggml'])} {_ratio(row['into_mt'], row['ggml'])}"
            f" {_ratio(row['ggml'], row['gguf'])}  {'; '.join(notes)}",
            flush=True,
        )
    print()
    print(
        "targets: ours >= 5x gguf-py (new arrays) on every type it supports; ours >= 0.5x ggml (one thread,"
        " into a buffer) on",
        ", ".join(sorted(GGML_TARGETS)),
    )
    print("missed (synthetic) with one thread (ours-1t):", "; ".join(misses["1t"]) or "none")
    print(
        f"missed (synthetic) with threads (ours-mt, {mt_note.split(':')[0]}):",
        "; ".join(misses["mt"]) or "none",
    )
    print(
        "gguf-py targets above the fresh-array fill (5x gguf-py against the row's fill rate, GB/s):",
        "; ".join(misses["fill"]) or "none",
    )
    print(
        "ggml targets above our kernels' widen-and-scale stage alone (0.5x ggml against the row's arith"
        " rate, GB/s, one thread):",
        "; ".join(misses["arith"]) or "none",
    )
    if lib is None:
        print("not measured: the ggml targets (no ggml library)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
