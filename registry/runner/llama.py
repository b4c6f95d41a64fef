"""The llama family (llama, mistral, SmolLM, ...): hyper-parameters and weights.

Also the shared readers the other architectures build on: they differ from llama only
in which optional tensors they have and a few switches in `Config`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from registry.runner import ops
from registry.runner.errors import BadMetadata, UnsupportedArchitecture
from registry.runner.model import Activation, Config, Layer, Transformer
from registry.runner.weights import ModelFile


@dataclass(frozen=True, slots=True)
class Dims:
    n_embd: int
    n_layer: int
    n_head: int
    n_head_kv: int
    head_dim_k: int
    head_dim_v: int
    n_ff: int
    n_vocab: int
    eps: float
    context_length: int


def read_dims(mf: ModelFile) -> Dims:
    a = mf.arch
    # Mixture-of-experts files (Mixtral says "llama") have expert FFNs this pass lacks.
    n_expert = mf.require_int(f"{a}.expert_count", 0)
    if n_expert:
        raise UnsupportedArchitecture(a, f"{n_expert} experts")
    n_embd = mf.require_int(f"{a}.embedding_length")
    n_layer = mf.require_int(f"{a}.block_count")
    n_head = mf.require_int(f"{a}.attention.head_count")
    n_head_kv = mf.require_int(f"{a}.attention.head_count_kv", n_head)
    if n_head == 0 or n_head_kv == 0 or n_head % n_head_kv:
        raise BadMetadata(f"{a}.attention.head_count_kv", f"{n_head_kv} kv heads for {n_head} heads")
    if n_layer == 0 or n_embd == 0:
        raise BadMetadata(f"{a}.block_count", "a model needs layers and an embedding width")
    head_dim_k = mf.require_int(f"{a}.attention.key_length", n_embd // n_head)
    head_dim_v = mf.require_int(f"{a}.attention.value_length", head_dim_k)
    eps_key = f"{a}.attention.layer_norm_rms_epsilon"
    mf.require(eps_key)
    eps = mf.get_float(eps_key, 0.0)
    if eps < 0:  # ggml refuses it too: sqrt(mean square + eps) is NaN for small rows
        raise BadMetadata(eps_key, f"{eps} is negative")
    embd = mf.tensor_info("token_embd.weight")
    n_vocab = embd.shape[1] if len(embd.shape) == 2 else 0
    return Dims(
        n_embd=n_embd,
        n_layer=n_layer,
        n_head=n_head,
        n_head_kv=n_head_kv,
        head_dim_k=head_dim_k,
        head_dim_v=head_dim_v,
        n_ff=mf.require_int(f"{a}.feed_forward_length"),
        n_vocab=n_vocab,
        eps=eps,
        context_length=mf.require_int(f"{a}.context_length"),
    )


def read_rope(
    mf: ModelFile, d: Dims, *, neox: bool, base_key: str = "rope.freq_base", default_base: float = 10000.0
) -> ops.Rope:
    a = mf.arch
    n_rot = mf.require_int(f"{a}.rope.dimension_count", d.head_dim_k)
    if n_rot > d.head_dim_k or n_rot % 2:
        raise BadMetadata(f"{a}.rope.dimension_count", f"{n_rot} for a head of {d.head_dim_k}")
    factors = mf.tensor("rope_freqs.weight", (n_rot // 2,)) if mf.has_tensor("rope_freqs.weight") else None
    return ops.Rope(
        n_rot=n_rot,
        base=mf.get_float(f"{a}.{base_key}", default_base, positive=True),
        neox=neox,
        freq_scale=read_rope_scale(mf),
        freq_factors=factors,
    )


# Rope scaling types whose effect this runner computes: "none" ignores the factor, "linear"
# divides every position by it.
IMPLEMENTED_ROPE_SCALING = ("none", "linear")


def read_rope_scale(mf: ModelFile) -> float:
    """The factor rope positions are multiplied by, read as llama.cpp reads it.

    The type defaults to "linear" and the factor to `rope.scaling.factor`, else the older
    `rope.scale_linear`, with 0 meaning none. Any other type (yarn, longrope, ...) and an
    attention factor other than 1 change every logit in llama.cpp, even on a short text:
    yarn is applied at every position, not only past the original context. This runner
    does not compute them, so such a file is UnsupportedArchitecture (skipped, not judged
    by a perplexity computed without them), unless they are no-ops: a factor of 0 or 1
    (yarn then mixes a frequency with itself) and an attention factor of 1.
    """
    a = mf.arch
    kind = mf.get_str(f"{a}.rope.scaling.type", "linear")
    factor_key = f"{a}.rope.scaling.factor"
    if mf.get(factor_key) is None and mf.get(f"{a}.rope.scale_linear") is not None:
        factor_key = f"{a}.rope.scale_linear"
    factor = mf.get_float(factor_key, 0.0)
    if factor < 0:
        raise BadMetadata(factor_key, f"{factor} is negative")
    attn_factor = mf.get_float(f"{a}.rope.scaling.attn_factor", 1.0)
    if attn_factor != 1.0:
        raise UnsupportedArchitecture(a, f"a rope scaling attention factor of {attn_factor:g}")
    scale = 1.0 if kind == "none" or factor == 0.0 else 1.0 / factor
    if scale != 1.0 and kind not in IMPLEMENTED_ROPE_SCALING:
        # The type is any string the file holds: name it only when it is short.
        name = repr(kind) if len(kind) <= 32 else "an unknown"
        raise UnsupportedArchitecture(a, f"{name} rope scaling (factor {factor:g})")
    return scale


def read_layer(
    mf: ModelFile, d: Dims, il: int, *, biases: bool = False, qk_norm: bool = False, post_norms: bool = False
) -> Layer:
    p = f"blk.{il}."
    e, nq, nk, nv = d.n_embd, d.n_head * d.head_dim_k, d.n_head_kv * d.head_dim_k, d.n_head_kv * d.head_dim_v

    def t(name: str, shape: tuple[int, ...]) -> np.ndarray:
        return mf.tensor(p + name, shape)

    def lin(*parts: tuple[str, tuple[int, int]]) -> ops.Linear:
        return ops.Linear([(mf.matrix(p + name, shape), mf.rounding(p + name)) for name, shape in parts])

    layer = Layer(
        attn_norm=t("attn_norm.weight", (e,)),
        wqkv=lin(("attn_q.weight", (nq, e)), ("attn_k.weight", (nk, e)), ("attn_v.weight", (nv, e))),
        wo=lin(("attn_output.weight", (e, d.n_head * d.head_dim_v))),
        ffn_norm=t("ffn_norm.weight", (e,)),
        w_gate_up=lin(("ffn_gate.weight", (d.n_ff, e)), ("ffn_up.weight", (d.n_ff, e))),
        w_down=lin(("ffn_down.weight", (e, d.n_ff))),
    )
    if biases:
        layer.bqkv = np.concatenate(
            [t("attn_q.bias", (nq,)), t("attn_k.bias", (nk,)), t("attn_v.bias", (nv,))]
        )
    if qk_norm:
        layer.q_norm = t("attn_q_norm.weight", (d.head_dim_k,))
        layer.k_norm = t("attn_k_norm.weight", (d.head_dim_k,))
    if post_norms:
        layer.post_attn_norm = t("post_attention_norm.weight", (e,))
        layer.post_ffn_norm = t("post_ffw_norm.weight", (e,))
    return layer


def build(
    mf: ModelFile,
    d: Dims,
    layers: list[Layer],
    *,
    rope: ops.Rope,
    activation: Activation = "silu",
    attn_scale: float | None = None,
    embed_scale: float | None = None,
    logit_softcap: float | None = None,
    rope_swa: ops.Rope | None = None,
    swa_window: int | None = None,
    swa_layers: tuple[bool, ...] = (),
) -> Transformer:
    """Assemble the model; `output.weight` missing means tied embeddings."""
    embd = mf.matrix("token_embd.weight", (d.n_vocab, d.n_embd))
    if mf.has_tensor("output.weight"):
        output = ops.Linear(
            [(mf.matrix("output.weight", (d.n_vocab, d.n_embd)), mf.rounding("output.weight"))]
        )
    else:
        output = ops.Linear([(embd, mf.rounding("token_embd.weight"))])
    config = Config(
        arch=mf.arch,
        n_vocab=d.n_vocab,
        n_embd=d.n_embd,
        n_layer=d.n_layer,
        n_head=d.n_head,
        n_head_kv=d.n_head_kv,
        head_dim_k=d.head_dim_k,
        head_dim_v=d.head_dim_v,
        eps=d.eps,
        attn_scale=attn_scale if attn_scale is not None else 1.0 / math.sqrt(d.head_dim_k),
        activation=activation,
        context_length=d.context_length,
        rope=rope,
        embed_scale=embed_scale,
        logit_softcap=logit_softcap,
        rope_swa=rope_swa,
        swa_window=swa_window,
        swa_layers=swa_layers,
    )
    return Transformer(config, embd, layers, mf.tensor("output_norm.weight", (d.n_embd,)), output)


def load(mf: ModelFile) -> Transformer:
    d = read_dims(mf)
    # llama.cpp's converter permutes llama q/k weights for the adjacent-pair (normal) rope.
    rope = read_rope(mf, d, neox=False)
    return build(mf, d, [read_layer(mf, d, il) for il in range(d.n_layer)], rope=rope)
