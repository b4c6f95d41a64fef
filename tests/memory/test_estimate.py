"""The memory estimate's rules, its profile of a header, its GPU split, and the line form a
database evaluates (registry/gguf/memory.py, memory_profile.py)."""

from __future__ import annotations

import sqlite3
from dataclasses import astuple, replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from registry.gguf.memory import (
    MemoryLine,
    MemorySettings,
    estimate,
    memory_line,
)
from registry.gguf.memory_profile import LayerGroup, MemoryProfile, memory_profile
from registry.gguf.reader import parse_header
from registry.gguf.types import GGMLType, ValueType
from registry.hub.local import read_header
from tests.gguf.builders import Arr, HeaderBuilder
from tests.memory import families
from tests.memory.conftest import FamilyFiles

MiB = 1 << 20


def header(
    arch: str, tensors: list[tuple[str, tuple[int, ...], GGMLType]] | None = None, /, **keys: Any
) -> Any:
    """A header of `arch` with a vocabulary of 1,000 tokens and the given `arch.`-relative keys
    (`attention__head_count` for `attention.head_count`)."""
    b = HeaderBuilder()
    b.kv("general.architecture", ValueType.STRING, arch)
    b.kv("tokenizer.ggml.tokens", ValueType.ARRAY, Arr(ValueType.STRING, [f"t{i}" for i in range(1000)]))
    for key, value in keys.items():
        name = f"{arch}.{key.replace('__', '.')}"
        if isinstance(value, Arr):
            b.kv(name, ValueType.ARRAY, value)
        elif isinstance(value, bool):
            b.kv(name, ValueType.BOOL, value)
        else:
            b.kv(name, ValueType.UINT32, value)
    for name, shape, qtype in tensors or [("token_embd.weight", (64, 1000), GGMLType.F16)]:
        b.tensor(name, shape, qtype)
    data = b.build()
    return parse_header(data, file_size=None)


LLAMA: dict[str, Any] = {"block_count": 4, "embedding_length": 64, "attention__head_count": 4, "attention__head_count_kv": 2,
         "feed_forward_length": 256, "context_length": 8192}  # fmt: skip


def test_a_dense_model_profile_from_its_header() -> None:
    tensors = [("token_embd.weight", (64, 1000), GGMLType.Q8_0), ("output.weight", (64, 1000), GGMLType.Q4_0),
               ("blk.0.attn_q.weight", (256, 64), GGMLType.Q4_K), ("blk.0.attn_norm.weight", (64,), GGMLType.F32),
               ("blk.0.ffn_down.weight", (256, 63), GGMLType.Q4_0)]  # fmt: skip
    p = memory_profile(header("llama", tensors, **LLAMA))
    assert p is not None
    assert p.attention == (LayerGroup(4, 4, 2, 16, 16),)
    assert (p.vocab_size, p.embedding_length, p.block_count, p.context_length) == (1000, 64, 4, 8192)
    assert p.feed_forward_length == 256 and p.expert_count == 0 and not p.output_tied
    embd = 1000 * 64 // 32 * 34
    assert p.input_bytes == embd
    # matrices a CPU repacks: output and attn_q; not the lookup, the norm, nor 63 rows
    assert dict(p.repackable) == {"Q4_0": 1000 * 64 // 32 * 18, "Q4_K": 256 * 64 // 256 * 144}
    assert p.weight_bytes == sum(t.n_bytes for t in header("llama", tensors, **LLAMA).tensors)
    assert MemoryProfile.from_dict(p.to_dict()) == p


def test_families_profiles(family_files: FamilyFiles) -> None:
    gemma = family_files.profile("gemma-3-1b")
    assert {(g.layers, g.sliding) for g in gemma.attention} == {(22, True), (4, False)}
    assert gemma.sliding_window == 512 and gemma.output_tied
    mamba = family_files.profile("mamba-130m")
    assert mamba.attention == () and mamba.recurrent_layers == 24
    assert mamba.recurrent_floats == 3 * 1536 + 16 * 1536  # conv history and the ssm state
    granite = family_files.profile("granite-4.0-h-micro")
    assert granite.recurrent_layers == 36 and sum(g.layers for g in granite.attention) == 4
    assert granite.recurrent_floats == 3 * (4096 + 2 * 128) + 128 * 4096
    deepseek = family_files.profile("deepseek-v2-lite")
    assert deepseek.mla_latent == 512 and deepseek.attention == (LayerGroup(27, 16, 1, 576, 0),)
    assert deepseek.feed_forward_length == 10944 and deepseek.expert_used_count == 6
    assert deepseek.shared_feed_forward_length == 2 * 1408
    moe = family_files.profile("qwen3-30b-a3b")
    assert (moe.expert_count, moe.expert_feed_forward_length, moe.feed_forward_length) == (128, 768, 0)


@pytest.mark.parametrize("arch", ["bert", "t5", "gemma-embedding", "no-such-arch-without-heads"])
def test_what_is_not_estimated(arch: str) -> None:
    keys = {**LLAMA} if arch != "no-such-arch-without-heads" else {"block_count": 4, "embedding_length": 64}
    assert memory_profile(header(arch, **keys)) is None


def test_headers_missing_counts_are_not_estimated() -> None:
    assert memory_profile(header("llama", **{**LLAMA, "attention__causal": False})) is None
    assert (
        memory_profile(header("llama", **{k: v for k, v in LLAMA.items() if k != "embedding_length"})) is None
    )
    assert memory_profile(header("mamba", block_count=4, embedding_length=64)) is None  # no state sizes
    b = HeaderBuilder()
    b.kv("general.architecture", ValueType.STRING, "llama")
    data = b.build()
    assert memory_profile(parse_header(data, file_size=None)) is None  # no vocabulary either


_KEYS = ["block_count", "embedding_length", "attention__head_count", "attention__head_count_kv",
         "feed_forward_length", "expert_count", "expert_used_count", "expert_feed_forward_length",
         "attention__sliding_window", "ssm__inner_size", "ssm__state_size", "ssm__conv_kernel",
         "attention__kv_lora_rank", "attention__key_length", "context_length"]  # fmt: skip
_VALUES = st.one_of(
    st.integers(0, 2**32 - 1), st.sampled_from([0, 1, 8, 4096]),
    st.lists(st.integers(0, 2**31 - 1), max_size=6).map(lambda v: Arr(ValueType.INT32, v)),
)  # fmt: skip


@settings(max_examples=200, deadline=None)
@given(arch=st.sampled_from(["llama", "gemma3", "mamba", "granitehybrid", "deepseek2", "qwen3moe"]),
       keys=st.dictionaries(st.sampled_from(_KEYS), _VALUES, max_size=len(_KEYS)),
       ctx=st.integers(1, 1 << 24))  # fmt: skip
def test_any_header_gives_an_estimate_or_none(arch: str, keys: dict[str, Any], ctx: int) -> None:
    """Whatever the header says, a profile is None or one the estimate sizes without error,
    with coefficients a catalog can store as signed 64-bit integers."""
    p = memory_profile(header(arch, **keys))
    if p is not None:
        e = estimate(p, MemorySettings(context=ctx))
        assert min(e.parts().values()) >= 0 and e.total >= e.weights
        assert all(0 <= v < 2**63 for v in astuple(memory_line(p)))


def test_lying_widths_are_not_estimated() -> None:
    huge = {**LLAMA, "attention__head_count_kv": 2**31, "attention__key_length": 2**31}
    assert memory_profile(header("llama", **huge)) is None
    assert memory_profile(header("llama", **{**LLAMA, "feed_forward_length": 2**31 + 1})) is not None
    assert memory_profile(header("qwen3moe", **{**LLAMA, "expert_count": 8, "expert_used_count": 2**31,
                                                "expert_feed_forward_length": 2**31})) is None  # fmt: skip


# -- settings --------------------------------------------------------------------------------


def test_settings_are_checked_and_a_quantized_cache_turns_flash_attention_on() -> None:
    assert MemorySettings(cache_type="q8_0").flash_attention
    assert not MemorySettings().flash_attention
    for bad in ({"context": -1}, {"ubatch": 0}, {"sequences": 0}, {"cache_type": "q5_1"}, {"offload": "npu"}):
        with pytest.raises(ValueError):
            MemorySettings(**bad)


def test_context_0_is_the_trained_context(family_files: FamilyFiles) -> None:
    p = family_files.profile("qwen2.5-0.5b")
    assert estimate(p, MemorySettings(context=0)) == replace(estimate(p, MemorySettings(context=32768)),
                                                             settings=MemorySettings(context=0))  # fmt: skip
    with pytest.raises(ValueError):
        estimate(replace(p, context_length=None), MemorySettings(context=0))


def test_the_kv_cache_follows_llama_cpp_layout(family_files: FamilyFiles) -> None:
    p = family_files.profile("gemma-3-4b")  # 5 full layers, 29 sliding of window 1024, 4 KV heads of 256
    e = estimate(p, MemorySettings(context=5000))
    full, swa = e.kv_cache
    assert (full.cells, full.layers, full.bytes) == (5120, 5, 5120 * 5 * 4 * 512 * 2)  # padded to 256
    assert (swa.cells, swa.layers) == (1536, 29)  # window + ubatch, padded
    assert estimate(p, MemorySettings(context=5000, swa_full=True)).kv_cache[1].cells == 5120
    four = estimate(p, MemorySettings(context=5000, sequences=4))  # 4 streams of 1,280 cells
    assert four.kv_cache[0].cells == 4 * 1280 and four.output == 4 * 262144 * 4
    q8 = estimate(p, MemorySettings(context=5000, cache_type="q8_0"))
    assert q8.kv_cache[0].bytes == 5120 * 5 * 2 * (4 * 256 // 32 * 34)


def test_without_flash_attention_v_rows_take_the_widest_layer() -> None:
    p = MemoryProfile("x", 2, 64, 100, None, (LayerGroup(1, 4, 2, 16, 16), LayerGroup(1, 4, 4, 16, 16)))
    assert estimate(p, MemorySettings(context=256)).kv_bytes == 256 * ((32 + 64) + (64 + 64)) * 2
    assert (
        estimate(p, MemorySettings(context=256, flash_attention=True)).kv_bytes
        == 256 * ((32 + 32) + (64 + 64)) * 2
    )


def test_the_compute_buffer_is_the_largest_working_set(family_files: FamilyFiles) -> None:
    llama = family_files.profile("llama-3.2-1b")
    short, long = (
        estimate(llama, MemorySettings(context=2048)),
        estimate(llama, MemorySettings(context=32768)),
    )
    assert short.compute_peak == "logits" and long.compute_peak == "attention"
    # 32 heads x 32,768 cells x 512 tokens of f32 KQ, the f32 mask, and the layer's other activations
    assert (
        long.compute == (32 * 32768 * 512 + 32768 * 512 + (3 * 2048 + 2 * 2048 + 1024) * 512) * 4 + 512 * 24
    )
    assert estimate(llama, MemorySettings(context=32768, flash_attention=True)).compute_peak == "logits"
    assert estimate(family_files.profile("mistral-7b"), MemorySettings(flash_attention=True)).compute_peak == (
        "feed-forward")  # fmt: skip
    assert estimate(family_files.profile("mixtral-8x7b"), MemorySettings(flash_attention=True)).compute_peak == (
        "experts")  # fmt: skip


def test_a_gpu_holds_the_layers_and_the_host_the_input_embedding(gemma3_path: Path) -> None:
    p = memory_profile(read_header(gemma3_path).header)
    assert p is not None and p.output_tied
    cpu = estimate(p, MemorySettings())
    gpu = estimate(p, MemorySettings(offload="gpu"))
    assert gpu.repacked == 0 and cpu.repacked == dict(p.repackable)["Q4_K"]
    assert gpu.host_weights == p.input_bytes
    assert gpu.weights == p.weight_bytes  # the tied output's copy replaces the embedding on the device
    assert gpu.device == gpu.weights + gpu.kv_bytes + gpu.compute - gpu.host_compute
    assert gpu.host == gpu.host_weights + gpu.output + gpu.host_compute
    assert gpu.host_compute > 0 and gpu.total == gpu.device + gpu.host
    assert cpu.device == 0 and cpu.host == cpu.total


# -- the line form ---------------------------------------------------------------------------

SETTINGS = [
    MemorySettings(), MemorySettings(flash_attention=True), MemorySettings(cache_type="q4_0"),
    MemorySettings(swa_full=True), MemorySettings(offload="gpu"), MemorySettings(ubatch=256, batch=2048),
    MemorySettings(batch=128), MemorySettings(logits_all=True, batch=1024),
]  # fmt: skip
CONTEXTS = [512, 513, 1000, 1024, 2047, 4096, 4097, 8192, 30001, 32768, 100000, 131072, 1 << 20, 1 << 24]


def _check_line(p: MemoryProfile, s: MemorySettings, contexts: list[int]) -> None:
    line = memory_line(p, s)
    exact_from = s.batch if s.logits_all else min(s.batch, s.ubatch)
    for c in contexts:
        full = estimate(p, replace(s, context=c)).total
        if c >= exact_from:
            assert line.bytes_at(c) == full, (p.architecture, s, c)
        else:
            assert line.bytes_at(c) >= full, (p.architecture, s, c)


@pytest.mark.parametrize("s", SETTINGS, ids=range(len(SETTINGS)))
@pytest.mark.parametrize("name", [f.name for f in families.catalog()])
def test_the_line_is_the_estimate_at_every_context(
    name: str, s: MemorySettings, family_files: FamilyFiles
) -> None:
    _check_line(family_files.profile(name), s, [1, 100, 256, 511, *CONTEXTS])


def test_the_line_of_the_sample_models(sample_model_path: Path) -> None:
    p = memory_profile(read_header(sample_model_path).header)
    assert p is not None
    for s in SETTINGS:
        _check_line(p, s, CONTEXTS)


def test_a_line_is_for_one_sequence() -> None:
    p = MemoryProfile("x", 1, 64, 100, None, (LayerGroup(1, 4, 2, 16, 16),))
    with pytest.raises(ValueError):
        memory_line(p, MemorySettings(sequences=2))


_groups = st.lists(
    st.builds(LayerGroup, st.integers(1, 64), st.integers(1, 128), st.integers(1, 16), st.integers(1, 512),
              st.integers(0, 512), st.booleans()),
    max_size=3,
)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(groups=_groups, vocab=st.integers(1, 300_000), embd=st.integers(1, 16384), window=st.integers(1, 8192),
       latent=st.sampled_from([0, 512]), ff=st.integers(0, 60000), experts=st.integers(0, 256),
       recurrent=st.integers(0, 64), settings_=st.sampled_from(SETTINGS),
       contexts=st.lists(st.integers(1, 1 << 22), min_size=1, max_size=5))  # fmt: skip
def test_the_line_is_the_estimate_for_any_profile(
    groups: list[LayerGroup], vocab: int, embd: int, window: int, latent: int, ff: int, experts: int,
    recurrent: int, settings_: MemorySettings, contexts: list[int],
) -> None:  # fmt: skip
    if latent:
        groups = [replace(g, key_length=latent + 64, value_length=0, kv_heads=1) for g in groups]
    p = MemoryProfile(
        "x", 64, embd, vocab, None, tuple(groups), window if any(g.sliding for g in groups) else None, latent,
        recurrent, 1000 if recurrent else 0, 3 * embd if recurrent else 0, ff, experts, min(experts, 8),
        ff // 4 if experts else 0, 0, 10**9, 10**8, True, (("Q4_0", 10**8),),
    )  # fmt: skip
    _check_line(p, settings_, contexts)


def test_the_line_as_sql(family_files: FamilyFiles) -> None:
    """The form MemoryLine documents, evaluated by a database from stored coefficients:
    what a catalog filters and sorts by."""
    sql = (
        "SELECT fixed + kv * c + swa_kv * w + (CASE WHEN logits >= layers THEN logits ELSE layers END) FROM ("
        " SELECT *, mask * c + swa_mask * w + (CASE WHEN blocks >= attention + kq * c"
        "  THEN blocks ELSE attention + kq * c END) AS layers FROM ("
        "  SELECT *, (CASE WHEN swa_cells > 0 AND swa_cells < c THEN swa_cells ELSE c END) AS w FROM ("
        "   SELECT *, ((? + 255) / 256) * 256 AS c FROM line)))"
    )
    db = sqlite3.connect(":memory:")
    columns = list(MemoryLine.__dataclass_fields__)
    db.execute(f"CREATE TABLE line ({', '.join(f'{c} INTEGER' for c in columns)})")
    for name in ("gemma-3-4b", "llama-3.1-8b", "deepseek-v2-lite", "mamba-130m"):
        line = memory_line(family_files.profile(name), MemorySettings())
        db.execute("DELETE FROM line")
        db.execute(
            f"INSERT INTO line VALUES ({', '.join('?' * len(columns))})", [getattr(line, c) for c in columns]
        )
        for c in (512, 4096, 5000, 131072):
            assert db.execute(sql, (c,)).fetchone()[0] == line.bytes_at(c)
