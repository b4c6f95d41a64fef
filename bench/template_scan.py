"""Time added by chat template scanning (safety findings and the capability probes), per
template, with a warm sandbox pool.

Run from the repository root: `.venv/bin/python bench/template_scan.py [--runs N]`.
Target: under 20 ms per typical template. Templates: the real ones from both sample
models (gemma-3-270m carries none, so its instruction-tuned siblings' template is timed
with that file's bos/eos), plus ChatML, Llama 3, and three with tools (Llama 3.2, Qwen2.5,
Qwen3). The sandbox child compiles while this process parses, so `first` is roughly the
child's Jinja compile time plus one round trip.

Columns: `first` is a template the sandbox child has never seen (a unique comment is
appended each run, so it is parsed, compiled and rendered every time); `repeat` is the
same template again (compiled template cached in the child, as when many files of one
repo share it); `cached` is a ScanCache hit (no sandbox round trip at all).
`scan_ms(templates, bos, eos, pool)` is the entry bench/parse.py can call.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import argparse
import statistics
import time
from collections.abc import Mapping
from dataclasses import dataclass

from registry.gguf.reader import parse_header
from registry.safety import (
    SandboxPool,
    ScanCache,
    chat_templates,
    scan_templates,
    scan_templates_report,
    special_tokens,
)
from registry.safety.capabilities import in_order
from tests.models import GEMMA3, SMOLLM2, SampleModel, fetch
from tests.safety import templates as T

TARGET_MS = 20.0


@dataclass
class Row:
    name: str
    chars: int
    findings: int
    first_ms: float
    repeat_ms: float
    cached_ms: float
    capabilities: str  # what the probes found, comma-separated


def _header_tokens(model: SampleModel) -> tuple[dict[str, str], str, str]:
    path = fetch(model)
    with path.open("rb") as f:
        header = parse_header(f.read(8 << 20), file_size=path.stat().st_size)
    bos, eos = special_tokens(header)
    return chat_templates(header), bos, eos


def scan_ms(templates: Mapping[str, str], bos: str, eos: str, pool: SandboxPool, runs: int = 20) -> Row:
    """Median milliseconds to scan `templates` (one file's worth) with a warm pool."""
    name = next(iter(templates))
    firsts, repeats, cached = [], [], []
    cache = ScanCache()
    report = scan_templates_report(templates, bos=bos, eos=eos, runner=pool, cache=cache)
    for i in range(runs):
        unique = {n: f"{s}{{# bench run {i} #}}" for n, s in templates.items()}
        t0 = time.perf_counter()
        scan_templates(unique, bos=bos, eos=eos, runner=pool)
        t1 = time.perf_counter()
        scan_templates(templates, bos=bos, eos=eos, runner=pool)
        t2 = time.perf_counter()
        scan_templates(templates, bos=bos, eos=eos, runner=pool, cache=cache)
        t3 = time.perf_counter()
        firsts.append(t1 - t0)
        repeats.append(t2 - t1)
        cached.append(t3 - t2)
    n = len(templates)
    return Row(
        name,
        sum(len(s) for s in templates.values()),
        len(report.findings),
        statistics.median(firsts) * 1000 / n,
        statistics.median(repeats) * 1000 / n,
        statistics.median(cached) * 1000 / n,
        ",".join(in_order(report.capabilities)) or "-",
    )


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args(argv)

    smol_templates, smol_bos, smol_eos = _header_tokens(SMOLLM2)
    gemma_templates, gemma_bos, gemma_eos = _header_tokens(GEMMA3)
    cases: list[tuple[str, Mapping[str, str], str, str]] = [
        ("smollm2 (file)", smol_templates, smol_bos, smol_eos),
        ("gemma3 (it template)", gemma_templates or {"default": T.GEMMA3}, gemma_bos, gemma_eos),
        ("chatml", {"default": T.CHATML}, "<s>", "</s>"),
        ("llama3", {"default": T.LLAMA3}, "<|begin_of_text|>", "<|eot_id|>"),
        ("llama3.2 +tools", {"default": T.LLAMA32}, "<|begin_of_text|>", "<|eot_id|>"),
        ("qwen2.5 +tools", {"default": T.QWEN25_TOOLS}, "", "<|im_end|>"),
        ("qwen3 +tools", {"default": T.QWEN3}, "", "<|im_end|>"),
    ]
    with SandboxPool() as pool:
        t0 = time.perf_counter()
        pool.warm()
        startup_ms = (time.perf_counter() - t0) * 1000
        rows = [scan_ms(templates, bos, eos, pool, args.runs) for _, templates, bos, eos in cases]

    head = (f"{'template':22s} {'chars':>6s} {'findings':>8s} {'first ms':>9s} {'repeat ms':>10s} {'cached ms':>10s}"
            "  can do")  # fmt: skip
    print(head)
    print("-" * len(head))
    for (label, *_), r in zip(cases, rows, strict=True):
        print(f"{label:22s} {r.chars:6d} {r.findings:8d} {r.first_ms:9.2f} {r.repeat_ms:10.2f} {r.cached_ms:10.3f}"
              f"  {r.capabilities}")  # fmt: skip
    print()
    worst = max(r.first_ms for r in rows)
    print(f"sandbox start-up (once per pool worker, amortised): {startup_ms:.0f} ms")
    print(
        f"target < {TARGET_MS:.0f} ms per typical template (first scan, worst): {worst:.2f} ms "
        f"{'met' if worst < TARGET_MS else 'MISSED'}"
    )
    return 0 if worst < TARGET_MS else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
