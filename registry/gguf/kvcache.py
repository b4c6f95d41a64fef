"""How much memory a model's KV cache takes per token of context, from its header keys.

What someone choosing a local model needs besides the file size: at 32K tokens the cache
of an 8B model is about as big as a 4-bit copy of its weights. `kv_cache(header)` counts, layer by
layer, the K and V rows a llama.cpp-style runtime keeps for each token, at f16 (2 bytes a
value, the usual default):

- a layer keeps `head_count_kv * key_length` values of K and `head_count_kv * value_length`
  of V per token. The head counts may be per-layer arrays (0: the layer has no attention);
  the lengths default to `embedding_length / head_count` (of the first layer);
- an MLA model (`attention.key_length_mla` and `value_length_mla` set) keeps only the
  compressed K, which doubles as V;
- sliding-window layers keep only the last `attention.sliding_window` tokens (with their
  own `key_length_swa` / `value_length_swa` when given). Which layers slide is a property
  of the architecture: `attention.sliding_window_pattern` as one flag per layer, or else
  the period (and phase) the architecture is known to use (`SWA_PATTERNS`), which that key
  overrides when it is a number. An architecture not listed there with no flag array has
  no sliding layers, whatever its `sliding_window` says (a runtime ignores the key for it);
- the last `nextn_predict_layers` blocks (multi-token prediction heads) and the blocks after
  the first `block_count - attention.shared_kv_layers` (which reuse earlier layers' cache)
  keep nothing of their own;
- in a hybrid model (Qwen3-Next and 3.5, Granite 4 hybrids, Jamba, LFM2, Nemotron-H, ...)
  only the attention layers keep a cache; the others keep a recurrent state of a fixed size,
  counted in `recurrent_layers` but not in bytes. Which layers are which: the file's
  `attention.recurrent_layers` flags or `full_attention_interval` (one attention layer in
  each interval) for the first kind (`INTERVAL_HYBRIDS`), a KV head count of 0 for the rest.

None (not estimated) for what has no per-token attention cache or one of another shape:
encoders and other non-causal models, purely recurrent models, and headers missing the
counts. A runtime adds some slack of its own (llama.cpp rounds cells up to 256 and by
default keeps one batch more in a sliding-window cache); the estimate is the cache itself.
`attention_plan(header)` is the per-layer layout both this and the estimate of everything
llama.cpp allocates (registry/gguf/memory.py) start from.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from registry.gguf.model import GGUFHeader
from registry.gguf.types import ValueType

F16_BYTES = 2
MAX_LAYERS = 4096  # no real model comes close; a per-layer array longer than this is refused
# Bytes per token beyond this (a TiB) come from a header that lies: not estimated. Sizes stay
# within a signed 64-bit integer, as every other size the catalog stores.
MAX_BYTES_PER_TOKEN = 1 << 40
MAX_SIZE = (1 << 63) - 1


@dataclass(frozen=True, slots=True)
class SwaPattern:
    period: int  # one full-attention layer in each `period`; 0: every layer slides
    dense_first: bool = False  # the full layer opens each period (else it closes it)
    window: int | None = None  # the window the architecture uses when the file gives none
    needs_window_key: bool = False  # slides only when the file sets a window above 0
    fixed_window: bool = False  # `window` whatever the file says (a runtime constant)


# Architectures known to interleave sliding-window and full-attention layers, as llama.cpp
# sets them up (general.architecture names).
SWA_PATTERNS: dict[str, SwaPattern] = {
    "gemma2": SwaPattern(2, window=4096),
    "gemma3": SwaPattern(6, needs_window_key=True),
    "gemma3n": SwaPattern(5),
    "cohere2": SwaPattern(4),
    "gpt-oss": SwaPattern(2),
    "llama4": SwaPattern(4, window=8192, fixed_window=True),  # chunked attention, 8,192-token chunks
    "olmo2": SwaPattern(4, needs_window_key=True),
    "exaone-moe": SwaPattern(4, window=128),
    "afmoe": SwaPattern(4, needs_window_key=True),
    "plamo3": SwaPattern(8, needs_window_key=True),
    "smallthinker": SwaPattern(4, dense_first=True, window=4096, needs_window_key=True, fixed_window=True),
    "lfm2": SwaPattern(0, needs_window_key=True),  # every attention layer, when there is a window
    "lfm2moe": SwaPattern(0, needs_window_key=True),
}
# Blocks that keep a cache, counted from the first, where the architecture fixes it.
KV_LAYERS_FROM_START = {"gemma3n": 20}
# No per-token attention cache: encoders and other non-causal models.
NO_CACHE = frozenset({
    "bert", "modern-bert", "nomic-bert", "nomic-bert-moe", "neo-bert", "jina-bert-v2", "jina-bert-v3",
    "eurobert", "gemma-embedding", "t5encoder", "wavtokenizer-dec", "dream", "llada", "llada-moe", "rnd1",
})  # fmt: skip
# A state that does not grow with the context in every layer (recurrent), or a cache of
# another shape (encoder-decoder cross attention, compressed sparse caches).
OTHER_MEMORY = frozenset({"mamba", "mamba2", "rwkv6", "rwkv6qwen2", "rwkv7", "arwkv7", "t5", "deepseek4"})
# Hybrids whose attention layers come one in each interval (default per architecture).
INTERVAL_HYBRIDS = {"qwen3next": 4, "qwen35": 4, "qwen35moe": 4, "minimax-01": 8}
# Hybrids whose recurrent layers have no KV heads; falcon-h1 runs both in every layer, and a
# Nemotron-H layer without KV heads and with a feed-forward is neither (an MLP block).
HEAD_HYBRIDS = frozenset({"jamba", "plamo2", "granitehybrid", "lfm2", "lfm2moe", "kimi-linear", "nemotron_h",
                          "nemotron_h_moe", "falcon-h1"})  # fmt: skip


@dataclass(frozen=True, slots=True)
class KVCache:
    layers: int  # layers whose cache grows with the context
    bytes_per_token: int  # their K and V together, f16
    swa_layers: int = 0  # layers that keep only the last `sliding_window` tokens
    swa_bytes_per_token: int = 0
    sliding_window: int | None = None
    at_context_length: int | None = None  # the cache for the model's whole context_length
    recurrent_layers: int = 0  # layers with a fixed-size recurrent state (not in the bytes)

    def bytes_at(self, tokens: int) -> int:
        """The cache for a context of `tokens` tokens."""
        window = tokens if self.sliding_window is None else min(tokens, self.sliding_window)
        return tokens * self.bytes_per_token + window * self.swa_bytes_per_token


def _int(header: GGUFHeader, key: str) -> int | None:
    value = header.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _per_layer(header: GGUFHeader, key: str, n_layer: int) -> list[int] | None:
    """A count given once for every layer or as one entry per layer; None when absent or
    malformed (negative, wrong length, not integers)."""
    field = header.fields.get(key)
    if field is None:
        return None
    if field.type is not ValueType.ARRAY:
        value = _int(header, key)
        return None if value is None else [value] * n_layer
    arr = header.get(key)
    if arr.element_type in (ValueType.STRING, ValueType.ARRAY, ValueType.BOOL, ValueType.FLOAT32,
                            ValueType.FLOAT64) or len(arr) != n_layer:  # fmt: skip
        return None
    values = [int(v) for v in arr.to_numpy()]
    return values if min(values) >= 0 else None


def _flags(header: GGUFHeader, key: str, n_layer: int) -> list[bool] | None:
    """One boolean per layer, or None when the key is not such an array."""
    field = header.fields.get(key)
    if field is None or field.type is not ValueType.ARRAY:
        return None
    arr = header.get(key)
    if arr.element_type is not ValueType.BOOL or len(arr) != n_layer:
        return None
    return [bool(v) for v in arr.to_numpy()]


def _sliding_layers(header: GGUFHeader, arch: str, n_layer: int) -> tuple[list[bool], int | None]:
    """Which layers slide, and their window (None when none does)."""
    a = f"{arch}."
    pattern_key = f"{a}attention.sliding_window_pattern"
    window = _int(header, f"{a}attention.sliding_window")
    flags = _flags(header, pattern_key, n_layer)
    if flags is not None and window:
        return flags, window if any(flags) else None
    known = SWA_PATTERNS.get(arch)
    if known is None or (known.needs_window_key and not window) or (known.fixed_window and window == 0):
        return [False] * n_layer, None
    window = known.window if known.fixed_window else window or known.window
    period = _int(header, pattern_key)
    period = known.period if period is None else period
    if not window or period == 1:
        return [False] * n_layer, None
    if known.dense_first:
        flags = [period == 0 or il % period != 0 for il in range(n_layer)]
    else:
        flags = [period == 0 or il % period < period - 1 for il in range(n_layer)]
    return flags, window


def _hybrid_layers(
    header: GGUFHeader, arch: str, n_layer: int, kv_heads: list[int]
) -> tuple[list[bool], set[int]]:
    """Which layers have attention, and which keep a recurrent state."""
    a = f"{arch}."
    if arch in INTERVAL_HYBRIDS:
        recurrent = _flags(header, f"{a}attention.recurrent_layers", n_layer)
        if recurrent is not None:
            attention = [not r for r in recurrent]
        else:
            interval = _int(header, f"{a}full_attention_interval") or INTERVAL_HYBRIDS[arch]
            attention = [(il + 1) % interval == 0 for il in range(n_layer)]
        return attention, {il for il in range(n_layer) if not attention[il]}
    if arch == "falcon-h1":
        return [True] * n_layer, set(range(n_layer))
    if arch in HEAD_HYBRIDS:
        ff = _per_layer(header, f"{a}feed_forward_length", n_layer) if arch.startswith("nemotron_h") else None
        return [True] * n_layer, {
            il for il in range(n_layer) if kv_heads[il] == 0 and (ff is None or ff[il] == 0)
        }
    return [True] * n_layer, set()


@dataclass(frozen=True, slots=True)
class AttentionLayer:
    """One block that keeps K and V rows for each token of context (`attention_plan`)."""

    index: int
    heads: int
    kv_heads: int
    key_length: int  # values of K per KV head (for MLA: the compressed latent plus its rope part)
    value_length: int  # 0 for MLA, whose compressed K is also read as V
    sliding: bool


@dataclass(frozen=True, slots=True)
class AttentionPlan:
    """Which blocks keep a cache and of what width, as llama.cpp lays its caches out."""

    layers: tuple[AttentionLayer, ...]
    sliding_window: int | None  # None when no layer slides
    recurrent_layers: tuple[int, ...]  # block indexes with a fixed-size recurrent state
    block_count: int
    context_length: int | None


def attention_plan(header: GGUFHeader) -> AttentionPlan | None:
    """The layers of `header` that keep a per-token cache; None when the model keeps none
    of this kind (see the module docstring) or the header lacks the counts."""
    arch = header.get("general.architecture")
    if not isinstance(arch, str) or arch in NO_CACHE or arch in OTHER_MEMORY:
        return None
    a = f"{arch}."
    if header.get(f"{a}attention.causal") is False:
        return None
    n_layer = _int(header, f"{a}block_count")
    if not n_layer or n_layer > MAX_LAYERS:
        return None
    heads = _per_layer(header, f"{a}attention.head_count", n_layer)
    if heads is None or heads[0] == 0:
        return None
    kv_heads = _per_layer(header, f"{a}attention.head_count_kv", n_layer)
    if header.fields.get(f"{a}attention.head_count_kv") is None:
        kv_heads = heads
    if kv_heads is None:
        return None
    embedding = _int(header, f"{a}embedding_length") or 0
    k_len = _int(header, f"{a}attention.key_length")
    v_len = _int(header, f"{a}attention.value_length")
    k_len = embedding // heads[0] if k_len is None else k_len
    v_len = embedding // heads[0] if v_len is None else v_len
    if not k_len:
        return None
    k_swa = _int(header, f"{a}attention.key_length_swa") or k_len
    v_swa = _int(header, f"{a}attention.value_length_swa") or v_len
    if _int(header, f"{a}attention.key_length_mla") and _int(header, f"{a}attention.value_length_mla"):
        v_len = v_swa = 0  # the compressed K is also read as V
    sliding, window = _sliding_layers(header, arch, n_layer)

    attention, recurrent = _hybrid_layers(header, arch, n_layer, kv_heads)
    kept = n_layer - (_int(header, f"{a}nextn_predict_layers") or 0)
    if (shared := _int(header, f"{a}attention.shared_kv_layers")) is not None:
        kept = min(kept, n_layer - shared)
    kept = min(kept, KV_LAYERS_FROM_START.get(arch, kept))
    layers = tuple(
        AttentionLayer(il, heads[il], kv_heads[il], k_swa if sliding[il] else k_len, v_swa if sliding[il] else v_len,
                       sliding[il])
        for il in range(max(kept, 0)) if kv_heads[il] and attention[il]
    )  # fmt: skip
    if not layers:
        return None
    recurrent_layers = tuple(il for il in range(n_layer) if il in recurrent)
    swa = any(layer.sliding for layer in layers)
    return AttentionPlan(
        layers, window if swa else None, recurrent_layers, n_layer, _int(header, f"{a}context_length")
    )


def kv_cache(header: GGUFHeader) -> KVCache | None:
    plan = attention_plan(header)
    if plan is None:
        return None
    layers = swa_layers = per_token = swa_per_token = 0
    for layer in plan.layers:
        row = layer.kv_heads * (layer.key_length + layer.value_length) * F16_BYTES
        if layer.sliding:
            swa_layers += 1
            swa_per_token += row
        else:
            layers += 1
            per_token += row
    if max(per_token, swa_per_token) > MAX_BYTES_PER_TOKEN:
        return None
    cache = KVCache(layers, per_token, swa_layers, swa_per_token, plan.sliding_window,
                    recurrent_layers=len(plan.recurrent_layers))  # fmt: skip
    if (context := plan.context_length) and (size := cache.bytes_at(context)) <= MAX_SIZE:
        cache = replace(cache, at_context_length=size)
    return cache
