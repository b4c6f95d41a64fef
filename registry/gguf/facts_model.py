"""The facts a catalog keeps about one artifact (a single file or all shards of a split model).

Derived from parsed headers by `registry.gguf.facts.derive_facts`; stored by the catalog.
Plain data, JSON-ready through `to_dict()`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from registry.gguf.kvcache import KVCache
from registry.gguf.memory_profile import MemoryProfile

# What a GGUF file is: a model, a multimodal projector (llama.cpp's --mmproj), a LoRA
# adapter, an importance matrix, or a vocabulary alone (`facts._kind` tells them apart).
KINDS = ("model", "mmproj", "lora", "imatrix", "vocab")
# What a projector takes in besides text, as llama.cpp's multimodal loader reads it: the
# `clip.has_vision_encoder` and `clip.has_audio_encoder` flags (`facts._modalities`).
MODALITIES = ("vision", "audio")


def modality_mask(names: Iterable[str]) -> int:
    """The catalog's bit mask of these MODALITIES names (bit i for MODALITIES[i])."""
    return sum(1 << MODALITIES.index(n) for n in set(names))


def modality_names(bits: int | None) -> list[str] | None:
    """A stored mask as names, in MODALITIES order (None stays None: not a projector)."""
    return None if bits is None else [n for i, n in enumerate(MODALITIES) if bits >> i & 1]


@dataclass(frozen=True, slots=True)
class QuantMixEntry:
    tensors: int
    elements: int
    bytes: int


@dataclass(frozen=True, slots=True)
class BaseModel:
    """One `general.base_model.{i}.*` group, with the hub repo id resolved where possible."""

    name: str | None = None
    organization: str | None = None
    version: str | None = None
    repo_url: str | None = None
    url: str | None = None
    doi: str | None = None
    uuid: str | None = None
    repo_id: str | None = None  # "org/name" resolved from repo_url, or organization/name


@dataclass(frozen=True, slots=True)
class SplitInfo:
    no: int  # 0-based index of this shard (split.no)
    count: int  # split.count
    tensors_count: int  # split.tensors.count: tensors over all shards


@dataclass(frozen=True, slots=True)
class Facts:
    architecture: str | None = None
    name: str | None = None
    basename: str | None = None
    finetune: str | None = None
    version: str | None = None
    size_label: str | None = None
    size_label_source: str | None = None  # "file" | "computed"
    parameter_count: int = 0
    license: str | None = None
    license_name: str | None = None
    license_link: str | None = None
    file_type: str | None = None  # label: "Q4_K_M", "Q8_0", "BF16", ...
    file_type_source: str | None = None  # "file" | "inferred"
    quant_mix: dict[str, QuantMixEntry] = field(default_factory=dict)  # tensor type name -> entry
    bits_per_weight: float | None = None
    context_length: int | None = None
    embedding_length: int | None = None
    block_count: int | None = None
    feed_forward_length: int | None = None
    head_count: int | None = None
    head_count_kv: int | None = None
    expert_count: int | None = None
    expert_used_count: int | None = None
    rope: dict[str, Any] = field(default_factory=dict)  # freq_base, scaling type/factor, dims...
    tokenizer_model: str | None = None
    tokenizer_pre: str | None = None
    vocab_size: int | None = None
    # Same key and at most 128 tokens apart: one can draft for the other (`registry.gguf.vocab`).
    vocab_sha256: str | None = None
    bos_token_id: int | None = None
    eos_token_id: int | None = None
    chat_template: str | None = None
    chat_template_sha256: str | None = None
    chat_templates: dict[str, str] = field(default_factory=dict)  # named variants
    base_models: tuple[BaseModel, ...] = ()
    source: dict[str, Any] = field(default_factory=dict)  # general.source.* keys
    tags: tuple[str, ...] = ()
    languages: tuple[str, ...] = ()
    datasets: tuple[str, ...] = ()
    description: str | None = None
    kind: str = "model"  # one of KINDS
    # A projector's inputs (MODALITIES names, in that order), each with the projector type the
    # file names for it (None: none named); {} for every other kind, and for a projector
    # that declares no encoder, which llama.cpp refuses to load.
    modalities: dict[str, str | None] = field(default_factory=dict)
    gguf_version: int = 3
    endianness: str = "little"
    alignment: int = 32
    tensor_count: int = 0
    kv_count: int = 0
    header_bytes: int = 0  # sum over shards of data_offset
    file_size: int | None = None  # sum over shards when known
    split: SplitInfo | None = None
    shard_count: int = 1
    # f16 KV cache per token of context (registry/gguf/kvcache.py); None: not estimated.
    kv_cache: KVCache | None = None
    # What llama.cpp's memory depends on (registry/gguf/memory_profile.py), for the memory
    # estimate at any settings; None: not estimated (not a model, encoders, odd headers).
    memory_profile: MemoryProfile | None = None
    metadata: dict[str, Any] = field(default_factory=dict)  # every scalar key of shard 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
