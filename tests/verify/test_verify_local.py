"""Verification of local files: the real SmolLM2 passes, each corruption fails with its reason.

Every case goes through `verify_local`, so the child process, its memory cap and its
wall-clock limit are part of what is tested.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest

from registry.config import Settings
from tests.models import sha256_file
from tests.runner.conftest import reference
from tests.runner.reference64 import Spec
from tests.runner.synthetic import make_weights, write_gguf
from tests.verify.conftest import (
    copy_model,
    f32_at,
    first_tensor,
    header_of,
    offset_field,
    patch,
    u64,
    write_tiny,
)
from workers.verify import VerifyResult, verify_local
from workers.verify_checks import ShardedModelFile, open_model_file, physical_memory, weight_budget


def _with(settings: Settings, **verify: object) -> Settings:
    return dataclasses.replace(settings, verify=dataclasses.replace(settings.verify, **verify))


async def _verify(path: Path, settings: Settings) -> VerifyResult:
    return await verify_local(path, settings)


async def test_smollm2_passes(smollm2_path: Path, settings: Settings) -> None:
    r = await _verify(smollm2_path, settings)
    d = r.to_dict()
    assert (r.status, r.reason) == ("passed", None), r.message
    assert d["sha256"] == [sha256_file(smollm2_path)]
    assert d["bytes_downloaded"] == 0
    assert d["tensors_checked"] == len(header_of(smollm2_path).tensors) == len(d["tensors"])
    assert d["nonfinite_values"] == 0
    emb = next(t for t in d["tensors"] if t["name"] == "token_embd.weight")
    assert emb["type"] == "Q8_0" and emb["nan"] == emb["inf"] == 0
    assert emb["min"] < emb["mean"] < emb["max"] and 0 < emb["std"] < 1
    ref = reference("smollm2")
    assert d["perplexity"] == pytest.approx(ref["perplexity"]["smoke"]["perplexity"], rel=0.03)
    assert d["generated_tokens"] == ref["greedy"]["capital"]["greedy"]
    assert d["generated_text"].startswith(" Paris")
    for stage in ("download", "hash", "header", "dequantize", "load", "perplexity", "generate"):
        assert d["timings"][stage] >= 0
    assert 100 << 20 < d["peak_rss_bytes"] < 3 << 30
    assert d["kept_matrices"] == 0  # under the default 8 GiB cap every weight is float32


async def test_truncated_file(smollm2_path: Path, tmp_path: Path, settings: Settings) -> None:
    bad = copy_model(smollm2_path, tmp_path / "cut.gguf")
    with bad.open("r+b") as f:
        f.truncate(bad.stat().st_size * 3 // 5)
    r = await _verify(bad, settings)
    assert (r.status, r.reason) == ("failed", "truncated"), r.message
    assert r.report is not None and r.report.tensors_checked == 0


async def test_file_cut_inside_its_header(smollm2_path: Path, tmp_path: Path, settings: Settings) -> None:
    bad = tmp_path / "head.gguf"
    bad.write_bytes(smollm2_path.read_bytes()[:100_000])
    r = await _verify(bad, settings)
    assert (r.status, r.reason) == ("failed", "truncated"), r.message


async def test_nan_scale_is_nonfinite_weights(smollm2_path: Path, tmp_path: Path, settings: Settings) -> None:
    bad = copy_model(smollm2_path, tmp_path / "nan.gguf")
    info = first_tensor(bad, "Q8_0")
    patch(bad, info.file_offset + 34 * 7, b"\x00\x7e")  # block 7's fp16 d = 0x7E00, a NaN
    r = await _verify(bad, settings)
    assert (r.status, r.reason) == ("failed", "nonfinite_weights"), r.message
    d = r.to_dict()
    assert d["nonfinite_values"] == 32  # the block's 32 values
    stats = next(t for t in d["tensors"] if t["name"] == info.name)
    assert stats["nan"] == 32 and math.isfinite(stats["mean"])
    assert d["perplexity"] is None  # no inference on broken weights


async def test_tensor_offset_past_the_end(smollm2_path: Path, tmp_path: Path, settings: Settings) -> None:
    bad = copy_model(smollm2_path, tmp_path / "oob.gguf")
    header = header_of(bad)
    last = header.tensors[-1]
    past = -(-(bad.stat().st_size + (1 << 20)) // header.alignment) * header.alignment
    patch(bad, offset_field(last), u64(past))
    assert header_of(bad).tensors[-1].offset == past
    r = await _verify(bad, settings)
    assert (r.status, r.reason) == ("failed", "tensor_out_of_bounds"), r.message
    assert last.name in (r.message or "")


async def test_exploding_activations_are_inference_nonfinite(
    smollm2_path: Path, tmp_path: Path, settings: Settings
) -> None:
    bad = copy_model(smollm2_path, tmp_path / "inf.gguf")
    info = header_of(bad).tensor("output_norm.weight")
    f32_at(bad, info, np.full(info.n_elements, 1e38))  # finite weights, infinite logits
    r = await _verify(bad, settings)
    assert (r.status, r.reason) == ("failed", "inference_nonfinite"), r.message
    assert r.report is not None and r.report.nonfinite_values == 0


async def test_perplexity_above_the_threshold_fails(smollm2_path: Path, settings: Settings) -> None:
    r = await _verify(smollm2_path, _with(settings, perplexity_threshold=5.0))
    assert (r.status, r.reason) == ("failed", "perplexity_too_high"), r.message
    assert r.report is not None and r.report.perplexity is not None and r.report.perplexity > 5


async def test_unsupported_architecture_is_skipped_after_the_header_checks(
    tmp_path: Path, settings: Settings
) -> None:
    r = await _verify(write_tiny(tmp_path / "mamba.gguf"), settings)
    assert (r.status, r.reason) == ("skipped", "unsupported_architecture"), r.message
    d = r.to_dict()
    assert d["architecture"] == "mamba"
    assert d["tensors_checked"] == 3 and d["nonfinite_values"] == 0
    assert {"header", "dequantize"} <= set(d["timings"])


async def test_nonfinite_weights_in_a_tiny_file(tmp_path: Path, settings: Settings) -> None:
    r = await _verify(write_tiny(tmp_path / "nan.gguf", nan=True), settings)
    assert (r.status, r.reason) == ("failed", "nonfinite_weights")


async def test_timeout_kills_the_child(tmp_path: Path, settings: Settings) -> None:
    r = await _verify(write_tiny(tmp_path / "t.gguf"), _with(settings, timeout_seconds=0.05))
    assert (r.status, r.reason) == ("failed", "timeout"), r.message


async def test_a_model_whose_float32_weights_exceed_the_cap_passes_quantized(
    smollm2_path: Path, settings: Settings
) -> None:
    # The float32 weights (538 MB) and the mapped file (98 MB) do not fit in 600 MB of
    # address space: every weight matrix stays quantized and is dequantized a piece at a
    # time. (The run peaks at about 490 MB of address space, 240 MB resident.)
    r = await _verify(smollm2_path, _with(settings, memory_cap_bytes=600 << 20))
    d = r.to_dict(tensors=False)
    assert (r.status, r.reason) == ("passed", None), r.message
    assert d["kept_matrices"] == 7 * 30 + 1  # per layer q k v o gate up down; tied embeddings
    ref = reference("smollm2")
    assert d["perplexity"] == pytest.approx(ref["perplexity"]["smoke"]["perplexity"], rel=0.03)
    assert d["generated_tokens"] == ref["greedy"]["capital"]["greedy"]
    assert d["peak_rss_bytes"] < 400 << 20


@pytest.mark.parametrize("cap_mb", [250, 300, 320])
async def test_memory_cap(smollm2_path: Path, settings: Settings, cap_mb: int) -> None:
    # This address space holds the mapped file and the interpreter but not numpy's work on
    # top: the cap still ends the run, as a verdict. At 300-320 MB it is OpenBLAS that
    # cannot get its buffers and ends the process, which is the cap too, not a crash.
    r = await _verify(smollm2_path, _with(settings, memory_cap_bytes=cap_mb << 20))
    assert (r.status, r.reason) == ("failed", "memory_exceeded"), r.message


def test_weight_budget() -> None:
    gib = 1 << 30
    assert weight_budget(8 * gib, gib) == 8 * gib - gib - 2 * gib  # a quarter of the cap is kept back
    assert weight_budget(2 * gib, gib // 2) == 2 * gib - gib // 2 - gib  # at least 1 GiB is
    assert weight_budget(gib, gib // 2) == 0
    assert weight_budget(0, gib) == weight_budget(physical_memory(), gib) > 0  # no cap: physical memory


async def test_removed_tensor_type_is_skipped(tmp_path: Path, settings: Settings) -> None:
    path = write_tiny(tmp_path / "q4_2.gguf")
    info = header_of(path).tensors[0]
    patch(path, offset_field(info) - 4, (4).to_bytes(4, "little"))  # ggml type 4: Q4_2, long removed
    r = await _verify(path, settings)
    assert (r.status, r.reason) == ("skipped", "unsupported_type"), r.message


async def test_split_model_is_checked_across_its_shards(tmp_path: Path, settings: Settings) -> None:
    spec = Spec("llama")
    make_weights(spec, np.random.default_rng(0), np.float32)
    names = list(spec.weights)
    halves = (names[: len(names) // 2], names[len(names) // 2 :])
    for i, part in enumerate(halves, start=1):
        shard = dataclasses.replace(spec, weights={n: spec.weights[n] for n in part})
        write_gguf(shard, tmp_path / f"tiny-{i:05d}-of-00002.gguf")
    mf = open_model_file(tmp_path / "tiny-00002-of-00002.gguf")
    assert isinstance(mf, ShardedModelFile) and all(mf.has_tensor(n) for n in names)
    assert mf.tensor("output.weight").shape == spec.weights["output.weight"].shape
    r = await _verify(tmp_path / "tiny-00001-of-00002.gguf", settings)
    # Weights from both shards load into the llama pass; the synthetic file has no tokenizer.
    assert r.report is not None and r.report.tensors_checked == len(names)
    assert r.reason == "invalid_model" and "tokenizer" in (r.message or ""), r.message
    assert len(r.sha256) == 2
