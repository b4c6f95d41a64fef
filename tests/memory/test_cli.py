"""`registry inspect --context` shows the memory estimate, part by part."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from registry.gguf.memory import MemorySettings, estimate
from registry.gguf.memory_profile import memory_profile
from registry.hub.local import read_header
from tests.memory.conftest import FamilyFiles

MiB = 1 << 20


def inspect(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "registry.cli", "inspect", *map(str, args)], capture_output=True,
                          text=True, timeout=300, check=True)  # fmt: skip


def test_json_carries_the_estimate_on_a_cpu_and_a_gpu(gemma3_path: Path) -> None:
    doc = json.loads(inspect(gemma3_path, "--context", "32K", "--json").stdout)["memory"]
    profile = memory_profile(read_header(gemma3_path).header)
    assert profile is not None
    cpu = estimate(profile, MemorySettings(context=32768))
    assert doc["cpu"]["parts"] == cpu.parts() and doc["cpu"]["total"] == cpu.total
    assert doc["cpu"]["settings"]["flash_attention"] is False and doc["cpu"]["compute_peak"] == "logits"
    assert [p["cells"] for p in doc["cpu"]["kv_cache"]] == [32768, 1024]
    gpu = doc["gpu"]
    assert gpu["device"] + gpu["host"] == gpu["total"] and gpu["parts"]["repacked"] == 0
    assert json.loads(inspect(gemma3_path, "--json").stdout).get("memory") is None


def test_text_shows_the_parts(family_files: FamilyFiles) -> None:
    out = inspect(family_files.path("granite-4.0-h-micro"), "--context", "131072").stdout
    line = next(x for x in out.splitlines() if x.startswith("memory at 131,072 tokens"))
    # llama.cpp's memory-fit run: 11,503.5 MiB without the CPU's repacked Q4_K copies
    assert line.endswith("12.4 GiB") and "repacked 1.2 GiB" in out
    assert "recurrent state 73.8 MiB" in out and "KV cache 1.0 GiB (4 layers x 131,072 cells)" in out
    assert "compute 8.3 GiB (attention)" in out and "on the device" in out
