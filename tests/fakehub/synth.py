"""Synthetic GGUF headers, packed as gguf-py's GGUFWriter packs them, header only.

A synthetic file is "virtual": its real header bytes (metadata and tensor infos, padded to
the alignment) followed by zeros up to the size its tensor infos declare. Nothing but the
header is ever held in memory, so a 10 GB model costs a few MiB.

Tokenizer arrays dominate header size and packing time, so the token lists are built once
per vocabulary size and packed once per process; a file holds its large arrays as shared
pieces (`SynthFile.segments`), so the fake hub builds each of a thousand quants in well under
a millisecond and keeps them without a copy of their vocabulary each. `build` packs the bytes
itself; `reference_header` writes the same file with gguf-py's writer, and the fake hub's
tests hold the two equal.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import random
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gguf
import numpy as np
from gguf import GGMLQuantizationType as Q
from gguf import GGUFValueType as VT

ALIGNMENT = 32

# The main quant of the weight matrices -> the llama ftype written to general.file_type.
FILE_TYPES: dict[str, tuple[Q, int]] = {
    "F16": (Q.F16, 1),
    "BF16": (Q.BF16, 32),
    "Q8_0": (Q.Q8_0, 7),
    "Q4_0": (Q.Q4_0, 2),
    "Q4_1": (Q.Q4_1, 3),
    "Q5_0": (Q.Q5_0, 8),
    "Q2_K": (Q.Q2_K, 10),
    "Q3_K_M": (Q.Q3_K, 12),
    "Q4_K_M": (Q.Q4_K, 15),
    "Q5_K_M": (Q.Q5_K, 17),
    "Q6_K": (Q.Q6_K, 18),
    "IQ2_XS": (Q.IQ2_XS, 20),
    "IQ4_XS": (Q.IQ4_XS, 30),
}

# The rest of llama-quantize's file types, for repos that carry two dozen quants; kept out of
# FILE_TYPES so that corpora drawing from it keep their draws.
MORE_FILE_TYPES: dict[str, tuple[Q, int]] = {
    "Q5_1": (Q.Q5_1, 9),
    "Q3_K_S": (Q.Q3_K, 11),
    "Q3_K_L": (Q.Q3_K, 13),
    "Q4_K_S": (Q.Q4_K, 14),
    "Q5_K_S": (Q.Q5_K, 16),
    "IQ2_XXS": (Q.IQ2_XXS, 19),
    "Q2_K_S": (Q.Q2_K, 21),
    "IQ3_XS": (Q.IQ3_XXS, 22),
    "IQ3_XXS": (Q.IQ3_XXS, 23),
    "IQ1_S": (Q.IQ1_S, 24),
    "IQ4_NL": (Q.IQ4_NL, 25),
    "IQ3_S": (Q.IQ3_S, 26),
    "IQ3_M": (Q.IQ3_S, 27),
    "IQ2_S": (Q.IQ2_S, 28),
    "IQ2_M": (Q.IQ2_S, 29),
    "IQ1_M": (Q.IQ1_M, 31),
}
ALL_FILE_TYPES = {**FILE_TYPES, **MORE_FILE_TYPES}

# What llama-quantize gives the tensors that matter most, per file type: (attn_v and ffn_down
# of the layers that get more bits, output.weight). A simplification of its rules that keeps
# their shape: a few layers at a higher type, the output matrix at Q6_K.
_MORE_BITS: dict[str, tuple[Q | None, Q]] = {
    "Q2_K": (Q.Q4_K, Q.Q6_K),
    "Q2_K_S": (None, Q.Q6_K),
    "Q3_K_S": (None, Q.Q6_K),
    "Q3_K_M": (Q.Q5_K, Q.Q6_K),
    "Q3_K_L": (Q.Q5_K, Q.Q6_K),
    "Q4_K_S": (Q.Q5_K, Q.Q6_K),
    "Q4_K_M": (Q.Q6_K, Q.Q6_K),
    "Q5_K_S": (None, Q.Q6_K),
    "Q5_K_M": (Q.Q6_K, Q.Q6_K),
    "IQ1_S": (Q.IQ2_XXS, Q.Q5_K),
    "IQ1_M": (Q.IQ2_XXS, Q.Q5_K),
    "IQ2_XXS": (Q.IQ3_XXS, Q.Q5_K),
    "IQ2_XS": (Q.IQ3_XXS, Q.Q5_K),
    "IQ2_S": (Q.IQ3_S, Q.Q5_K),
    "IQ2_M": (Q.IQ3_S, Q.Q5_K),
    "IQ3_XXS": (Q.IQ3_S, Q.Q6_K),
    "IQ3_XS": (Q.IQ3_S, Q.Q6_K),
    "IQ3_S": (None, Q.Q6_K),
    "IQ3_M": (Q.Q4_K, Q.Q6_K),
    "IQ4_XS": (None, Q.Q6_K),
    "IQ4_NL": (None, Q.Q6_K),
}


def _more_bits(i: int, n: int) -> bool:
    """llama-quantize's use_more_bits: the first and last eighth of the layers and every third."""
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


@functools.lru_cache(maxsize=16)
def vocab(
    size: int, style: str, n_merges: int | None = None
) -> tuple[list[str], list[float], list[int], list[str]]:
    """Deterministic token strings, scores, token types and (for BPE) merges.

    Like a real BPE vocabulary, a merge splits a token in two ("t1a2" <- "t1 a2"), and there
    is about one merge per token unless `n_merges` says otherwise (llama3 has 2.2 per token;
    the extra ones repeat tokens, as its other ways to build them do).
    """
    specials = (
        ["<unk>", "<s>", "</s>"] if style == "llama" else ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    )
    tokens = specials + [f"t{i:x}" for i in range(len(specials), size)]
    scores = [float(-i) for i in range(size)]
    types = [3] * len(specials) + [1] * (size - len(specials))
    merges: list[str] = []
    if style == "gpt2":
        plain = tokens[len(specials) :]
        count = len(plain) if n_merges is None else n_merges
        merges = [f"{t[:2]} {t[2:]}" for t in itertools.islice(itertools.cycle(plain), count)]
    return tokens, scores, types, merges


@functools.lru_cache(maxsize=4)
def edited_tokens(size: int, style: str, n_merges: int | None, seed: int) -> list[str]:
    """`vocab()`'s tokens with 1% of them changed at random places, each to another string of
    the same length: the array keeps its length and its byte size, only those bytes differ."""
    tokens = list(vocab(size, style, n_merges)[0])
    rng = random.Random(seed)
    for i in rng.sample(range(3, size), max(1, size // 100)):
        tokens[i] = "u" + tokens[i][1:]  # unique still: every plain token starts with "t"
    return tokens


@dataclass(frozen=True)
class ModelSpec:
    """What a synthetic GGUF file declares. Small defaults keep tests cheap."""

    arch: str = "llama"
    name: str = "Synth"
    basename: str | None = None
    finetune: str | None = None
    size_label: str | None = None
    license: str | None = None
    quant: str = "Q4_K_M"
    n_layers: int = 2
    n_embd: int = 256
    n_ff: int = 512
    n_head: int = 4
    n_head_kv: int = 2
    n_experts: int = 0
    context_length: int = 4096
    vocab_size: int = 1024
    tokenizer: str = "llama"  # "llama" (sentencepiece) or "gpt2" (BPE with merges)
    pre: str | None = None  # tokenizer.ggml.pre, e.g. "llama-bpe", "qwen2"
    merges: int | None = None  # BPE merges; None: one per token
    chat_template: str | None = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    kind: str = "model"  # "model", "lora" (adapter), "mmproj" (vision projector) or "imatrix"
    base_models: tuple[tuple[str, str, str], ...] = ()  # (name, organization, repo_url)
    extra: tuple[tuple[str, Any], ...] = field(default=())
    # As llama-quantize writes a quant: general.quantization_version after the tokenizer,
    # a few layers' attn_v and ffn_down at a higher type (see _MORE_BITS), and with
    # `imatrix` the quantize.imatrix.* keys last.
    quantized: bool = False
    imatrix: bool = False
    # Nonzero: 1% of the tokens (never the special ones) replaced by other strings of the same
    # byte length, at places this seed picks, as a re-uploaded tokenizer fix would.
    vocab_edit: int = 0

    def tensor_plan(self) -> list[tuple[str, tuple[int, ...], Q]]:
        """(name, numpy-order shape, type) of every tensor, in file order."""
        main, _ = ALL_FILE_TYPES[self.quant]
        e, ff = self.n_embd, self.n_ff
        plan: list[tuple[str, tuple[int, ...], Q]] = []
        if self.kind == "imatrix":
            for i in range(self.n_layers):
                for t in ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"):
                    width = ff if t == "ffn_down" else e
                    plan.append((f"blk.{i}.{t}.weight.in_sum2", (1, width), Q.F32))
                    plan.append((f"blk.{i}.{t}.weight.counts", (1, 1), Q.F32))
            return plan
        if self.quantized:
            return self._quantized_plan(main)
        if self.kind == "lora":
            for i in range(self.n_layers):
                for t in ("attn_q", "attn_v"):
                    plan.append((f"blk.{i}.{t}.weight.lora_a", (16, e), Q.F16))
                    plan.append((f"blk.{i}.{t}.weight.lora_b", (e, 16), Q.F16))
            return plan
        if self.kind == "mmproj":
            plan.append(("v.patch_embd.weight", (e, 3, 14, 14), Q.F16))
            for i in range(self.n_layers):
                plan.append((f"v.blk.{i}.attn_q.weight", (e, e), Q.F16))
                plan.append((f"v.blk.{i}.ln1.weight", (e,), Q.F32))
            plan.append(("mm.0.weight", (e, e), Q.F16))
            return plan
        plan.append(("token_embd.weight", (self.vocab_size, e), main))
        for i in range(self.n_layers):
            b = f"blk.{i}"
            plan.append((f"{b}.attn_norm.weight", (e,), Q.F32))
            for t in ("attn_q", "attn_k", "attn_v", "attn_output"):
                plan.append((f"{b}.{t}.weight", (e, e), main))
            if self.n_experts:
                for t in ("ffn_gate_exps", "ffn_up_exps"):
                    plan.append((f"{b}.{t}.weight", (self.n_experts, ff, e), main))
                plan.append((f"{b}.ffn_down_exps.weight", (self.n_experts, e, ff), main))
                plan.append((f"{b}.ffn_gate_inp.weight", (self.n_experts, e), Q.F32))
            else:
                plan.append((f"{b}.ffn_gate.weight", (ff, e), main))
                plan.append((f"{b}.ffn_up.weight", (ff, e), main))
                plan.append((f"{b}.ffn_down.weight", (e, ff), Q.Q6_K if main in _K_QUANTS else main))
            plan.append((f"{b}.ffn_norm.weight", (e,), Q.F32))
        plan.append(("output_norm.weight", (e,), Q.F32))
        plan.append(("output.weight", (self.vocab_size, e), Q.Q6_K if main in _K_QUANTS else main))
        return plan

    def _quantized_plan(self, main: Q) -> list[tuple[str, tuple[int, ...], Q]]:
        more, output = _MORE_BITS.get(self.quant, (None, main))
        e, ff = self.n_embd, self.n_ff
        plan: list[tuple[str, tuple[int, ...], Q]] = [("token_embd.weight", (self.vocab_size, e), main)]
        for i in range(self.n_layers):
            b = f"blk.{i}"
            up = more if more is not None and _more_bits(i, self.n_layers) else main
            plan.append((f"{b}.attn_norm.weight", (e,), Q.F32))
            plan.append((f"{b}.attn_q.weight", (e, e), main))
            plan.append((f"{b}.attn_k.weight", (e // self.n_head * self.n_head_kv, e), main))
            plan.append((f"{b}.attn_v.weight", (e // self.n_head * self.n_head_kv, e), up))
            plan.append((f"{b}.attn_output.weight", (e, e), main))
            plan.append((f"{b}.ffn_gate.weight", (ff, e), main))
            plan.append((f"{b}.ffn_up.weight", (ff, e), main))
            plan.append((f"{b}.ffn_down.weight", (e, ff), up))
            plan.append((f"{b}.ffn_norm.weight", (e,), Q.F32))
        plan.append(("output_norm.weight", (e,), Q.F32))
        plan.append(("output.weight", (self.vocab_size, e), output))
        return plan

    def metadata(self) -> dict[str, tuple[VT, Any]]:
        """The key-value pairs of the file, in order: key -> (value type, value)."""
        a = self.arch
        kv: dict[str, tuple[VT, Any]] = {}

        def put(key: str, vtype: VT, value: Any) -> None:
            kv[key] = (vtype, value)

        kinds = {"model": "model", "lora": "adapter", "mmproj": "mmproj", "imatrix": "imatrix"}
        if self.kind == "imatrix":
            put("general.type", VT.STRING, "imatrix")
            put("imatrix.datasets", VT.ARRAY, ["calibration_datav3.txt"])
            put("imatrix.chunk_count", VT.UINT32, 125)
            put("imatrix.chunk_size", VT.UINT32, 512)
            return kv
        put("general.architecture", VT.STRING, a)
        put("general.type", VT.STRING, kinds[self.kind])
        put("general.name", VT.STRING, self.name)
        for key, value in (
            ("general.basename", self.basename),
            ("general.finetune", self.finetune),
            ("general.size_label", self.size_label),
            ("general.license", self.license),
        ):
            if value is not None:
                put(key, VT.STRING, value)
        if self.base_models:
            put("general.base_model.count", VT.UINT32, len(self.base_models))
            for i, (name, org, url) in enumerate(self.base_models):
                put(f"general.base_model.{i}.name", VT.STRING, name)
                put(f"general.base_model.{i}.organization", VT.STRING, org)
                put(f"general.base_model.{i}.repo_url", VT.STRING, url)
        if self.kind == "lora":
            put("adapter.type", VT.STRING, "lora")
            put("adapter.lora.alpha", VT.FLOAT32, 16.0)
        elif self.kind == "model":
            put(f"{a}.context_length", VT.UINT32, self.context_length)
            put(f"{a}.embedding_length", VT.UINT32, self.n_embd)
            put(f"{a}.block_count", VT.UINT32, self.n_layers)
            put(f"{a}.feed_forward_length", VT.UINT32, self.n_ff)
            put(f"{a}.attention.head_count", VT.UINT32, self.n_head)
            put(f"{a}.attention.head_count_kv", VT.UINT32, self.n_head_kv)
            put(f"{a}.rope.freq_base", VT.FLOAT32, 10000.0)
            put(f"{a}.attention.layer_norm_rms_epsilon", VT.FLOAT32, 1e-5)
            if self.n_experts:
                put(f"{a}.expert_count", VT.UINT32, self.n_experts)
                put(f"{a}.expert_used_count", VT.UINT32, min(2, self.n_experts))
            put("general.file_type", VT.UINT32, ALL_FILE_TYPES[self.quant][1])
            if not self.quantized:
                put("general.quantization_version", VT.UINT32, 2)
            tokens, scores, types, merges = vocab(self.vocab_size, self.tokenizer, self.merges)
            if self.vocab_edit:
                tokens = edited_tokens(self.vocab_size, self.tokenizer, self.merges, self.vocab_edit)
            put("tokenizer.ggml.model", VT.STRING, self.tokenizer)
            if self.pre is not None:
                put("tokenizer.ggml.pre", VT.STRING, self.pre)
            put("tokenizer.ggml.tokens", VT.ARRAY, tokens)
            if self.tokenizer == "llama":
                put("tokenizer.ggml.scores", VT.ARRAY, scores)
            put("tokenizer.ggml.token_type", VT.ARRAY, types)
            if merges:
                put("tokenizer.ggml.merges", VT.ARRAY, merges)
            put("tokenizer.ggml.bos_token_id", VT.UINT32, 1)
            put("tokenizer.ggml.eos_token_id", VT.UINT32, 2)
            if self.chat_template is not None:
                put("tokenizer.chat_template", VT.STRING, self.chat_template)
            if self.quantized:
                put("general.quantization_version", VT.UINT32, 2)
            if self.imatrix:
                put("quantize.imatrix.file", VT.STRING, f"/models/{self.basename or 'model'}.imatrix")
                put("quantize.imatrix.dataset", VT.STRING, "/training_data/calibration_datav3.txt")
                put("quantize.imatrix.entries_count", VT.INT32, 7 * self.n_layers)
                put("quantize.imatrix.chunks_count", VT.INT32, 125)
        elif self.kind == "mmproj":
            put("clip.has_vision_encoder", VT.BOOL, True)
            put("clip.projector_type", VT.STRING, "mlp")
            put("clip.vision.embedding_length", VT.UINT32, self.n_embd)
        for key, value in self.extra:
            if isinstance(value, bool):
                put(key, VT.BOOL, value)
            elif isinstance(value, int):
                put(key, VT.UINT32, value)
            elif isinstance(value, float):
                put(key, VT.FLOAT32, value)
            elif isinstance(value, str):
                put(key, VT.STRING, value)
            else:
                put(key, VT.ARRAY, value)
        return kv


_K_QUANTS = {Q.Q2_K, Q.Q3_K, Q.Q4_K, Q.Q5_K, Q.Q6_K, Q.IQ2_XS, Q.IQ4_XS}


def _nbytes(shape: Sequence[int], qtype: Q) -> int:
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    n = 1
    for d in shape:
        n *= d
    if shape[-1] % block:
        raise ValueError(f"row of {shape[-1]} is not a multiple of the {qtype.name} block ({block})")
    return n // block * size


def _pad(n: int, align: int = ALIGNMENT) -> int:
    return (n + align - 1) // align * align


_U32, _U64 = struct.Struct("<I"), struct.Struct("<Q")
# gguf-py's writer packs scalars with these formats (little-endian).
_SCALARS: dict[VT, struct.Struct] = {
    vt: struct.Struct("<" + fmt)
    for vt, fmt in (
        (VT.UINT8, "B"), (VT.INT8, "b"), (VT.UINT16, "H"), (VT.INT16, "h"), (VT.UINT32, "I"),
        (VT.INT32, "i"), (VT.FLOAT32, "f"), (VT.UINT64, "Q"), (VT.INT64, "q"), (VT.FLOAT64, "d"),
        (VT.BOOL, "?"),
    )
}  # fmt: skip
_NUMPY = {VT.FLOAT32: "<f4", VT.INT32: "<i4"}
LARGE = 1024  # elements: arrays this long are packed once per process and shared by every file
_packed: dict[int, tuple[object, bytes]] = {}  # id(array) -> (the array, kept so its id stays its own; bytes)


def _string(value: str) -> bytes:
    raw = value.encode("utf-8")
    return _U64.pack(len(raw)) + raw


def _value(vtype: VT, value: Any) -> bytes:
    """A value's bytes after its type, as gguf-py's GGUFWriter packs it."""
    if vtype is VT.STRING:
        return _string(value)
    if vtype is not VT.ARRAY:
        return _SCALARS[vtype].pack(value)
    hit = _packed.get(id(value)) if len(value) >= LARGE else None
    if hit is not None and hit[0] is value:
        return hit[1]
    etype = VT.get_type(value[0])  # the writer's rule: the first element's Python type
    if etype is VT.STRING:
        body = b"".join([_string(v) for v in value])
    elif etype in _NUMPY:
        body = np.asarray(value, dtype=_NUMPY[etype]).tobytes()
    else:
        body = b"".join([_value(etype, v) for v in value])
    packed = _U32.pack(etype) + _U64.pack(len(value)) + body
    if len(value) >= LARGE:
        _packed[id(value)] = (value, packed)
    return packed


@dataclass(frozen=True)
class SynthFile:
    """A synthetic file's header as pieces: a large array's bytes are one object shared by
    every file that holds the array, so a thousand quants of one vocabulary cost one copy."""

    segments: tuple[bytes, ...]  # the header padded to the alignment, in order
    starts: tuple[int, ...]  # offset of each segment
    size: int  # header plus declared tensor data

    @property
    def header(self) -> bytes:
        """Exactly the bytes before the tensor data."""
        return b"".join(self.segments)

    def read(self, start: int, end: int) -> bytes:
        """Bytes [start, end) of the file: the header's, then zeros."""
        end = min(end, self.size)
        out: list[bytes] = []
        pos = start
        i = max(0, bisect.bisect_right(self.starts, start) - 1)
        while pos < end and i < len(self.segments):
            seg, at = self.segments[i], self.starts[i]
            lo, hi = pos - at, min(len(seg), end - at)
            if lo < hi:
                out.append(seg[lo:hi])
                pos = at + hi
            i += 1
        if pos < end:
            out.append(bytes(end - pos))
        return b"".join(out)


def _plan_and_kvs(
    spec: ModelSpec, shard: tuple[int, int] | None
) -> tuple[list[tuple[str, tuple[int, ...], Q]], dict[str, tuple[VT, Any]]]:
    """The file's tensors and key-value pairs; a shard holds its share of the tensors."""
    plan = spec.tensor_plan()
    # gguf-split writes only the split keys into shards 2..N, general.architecture included.
    kv = spec.metadata() if shard is None or shard[0] == 1 or spec.kind == "imatrix" else {}
    if shard is not None:
        no, count = shard
        kv[gguf.Keys.Split.LLM_KV_SPLIT_NO] = (VT.UINT16, no - 1)
        kv[gguf.Keys.Split.LLM_KV_SPLIT_COUNT] = (VT.UINT16, count)
        kv[gguf.Keys.Split.LLM_KV_SPLIT_TENSORS_COUNT] = (VT.INT32, len(plan))
        per = -(-len(plan) // count)
        plan = plan[(no - 1) * per : no * per]
    return plan, kv


def build(spec: ModelSpec, *, shard: tuple[int, int] | None = None) -> SynthFile:
    """Header and declared size of one file (or of shard `no` of `count`, 1-based), packed
    as gguf-py's writer packs them (`reference_header` writes the same with it)."""
    plan, kv = _plan_and_kvs(spec, shard)
    segments: list[bytes] = []
    small = bytearray(_U32.pack(gguf.GGUF_MAGIC) + _U32.pack(gguf.GGUF_VERSION))
    small += _U64.pack(len(plan)) + _U64.pack(len(kv))
    for key, (vtype, value) in kv.items():
        small += _string(key) + _U32.pack(vtype)
        packed = _value(vtype, value)
        if vtype is VT.ARRAY and len(value) >= LARGE:
            segments += [bytes(small), packed]
            small = bytearray()
        else:
            small += packed
    data = 0
    for name, shape, qtype in plan:
        small += _string(name) + _U32.pack(len(shape))
        small += b"".join([_U64.pack(d) for d in reversed(shape)])
        small += _U32.pack(qtype) + _U64.pack(data)
        data += _pad(_nbytes(shape, qtype))
    length = sum(map(len, segments)) + len(small)
    small += bytes(_pad(length) - length)
    segments.append(bytes(small))
    starts = tuple(itertools.accumulate((len(s) for s in segments[:-1]), initial=0))
    return SynthFile(tuple(segments), starts, _pad(length) + data)


def reference_header(spec: ModelSpec, path: Path, *, shard: tuple[int, int] | None = None) -> bytes:
    """The same header written by gguf-py's GGUFWriter to `path` (a check on `build`; slow
    for large vocabularies, which the writer packs element by element)."""
    plan, kv = _plan_and_kvs(spec, shard)
    writer = gguf.GGUFWriter(path, spec.arch)
    writer.kv_data[0].clear()  # the architecture comes from `kv`, where the file has it
    for key, (vtype, value) in kv.items():
        writer.add_key_value(key, value, vtype)
    for name, shape, qtype in plan:
        writer.add_tensor_info(name, shape, np.dtype(np.float32), _nbytes(shape, qtype), raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    writer.close()
    raw = path.read_bytes()
    return raw + bytes(_pad(len(raw)) - len(raw))
