"""Synthetic GGUF headers written with gguf-py's GGUFWriter, header only.

A synthetic file is "virtual": its real header bytes (metadata and tensor infos, padded to
the alignment) followed by zeros up to the size its tensor infos declare. Nothing but the
header is ever held in memory, so a 10 GB model costs a few MiB.

Tokenizer arrays dominate header size and packing time (a 262k vocabulary is ~0.2 s per
array), so the token lists are built once per vocabulary size and their packed bytes are
cached by identity; a thousand repos sharing three vocabularies pack each array once.
"""

from __future__ import annotations

import functools
import io
import itertools
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import gguf
import numpy as np
from gguf import GGMLQuantizationType as Q
from gguf import GGUFValueType as VT
from gguf.gguf_writer import WriterState

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


class _CachingWriter(gguf.GGUFWriter):
    """GGUFWriter that packs each large array object once per process."""

    _packed: ClassVar[dict[int, tuple[object, bytes]]] = {}

    def _pack_val(self, val: Any, vtype: VT, add_vtype: bool, sub_type: VT | None = None) -> bytes:
        if vtype == VT.ARRAY and isinstance(val, list | tuple) and len(val) >= 1024:
            hit = self._packed.get(id(val))
            if hit is not None and hit[0] is val and add_vtype:
                return hit[1]
            packed = super()._pack_val(val, vtype, add_vtype, sub_type)
            if add_vtype:
                self._packed[id(val)] = (val, packed)  # holding `val` keeps its id unique
            return packed
        return super()._pack_val(val, vtype, add_vtype, sub_type)


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

    def metadata(self, writer: gguf.GGUFWriter) -> None:
        a = self.arch
        kinds = {"model": "model", "lora": "adapter", "mmproj": "mmproj", "imatrix": "imatrix"}
        if self.kind == "imatrix":
            writer.add_type("imatrix")
            writer.add_array("imatrix.datasets", ["calibration_datav3.txt"])
            writer.add_uint32("imatrix.chunk_count", 125)
            writer.add_uint32("imatrix.chunk_size", 512)
            return
        writer.add_type(kinds[self.kind])
        writer.add_name(self.name)
        for value, add in (
            (self.basename, writer.add_basename),
            (self.finetune, writer.add_finetune),
            (self.size_label, writer.add_size_label),
            (self.license, writer.add_license),
        ):
            if value is not None:
                add(value)
        if self.base_models:
            writer.add_base_model_count(len(self.base_models))
            for i, (name, org, url) in enumerate(self.base_models):
                writer.add_base_model_name(i, name)
                writer.add_base_model_organization(i, org)
                writer.add_base_model_repo_url(i, url)
        if self.kind == "lora":
            writer.add_string("adapter.type", "lora")
            writer.add_float32("adapter.lora.alpha", 16.0)
        elif self.kind == "model":
            writer.add_uint32(f"{a}.context_length", self.context_length)
            writer.add_uint32(f"{a}.embedding_length", self.n_embd)
            writer.add_uint32(f"{a}.block_count", self.n_layers)
            writer.add_uint32(f"{a}.feed_forward_length", self.n_ff)
            writer.add_uint32(f"{a}.attention.head_count", self.n_head)
            writer.add_uint32(f"{a}.attention.head_count_kv", self.n_head_kv)
            writer.add_float32(f"{a}.rope.freq_base", 10000.0)
            writer.add_float32(f"{a}.attention.layer_norm_rms_epsilon", 1e-5)
            if self.n_experts:
                writer.add_uint32(f"{a}.expert_count", self.n_experts)
                writer.add_uint32(f"{a}.expert_used_count", min(2, self.n_experts))
            writer.add_uint32("general.file_type", ALL_FILE_TYPES[self.quant][1])
            if not self.quantized:
                writer.add_uint32("general.quantization_version", 2)
            tokens, scores, types, merges = vocab(self.vocab_size, self.tokenizer, self.merges)
            if self.vocab_edit:
                tokens = edited_tokens(self.vocab_size, self.tokenizer, self.merges, self.vocab_edit)
            writer.add_string("tokenizer.ggml.model", self.tokenizer)
            if self.pre is not None:
                writer.add_string("tokenizer.ggml.pre", self.pre)
            writer.add_array("tokenizer.ggml.tokens", tokens)
            if self.tokenizer == "llama":
                writer.add_array("tokenizer.ggml.scores", scores)
            writer.add_array("tokenizer.ggml.token_type", types)
            if merges:
                writer.add_array("tokenizer.ggml.merges", merges)
            writer.add_uint32("tokenizer.ggml.bos_token_id", 1)
            writer.add_uint32("tokenizer.ggml.eos_token_id", 2)
            if self.chat_template is not None:
                writer.add_string("tokenizer.chat_template", self.chat_template)
            if self.quantized:
                writer.add_uint32("general.quantization_version", 2)
            if self.imatrix:
                writer.add_string("quantize.imatrix.file", f"/models/{self.basename or 'model'}.imatrix")
                writer.add_string("quantize.imatrix.dataset", "/training_data/calibration_datav3.txt")
                writer.add_int32("quantize.imatrix.entries_count", 7 * self.n_layers)
                writer.add_int32("quantize.imatrix.chunks_count", 125)
        elif self.kind == "mmproj":
            writer.add_bool("clip.has_vision_encoder", True)
            writer.add_string("clip.projector_type", "mlp")
            writer.add_uint32("clip.vision.embedding_length", self.n_embd)
        for key, value in self.extra:
            if isinstance(value, bool):
                writer.add_bool(key, value)
            elif isinstance(value, int):
                writer.add_uint32(key, value)
            elif isinstance(value, float):
                writer.add_float32(key, value)
            elif isinstance(value, str):
                writer.add_string(key, value)
            else:
                writer.add_array(key, value)


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


@dataclass(frozen=True)
class SynthFile:
    header: bytes  # padded to the alignment: exactly the bytes before tensor data
    size: int  # header plus declared tensor data


def build(spec: ModelSpec, *, shard: tuple[int, int] | None = None) -> SynthFile:
    """Header bytes and declared size of one file (or of shard `no` of `count`, 1-based)."""
    plan = spec.tensor_plan()
    writer = _CachingWriter(None, spec.arch)
    if spec.kind == "imatrix":
        writer.kv_data[0].clear()  # llama-imatrix names no architecture
        spec.metadata(writer)
    elif shard is None or shard[0] == 1:
        spec.metadata(writer)
    else:
        # gguf-split writes only the split keys into shards 2..N; drop general.architecture too.
        writer.kv_data[0].clear()
    if shard is not None:
        no, count = shard
        writer.add_uint16(gguf.Keys.Split.LLM_KV_SPLIT_NO, no - 1)
        writer.add_uint16(gguf.Keys.Split.LLM_KV_SPLIT_COUNT, count)
        writer.add_int32(gguf.Keys.Split.LLM_KV_SPLIT_TENSORS_COUNT, len(plan))
        per = -(-len(plan) // count)
        plan = plan[(no - 1) * per : no * per]
    data = 0
    for name, shape, qtype in plan:
        nbytes = _nbytes(shape, qtype)
        writer.add_tensor_info(name, shape, np.dtype(np.float32), nbytes, raw_dtype=qtype)
        data += _pad(nbytes)
    out = io.BytesIO()
    writer.fout = [out]  # type: ignore[list-item]
    writer.state = WriterState.EMPTY
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    raw = out.getvalue()
    header = raw + b"\0" * (_pad(len(raw)) - len(raw))
    return SynthFile(header=header, size=len(header) + data)
