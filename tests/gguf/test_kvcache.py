"""The KV cache estimate (registry/gguf/kvcache.py): real models against llama.cpp's own
figures, and headers built by hand for each rule."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from registry.gguf.facts import derive_facts
from registry.gguf.kvcache import KVCache, kv_cache
from registry.gguf.model import GGUFHeader
from registry.gguf.reader import parse_header
from registry.gguf.types import ValueType
from registry.hub.local import read_header
from tests.gguf.builders import Arr, HeaderBuilder

MiB = 1 << 20
REFVENV_PYTHON = Path(__file__).resolve().parents[2] / ".cache" / "refvenv" / "bin" / "python"

# llama.cpp's own report (llama-cpp-python 0.3.36, `Llama(path, n_ctx=4096, verbose=True)`,
# which keeps sliding-window caches at full size): "llama_kv_cache: size = 90.00 MiB ( 4096
# cells, 30 layers ...)" for SmolLM2, and for Gemma 3 "12.00 MiB (4096 cells, 3 layers)" for
# the full-attention cache and "60.00 MiB (4096 cells, 15 layers)" for the sliding one.
LLAMA_CPP_AT_4096 = {
    "smollm2": {(30, False): 90 * MiB},
    "gemma3": {(3, False): 12 * MiB, (15, True): 60 * MiB},
}


def test_smollm2_is_full_attention_everywhere(smollm2_path: Path) -> None:
    kv = kv_cache(read_header(smollm2_path).header)
    # 30 layers x 3 KV heads x (64 + 64) values x 2 bytes
    assert kv == KVCache(30, 30 * 3 * 128 * 2, at_context_length=8192 * 23040)
    assert {(kv.layers, False): 4096 * kv.bytes_per_token} == LLAMA_CPP_AT_4096["smollm2"]


def test_gemma3_slides_five_layers_in_six(gemma3_path: Path) -> None:
    kv = kv_cache(read_header(gemma3_path).header)
    assert kv is not None
    assert (kv.layers, kv.swa_layers, kv.sliding_window) == (3, 15, 512)
    assert (kv.bytes_per_token, kv.swa_bytes_per_token) == (3 * 1 * 512 * 2, 15 * 1 * 512 * 2)
    assert {(kv.layers, False): 4096 * kv.bytes_per_token,
            (kv.swa_layers, True): 4096 * kv.swa_bytes_per_token} == LLAMA_CPP_AT_4096["gemma3"]  # fmt: skip
    # At its whole context the window caps the sliding layers: 96 MiB + 7.5 MiB, not 576 MiB.
    assert kv.at_context_length == kv.bytes_at(32768) == 96 * MiB + 512 * 15360
    assert kv.bytes_at(100) == 100 * (3072 + 15360)


@pytest.mark.skipif(not REFVENV_PYTHON.exists(), reason="no peer virtualenv (make refvenv): llama.cpp not here")
@pytest.mark.parametrize("n_ctx", [1024, 6144])
def test_the_estimate_is_what_llama_cpp_allocates(sample_model_path: Path, n_ctx: int) -> None:
    """Live: llama.cpp (through llama-cpp-python) loads the model and logs each KV cache it
    makes: cells, layers, and K and V sizes in MiB."""
    script = "import sys; from llama_cpp import Llama; Llama(sys.argv[1], n_ctx=int(sys.argv[2]), verbose=True)"
    run = subprocess.run([str(REFVENV_PYTHON), "-c", script, str(sample_model_path), str(n_ctx)],
                         capture_output=True, text=True, timeout=600, check=True)  # fmt: skip
    caches = re.findall(
        r"llama_kv_cache: size = +([\d.]+) MiB \( *(\d+) cells, +(\d+) layers.*K \(f16\): +([\d.]+) MiB, "
        r"V \(f16\): +([\d.]+) MiB",
        run.stderr,
    )
    assert caches, run.stderr[-2000:]
    kv = kv_cache(read_header(sample_model_path).header)
    assert kv is not None
    ours = {kv.layers: kv.bytes_per_token} | ({kv.swa_layers: kv.swa_bytes_per_token} if kv.swa_layers else {})
    theirs = {int(layers): round(float(size) * MiB) // int(cells) for size, cells, layers, _, _ in caches}
    assert all(int(cells) == n_ctx for _, cells, _, _, _ in caches)  # full-size caches: one cell a token
    assert theirs == ours


# -- headers built by hand -------------------------------------------------------------------


def header(arch: str, **keys: Any) -> GGUFHeader:
    """A header of `arch` with `block_count` 4, 8 heads, embedding 512, and the given keys
    (`attention_head_count_kv=...` for `arch.attention.head_count_kv`; arrays as Arr)."""
    values: dict[str, Any] = {"block_count": 4, "embedding_length": 512, "attention.head_count": 8, **{
        ("attention." + k.removeprefix("attention_") if k.startswith("attention_") else k): v
        for k, v in keys.items()}}  # fmt: skip
    b = HeaderBuilder()
    b.kv("general.architecture", ValueType.STRING, arch)
    for key, value in values.items():
        if value is None:
            continue
        vtype = ValueType.BOOL if isinstance(value, bool) else ValueType.UINT32
        if isinstance(value, Arr):
            b.kv(f"{arch}.{key}", ValueType.ARRAY, value)
        else:
            b.kv(f"{arch}.{key}", vtype, value)
    data = b.build()
    return parse_header(data, file_size=len(data))


def per_layer(*values: int) -> Arr:
    return Arr(ValueType.INT32, list(values))


def flags(*values: bool) -> Arr:
    return Arr(ValueType.BOOL, list(values))


def test_heads_default_to_the_head_count_and_lengths_to_its_share_of_the_embedding() -> None:
    # 8 KV heads of 512 / 8 = 64 values, K and V, 2 bytes, 4 layers
    assert kv_cache(header("llama")) == KVCache(4, 4 * 8 * 128 * 2)
    assert kv_cache(header("llama", attention_head_count_kv=2)) == KVCache(4, 4 * 2 * 128 * 2)
    explicit = header("llama", attention_head_count_kv=2, attention_key_length=96, attention_value_length=32)
    assert kv_cache(explicit) == KVCache(4, 4 * 2 * 128 * 2)
    assert kv_cache(header("llama", attention_key_length=192, attention_value_length=128,
                           context_length=1000)) == KVCache(4, 4 * 8 * 320 * 2, at_context_length=1000 * 20480)  # fmt: skip


def test_per_layer_head_counts_and_layers_without_attention() -> None:
    kv = kv_cache(header("llama", attention_head_count_kv=per_layer(2, 0, 4, 0)))
    assert kv == KVCache(2, (2 + 4) * 128 * 2)
    assert kv_cache(header("llama", attention_head_count_kv=per_layer(0, 0, 0, 0))) is None
    assert kv_cache(header("llama", attention_head_count_kv=per_layer(2, 2))) is None  # not one per layer
    assert kv_cache(header("llama", attention_head_count_kv=Arr(ValueType.FLOAT32, [2.0] * 4))) is None
    assert kv_cache(header("llama", attention_head_count=per_layer(8, 8, 8, 8))) == KVCache(4, 4 * 8 * 128 * 2)


def test_an_mla_model_keeps_only_the_compressed_k() -> None:
    mla = header("deepseek2", attention_head_count_kv=1, attention_key_length=576, attention_value_length=512,
                 attention_key_length_mla=192, attention_value_length_mla=128)  # fmt: skip
    assert kv_cache(mla) == KVCache(4, 4 * 576 * 2)
    unconverted = header("deepseek2", attention_key_length=192, attention_value_length=128)
    assert kv_cache(unconverted) == KVCache(4, 4 * 8 * 320 * 2)


def test_sliding_layers_by_the_architecture_pattern() -> None:
    # gemma3: period 6, the last of each period full; only with a window in the file
    kv = kv_cache(header("gemma3", block_count=12, attention_sliding_window=1024))
    assert (kv.layers, kv.swa_layers, kv.sliding_window) == (2, 10, 1024) if kv else False
    assert kv_cache(header("gemma3", block_count=12)) == KVCache(12, 12 * 8 * 128 * 2)
    assert kv_cache(header("gemma3", block_count=12, attention_sliding_window=0)) == KVCache(12, 12 * 8 * 128 * 2)
    # gemma2: period 2, window 4096 unless the file says otherwise
    kv = kv_cache(header("gemma2"))
    assert kv == KVCache(2, 2 * 2048, 2, 2 * 2048, 4096)
    # a number in sliding_window_pattern overrides the period
    kv = kv_cache(header("cohere2", block_count=8, attention_sliding_window=256, attention_sliding_window_pattern=2))
    assert kv is not None and (kv.layers, kv.swa_layers) == (4, 4)
    # dense first: the full layer opens each period; the window is the architecture's own
    kv = kv_cache(header("smallthinker", block_count=8, attention_sliding_window=1))
    assert kv is not None and (kv.layers, kv.swa_layers, kv.sliding_window) == (2, 6, 4096)
    assert kv_cache(header("smallthinker", block_count=8)) == KVCache(8, 8 * 2048)
    # llama4: chunks of 8,192 tokens, unless the file sets the window to 0
    kv = kv_cache(header("llama4", block_count=8, attention_sliding_window=99))
    assert kv is not None and (kv.layers, kv.swa_layers, kv.sliding_window) == (2, 6, 8192)
    assert kv_cache(header("llama4", block_count=8, attention_sliding_window=0)) == KVCache(8, 8 * 2048)
    # an architecture not known to slide ignores the window key (phi3, mistral, qwen2 files carry one)
    assert kv_cache(header("phi3", attention_sliding_window=2047)) == KVCache(4, 4 * 2048)


def test_a_flag_per_layer_says_which_slide_and_key_lengths_may_differ_there() -> None:
    kv = kv_cache(header("someone-new", attention_sliding_window=128,
                         attention_sliding_window_pattern=flags(True, True, False, True),
                         attention_key_length_swa=32, attention_value_length_swa=32))  # fmt: skip
    assert kv == KVCache(1, 8 * 128 * 2, 3, 3 * 8 * 64 * 2, 128)
    assert kv.bytes_at(1000) == 1000 * 2048 + 128 * 3072 if kv else False
    no_window = header("someone-new", attention_sliding_window_pattern=flags(True, True, False, True))
    assert kv_cache(no_window) == KVCache(4, 4 * 2048)
    none_slide = header("someone-new", attention_sliding_window=128, attention_sliding_window_pattern=flags(*[False] * 4))
    assert kv_cache(none_slide) == KVCache(4, 4 * 2048)


def test_layers_without_a_cache_of_their_own() -> None:
    assert kv_cache(header("glm4moe", nextn_predict_layers=1)) == KVCache(3, 3 * 2048)
    assert kv_cache(header("gemma4", attention_shared_kv_layers=3)) == KVCache(1, 2048)
    kv = kv_cache(header("gemma3n", block_count=30, attention_sliding_window=512))
    assert kv is not None and kv.layers + kv.swa_layers == 20 and (kv.layers, kv.swa_layers) == (4, 16)


def test_hybrids_count_their_attention_layers_only() -> None:
    # one attention layer in each full_attention_interval (4 by default for Qwen3.5), or the file's flags
    kv = kv_cache(header("qwen35", block_count=8, attention_head_count_kv=2))
    assert kv == KVCache(2, 2 * 2 * 128 * 2, recurrent_layers=6)
    kv = kv_cache(header("qwen3next", block_count=8, attention_head_count_kv=2, full_attention_interval=2))
    assert kv == KVCache(4, 4 * 2 * 128 * 2, recurrent_layers=4)
    flagged = header("qwen35moe", attention_head_count_kv=2,
                     attention_recurrent_layers=flags(False, True, True, False))  # fmt: skip
    assert kv_cache(flagged) == KVCache(2, 2 * 2 * 128 * 2, recurrent_layers=2)
    assert kv_cache(header("minimax-01", block_count=16)) == KVCache(2, 2 * 2048, recurrent_layers=14)
    # recurrent layers have no KV heads
    assert kv_cache(header("granitehybrid", attention_head_count_kv=per_layer(0, 0, 0, 2))) == KVCache(
        1, 2 * 128 * 2, recurrent_layers=3)  # fmt: skip
    # Nemotron-H: no KV heads and a feed-forward is an MLP block, neither
    nemotron = header("nemotron_h", attention_head_count_kv=per_layer(0, 2, 0, 0),
                      feed_forward_length=per_layer(0, 0, 1024, 0))  # fmt: skip
    assert kv_cache(nemotron) == KVCache(1, 2 * 128 * 2, recurrent_layers=2)
    # LFM2 slides every attention layer when it has a window
    kv = kv_cache(header("lfm2", attention_head_count_kv=per_layer(0, 2, 0, 2), attention_sliding_window=64))
    assert kv == KVCache(0, 0, 2, 2 * 2 * 128 * 2, 64, recurrent_layers=2)
    assert kv_cache(header("lfm2", attention_head_count_kv=per_layer(0, 2, 0, 2))) == KVCache(
        2, 2 * 2 * 128 * 2, recurrent_layers=2)  # fmt: skip
    # Falcon-H1 runs attention and a recurrent state in every layer
    assert kv_cache(header("falcon-h1")) == KVCache(4, 4 * 2048, recurrent_layers=4)


@pytest.mark.parametrize("arch", ["bert", "nomic-bert", "mamba", "rwkv7", "t5", "gemma-embedding"])
def test_models_with_another_kind_of_memory_are_not_estimated(arch: str) -> None:
    assert kv_cache(header(arch)) is None


def test_headers_missing_or_lying_about_counts_are_not_estimated() -> None:
    assert kv_cache(header("llama", attention_causal=False)) is None
    assert kv_cache(header("llama", attention_head_count=None)) is None
    assert kv_cache(header("llama", attention_head_count=0)) is None
    assert kv_cache(header("llama", block_count=None)) is None
    assert kv_cache(header("llama", block_count=0)) is None
    assert kv_cache(header("llama", block_count=10**6)) is None  # an array that long would be refused too
    assert kv_cache(header("llama", embedding_length=None)) is None  # no lengths to go on
    assert kv_cache(header("llama", attention_head_count_kv=Arr(ValueType.INT32, [-1, 2, 2, 2]))) is None
    b = HeaderBuilder()
    b.kv("general.name", ValueType.STRING, "no architecture")
    data = b.build()
    assert kv_cache(parse_header(data, file_size=len(data))) is None


def test_facts_carry_it_for_models_only(smollm2_path: Path) -> None:
    facts = derive_facts([read_header(smollm2_path).header])
    assert facts.kv_cache == kv_cache(read_header(smollm2_path).header)
    assert facts.to_dict()["kv_cache"]["bytes_per_token"] == 23040
    lora = header("llama", block_count=4)
    b = HeaderBuilder()
    b.kv("general.architecture", ValueType.STRING, "llama")
    b.kv("general.type", ValueType.STRING, "adapter")
    b.kv("adapter.type", ValueType.STRING, "lora")
    b.kv("llama.block_count", ValueType.UINT32, 4)
    b.kv("llama.attention.head_count", ValueType.UINT32, 8)
    b.kv("llama.embedding_length", ValueType.UINT32, 512)
    data = b.build()
    adapter = derive_facts([parse_header(data, file_size=len(data))])
    assert adapter.kind == "lora" and adapter.kv_cache is None
    assert kv_cache(lora) is not None  # the same keys in a model: estimated


_COUNTS = st.one_of(st.integers(0, 2**32 - 1), st.sampled_from([0, 1, 2, 4, 8, 64, 4096, 2**32 - 1]))
_KEYS = ["block_count", "embedding_length", "context_length", "attention_head_count", "attention_head_count_kv",
         "attention_key_length", "attention_value_length", "attention_sliding_window",
         "attention_sliding_window_pattern", "attention_shared_kv_layers", "nextn_predict_layers",
         "attention_key_length_mla", "attention_value_length_mla", "full_attention_interval",
         "attention_recurrent_layers", "feed_forward_length"]  # fmt: skip
_VALUES = st.one_of(
    st.none(), _COUNTS, st.booleans(),
    st.lists(st.integers(0, 2**31 - 1), max_size=9).map(lambda v: Arr(ValueType.INT32, v)),
    st.lists(st.booleans(), max_size=9).map(lambda v: Arr(ValueType.BOOL, v)),
    st.lists(st.floats(width=32), max_size=5).map(lambda v: Arr(ValueType.FLOAT32, v)),
)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(arch=st.sampled_from(["llama", "gemma3", "gemma2", "llama4", "qwen35", "nemotron_h", "lfm2", "gemma3n",
                             "deepseek2", "mamba", "x"]),
       keys=st.dictionaries(st.sampled_from(_KEYS), _VALUES, max_size=len(_KEYS)))  # fmt: skip
def test_any_header_gives_an_estimate_in_bounds_or_none(arch: str, keys: dict[str, Any]) -> None:
    """Whatever a header says (huge counts, arrays of the wrong length or type, flags that
    contradict each other), the estimate is None or sizes a catalog can store; never an error."""
    kv = kv_cache(header(arch, **keys))
    if kv is None:
        return
    fields = (kv.layers, kv.bytes_per_token, kv.swa_layers, kv.swa_bytes_per_token, kv.recurrent_layers)
    assert all(0 <= f <= 2**63 - 1 for f in fields)
    assert kv.layers + kv.swa_layers >= 1 and (kv.sliding_window is None) == (kv.swa_layers == 0)
    assert kv.at_context_length is None or 0 <= kv.at_context_length <= 2**63 - 1
