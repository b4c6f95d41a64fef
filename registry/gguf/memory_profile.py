"""What a model's header says about the memory llama.cpp gives it: `MemoryProfile`.

The numbers the memory estimate (`registry.gguf.memory`) needs and nothing more, small and
plain enough for the catalog to keep per artifact (`to_dict` / `from_dict`): the tensor
bytes and where llama.cpp places them, the layers that keep a KV cache (grouped by shape,
from `registry.gguf.kvcache.attention_plan`), the recurrent state of mamba, rwkv and hybrid
layers, and the widths of the activations a forward pass holds (vocabulary, embedding,
feed-forward and expert widths).

`memory_profile(header)` is None for what llama.cpp runs without a growing cache or a
recurrent state of a known shape (encoders, encoder-decoders, compressed sparse caches)
and for headers missing the counts.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from registry.gguf.kvcache import MAX_LAYERS, NO_CACHE, AttentionLayer, attention_plan
from registry.gguf.model import GGUFHeader, TensorInfo
from registry.gguf.types import GGMLType

# Purely recurrent architectures: every block keeps a state of a fixed size, none a KV cache.
RECURRENT = frozenset({"mamba", "mamba2", "rwkv6", "rwkv6qwen2", "rwkv7", "arwkv7"})
# Tensors llama.cpp keeps in host memory whatever the offload: the input layer (a lookup, not
# a product) and its companions.
INPUT_TENSORS = frozenset({"token_embd.weight", "token_embd_norm.weight", "token_embd_norm.bias",
                           "per_layer_token_embd.weight", "token_types.weight", "position_embd.weight"})  # fmt: skip
# Weights read by a matrix product: the ones a CPU backend may copy into its own layout.
# Lookups (embeddings), convolutions and the 3-D MLA projections are not.
NOT_MATMUL = ("_norm.weight", "_norm.bias", "conv1d.weight", "attn_k_b.weight", "attn_v_b.weight")
MAX_WIDTH = 1 << 32  # a width beyond this comes from a header that lies: not estimated
# Per-token and per-layer sizes beyond this (a TiB) too; it keeps every coefficient of the
# estimate within a signed 64-bit integer, as the catalog stores sizes.
MAX_BYTES = 1 << 40


@dataclass(frozen=True, slots=True)
class LayerGroup:
    """Blocks whose caches have one shape: `layers` of them, each with `kv_heads` heads
    of `key_length` + `value_length` values per token, `heads` query heads."""

    layers: int
    heads: int
    kv_heads: int
    key_length: int
    value_length: int
    sliding: bool = False


@dataclass(frozen=True, slots=True)
class MemoryProfile:
    architecture: str
    block_count: int
    embedding_length: int
    vocab_size: int
    context_length: int | None
    attention: tuple[LayerGroup, ...] = ()
    sliding_window: int | None = None  # tokens a sliding layer keeps; None when none slides
    mla_latent: int = 0  # MLA's compressed width (kv_lora_rank); 0 for other attention
    recurrent_layers: int = 0
    recurrent_floats: int = 0  # f32 values of state one recurrent layer keeps per sequence
    recurrent_width: int = 0  # f32 values per token a recurrent block's projections produce
    feed_forward_length: int = 0  # widest dense feed-forward (0: none)
    expert_count: int = 0
    expert_used_count: int = 0
    expert_feed_forward_length: int = 0
    shared_feed_forward_length: int = 0  # the shared experts together
    weight_bytes: int = 0  # every tensor of every shard
    input_bytes: int = 0  # of those, INPUT_TENSORS
    output_tied: bool = False  # no output.weight: the embedding matrix is read again as the output layer
    repackable: tuple[tuple[str, int], ...] = ()  # (tensor type, bytes) of matmul weights a CPU may repack

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> MemoryProfile:
        """A profile as `to_dict` wrote it; KeyError / TypeError / ValueError when it is not one."""
        fields = dict(data)
        fields["attention"] = tuple(LayerGroup(**g) for g in fields.get("attention", ()))
        fields["repackable"] = tuple((str(t), int(n)) for t, n in fields.get("repackable", ()))
        return cls(**fields)


def _int(header: GGUFHeader, key: str, default: int = 0) -> int:
    value = header.get(key)
    return (
        value
        if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < MAX_WIDTH
        else default
    )


def _largest(header: GGUFHeader, key: str) -> int:
    """A count given once or per layer: its largest value (0 when absent or malformed)."""
    value = header.get(key)
    if isinstance(value, int) and not isinstance(value, bool):
        return value if 0 <= value < MAX_WIDTH else 0
    try:
        values = [int(v) for v in value.to_numpy()] if value is not None else []
    except (AttributeError, TypeError, ValueError):
        return 0
    return max((v for v in values if 0 <= v < MAX_WIDTH), default=0)


def _groups(layers: Iterable[AttentionLayer]) -> tuple[LayerGroup, ...]:
    counts = Counter((x.heads, x.kv_heads, x.key_length, x.value_length, x.sliding) for x in layers)
    return tuple(LayerGroup(n, *shape) for shape, n in counts.items())


def _vocab_size(header: GGUFHeader, arch: str, tensors: Sequence[TensorInfo]) -> int:
    tokens = header.get("tokenizer.ggml.tokens")
    if tokens is not None and hasattr(tokens, "__len__"):
        return len(tokens)
    if size := _int(header, f"{arch}.vocab_size"):
        return size
    embd = next((t for t in tensors if t.name == "token_embd.weight"), None)
    return embd.shape[1] if embd is not None and len(embd.shape) > 1 else 0


def _recurrent_state(header: GGUFHeader, arch: str, n_embd: int) -> tuple[int, int]:
    """f32 values of state per recurrent layer and sequence, and the values per token its
    input projection makes, as llama.cpp sizes them (`n_embd_r` + `n_embd_s`)."""
    a = f"{arch}."
    if head := _int(header, f"{a}wkv.head_size"):  # rwkv: token shifts and the wkv state
        shifts = _int(header, f"{a}token_shift_count", 2)
        return shifts * n_embd + n_embd * head, 8 * n_embd
    if l_cache := _int(header, f"{a}shortconv.l_cache"):  # lfm2's short convolutions
        return n_embd * (l_cache - 1), 3 * n_embd
    d_conv, d_inner = _int(header, f"{a}ssm.conv_kernel"), _int(header, f"{a}ssm.inner_size")
    d_state, n_group = _int(header, f"{a}ssm.state_size"), _int(header, f"{a}ssm.group_count")
    if not d_inner or not d_state:
        return 0, 0
    channels = d_inner + 2 * n_group * d_state
    conv = (d_conv - 1) * channels if d_conv else 0
    projection = 2 * d_inner + 2 * n_group * d_state + _int(header, f"{a}ssm.time_step_rank")
    return conv + d_state * d_inner, projection + channels + d_inner


def _weights(tensors: Sequence[TensorInfo]) -> tuple[int, int, bool, tuple[tuple[str, int], ...]]:
    total = inputs = 0
    repackable: Counter[GGMLType] = Counter()
    tied = not any(t.name == "output.weight" for t in tensors)
    for t in tensors:
        total += t.n_bytes
        if t.name in INPUT_TENSORS:
            inputs += t.n_bytes
        matmul = t.name == "output.weight" or (
            t.name not in INPUT_TENSORS and not t.name.endswith(NOT_MATMUL)
        )
        dims = len(t.shape)
        if ((matmul and dims == 2) or (dims == 3 and "_exps." in t.name)) and t.shape[1] % 8 == 0:
            repackable[t.type] += t.n_bytes
        if t.name == "token_embd.weight" and tied and dims == 2 and t.shape[1] % 8 == 0:
            repackable[t.type] += t.n_bytes  # its second use, as the output layer, is a product
    return total, inputs, tied, tuple(sorted((k.name, n) for k, n in repackable.items()))


def memory_profile(header: GGUFHeader, tensors: Sequence[TensorInfo] | None = None) -> MemoryProfile | None:
    """The profile of the model whose metadata `header` carries (shard 0 of a split model),
    with `tensors` the tensor infos of all its shards (default: the header's own)."""
    tensors = header.tensors if tensors is None else tensors
    arch = header.get("general.architecture")
    if not isinstance(arch, str) or arch in NO_CACHE or header.get(f"{arch}.attention.causal") is False:
        return None
    a = f"{arch}."
    n_layer, n_embd = _int(header, f"{a}block_count"), _int(header, f"{a}embedding_length")
    n_vocab = _vocab_size(header, arch, tensors)
    if not 0 < n_layer <= MAX_LAYERS or not n_embd or not n_vocab:
        return None
    plan = attention_plan(header)
    if plan is None and arch not in RECURRENT:
        return None
    recurrent = plan.recurrent_layers if plan is not None else tuple(range(n_layer))
    state, width = _recurrent_state(header, arch, n_embd)
    if recurrent and not state:
        return None
    layers = plan.layers if plan is not None else ()
    latent = _int(header, f"{a}attention.kv_lora_rank") if any(x.value_length == 0 for x in layers) else 0
    weights, inputs, tied, repackable = _weights(tensors)
    n_expert = _int(header, f"{a}expert_count")
    n_ff = _largest(header, f"{a}feed_forward_length")
    n_ff_exp = _largest(header, f"{a}expert_feed_forward_length") or (n_ff if n_expert else 0)
    dense = n_ff if not n_expert or _int(header, f"{a}leading_dense_block_count") else 0
    shared = (
        _int(header, f"{a}expert_shared_feed_forward_length")
        or _int(header, f"{a}expert_shared_count") * n_ff_exp
    )
    kv_row = sum(x.kv_heads * (x.key_length + x.value_length) * 2 for x in layers)
    used = _largest(header, f"{a}expert_used_count") if n_expert else 0
    widths = (state, width, n_vocab, n_embd, n_ff, n_ff_exp * max(used, 1), shared, latent)
    if kv_row > MAX_BYTES or max(widths) * 4 > MAX_BYTES:
        return None
    return MemoryProfile(
        architecture=arch, block_count=n_layer, embedding_length=n_embd, vocab_size=n_vocab,
        context_length=_int(header, f"{a}context_length") or None, attention=_groups(layers),
        sliding_window=plan.sliding_window if plan is not None else None, mla_latent=latent,
        recurrent_layers=len(recurrent), recurrent_floats=state if recurrent else 0,
        recurrent_width=width if recurrent else 0, feed_forward_length=dense, expert_count=n_expert,
        expert_used_count=used,
        expert_feed_forward_length=n_ff_exp, shared_feed_forward_length=shared if n_expert else 0,
        weight_bytes=weights, input_bytes=inputs, output_tied=tied, repackable=repackable,
    )  # fmt: skip
