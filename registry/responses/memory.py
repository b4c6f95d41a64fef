"""The memory estimate in responses: an artifact's memory line among its facts (what the
search sizes it by at any context) and the estimate in parts at settings a client picks
(`registry.gguf.memory`), on a CPU and with every layer on a GPU."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Annotated, Any, Literal

from registry.gguf.memory import CACHE_TYPES, MemoryEstimate, MemoryLine, MemorySettings, estimate
from registry.gguf.memory_profile import MemoryProfile
from registry.responses.base import Response, doc

# Each part as people read it, in MemoryParts' order (the command line's and the web's words).
PART_LABELS = {"weights": "weights", "repacked": "repacked weights", "kv_cache": "KV cache",
               "recurrent": "recurrent state", "output": "output", "compute": "compute"}  # fmt: skip
CacheType = Literal["f16", "q8_0", "q4_0"]
assert set(CACHE_TYPES) == set(CacheType.__args__)  # type: ignore[attr-defined]


class MemoryLineFacts(Response, kw_only=True):
    """What llama.cpp allocates on a CPU (f16 KV cache, no flash attention, micro-batch 512) as a function of the
    context, from one micro-batch on: with c the context padded to 256 cells and w = min(c, swa_cells) (c when
    swa_cells is 0), fixed + kv * c + swa_kv * w + max(logits, mask * c + swa_mask * w + max(blocks, attention +
    kq * c)) bytes. The search's `memory` and its filter and sort evaluate this, at the context asked for or the
    model's own context_length when that is shorter."""

    fixed: int
    kv: int
    swa_kv: int
    swa_cells: int
    logits: int
    mask: int
    swa_mask: int
    blocks: int
    attention: int
    kq: int

    @classmethod
    def of(cls, line: MemoryLine) -> MemoryLineFacts:
        return cls(**{name: getattr(line, name) for name in MemoryLine.__dataclass_fields__})

    def line(self) -> MemoryLine:
        return MemoryLine(**{name: getattr(self, name) for name in MemoryLine.__dataclass_fields__})


class MemorySettingsOut(Response, kw_only=True):
    context: int
    batch: int
    ubatch: int
    cache_type: CacheType
    flash_attention: Annotated[bool, doc("A quantized cache turns it on: llama.cpp needs it for one.")]
    offload: Literal["cpu", "gpu"]


class KVCachePart(Response, kw_only=True):
    layers: int
    cells: int
    bytes: int
    sliding: bool


class MemoryParts(Response, kw_only=True):
    weights: Annotated[int, doc("The tensors, mapped from the file; with a GPU the input embedding stays in host "
                                "memory and counts here too.")]  # fmt: skip
    repacked: Annotated[int, doc("On a CPU: copies of the quantized matrices llama.cpp rearranges for its AVX2 "
                                 "kernels, besides the mapped file.")]  # fmt: skip
    kv_cache: int
    recurrent: Annotated[int, doc("The fixed state of mamba, rwkv and hybrid recurrent layers.")]
    output: Annotated[int, doc("The logits of the last token of each sequence.")]
    compute: Annotated[int, doc("The activations of one micro-batch at their largest.")]


class MemoryAt(Response, kw_only=True):
    """What llama.cpp allocates to run the model with these settings, part by part."""

    settings: MemorySettingsOut
    parts: MemoryParts
    kv_cache: list[KVCachePart]
    compute_peak: Annotated[str, doc("What the compute buffer is sized for: logits, attention, feed-forward, "
                                     "experts or recurrent.")]  # fmt: skip
    total: int
    device: Annotated[int, doc("Bytes on the GPU (0 on a CPU).")]
    host: Annotated[int, doc("Bytes in host memory.")]

    @classmethod
    def of(cls, e: MemoryEstimate) -> MemoryAt:
        s = e.settings
        return cls(
            settings=MemorySettingsOut(context=s.context, batch=s.batch, ubatch=s.ubatch,
                                       cache_type=s.cache_type, flash_attention=s.flash_attention,  # type: ignore[arg-type]
                                       offload=s.offload),  # type: ignore[arg-type]
            parts=MemoryParts(**e.parts()),
            kv_cache=[KVCachePart(layers=p.layers, cells=p.cells, bytes=p.bytes, sliding=p.sliding) for p in e.kv_cache],
            compute_peak=e.compute_peak, total=e.total, device=e.device, host=e.host,
        )  # fmt: skip


class MemoryEstimates(Response, kw_only=True):
    """The estimate at one context (`tokens`: the context asked for, or the model's own context_length when that
    is shorter) on a CPU and with every layer on one GPU; llama.cpp release and accuracy: docs/compatibility.md."""

    tokens: int
    cpu: MemoryAt
    gpu: MemoryAt


def stored_profile(extra: Mapping[str, Any]) -> MemoryProfile | None:
    """The memory profile a facts row keeps among its `extra` facts; None when absent (rows
    an older release wrote) or of another shape."""
    data = extra.get("memory_profile")
    if not isinstance(data, Mapping):
        return None
    try:
        return MemoryProfile.from_dict(data)
    except (KeyError, TypeError, ValueError):
        return None


def memory_estimates(
    profile: MemoryProfile, tokens: int, *, batch: int = 512, cache_type: str = "f16", flash_attention: bool = False
) -> MemoryEstimates:  # fmt: skip
    """The estimate at `tokens` (already capped at the model's context) with these settings."""
    settings = MemorySettings(context=tokens, batch=batch, ubatch=batch, cache_type=cache_type,
                              flash_attention=flash_attention)  # fmt: skip
    cpu = estimate(profile, settings)
    gpu = estimate(profile, replace(settings, offload="gpu"))
    return MemoryEstimates(tokens=tokens, cpu=MemoryAt.of(cpu), gpu=MemoryAt.of(gpu))


__all__ = [
    "PART_LABELS", "CacheType", "KVCachePart", "MemoryAt", "MemoryEstimates", "MemoryLineFacts", "MemoryParts",
    "MemorySettingsOut", "memory_estimates", "stored_profile",
]  # fmt: skip
