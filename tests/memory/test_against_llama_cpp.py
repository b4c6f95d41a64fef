"""The memory estimate against the buffers llama.cpp allocates.

llama_cpp_figures.json holds llama.cpp's own figures (bench/memory.py --record: each file
loaded by llama-cpp-python 0.3.36, its log parsed; the file's note says how), so these
tests check the same numbers without llama.cpp. The KV cache, recurrent state, output
buffer and repacked weights must be what llama.cpp allocates to its printed precision;
the compute buffer and the total within 5% or 32 MiB, whichever is larger (the target of
bench/memory.py). The last test repeats a few loads live when the reference virtualenv is
here.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from bench.memory import PARTS, REFVENV, parse_log, probe_args, run_probe
from registry.gguf.memory import REPACK_AVX512, MemorySettings, estimate
from registry.gguf.memory_profile import MemoryProfile, memory_profile
from registry.hub.local import read_header
from tests.memory.conftest import FamilyFiles
from tests.models import GEMMA3, SMOLLM2

MiB = 1 << 20
FIGURES = json.loads((Path(__file__).parent / "llama_cpp_figures.json").read_text())
PRINTED = 0.006 * MiB  # llama.cpp prints MiB to two decimals
GIB_PRINTED = 0.006 * 1024 * MiB  # and a large model's file size in GiB to two decimals
SAMPLES = {SMOLLM2.path.stem: "smollm2_path", GEMMA3.path.stem: "gemma3_path"}


def _settings(data: dict[str, Any]) -> MemorySettings:
    return MemorySettings(**{**data, "repack": frozenset(data["repack"])})


def _profile(
    case: dict[str, Any], request: pytest.FixtureRequest, family_files: FamilyFiles
) -> MemoryProfile:
    if case["source"] == "zoo":
        return MemoryProfile.from_dict(case["profile"])
    if case["source"] == "sample":
        path = request.getfixturevalue(SAMPLES[case["name"]])
        profile = memory_profile(read_header(path).header)
        assert profile is not None
        return profile
    return family_files.profile(case["name"])


def check(ours: dict[str, int], theirs: dict[str, int | None], lines: int = 2) -> None:
    """Our parts against llama.cpp's (None: a part it did not report)."""
    for part in ("kv_cache", "recurrent", "output"):
        assert abs(ours[part] - (theirs[part] or 0)) <= lines * PRINTED, part
    if theirs["repacked"] is not None:
        assert abs(ours["repacked"] - theirs["repacked"]) <= PRINTED
        # The mapped range leaves out repacked tensors at its ends: less, never more.
        assert -PRINTED <= ours["weights"] - theirs["weights"] <= theirs["repacked"] + PRINTED  # type: ignore[operator]
    else:
        assert theirs["weights"] is not None and abs(ours["weights"] - theirs["weights"]) <= GIB_PRINTED
    total = sum(theirs[p] or 0 for p in PARTS)
    ours_total = sum(ours[p] for p in PARTS if theirs[p] is not None)
    target = max(0.05 * total, 32 * MiB)
    assert abs(ours["compute"] - (theirs["compute"] or 0)) <= target
    assert abs(ours_total - total) <= target


@pytest.mark.parametrize(
    "case",
    FIGURES["cases"],
    ids=[f"{c['name']}@{c['settings']['context']}-{c['variant']}" for c in FIGURES["cases"]],
)
def test_the_estimate_is_what_llama_cpp_allocated(
    case: dict[str, Any], request: pytest.FixtureRequest, family_files: FamilyFiles
) -> None:
    ours = estimate(_profile(case, request, family_files), _settings(case["settings"])).parts()
    check(ours, case["llama_cpp"])


def test_the_figures_cover_every_family_and_setting() -> None:
    cases = FIGURES["cases"]
    assert {
        "llama",
        "qwen2",
        "qwen3",
        "qwen3moe",
        "gemma3",
        "deepseek2",
        "granitehybrid",
        "mamba",
        "qwen3next",
        "gpt-oss",
    } <= {c["family"] for c in cases}
    assert {"sample", "zoo", "synthetic"} == {c["source"] for c in cases}
    assert {"default", "fa", "q8_0", "q4_0", "swa_full", "seq4", "ub256"} <= {c["variant"] for c in cases}
    assert any(c["settings"]["context"] == 131072 for c in cases)
    assert FIGURES["note"]["llama_cpp_python"] == "0.3.36"


@pytest.mark.skipif(not (REFVENV / "bin" / "python").exists(), reason=f"no reference virtualenv at {REFVENV}")
@pytest.mark.parametrize(
    ("name", "settings"),
    [
        (SMOLLM2.path.stem, MemorySettings(context=6000)),
        (GEMMA3.path.stem, MemorySettings(context=10000, flash_attention=True, cache_type="q8_0")),
        ("gemma-3-1b", MemorySettings(context=20000, ubatch=384)),
        ("granite-4.0-h-micro", MemorySettings(context=9000, sequences=2)),
        ("deepseek-v2-lite", MemorySettings(context=12288)),
    ],
)
def test_live_against_llama_cpp(
    name: str, settings: MemorySettings, request: pytest.FixtureRequest, family_files: FamilyFiles
) -> None:
    """Settings the recorded figures do not have, measured now."""
    sample = name in SAMPLES
    path = request.getfixturevalue(SAMPLES[name]) if sample else family_files.path(name)
    _, info = run_probe(path, ["--ctx", "512", "--no-alloc", "1"])
    if sample:
        cpu = REPACK_AVX512 if "AVX512 = 1" in str(info["system"]) else frozenset({"Q4_0", "Q4_K", "IQ4_NL"})
        settings = replace(settings, repack=cpu)
    else:
        settings = replace(settings, repack=frozenset())
    log, _ = run_probe(path, [*probe_args(settings), "--no-alloc", str(int(not sample))])
    profile = memory_profile(read_header(path).header)
    assert profile is not None
    check(estimate(profile, settings).parts(), parse_log(log))
