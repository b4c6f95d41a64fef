"""How much memory llama.cpp allocates to run a model, part by part, from its header.

`estimate(profile, settings)` follows what llama.cpp does when it loads a model and makes
a context (llama-cpp-python 0.3.36, which vendors llama.cpp 0c1e57098):

- **weights**: every tensor's bytes, mapped from the file. On a CPU, llama.cpp also copies
  the matrices of some quantized types into an interleaved layout its kernels read faster
  (`repacked`: which types depends on the CPU; `MemorySettings.repack`), while the file
  stays mapped. With every layer on a GPU the input embedding stays in host memory and,
  when the output layer reads the embedding matrix again (tied embeddings), the device
  gets a copy of it.
- **KV cache**: the context is padded to 256 cells; each attention layer keeps K and V
  rows of its own width for every cell (`MemorySettings.cache_type` f16, q8_0 or q4_0 per
  row of 32 values). Sliding-window layers keep `window + ubatch` cells padded to 256, or
  the whole context with `swa_full`. MLA keeps only its compressed K. Without flash
  attention V is stored transposed, every layer at the widest layer's width.
- **recurrent state**: mamba, rwkv and the recurrent layers of hybrids keep a fixed f32
  state per sequence, whatever the context.
- **output buffer**: one row of logits (`vocab x 4` bytes) per output, reserved for one
  output per sequence, or for a whole batch with `logits_all`.
- **compute buffer**: the largest set of activations alive at once while llama.cpp runs one
  micro-batch of `ubatch` tokens, which is what it reserves. The candidates: the logits of
  the micro-batch, an attention layer (without flash attention its KQ matrix,
  `heads x cells x ubatch x 4` bytes, dominates at long contexts), a feed-forward or expert
  block, a recurrent block; the attention masks (one per cache, f32, or f16 with flash
  attention) stay alive through all layers. The tensor sizes come from the graph llama.cpp
  builds; the per-token multiples of the embedding width around each (`COMPUTE_*`) were
  calibrated against llama.cpp's reservations (bench/memory.py).

The compute buffer is the estimate's least exact part: llama.cpp's allocator places
tensors in one buffer as they come, and a large tensor that fits no hole left by earlier
ones goes above them, which can add up to the size of a layer's working set.
`MemoryLine` is the same estimate as a function of the context alone, in the shape a
database can evaluate (`memory_line`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from registry.gguf.memory_profile import LayerGroup, MemoryProfile

CELL_PAD = 256  # llama.cpp pads the context, and a sliding-window cache, to this many cells
# KV cache row types: values per block and bytes per block.
CACHE_TYPES = {"f16": (1, 2), "q8_0": (32, 34), "q4_0": (32, 18)}
# Tensor types whose matrices llama.cpp's CPU backend repacks (with rows a multiple of 8):
# on x86-64 with AVX2, and with AVX-512 also Q2_K. ARM CPUs repack other sets.
REPACK_AVX2 = frozenset({"Q4_0", "Q4_K", "IQ4_NL", "MXFP4"})
REPACK_AVX512 = REPACK_AVX2 | {"Q2_K"}
F32 = 4
# Calibrated on llama.cpp's reservations (bench/memory.py): how many f32 activations of the
# embedding width (or of the query width) are alive beside the logits, an attention layer's
# KQ matrix, a feed-forward block's n_ff-wide tensors, an MLA layer's latents, a recurrent
# block's projections.
COMPUTE_OUTPUT_EMBD = 3
COMPUTE_ATTENTION_EMBD = 3
COMPUTE_ATTENTION_QUERY = 2
COMPUTE_FFN_EMBD = 4
COMPUTE_MLA_EMBD = 5
COMPUTE_RECURRENT_EMBD = 2
# Small per-token inputs: positions, output ids (i32) and each cache's K and V row ids (i64).
INPUT_BYTES_PER_TOKEN = 8
CACHE_INDEX_BYTES_PER_TOKEN = 16
OFFLOADS = ("cpu", "gpu")


@dataclass(frozen=True, slots=True)
class MemorySettings:
    """How the model is run; the defaults are llama-cpp-python's (`Llama(path, n_ctx=4096)`)
    except `swa_full`, which llama.cpp's own tools leave off."""

    context: int = 4096  # tokens asked for (n_ctx); 0: the model's trained context, as llama.cpp reads 0
    batch: int = 512  # n_batch
    ubatch: int = 512  # n_ubatch: tokens one forward pass takes
    sequences: int = 1  # n_seq_max, each with its own share of the context
    cache_type: str = "f16"  # K and V: f16, q8_0 or q4_0 (quantized V needs flash attention)
    flash_attention: bool = False
    swa_full: bool = False  # sliding-window layers keep the whole context
    logits_all: bool = False  # logits for every token of a batch (perplexity), not the last
    offload: str = "cpu"  # "cpu", or "gpu": every layer on one GPU (KV cache there too)
    repack: frozenset[str] = field(default=REPACK_AVX2)  # tensor types the CPU repacks

    def __post_init__(self) -> None:
        if min(self.batch, self.ubatch, self.sequences) < 1 or self.context < 0:
            raise ValueError("batch, ubatch and sequences must be at least 1, context at least 0")
        if self.cache_type not in CACHE_TYPES:
            raise ValueError(f"cache_type must be one of {', '.join(CACHE_TYPES)}")
        if self.offload not in OFFLOADS:
            raise ValueError(f"offload must be one of {', '.join(OFFLOADS)}")
        if self.cache_type != "f16" and not self.flash_attention:
            # llama.cpp refuses a quantized V cache without flash attention (and turns it on
            # where its setting is "auto"): the estimate does as it would have to.
            object.__setattr__(self, "flash_attention", True)


@dataclass(frozen=True, slots=True)
class CachePart:
    """One group of layers' cache: `layers` layers of `cells` cells, `bytes` in all."""

    layers: int
    cells: int
    bytes: int
    sliding: bool = False


@dataclass(frozen=True, slots=True)
class MemoryEstimate:
    settings: MemorySettings
    cells: int  # cells of the full-attention cache (the padded context)
    weights: int
    repacked: int
    kv_cache: tuple[CachePart, ...]
    recurrent: int
    output: int
    compute: int
    compute_peak: str  # what the compute buffer is sized for: "logits", "attention", "feed-forward", ...
    host_compute: int  # of `compute`, the inputs a GPU run keeps in host memory (0 on a CPU)
    host_weights: int = 0  # with a GPU: the input embedding, kept in host memory besides `weights`

    @property
    def kv_bytes(self) -> int:
        return sum(p.bytes for p in self.kv_cache)

    @property
    def device(self) -> int:
        """Bytes on the GPU (0 on a CPU)."""
        if self.settings.offload == "cpu":
            return 0
        return self.weights + self.kv_bytes + self.recurrent + self.compute - self.host_compute

    @property
    def total(self) -> int:
        return (self.weights + self.host_weights + self.repacked + self.kv_bytes + self.recurrent + self.output
                + self.compute)  # fmt: skip

    @property
    def host(self) -> int:
        """Bytes in host memory."""
        return self.total - self.device

    def parts(self) -> dict[str, int]:
        return {"weights": self.weights + self.host_weights, "repacked": self.repacked, "kv_cache": self.kv_bytes,
                "recurrent": self.recurrent, "output": self.output, "compute": self.compute}  # fmt: skip


def _pad(n: int, to: int = CELL_PAD) -> int:
    return -(-n // to) * to


def _row(values: int, cache_type: str) -> int:
    per_block, block_bytes = CACHE_TYPES[cache_type]
    return -(-values // per_block) * block_bytes


@dataclass(frozen=True, slots=True)
class _Shape:
    """The cells and tokens llama.cpp sizes everything by, from the settings."""

    streams: int
    cells: int  # per stream, full-attention cache
    swa_cells: int  # per stream, sliding-window cache
    swa_cap: int  # the most cells a sliding-window cache keeps, whatever the context
    tokens: int  # of a micro-batch
    outputs: int  # rows the output buffer is reserved for


def _shape(p: MemoryProfile, s: MemorySettings) -> _Shape:
    context = s.context or p.context_length
    if not context:
        raise ValueError("context 0 asks for the model's trained context, which its header does not give")
    batch = min(context, s.batch)  # causal models: a batch never exceeds the context
    ubatch = min(batch, s.ubatch)
    n_ctx = _pad(context)
    cells = _pad(n_ctx // s.sequences) if s.sequences > 1 else n_ctx
    cap = _pad((p.sliding_window or 0) + ubatch)
    swa = cells if s.swa_full else min(cells, cap)
    outputs = max(batch, s.sequences) if s.logits_all else s.sequences
    return _Shape(s.sequences, cells, swa, cap, min(n_ctx, ubatch), outputs)


def _kv(p: MemoryProfile, s: MemorySettings, sh: _Shape) -> tuple[CachePart, ...]:
    v_width = max((g.kv_heads * g.value_length for g in p.attention), default=0)
    parts = []
    for sliding in (False, True):
        groups = [g for g in p.attention if g.sliding == sliding]
        if not groups:
            continue
        cells = (sh.swa_cells if sliding else sh.cells) * sh.streams
        row = 0
        for g in groups:
            v = 0 if g.value_length == 0 else (g.kv_heads * g.value_length if s.flash_attention else v_width)
            row += g.layers * (_row(g.kv_heads * g.key_length, s.cache_type) + _row(v, s.cache_type))
        parts.append(CachePart(sum(g.layers for g in groups), cells, row * cells, sliding))
    return tuple(parts)


@dataclass(frozen=True, slots=True)
class _Compute:
    """The compute buffer as llama.cpp's reservation sizes it, in the form `MemoryLine`
    keeps: `max(logits, masks + max(blocks, attention + kq * cells))`, where only
    `masks`, `kq` and the sliding-window part of `masks` grow with the context."""

    logits: int
    blocks: int  # the largest block working set that does not grow with the context
    blocks_name: str
    attention: int  # a full-attention layer's working set without its KQ matrix
    kq: int  # bytes of a full-attention layer per cell (KQ and MLA's transposed latent)
    mask: int  # bytes of the full-attention mask per cell
    swa_mask: int  # bytes of the sliding-window mask per cell
    inputs: int  # small inputs (positions, row ids)
    host_inputs: int  # inputs a GPU keeps on the host besides the masks (the embeddings)

    def at(self, cells: int, swa_cells: int) -> tuple[int, str]:
        masks = self.mask * cells + self.swa_mask * swa_cells
        attention = self.attention + self.kq * cells
        layers = masks + max(self.blocks, attention)
        if self.logits >= layers:
            return self.logits + self.inputs, "logits"
        return layers + self.inputs, "attention" if attention > self.blocks else self.blocks_name


def _compute(p: MemoryProfile, s: MemorySettings, sh: _Shape) -> _Compute:
    u, e = sh.tokens, p.embedding_length
    act = u * F32  # bytes per activation value across the micro-batch
    mask_bytes = 2 if s.flash_attention else F32
    # With swa_full a sliding layer's cache, and KQ, grow with the context as a full one's.
    full = [g for g in p.attention if not g.sliding or s.swa_full]
    swa = [g for g in p.attention if g.sliding and not s.swa_full]
    has_swa = any(g.sliding for g in p.attention)

    def attention_set(g: LayerGroup) -> tuple[int, int]:
        """A layer's working set without KQ, and its bytes per cell."""
        kq = 0 if s.flash_attention else g.heads * u * F32
        if p.mla_latent:
            rope = g.key_length - p.mla_latent
            fixed = (COMPUTE_MLA_EMBD * e + g.heads * (2 * p.mla_latent + rope)) * act
            return fixed, kq + (0 if s.flash_attention else p.mla_latent * 2)
        width = COMPUTE_ATTENTION_EMBD * e + COMPUTE_ATTENTION_QUERY * g.heads * g.key_length
        return (width + g.kv_heads * (g.key_length + g.value_length)) * act, kq

    blocks: list[tuple[int, str]] = [(0, "feed-forward")]
    for g in swa:  # a sliding layer's KQ spans the window's cells (sized at their most), not the context's
        fixed, per_cell = attention_set(g)
        blocks.append((fixed + per_cell * sh.swa_cap, "attention"))
    if p.feed_forward_length:
        blocks.append(((3 * p.feed_forward_length + COMPUTE_FFN_EMBD * e) * act, "feed-forward"))
    if p.expert_count:
        used = p.expert_used_count
        blocks.append(((3 * p.expert_feed_forward_length * used + 2 * e * used) * act, "experts"))
    if p.shared_feed_forward_length:
        blocks.append(((3 * p.shared_feed_forward_length + COMPUTE_FFN_EMBD * e) * act, "feed-forward"))
    if p.recurrent_layers:
        state = p.recurrent_floats * F32 * sh.streams
        blocks.append(((p.recurrent_width + COMPUTE_RECURRENT_EMBD * e) * act + state, "recurrent"))
    block, name = max(blocks)
    # Layers of several shapes: the largest working set with the largest KQ, an upper bound
    # that stays one line in the context.
    sets = [attention_set(g) for g in full]
    attention, per_cell = max((a for a, _ in sets), default=0), max((k for _, k in sets), default=0)
    logits = (p.vocab_size * u + COMPUTE_OUTPUT_EMBD * e * u) * F32
    caches = (1 if any(not g.sliding for g in p.attention) else 0) + (1 if has_swa else 0)
    inputs = u * (INPUT_BYTES_PER_TOKEN + CACHE_INDEX_BYTES_PER_TOKEN * caches)
    return _Compute(logits, block, name, attention, per_cell, mask_bytes * u if caches - has_swa else 0,
                    mask_bytes * u if has_swa else 0, inputs, e * act)  # fmt: skip


def estimate(p: MemoryProfile, s: MemorySettings | None = None) -> MemoryEstimate:
    """What llama.cpp allocates for `p` run with `s` (default: `MemorySettings()`)."""
    s = s or MemorySettings()
    sh = _shape(p, s)
    kv = _kv(p, s, sh)
    compute = _compute(p, s, sh)
    # Each sequence attends over its own stream of cells: KQ and masks span one stream's
    # cells for each of its share of the micro-batch's tokens.
    size, peak = compute.at(sh.cells, sh.swa_cells)
    recurrent = p.recurrent_layers * p.recurrent_floats * F32 * max(1, s.sequences)
    output = p.vocab_size * sh.outputs * F32
    if s.offload == "cpu":
        repacked = sum(n for t, n in p.repackable if t in s.repack)
        return MemoryEstimate(
            s, sh.cells * sh.streams, p.weight_bytes, repacked, kv, recurrent, output, size, peak, 0
        )
    # Every layer on the GPU: the input embedding stays on the host; a tied output layer is
    # a copy of it on the device.
    device_weights = p.weight_bytes - p.input_bytes + (p.input_bytes if p.output_tied else 0)
    cells = sh.cells * sh.streams
    host_compute = (
        compute.mask * sh.cells + compute.swa_mask * sh.swa_cells + compute.host_inputs + compute.inputs
    )
    return MemoryEstimate(s, cells, device_weights, 0, kv, recurrent, output, size, peak, min(host_compute, size),
                          p.input_bytes)  # fmt: skip


@dataclass(frozen=True, slots=True)
class MemoryLine:
    """`estimate(...).total` as a function of the context, for contexts of at least one
    micro-batch, in terms a database evaluates per row (`bytes_at`):

        c = the context padded to 256 cells; w = min(c, swa_cells)
        fixed + kv * c + swa_kv * w + max(logits, mask * c + swa_mask * w + max(blocks, attention + kq * c))

    Below one micro-batch it is an upper bound (the estimate sizes a shorter batch)."""

    fixed: int
    kv: int  # KV bytes per cell, full-attention layers
    swa_kv: int  # KV bytes per cell, sliding-window layers
    swa_cells: int  # cells a sliding-window cache keeps at most (0: none; the context when swa_full)
    logits: int
    mask: int
    swa_mask: int
    blocks: int
    attention: int
    kq: int

    def bytes_at(self, tokens: int) -> int:
        c = _pad(tokens)
        w = min(c, self.swa_cells) if self.swa_cells else c
        layers = self.mask * c + self.swa_mask * w + max(self.blocks, self.attention + self.kq * c)
        return self.fixed + self.kv * c + self.swa_kv * w + max(self.logits, layers)


def memory_line(p: MemoryProfile, s: MemorySettings | None = None) -> MemoryLine:
    """The coefficients of `estimate(p, s)` over contexts, for one sequence."""
    s = s or MemorySettings()
    if s.sequences != 1:
        raise ValueError("a memory line is for one sequence")
    # From one whole micro-batch on, every size is linear in the cells (or constant).
    small = replace(s, context=min(s.batch, s.ubatch))
    large = replace(s, context=max(s.batch, s.ubatch, 1 << 20))
    e = estimate(p, large)
    sh = _shape(p, small)
    compute = _compute(p, small, sh)
    kv_rows = {part.sliding: part.bytes // part.cells for part in e.kv_cache}
    window = 0 if not any(g.sliding for g in p.attention) else (1 << 62 if s.swa_full else sh.swa_cap)
    return MemoryLine(e.total - e.kv_bytes - e.compute, kv_rows.get(False, 0), kv_rows.get(True, 0), window,
                      compute.logits + compute.inputs, compute.mask, compute.swa_mask, compute.blocks + compute.inputs,
                      compute.attention + compute.inputs, compute.kq)  # fmt: skip


def estimate_dict(e: MemoryEstimate) -> dict[str, object]:
    """The estimate as JSON: the settings it assumes, each part in bytes, the total, and
    with a GPU what sits on the device and what in host memory."""
    s = e.settings
    return {
        "settings": {"context": s.context, "batch": s.batch, "ubatch": s.ubatch, "sequences": s.sequences,
                     "cache_type": s.cache_type, "flash_attention": s.flash_attention, "swa_full": s.swa_full,
                     "logits_all": s.logits_all, "offload": s.offload, "repack": sorted(s.repack)},
        "cells": e.cells,
        "parts": e.parts(),
        "kv_cache": [{"layers": p.layers, "cells": p.cells, "bytes": p.bytes, "sliding": p.sliding}
                     for p in e.kv_cache],
        "compute_peak": e.compute_peak,
        "total": e.total,
        "device": e.device,
        "host": e.host,
    }  # fmt: skip


def _short(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n:,} bytes"


def estimate_text(cpu: MemoryEstimate, gpu: MemoryEstimate | None = None) -> str:
    """A few lines for a terminal: the total and its parts on a CPU, and with a GPU estimate
    the device / host split."""
    s = cpu.settings
    attention = "flash attention" if s.flash_attention else "no flash attention"
    lines = [f"memory at {s.context:,} tokens (llama.cpp on a CPU, {s.cache_type} cache, {attention}, "
             f"micro-batch {s.ubatch}): {_short(cpu.total)}"]  # fmt: skip
    parts = [f"weights {_short(cpu.weights)}"]
    if cpu.repacked:
        parts.append(f"repacked {_short(cpu.repacked)}")
    for p in cpu.kv_cache:
        kind = "sliding-window KV cache" if p.sliding else "KV cache"
        parts.append(f"{kind} {_short(p.bytes)} ({p.layers} layers x {p.cells:,} cells)")
    if cpu.recurrent:
        parts.append(f"recurrent state {_short(cpu.recurrent)}")
    parts += [f"compute {_short(cpu.compute)} ({cpu.compute_peak})", f"output {_short(cpu.output)}"]
    lines.append("  " + ", ".join(parts))
    if gpu is not None:
        lines.append(
            f"  every layer on a GPU: {_short(gpu.device)} on the device, {_short(gpu.host)} in host memory"
        )
    return "\n".join(lines) + "\n"
