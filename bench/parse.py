"""Header parsing side by side with gguf-py, and the reads a range-reading driver needs.

Run from the repository root: `.venv/bin/python bench/parse.py [--runs N] [--ref-runs N]`.
Targets: parse_header >= 50x faster than gguf.GGUFReader on both real headers, and at
most 2 reads of growing windows (first 2 MiB, then up to NeedMoreData.needed + margin).
Indexing also scans each file's chat templates for safety: "scanning adds under 20 ms per
typical template" (the real templates of the sample files, scanned for the first time
with a warm sandbox pool; bench/template_scan.py has the wider table).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import argparse
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

from bench.template_scan import TARGET_MS as SCAN_TARGET_MS
from bench.template_scan import Row as ScanRow
from bench.template_scan import scan_ms
from registry.gguf.array import GGUFArray
from registry.gguf.errors import NeedMoreData
from registry.gguf.reader import next_window, parse_header
from registry.safety import SandboxPool, chat_templates, special_tokens
from tests.models import GEMMA3, SMOLLM2, SampleModel, fetch
from tests.safety.templates import GEMMA3 as GEMMA3_IT_TEMPLATE

FIRST_WINDOW = 2 * 1024 * 1024
MARGIN = 64 * 1024
SPEEDUP_TARGET = 50
READS_TARGET = 2


@dataclass
class Row:
    model: str
    header_bytes: int
    ours_ms: float
    ours_decode_ms: float
    ours_bytearray_ms: float
    ref_ms: float
    reads: int
    windows: list[int]

    @property
    def speedup(self) -> float:
        return self.ref_ms / self.ours_ms


def median_ms(fn: Callable[[], object], runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def driver_reads(path: Path) -> tuple[int, list[int]]:
    """Reads a range-reading client makes: 2 MiB first, then up to needed + margin."""
    size = path.stat().st_size
    window = min(FIRST_WINDOW, size)
    windows = [window]
    with path.open("rb") as f:
        data = f.read(window)
        while True:
            try:
                parse_header(data, file_size=size)
                return len(windows), windows
            except NeedMoreData as exc:
                window = min(next_window(exc, margin=MARGIN), size)
                data += f.read(window - len(data))
                windows.append(window)


def decode_all(data: bytes) -> None:
    header = parse_header(data)
    for f in header.fields.values():
        if isinstance(f.value, GGUFArray):
            f.value.to_list()


def measure(model: SampleModel, runs: int, ref_runs: int) -> Row:
    import gguf  # the reference reader; only the benchmark and the tests import it

    path = fetch(model)
    with path.open("rb") as f:
        data = f.read(16 * 1024 * 1024)
    header_bytes = parse_header(data).data_offset
    data = data[:header_bytes]
    ours = median_ms(lambda: parse_header(data), runs)
    decode = median_ms(lambda: decode_all(data), max(3, runs // 4))
    mutable = bytearray(data)
    from_bytearray = median_ms(lambda: parse_header(mutable), runs)  # includes the defensive copy
    ref = median_ms(lambda: gguf.GGUFReader(path), ref_runs)
    reads, windows = driver_reads(path)
    return Row(model.filename, header_bytes, ours, decode, from_bytearray, ref, reads, windows)


def template_scans(runs: int) -> list[tuple[str, ScanRow]]:
    """Per-template scan time of each sample file's templates with a warm sandbox pool.

    gemma-3-270m carries no template; its instruction-tuned siblings' one stands in, with
    that file's bos/eos, since a file without a template costs nothing to scan.
    """
    cases = []
    for model in (SMOLLM2, GEMMA3):
        path = fetch(model)
        with path.open("rb") as f:
            header = parse_header(f.read(16 * 1024 * 1024), file_size=path.stat().st_size)
        templates = chat_templates(header) or {"default": GEMMA3_IT_TEMPLATE}
        label = model.filename if chat_templates(header) else f"{model.filename} (it template)"
        cases.append((label, templates, *special_tokens(header)))
    with SandboxPool() as pool:
        pool.warm()  # start-up is paid once per indexing run, not per template
        return [(label, scan_ms(t, bos, eos, pool, runs)) for label, t, bos, eos in cases]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=21, help="runs of parse_header per model")
    parser.add_argument("--ref-runs", type=int, default=3, help="runs of gguf.GGUFReader per model")
    parser.add_argument("--scan-runs", type=int, default=20, help="runs of the chat template scan per model")
    args = parser.parse_args(argv)
    rows = [measure(m, args.runs, args.ref_runs) for m in (SMOLLM2, GEMMA3)]
    scans = template_scans(args.scan_runs)

    head = (
        f"{'model':<34} {'header':>10} {'parse_header':>13} {'+decode all':>12} "
        f"{'GGUFReader':>11} {'speedup':>8} {'reads':>6}  windows (bytes)"
    )
    print(head)
    print("-" * len(head))
    for r in rows:
        print(
            f"{r.model:<34} {r.header_bytes:>10,} {r.ours_ms:>10.2f} ms {r.ours_decode_ms:>9.2f} ms "
            f"{r.ref_ms:>8.0f} ms {r.speedup:>7.0f}x {r.reads:>6}  {' -> '.join(f'{w:,}' for w in r.windows)}"
        )
    print()
    for r in rows:
        print(
            f"{r.model}: from a bytearray (copied once for safety) {r.ours_bytearray_ms:.2f} ms, "
            f"copy cost {r.ours_bytearray_ms - r.ours_ms:+.2f} ms"
        )
    print()
    speed_ok = all(r.speedup >= SPEEDUP_TARGET for r in rows)
    reads_ok = all(r.reads <= READS_TARGET for r in rows)
    print(f"speedup target >= {SPEEDUP_TARGET}x: {'met' if speed_ok else 'MISSED'}")
    print(
        f"reads target <= {READS_TARGET} (first {FIRST_WINDOW:,} B, margin {MARGIN:,} B): {'met' if reads_ok else 'MISSED'}"
    )
    print(
        "parse_header: median over header bytes in memory; '+decode all' also turns every array into lists;"
    )
    print("GGUFReader: median of gguf.GGUFReader(path) on the file (memory-mapped).")
    print()
    for label, s in scans:
        print(
            f"template scan {label}: {s.chars:,} chars, {s.findings} finding(s); per template "
            f"first {s.first_ms:.2f} ms, repeat {s.repeat_ms:.2f} ms, cached {s.cached_ms:.3f} ms"
        )
    worst_scan = max(s.first_ms for _, s in scans)
    scan_ok = worst_scan < SCAN_TARGET_MS
    print(
        f"scan target: scanning adds < {SCAN_TARGET_MS:.0f} ms per typical template (first scan, worst "
        f"{worst_scan:.2f} ms): {'met' if scan_ok else 'MISSED'}"
    )
    return 0 if speed_ok and reads_ok and scan_ok else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
