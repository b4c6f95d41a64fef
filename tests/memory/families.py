"""Synthetic GGUF files shaped like real models of each family, for the memory estimate.

A memory estimate depends on a file's header only (shapes, types, hyperparameters), so the
files written here carry a real header (written by gguf-py, llama.cpp's reference writer)
and a tensor data section of zeros left as a hole in a sparse file: a 17 GB Qwen3-30B-A3B
shape costs a few megabytes of disk. llama.cpp loads them (bench/memory.py measures them
with its memory-fit mode, which reads no tensor data), and the tests read the same headers.

Each `Family` is the shape of one published model (its dimensions, head counts, vocabulary
size and trained context), with the tensor list llama.cpp's loader asks for that
architecture and a plausible mix of quantized types.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gguf
import numpy as np

Q = gguf.GGMLQuantizationType
Tensor = tuple[str, tuple[int, ...], gguf.GGMLQuantizationType]  # name, ggml shape (ne0 first), type


@dataclass(frozen=True)
class Family:
    name: str  # what the bench table calls it: "llama-3.2-1b"
    family: str  # the group its worst deviation is reported under: "llama", "gemma3", ...
    arch: str
    keys: dict[str, Any]  # `{arch}.`-relative keys, and "general." / "tokenizer." ones as they are
    tensors: tuple[Tensor, ...]
    n_vocab: int
    contexts: tuple[int, ...] = (4096, 32768)
    notes: str = ""


def _mat(rows_out: int, cols_in: int) -> tuple[int, int]:
    return (cols_in, rows_out)


@dataclass
class _Tensors:
    """Collects tensors in file order, types picked per role."""

    matrix: gguf.GGMLQuantizationType = Q.Q4_K
    out: list[Tensor] = field(default_factory=list)

    def add(self, name: str, shape: tuple[int, ...], qtype: gguf.GGMLQuantizationType | None = None) -> None:
        if qtype is None:
            qtype = Q.F32 if len(shape) == 1 or shape[0] < 32 else self.matrix
        if qtype not in (Q.F32, Q.F16) and shape[0] % gguf.GGML_QUANT_SIZES[qtype][0]:
            qtype = Q.F16 if shape[0] % 2 == 0 else Q.F32
        self.out.append((name, shape, qtype))

    def norm(self, name: str, n: int) -> None:
        self.add(name, (n,), Q.F32)


def _embeddings(t: _Tensors, n_embd: int, n_vocab: int, tied: bool) -> None:
    t.add("token_embd.weight", (n_embd, n_vocab), Q.Q6_K if n_embd % 256 == 0 else Q.Q8_0)
    t.norm("output_norm.weight", n_embd)
    if not tied:
        t.add("output.weight", (n_embd, n_vocab), Q.Q6_K if n_embd % 256 == 0 else Q.Q8_0)


def _attention(t: _Tensors, p: str, n_embd: int, n_head: int, n_kv: int, head_k: int, head_v: int, *,
               bias: bool = False, qk_norm: bool = False) -> None:  # fmt: skip
    t.norm(p + "attn_norm.weight", n_embd)
    t.add(p + "attn_q.weight", _mat(n_head * head_k, n_embd))
    t.add(p + "attn_k.weight", _mat(n_kv * head_k, n_embd))
    t.add(p + "attn_v.weight", _mat(n_kv * head_v, n_embd), Q.Q6_K if n_embd % 256 == 0 else None)
    if bias:
        t.norm(p + "attn_q.bias", n_head * head_k)
        t.norm(p + "attn_k.bias", n_kv * head_k)
        t.norm(p + "attn_v.bias", n_kv * head_v)
    if qk_norm:
        t.norm(p + "attn_q_norm.weight", head_k)
        t.norm(p + "attn_k_norm.weight", head_k)
    t.add(p + "attn_output.weight", _mat(n_embd, n_head * head_v))


def _ffn(t: _Tensors, p: str, n_embd: int, n_ff: int) -> None:
    t.norm(p + "ffn_norm.weight", n_embd)
    t.add(p + "ffn_gate.weight", _mat(n_ff, n_embd))
    t.add(p + "ffn_up.weight", _mat(n_ff, n_embd))
    t.add(p + "ffn_down.weight", _mat(n_embd, n_ff), Q.Q6_K if n_ff % 256 == 0 else None)


def _experts(t: _Tensors, p: str, n_embd: int, n_ff_exp: int, n_expert: int) -> None:
    t.add(p + "ffn_gate_inp.weight", (n_embd, n_expert), Q.F32)
    t.add(p + "ffn_gate_exps.weight", (n_embd, n_ff_exp, n_expert))
    t.add(p + "ffn_up_exps.weight", (n_embd, n_ff_exp, n_expert))
    t.add(p + "ffn_down_exps.weight", (n_ff_exp, n_embd, n_expert), Q.Q6_K if n_ff_exp % 256 == 0 else None)


def _common_keys(ctx: int, n_embd: int, n_layer: int, n_ff: int, n_head: int, n_kv: Any) -> dict[str, Any]:
    return {
        "context_length": ctx, "embedding_length": n_embd, "block_count": n_layer, "feed_forward_length": n_ff,
        "attention.head_count": n_head, "attention.head_count_kv": n_kv,
        "attention.layer_norm_rms_epsilon": 1e-6, "rope.freq_base": 10000.0,
    }  # fmt: skip


def dense(name: str, arch: str, *, n_embd: int, n_layer: int, n_head: int, n_kv: int, n_ff: int, n_vocab: int,
          ctx: int, head: int | None = None, tied: bool = True, bias: bool = False, qk_norm: bool = False,
          contexts: tuple[int, ...] = (4096, 32768), family: str | None = None, n_expert: int = 0,
          n_expert_used: int = 0, extra: dict[str, Any] | None = None) -> Family:  # fmt: skip
    """llama, qwen2, qwen3 and other decoder-only transformers with one FFN per block (a
    mixture of experts in llama's own tensors when `n_expert`)."""
    head = head or n_embd // n_head
    t = _Tensors()
    _embeddings(t, n_embd, n_vocab, tied)
    for il in range(n_layer):
        p = f"blk.{il}."
        _attention(t, p, n_embd, n_head, n_kv, head, head, bias=bias, qk_norm=qk_norm)
        if n_expert:
            t.norm(p + "ffn_norm.weight", n_embd)
            _experts(t, p, n_embd, n_ff, n_expert)
        else:
            _ffn(t, p, n_embd, n_ff)
        if arch == "gemma3":
            t.norm(p + "post_attention_norm.weight", n_embd)
            t.norm(p + "post_ffw_norm.weight", n_embd)
    keys = _common_keys(ctx, n_embd, n_layer, n_ff, n_head, n_kv)
    keys |= {"attention.key_length": head, "attention.value_length": head, "rope.dimension_count": head}
    if n_expert:
        keys |= {"expert_count": n_expert, "expert_used_count": n_expert_used}
    return Family(name, family or arch, arch, keys | (extra or {}), tuple(t.out), n_vocab, contexts)


def qwen3moe(name: str, *, n_embd: int, n_layer: int, n_head: int, n_kv: int, head: int, n_expert: int,
             n_expert_used: int, n_ff_exp: int, n_vocab: int, ctx: int,
             contexts: tuple[int, ...] = (4096, 32768)) -> Family:  # fmt: skip
    t = _Tensors()
    _embeddings(t, n_embd, n_vocab, tied=False)
    for il in range(n_layer):
        p = f"blk.{il}."
        _attention(t, p, n_embd, n_head, n_kv, head, head, qk_norm=True)
        t.norm(p + "ffn_norm.weight", n_embd)
        _experts(t, p, n_embd, n_ff_exp, n_expert)
    keys = _common_keys(ctx, n_embd, n_layer, n_ff_exp * n_expert_used, n_head, n_kv)
    keys |= {"attention.key_length": head, "attention.value_length": head, "expert_count": n_expert,
             "expert_used_count": n_expert_used, "expert_feed_forward_length": n_ff_exp}  # fmt: skip
    return Family(name, "qwen3moe", "qwen3moe", keys, tuple(t.out), n_vocab, contexts)


def deepseek2(name: str, *, n_embd: int, n_layer: int, n_head: int, q_lora: int, kv_lora: int, rope: int,
              k_nope: int, v_head: int, n_expert: int, n_expert_used: int, n_shared: int, n_ff_exp: int,
              n_ff: int, n_dense: int, n_vocab: int, ctx: int,
              contexts: tuple[int, ...] = (4096, 32768)) -> Family:  # fmt: skip
    """DeepSeek-V2/V3 as converted today: MLA with the K and V up-projections split (wk_b,
    wv_b), so the cache keeps the compressed latent and the rope part only."""
    t = _Tensors()
    _embeddings(t, n_embd, n_vocab, tied=False)
    k_mla = k_nope + rope
    for il in range(n_layer):
        p = f"blk.{il}."
        t.norm(p + "attn_norm.weight", n_embd)
        if q_lora:
            t.norm(p + "attn_q_a_norm.weight", q_lora)
            t.add(p + "attn_q_a.weight", _mat(q_lora, n_embd))
            t.add(p + "attn_q_b.weight", _mat(n_head * k_mla, q_lora))
        else:
            t.add(p + "attn_q.weight", _mat(n_head * k_mla, n_embd))
        t.norm(p + "attn_kv_a_norm.weight", kv_lora)
        t.add(p + "attn_kv_a_mqa.weight", _mat(kv_lora + rope, n_embd))
        t.add(p + "attn_k_b.weight", (k_nope, kv_lora, n_head), Q.Q8_0 if k_nope % 32 == 0 else Q.F16)
        t.add(p + "attn_v_b.weight", (kv_lora, v_head, n_head), Q.Q8_0)
        t.add(p + "attn_output.weight", _mat(n_embd, n_head * v_head))
        t.norm(p + "ffn_norm.weight", n_embd)
        if il < n_dense:
            t.add(p + "ffn_gate.weight", _mat(n_ff, n_embd))
            t.add(p + "ffn_up.weight", _mat(n_ff, n_embd))
            t.add(p + "ffn_down.weight", _mat(n_embd, n_ff))
        else:
            _experts(t, p, n_embd, n_ff_exp, n_expert)
            t.add(p + "ffn_gate_shexp.weight", _mat(n_ff_exp * n_shared, n_embd))
            t.add(p + "ffn_up_shexp.weight", _mat(n_ff_exp * n_shared, n_embd))
            t.add(p + "ffn_down_shexp.weight", _mat(n_embd, n_ff_exp * n_shared))
    keys = _common_keys(ctx, n_embd, n_layer, n_ff, n_head, 1)
    keys |= {
        "attention.key_length": kv_lora + rope, "attention.value_length": kv_lora,
        "attention.key_length_mla": k_mla, "attention.value_length_mla": v_head,
        "attention.kv_lora_rank": kv_lora, "rope.dimension_count": rope,
        "leading_dense_block_count": n_dense, "expert_count": n_expert, "expert_used_count": n_expert_used,
        "expert_shared_count": n_shared, "expert_feed_forward_length": n_ff_exp, "expert_weights_scale": 1.0,
        "expert_gating_func": 1,
    }  # fmt: skip
    if q_lora:
        keys["attention.q_lora_rank"] = q_lora
    return Family(name, "deepseek2", "deepseek2", keys, tuple(t.out), n_vocab, contexts)


def granite_hybrid(name: str, *, n_embd: int, n_layer: int, attention_layers: tuple[int, ...], n_head: int,
                   n_kv: int, n_ff: int, d_state: int, n_group: int, n_ssm_head: int, d_conv: int, n_vocab: int,
                   ctx: int, contexts: tuple[int, ...] = (4096, 32768)) -> Family:  # fmt: skip
    """Granite 4.0 H: Mamba-2 layers, with attention in a few (a KV head count of 0 marks
    the recurrent ones)."""
    d_inner = 2 * n_embd
    head = n_embd // n_head
    t = _Tensors()
    _embeddings(t, n_embd, n_vocab, tied=True)
    for il in range(n_layer):
        p = f"blk.{il}."
        if il in attention_layers:
            _attention(t, p, n_embd, n_head, n_kv, head, head)
        else:
            t.norm(p + "attn_norm.weight", n_embd)
            t.add(p + "ssm_in.weight", _mat(2 * d_inner + 2 * n_group * d_state + n_ssm_head, n_embd))
            t.add(p + "ssm_conv1d.weight", (d_conv, d_inner + 2 * n_group * d_state), Q.F32)
            t.norm(p + "ssm_conv1d.bias", d_inner + 2 * n_group * d_state)
            t.norm(p + "ssm_dt.bias", n_ssm_head)
            t.add(p + "ssm_a", (1, n_ssm_head), Q.F32)
            t.add(p + "ssm_d", (1, n_ssm_head), Q.F32)
            t.add(p + "ssm_norm.weight", (d_inner // n_group, n_group), Q.F32)
            t.add(p + "ssm_out.weight", _mat(n_embd, d_inner))
        _ffn(t, p, n_embd, n_ff)
    kv = [n_kv if il in attention_layers else 0 for il in range(n_layer)]
    keys = _common_keys(ctx, n_embd, n_layer, n_ff, n_head, kv)
    keys |= {"ssm.conv_kernel": d_conv, "ssm.inner_size": d_inner, "ssm.state_size": d_state,
             "ssm.time_step_rank": n_ssm_head, "ssm.group_count": n_group, "rope.dimension_count": head}  # fmt: skip
    return Family(name, "granitehybrid", "granitehybrid", keys, tuple(t.out), n_vocab, contexts)


def qwen3next(name: str, *, n_embd: int, n_layer: int, n_head: int, n_kv: int, head: int, n_expert: int,
              n_expert_used: int, n_ff_exp: int, n_ff_shared: int, d_state: int, n_k_heads: int, n_v_heads: int,
              d_conv: int, n_vocab: int, ctx: int, interval: int = 4,
              contexts: tuple[int, ...] = (4096, 32768)) -> Family:  # fmt: skip
    """Qwen3-Next: gated delta net layers, with gated full attention in one layer of each
    `interval`, and a mixture of experts with a shared expert in every layer."""
    key_dim, value_dim = d_state * n_k_heads, d_state * n_v_heads
    t = _Tensors()
    _embeddings(t, n_embd, n_vocab, tied=False)
    for il in range(n_layer):
        p = f"blk.{il}."
        t.norm(p + "attn_norm.weight", n_embd)
        t.norm(p + "post_attention_norm.weight", n_embd)
        if (il + 1) % interval == 0:
            t.add(p + "attn_q.weight", _mat(2 * n_head * head, n_embd))
            t.add(p + "attn_k.weight", _mat(n_kv * head, n_embd))
            t.add(p + "attn_v.weight", _mat(n_kv * head, n_embd))
            t.add(p + "attn_output.weight", _mat(n_embd, n_head * head))
            t.norm(p + "attn_q_norm.weight", head)
            t.norm(p + "attn_k_norm.weight", head)
        else:
            t.add(p + "attn_qkv.weight", _mat(2 * key_dim + value_dim, n_embd))
            t.add(p + "attn_gate.weight", _mat(value_dim, n_embd))
            t.add(p + "ssm_conv1d.weight", (d_conv, 2 * key_dim + value_dim), Q.F32)
            t.norm(p + "ssm_dt.bias", n_v_heads)
            t.norm(p + "ssm_a", n_v_heads)
            t.add(p + "ssm_ba.weight", _mat(2 * n_v_heads, n_embd))
            t.norm(p + "ssm_norm.weight", d_state)
            t.add(p + "ssm_out.weight", _mat(n_embd, value_dim))
        _experts(t, p, n_embd, n_ff_exp, n_expert)
        t.norm(p + "ffn_gate_inp_shexp.weight", n_embd)
        t.add(p + "ffn_gate_shexp.weight", _mat(n_ff_shared, n_embd))
        t.add(p + "ffn_up_shexp.weight", _mat(n_ff_shared, n_embd))
        t.add(p + "ffn_down_shexp.weight", _mat(n_embd, n_ff_shared))
    keys = _common_keys(ctx, n_embd, n_layer, n_ff_exp, n_head, n_kv)
    keys |= {"attention.key_length": head, "attention.value_length": head, "rope.dimension_count": 64,
             "expert_count": n_expert, "expert_used_count": n_expert_used, "expert_feed_forward_length": n_ff_exp,
             "expert_shared_feed_forward_length": n_ff_shared, "ssm.conv_kernel": d_conv,
             "ssm.inner_size": value_dim, "ssm.state_size": d_state, "ssm.group_count": n_k_heads,
             "ssm.time_step_rank": n_v_heads, "full_attention_interval": interval}  # fmt: skip
    return Family(name, "qwen3next", "qwen3next", keys, tuple(t.out), n_vocab, contexts)


def gpt_oss(name: str, *, n_embd: int, n_layer: int, n_head: int, n_kv: int, head: int, n_expert: int,
            n_expert_used: int, n_ff_exp: int, window: int, n_vocab: int, ctx: int,
            contexts: tuple[int, ...] = (4096, 32768)) -> Family:  # fmt: skip
    """gpt-oss: sliding-window attention in every other layer, attention sinks, MXFP4 experts."""
    t = _Tensors()
    _embeddings(t, n_embd, n_vocab, tied=False)
    for il in range(n_layer):
        p = f"blk.{il}."
        _attention(t, p, n_embd, n_head, n_kv, head, head, bias=True)
        t.norm(p + "post_attention_norm.weight", n_embd)
        t.norm(p + "attn_sinks.weight", n_head)
        t.norm(p + "attn_output.bias", n_embd)
        t.add(p + "ffn_gate_inp.weight", (n_embd, n_expert), Q.F32)
        t.norm(p + "ffn_gate_inp.bias", n_expert)
        for part, shape in (("gate", (n_embd, n_ff_exp, n_expert)), ("up", (n_embd, n_ff_exp, n_expert)),
                            ("down", (n_ff_exp, n_embd, n_expert))):  # fmt: skip
            t.add(p + f"ffn_{part}_exps.weight", shape, Q.MXFP4)
            t.add(p + f"ffn_{part}_exps.bias", (shape[1], n_expert), Q.F32)
    keys = _common_keys(ctx, n_embd, n_layer, n_ff_exp, n_head, n_kv)
    keys |= {"attention.key_length": head, "attention.value_length": head, "rope.dimension_count": head,
             "expert_count": n_expert, "expert_used_count": n_expert_used, "expert_feed_forward_length": n_ff_exp,
             "attention.sliding_window": window}  # fmt: skip
    return Family(name, "gpt-oss", "gpt-oss", keys, tuple(t.out), n_vocab, contexts)


def mamba(name: str, *, n_embd: int, n_layer: int, d_state: int, d_conv: int, dt_rank: int, n_vocab: int,
          ctx: int, contexts: tuple[int, ...] = (4096, 32768)) -> Family:  # fmt: skip
    d_inner = 2 * n_embd
    t = _Tensors(matrix=Q.Q8_0)
    _embeddings(t, n_embd, n_vocab, tied=True)
    for il in range(n_layer):
        p = f"blk.{il}."
        t.norm(p + "attn_norm.weight", n_embd)
        t.add(p + "ssm_in.weight", _mat(2 * d_inner, n_embd))
        t.add(p + "ssm_conv1d.weight", (d_conv, d_inner), Q.F32)
        t.norm(p + "ssm_conv1d.bias", d_inner)
        t.add(p + "ssm_x.weight", _mat(dt_rank + 2 * d_state, d_inner))
        t.add(p + "ssm_dt.weight", _mat(d_inner, dt_rank))
        t.norm(p + "ssm_dt.bias", d_inner)
        t.add(p + "ssm_a", (d_state, d_inner), Q.F32)
        t.norm(p + "ssm_d", d_inner)
        t.add(p + "ssm_out.weight", _mat(n_embd, d_inner))
    keys = {
        "context_length": ctx, "embedding_length": n_embd, "block_count": n_layer, "feed_forward_length": 0,
        "attention.head_count": 0, "attention.layer_norm_rms_epsilon": 1e-5, "ssm.conv_kernel": d_conv,
        "ssm.inner_size": d_inner, "ssm.state_size": d_state, "ssm.time_step_rank": dt_rank,
    }  # fmt: skip
    return Family(name, "mamba", "mamba", keys, tuple(t.out), n_vocab, contexts)


def catalog() -> list[Family]:
    """The families bench/memory.py measures and tests/memory checks, shaped like the named models."""
    return [
        dense(
            "llama-3.2-1b",
            "llama",
            n_embd=2048,
            n_layer=16,
            n_head=32,
            n_kv=8,
            n_ff=8192,
            n_vocab=128256,
            ctx=131072,
            contexts=(4096, 32768, 131072),
        ),
        dense(
            "llama-3.1-8b",
            "llama",
            n_embd=4096,
            n_layer=32,
            n_head=32,
            n_kv=8,
            n_ff=14336,
            n_vocab=128256,
            ctx=131072,
            tied=False,
            contexts=(4096, 32768, 131072),
        ),
        dense(
            "mistral-7b",
            "llama",
            n_embd=4096,
            n_layer=32,
            n_head=32,
            n_kv=8,
            n_ff=14336,
            n_vocab=32768,
            ctx=32768,
            tied=False,
            contexts=(4096, 32768),
        ),
        dense(
            "mixtral-8x7b",
            "llama",
            n_embd=4096,
            n_layer=32,
            n_head=32,
            n_kv=8,
            n_ff=14336,
            n_vocab=32000,
            ctx=32768,
            tied=False,
            n_expert=8,
            n_expert_used=2,
            contexts=(4096, 32768),
        ),
        dense(
            "qwen2.5-0.5b",
            "qwen2",
            n_embd=896,
            n_layer=24,
            n_head=14,
            n_kv=2,
            n_ff=4864,
            n_vocab=151936,
            ctx=32768,
            bias=True,
        ),
        dense(
            "qwen3-4b",
            "qwen3",
            n_embd=2560,
            n_layer=36,
            n_head=32,
            n_kv=8,
            head=128,
            n_ff=9728,
            n_vocab=151936,
            ctx=40960,
            qk_norm=True,
        ),
        qwen3moe(
            "qwen3-30b-a3b",
            n_embd=2048,
            n_layer=48,
            n_head=32,
            n_kv=4,
            head=128,
            n_expert=128,
            n_expert_used=8,
            n_ff_exp=768,
            n_vocab=151936,
            ctx=40960,
        ),
        dense(
            "gemma-3-1b",
            "gemma3",
            n_embd=1152,
            n_layer=26,
            n_head=4,
            n_kv=1,
            head=256,
            n_ff=6912,
            n_vocab=262144,
            ctx=32768,
            qk_norm=True,
            extra={"attention.sliding_window": 512, "rope.freq_base_swa": 10000.0},
        ),
        dense(
            "gemma-3-4b",
            "gemma3",
            n_embd=2560,
            n_layer=34,
            n_head=8,
            n_kv=4,
            head=256,
            n_ff=10240,
            n_vocab=262144,
            ctx=131072,
            qk_norm=True,
            contexts=(4096, 32768, 131072),
            extra={"attention.sliding_window": 1024, "rope.freq_base_swa": 10000.0},
        ),
        deepseek2(
            "deepseek-v2-lite",
            n_embd=2048,
            n_layer=27,
            n_head=16,
            q_lora=0,
            kv_lora=512,
            rope=64,
            k_nope=128,
            v_head=128,
            n_expert=64,
            n_expert_used=6,
            n_shared=2,
            n_ff_exp=1408,
            n_ff=10944,
            n_dense=1,
            n_vocab=102400,
            ctx=163840,
            contexts=(4096, 32768, 131072),
        ),
        granite_hybrid(
            "granite-4.0-h-micro",
            n_embd=2048,
            n_layer=40,
            attention_layers=(9, 19, 29, 39),
            n_head=32,
            n_kv=8,
            n_ff=8192,
            d_state=128,
            n_group=1,
            n_ssm_head=64,
            d_conv=4,
            n_vocab=100352,
            ctx=131072,
            contexts=(4096, 32768, 131072),
        ),
        qwen3next(
            "qwen3-next-80b-a3b",
            n_embd=2048,
            n_layer=48,
            n_head=16,
            n_kv=2,
            head=256,
            n_expert=512,
            n_expert_used=10,
            n_ff_exp=512,
            n_ff_shared=512,
            d_state=128,
            n_k_heads=16,
            n_v_heads=32,
            d_conv=4,
            n_vocab=151936,
            ctx=262144,
            contexts=(4096, 32768, 131072),
        ),
        gpt_oss(
            "gpt-oss-20b",
            n_embd=2880,
            n_layer=24,
            n_head=64,
            n_kv=8,
            head=64,
            n_expert=32,
            n_expert_used=4,
            n_ff_exp=2880,
            window=128,
            n_vocab=201088,
            ctx=131072,
            contexts=(4096, 32768, 131072),
        ),
        mamba(
            "mamba-130m", n_embd=768, n_layer=24, d_state=16, d_conv=4, dt_rank=48, n_vocab=50280, ctx=1048576
        ),
    ]


def by_name(name: str) -> Family:
    return next(f for f in catalog() if f.name == name)


def vocab_keys(n_vocab: int) -> dict[str, Any]:
    """A SentencePiece vocabulary of `n_vocab` tokens (byte fallback, then filler pieces)."""
    tokens = ["<unk>", "<s>", "</s>", *(f"<0x{b:02X}>" for b in range(256))]
    types = [2, 3, 3, *([6] * 256)]
    tokens += [f"\u2581t{i}" for i in range(len(tokens), n_vocab)]
    types += [1] * (n_vocab - len(types))
    return {
        "tokenizer.ggml.model": "llama", "tokenizer.ggml.tokens": tokens, "tokenizer.ggml.token_type": types,
        "tokenizer.ggml.scores": [0.0] * n_vocab, "tokenizer.ggml.bos_token_id": 1, "tokenizer.ggml.eos_token_id": 2,
    }  # fmt: skip


def _add(w: gguf.GGUFWriter, key: str, value: Any) -> None:
    if isinstance(value, str):
        w.add_string(key, value)
    elif isinstance(value, bool):
        w.add_bool(key, value)
    elif isinstance(value, int):
        w.add_uint32(key, value)
    elif isinstance(value, float):
        w.add_float32(key, value)
    elif isinstance(value, list):
        if value and isinstance(value[0], float):
            w.add_array(key, [float(v) for v in value])
        else:
            w.add_array(key, value)
    else:
        raise TypeError(f"no GGUF value for {key}={value!r}")


def tensor_bytes(shape: tuple[int, ...], qtype: gguf.GGMLQuantizationType) -> int:
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    return int(np.prod(shape)) // block * size


def write(
    family: Family, path: Path, *, retype: Callable[[Tensor], gguf.GGMLQuantizationType] | None = None
) -> Path:
    """The family as a sparse GGUF file at `path`: its header, then a hole as its tensor data."""
    w = gguf.GGUFWriter(str(path), family.arch)
    w.add_string("general.name", family.name)
    w.add_uint32("general.file_type", 15)  # Q4_K_M: the mix most files of these models are published in
    for key, value in family.keys.items():
        _add(w, key if key.startswith(("general.", "tokenizer.")) else f"{family.arch}.{key}", value)
    for key, value in vocab_keys(family.n_vocab).items():
        _add(w, key, value)
    for name, shape, qtype in family.tensors:
        qtype = retype((name, shape, qtype)) if retype else qtype
        w.add_tensor_info(
            name, tuple(reversed(shape)), np.dtype(np.float32), tensor_bytes(shape, qtype), raw_dtype=qtype
        )
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    w.close()
    alignment = 32
    with open(path, "r+b") as f:
        end = f.seek(0, 2)
        data_offset = -(-end // alignment) * alignment
        size = sum(-(-tensor_bytes(s, retype((n, s, q)) if retype else q) // alignment) * alignment
                   for n, s, q in family.tensors)  # fmt: skip
        f.truncate(data_offset + size)
    return path


def write_dense(family: Family, path: Path, seed: int = 0) -> Path:
    """The family as an F16 file with random weights (F32 vectors), for llama.cpp's quantizer."""
    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(str(path), family.arch)
    w.add_string("general.name", family.name)
    w.add_uint32("general.file_type", 1)
    for key, value in family.keys.items():
        _add(w, key if key.startswith(("general.", "tokenizer.")) else f"{family.arch}.{key}", value)
    for key, value in vocab_keys(family.n_vocab).items():
        _add(w, key, value)
    for name, shape, qtype in family.tensors:
        dtype = np.float32 if qtype == Q.F32 else np.float16
        w.add_tensor(name, (rng.standard_normal(tuple(reversed(shape))) * 0.02).astype(dtype))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


ZOO_BASE = dense("zoo-llama", "llama", n_embd=512, n_layer=8, n_head=8, n_kv=4, n_ff=1536, n_vocab=32000,
                 ctx=8192, tied=False)  # fmt: skip


def files(directory: Path) -> Iterator[tuple[Family, Path]]:
    """Every family of the catalog, written into `directory` once (kept when already there)."""
    for family in catalog():
        path = directory / f"{family.name}.gguf"
        if not path.exists():
            write(family, path)
        yield family, path
