"""The memory estimate (registry/gguf/memory.py) against what llama.cpp allocates, part by part.

Run from the repository root: `.venv/bin/python -m bench.memory [--record FILE] [--only TEXT]`.
Each file is loaded by llama.cpp through llama-cpp-python in the reference virtualenv
(.cache/refvenv, `make refvenv`; bench/memory_probe.py runs there as a subprocess), which
logs the size of every buffer it allocates: model (and the CPU's repacked copies), KV cache,
recurrent state, output and compute. The table puts our estimate beside each part, then
the worst total deviation per family. Target: every total within 5% or 32 MiB of
llama.cpp's, whichever is larger.

Files: the two sample models; a zoo of quantizations llama.cpp's own quantizer makes from
a small random F16 llama; synthetic files shaped like published models of each family
(tests/memory/families.py: sparse files, headers only, which llama.cpp sizes in its
memory-fit mode without reading tensor data, so its weights come from its "file size" line,
printed to 0.01 GiB). Only the CPU case can be measured here. `--record` writes the
figures as the test data tests/memory/ checks the estimate against without llama.cpp.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import argparse
import json
import os
import re
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from registry.gguf.memory import REPACK_AVX2, REPACK_AVX512, MemorySettings, estimate
from registry.gguf.memory_profile import MemoryProfile, memory_profile
from registry.hub.local import read_header
from tests.memory import families
from tests.models import GEMMA3, SMOLLM2

ROOT = Path(__file__).resolve().parent.parent
REFVENV = Path(os.environ.get("REGISTRY_REFVENV", ROOT / ".cache" / "refvenv"))
PROBE = Path(__file__).resolve().parent / "memory_probe.py"
MiB = 1 << 20
TARGET_SHARE, TARGET_FLOOR = 0.05, 32 * MiB
# llama_ftype ids of the zoo's quantizations, as llama.cpp's quantizer names them.
ZOO = {"Q8_0": 7, "Q6_K": 18, "Q5_K_S": 16, "Q4_K_M": 15, "Q4_0": 2, "IQ4_NL": 25, "IQ4_XS": 30, "Q3_K_M": 12,
       "Q2_K": 10}  # fmt: skip
PARTS = ("weights", "repacked", "kv_cache", "recurrent", "output", "compute")
# Settings besides the default the bench also measures, on a few files.
VARIANTS: dict[str, dict[str, Any]] = {
    "fa": {"flash_attention": True},
    "q8_0": {"cache_type": "q8_0"},
    "q4_0": {"cache_type": "q4_0"},
    "swa_full": {"swa_full": True},
    "seq4": {"sequences": 4},
    "ub256": {"ubatch": 256, "batch": 2048},
}
VARIANT_FILES = ("SmolLM2-135M-Instruct.Q4_1", "gemma-3-270m-q4_k_m", "llama-3.2-1b", "gemma-3-1b",
                 "deepseek-v2-lite", "granite-4.0-h-micro", "mamba-130m")  # fmt: skip


def _mib(text: str, unit: str = "MiB") -> int:
    return round(float(text) * (1024 if unit == "GiB" else 1) * MiB)


def parse_log(log: str) -> dict[str, int | None]:
    """Bytes of each part from llama.cpp's log (to its printed 0.01 MiB); None for a part it
    did not report (the model buffers of the memory-fit mode, which allocates none)."""
    models = re.findall(r"load_tensors: +(\S+) model buffer size = +([\d.]+) MiB", log)
    no_alloc = re.search(r"print_info: no_alloc += 1", log) is not None
    if no_alloc:
        size = re.search(r"print_info: file size += ([\d.]+) (MiB|GiB)", log)
        weights: int | None = _mib(*size.groups()) if size else None
        repacked: int | None = None
    else:
        weights = sum(_mib(n) for name, n in models if name != "CPU_REPACK")
        repacked = sum(_mib(n) for name, n in models if name == "CPU_REPACK")
    kv = sum(_mib(n) for n in re.findall(r"llama_kv_cache: size = +([\d.]+) MiB", log))
    recurrent = sum(_mib(n) for n in re.findall(r"llama_memory_recurrent: size = +([\d.]+) MiB", log))
    output = re.search(r"output buffer size = +([\d.]+) MiB", log)
    compute = re.findall(r"sched_reserve: +\S+ compute buffer size = +([\d.]+) MiB", log)
    return {"weights": weights, "repacked": repacked, "kv_cache": kv, "recurrent": recurrent,
            "output": _mib(output.group(1)) if output else None,
            "compute": sum(_mib(n) for n in compute) if compute else None}  # fmt: skip


def probe_args(s: MemorySettings) -> list[str]:
    return ["--ctx", str(s.context), "--batch", str(s.batch), "--ubatch", str(s.ubatch), "--seqs",
            str(s.sequences), "--cache", s.cache_type, "--flash-attn", str(int(s.flash_attention)),
            "--swa-full", str(int(s.swa_full))]  # fmt: skip


def run_probe(path: Path, args: list[str]) -> tuple[str, dict[str, object]]:
    run = subprocess.run([str(REFVENV / "bin" / "python"), str(PROBE), str(path), *args], capture_output=True,
                         text=True, timeout=1800)  # fmt: skip
    info = json.loads(run.stdout.strip().splitlines()[-1]) if run.stdout.strip() else {}
    if run.returncode != 0 or not info.get("loaded", info.get("quantized")):
        raise RuntimeError(f"llama.cpp failed on {path.name} {' '.join(args)}:\n{run.stderr[-3000:]}")
    return run.stderr, info


@dataclass
class Case:
    name: str  # file name without .gguf
    family: str
    source: str  # "sample", "zoo" or "synthetic"
    path: Path
    settings: MemorySettings
    variant: str = "default"
    no_alloc: bool = False
    profile: MemoryProfile | None = None
    llama_cpp: dict[str, int | None] = field(default_factory=dict)
    ours: dict[str, int] = field(default_factory=dict)

    @property
    def llama_total(self) -> int:
        return sum(v or 0 for k, v in self.llama_cpp.items() if k in PARTS and (k in self.ours))

    @property
    def ours_total(self) -> int:
        return sum(v for k, v in self.ours.items() if self.llama_cpp.get(k) is not None)

    @property
    def deviation(self) -> float:
        return (self.ours_total - self.llama_total) / self.llama_total

    @property
    def within(self) -> bool:
        return abs(self.ours_total - self.llama_total) <= max(TARGET_SHARE * self.llama_total, TARGET_FLOOR)


def _contexts(ctx_train: int | None, wanted: tuple[int, ...] = (4096, 32768, 131072)) -> tuple[int, ...]:
    return tuple(c for c in wanted if c <= 32768 or (ctx_train or 0) >= c)


def cases(work: Path, only: str | None, cpu_repack: frozenset[str]) -> Iterator[Case]:
    base = MemorySettings(repack=cpu_repack)
    samples = [(SMOLLM2.path, "llama"), (GEMMA3.path, "gemma3")]
    for path, family in samples:
        if not path.exists():
            print(f"skipped {path.name}: not fetched (python -m tests.models fetch)", file=sys.stderr)
            continue
        ctx_train = read_header(path).header.get(f"{family}.context_length")
        for c in _contexts(ctx_train):
            yield Case(path.stem, family, "sample", path, replace(base, context=c))
    zoo_dir = work / "zoo"
    zoo_dir.mkdir(exist_ok=True)
    f16 = zoo_dir / "zoo-F16.gguf"
    if not f16.exists():
        families.write_dense(families.ZOO_BASE, f16)
    for label, ftype in ZOO.items():
        out = zoo_dir / f"zoo-{label}.gguf"
        if not out.exists() and (only is None or only in out.stem):
            run_probe(f16, ["--quantize", str(out), "--ftype", str(ftype)])
        for c in (4096, 32768):
            yield Case(out.stem, "llama (zoo)", "zoo", out, replace(base, context=c))
    for fam, path in families.files(work):
        for c in fam.contexts:
            yield Case(fam.name, fam.family, "synthetic", path, replace(base, context=c, repack=frozenset()),
                       no_alloc=True)  # fmt: skip


def variants(all_cases: list[Case]) -> Iterator[Case]:
    for case in all_cases:
        if case.name not in VARIANT_FILES or case.settings.context != 4096:
            continue
        for variant, change in VARIANTS.items():
            if variant == "swa_full" and case.family != "gemma3":
                continue
            yield replace(
                case, settings=replace(case.settings, **change), variant=variant, llama_cpp={}, ours={}
            )


def measure(case: Case) -> Case:
    log, _ = run_probe(case.path, [*probe_args(case.settings), "--no-alloc", str(int(case.no_alloc)),
                                   "--repack", str(int(bool(case.settings.repack) or not case.no_alloc))])  # fmt: skip
    header = read_header(case.path).header
    case.profile = memory_profile(header)
    if case.profile is None:
        raise RuntimeError(f"no memory profile for {case.name}")
    case.llama_cpp = parse_log(log)
    case.ours = ours(case.profile, case.settings)
    return case


def ours(profile: MemoryProfile, settings: MemorySettings) -> dict[str, int]:
    return estimate(profile, settings).parts()


def _cell(ours: int, theirs: int | None) -> str:
    return f"{ours / MiB:9.1f} {'-' if theirs is None else f'{theirs / MiB:.1f}':>9}"


def print_table(done: list[Case]) -> None:
    head = f"{'file':28} {'ctx':>6} {'settings':9}" + "".join(f" {p + ' ours/llama':>19}" for p in PARTS)
    print(head + f" {'total ours/llama':>21} {'dev':>7}")
    for c in done:
        row = f"{c.name[:28]:28} {c.settings.context:6} {c.variant:9}"
        row += "".join(" " + _cell(c.ours[p], c.llama_cpp.get(p)) for p in PARTS)
        mark = "" if c.within else "  MISSED"
        print(row + f" {c.ours_total / MiB:10.1f} {c.llama_total / MiB:10.1f} {c.deviation:+7.2%}{mark}")
    print("\nworst total deviation per family (target: within 5% or 32 MiB, whichever is larger)")
    by_family: dict[str, list[Case]] = {}
    for c in done:
        by_family.setdefault(c.family, []).append(c)
    for fam, group in by_family.items():
        worst = max(group, key=lambda c: abs(c.ours_total - c.llama_total))
        share = max(group, key=lambda c: abs(c.deviation))
        compute = max(group, key=lambda c: abs(c.ours["compute"] - (c.llama_cpp["compute"] or 0)))
        off = compute.ours["compute"] - (compute.llama_cpp["compute"] or 0)
        ok = all(c.within for c in group)
        print(f"  {fam:14} {len(group):3} runs  total {(worst.ours_total - worst.llama_total) / MiB:+7.1f} MiB "
              f"({worst.name} @ {worst.settings.context} {worst.variant}), {share.deviation:+.2%} "
              f"({share.name} @ {share.settings.context} {share.variant}); compute {off / MiB:+6.1f} MiB "
              f"({off / (compute.llama_cpp['compute'] or 1):+.1%} of it, {compute.name} @ {compute.settings.context} "
              f"{compute.variant})  {'ok' if ok else 'MISSED'}")  # fmt: skip
    print(f"\n{sum(c.within for c in done)}/{len(done)} totals within target")


def record(done: list[Case], path: Path, info: dict[str, object]) -> None:
    def settings(s: MemorySettings) -> dict[str, object]:
        d = asdict(s)
        d["repack"] = sorted(s.repack)
        return d

    data = {
        "note": {
            "made_by": "bench/memory.py --record",
            "llama_cpp_python": info.get("llama_cpp_python"),
            "llama_cpp": "0c1e57098 (the commit llama-cpp-python 0.3.36 vendors)",
            "system": info.get("system"),
            "how": "bench/memory_probe.py loads each file with llama_model_load_from_file and "
                   "llama_init_from_model (one thread, the settings listed), synthetic files with "
                   "model_params.no_alloc (llama.cpp's memory-fit mode); sizes are parsed from its "
                   "log, printed to 0.01 MiB (weights of no_alloc runs to 0.01 GiB). Zoo files are "
                   "made by llama_model_quantize from a random F16 llama and are not kept: their "
                   "profile (registry/gguf/memory_profile.py) is recorded instead.",
        },
        "cases": [
            {"name": c.name, "family": c.family, "source": c.source, "variant": c.variant,
             "settings": settings(c.settings), "llama_cpp": c.llama_cpp,
             "profile": c.profile.to_dict() if c.source == "zoo" and c.profile else None}
            for c in done
        ],
    }  # fmt: skip
    path.write_text(json.dumps(data, indent=1) + "\n")
    print(f"recorded {len(done)} runs in {path}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--record", type=Path, help="write the measured figures as test data (JSON)")
    parser.add_argument("--only", help="only files whose name contains this")
    parser.add_argument(
        "--work", type=Path, help="where to keep the generated files (default: a temporary directory)"
    )
    args = parser.parse_args()
    if not (REFVENV / "bin" / "python").exists():
        print(f"no reference virtualenv at {REFVENV} (make refvenv): llama.cpp is not here", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="bench-memory-") as tmp:
        work = args.work or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        _, info = run_probe(SMOLLM2.path, ["--ctx", "512", "--no-alloc", "1"])
        cpu = REPACK_AVX512 if "AVX512 = 1" in str(info.get("system")) else REPACK_AVX2
        todo = [c for c in cases(work, args.only, cpu) if args.only is None or args.only in c.name]
        todo += list(variants(todo))
        done = [measure(c) for c in todo]
    print(f"llama-cpp-python {info.get('llama_cpp_python')} (llama.cpp 0c1e57098), CPU; sizes in MiB\n")
    print_table(done)
    if args.record:
        record(done, args.record, info)
    return 0 if all(c.within for c in done) else 1


if __name__ == "__main__":
    sys.exit(main())
