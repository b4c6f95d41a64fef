"""The decoder-only transformer every supported architecture maps onto, and its KV cache.

Architectures differ in a handful of switches (biases, q/k norms, post-norms, activation,
rope style, sliding windows, embedding scale, logit soft-capping); `llama.py`,
`gemma3.py` and `qwen.py` read their hyper-parameters and tensors into the `Config` and
`Layer` records below, and this one forward pass runs them all.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import numpy as np

from registry.runner import ops
from registry.runner.errors import ContextOverflow, UnsupportedArchitecture
from registry.runner.weights import ModelFile

Activation = Literal["silu", "gelu_tanh"]


@dataclass(frozen=True, slots=True)
class Config:
    arch: str
    n_vocab: int
    n_embd: int
    n_layer: int
    n_head: int
    n_head_kv: int
    head_dim_k: int
    head_dim_v: int
    eps: float
    attn_scale: float
    activation: Activation
    context_length: int
    rope: ops.Rope
    embed_scale: float | None = None
    logit_softcap: float | None = None
    # Sliding-window layers: their own rope and the window size (gemma3).
    rope_swa: ops.Rope | None = None
    swa_window: int | None = None
    swa_layers: tuple[bool, ...] = ()

    def is_swa(self, il: int) -> bool:
        return bool(self.swa_layers) and self.swa_layers[il]


@dataclass(slots=True)
class Layer:
    attn_norm: np.ndarray
    # q, k and v projections stacked row-wise: one matmul instead of three per token.
    wqkv: ops.Linear
    wo: ops.Linear
    ffn_norm: np.ndarray
    # gate and up projections stacked row-wise, for the same reason.
    w_gate_up: ops.Linear
    w_down: ops.Linear
    bqkv: np.ndarray | None = None
    q_norm: np.ndarray | None = None
    k_norm: np.ndarray | None = None
    post_attn_norm: np.ndarray | None = None
    post_ffn_norm: np.ndarray | None = None


class KVCache:
    """Keys (after rope) and values of every layer for positions 0..n-1."""

    def __init__(self, config: Config, n_ctx: int) -> None:
        self.n_ctx = n_ctx
        self.n = 0
        self.k = [
            np.zeros((n_ctx, config.n_head_kv, config.head_dim_k), np.float32) for _ in range(config.n_layer)
        ]
        self.v = [
            np.zeros((n_ctx, config.n_head_kv, config.head_dim_v), np.float32) for _ in range(config.n_layer)
        ]


class Transformer:
    def __init__(
        self,
        config: Config,
        token_embd: ops.Weight,
        layers: list[Layer],
        output_norm: np.ndarray,
        output: ops.Linear,
        *,
        ggml_rounding: bool = True,
    ) -> None:
        self.config = config
        self.token_embd = token_embd
        self.layers = layers
        self.output_norm = output_norm
        self.output = output  # (n_vocab, n_embd); holds token_embd itself when tied
        # Round matmul inputs, K/V and attention operands as ggml's CPU backend does
        # (see ops.round_activations); off, the pass is plain float32 math.
        self.ggml_rounding = ggml_rounding
        # Weight matrices left quantized and dequantized on each use (load_model).
        self.kept_matrices = 0

    @property
    def n_vocab(self) -> int:
        return self.config.n_vocab

    def new_cache(self, n_ctx: int | None = None) -> KVCache:
        return KVCache(self.config, n_ctx or min(self.config.context_length, 2048))

    def forward(
        self, tokens: np.ndarray | list[int], cache: KVCache, *, all_logits: bool = False
    ) -> np.ndarray:
        """Run `tokens` after the cache's positions; logits (T or 1, n_vocab) float32.

        With `all_logits` False only the last position's logits are computed: the output
        projection is the largest matmul, and generation needs just that row.
        """
        c = self.config
        ids = np.asarray(tokens, dtype=np.int64).reshape(-1)
        if ids.size == 0:
            raise ValueError("no tokens to run")
        if ids.min() < 0 or ids.max() >= c.n_vocab:
            raise ValueError(f"token id out of range 0..{c.n_vocab - 1}")
        t, start = ids.size, cache.n
        if start + t > cache.n_ctx:
            raise ContextOverflow(start + t, cache.n_ctx)
        e = self.token_embd
        x = e[ids].astype(np.float32, copy=True) if isinstance(e, np.ndarray) else e.take(ids)
        if c.embed_scale is not None:
            x *= np.float32(c.embed_scale)
        pos = np.arange(start, start + t)
        tables = c.rope.tables(pos)
        local_tables = c.rope_swa.tables(pos) if c.rope_swa is not None else tables
        for il, layer in enumerate(self.layers):
            swa = c.is_swa(il)
            x = x + self._attention(il, layer, x, cache, pos, local_tables if swa else tables, swa)
            x = x + self._ffn(layer, x)
        cache.n = start + t
        h = ops.rms_norm(x if all_logits else x[-1:], self.output_norm, c.eps)
        logits = self.output(h, self.ggml_rounding)
        if c.logit_softcap is not None:
            cap = np.float32(c.logit_softcap)
            logits = cap * np.tanh(logits / cap)
        return logits

    def _attention(
        self,
        il: int,
        layer: Layer,
        x: np.ndarray,
        cache: KVCache,
        pos: np.ndarray,
        tables: tuple[np.ndarray, np.ndarray],
        swa: bool,
    ) -> np.ndarray:
        """The attention block's contribution to the residual stream; stores K and V."""
        c, r = self.config, self.ggml_rounding
        # ggml keeps K and V in float16 and multiplies them with float16-rounded operands.
        f16 = ops.to_f16 if r else ops.identity
        rope = c.rope_swa if swa and c.rope_swa is not None else c.rope
        t, start = x.shape[0], cache.n
        nq, nk = c.n_head * c.head_dim_k, c.n_head_kv * c.head_dim_k
        qkv = layer.wqkv(ops.rms_norm(x, layer.attn_norm, c.eps), r)
        if layer.bqkv is not None:
            qkv += layer.bqkv
        q = qkv[:, :nq].reshape(t, c.n_head, c.head_dim_k)
        k = qkv[:, nq : nq + nk].reshape(t, c.n_head_kv, c.head_dim_k)
        v = qkv[:, nq + nk :].reshape(t, c.n_head_kv, c.head_dim_v)
        if layer.q_norm is not None:
            q = ops.rms_norm(q, layer.q_norm, c.eps)
        if layer.k_norm is not None:
            k = ops.rms_norm(k, layer.k_norm, c.eps)
        cache.k[il][start : start + t] = f16(rope.apply(k, *tables))
        cache.v[il][start : start + t] = f16(v)
        a = ops.attention(
            f16(rope.apply(q, *tables)),
            cache.k[il][: start + t],
            cache.v[il][: start + t],
            pos,
            np.arange(start + t),
            c.attn_scale,
            c.swa_window if swa else None,
            round_probs=f16,
        )
        o = layer.wo(a, r)
        return ops.rms_norm(o, layer.post_attn_norm, c.eps) if layer.post_attn_norm is not None else o

    def _ffn(self, layer: Layer, x: np.ndarray) -> np.ndarray:
        """The gated feed-forward block's contribution to the residual stream."""
        c, r = self.config, self.ggml_rounding
        act = ops.silu if c.activation == "silu" else ops.gelu_tanh
        gu = layer.w_gate_up(ops.rms_norm(x, layer.ffn_norm, c.eps), r)
        n_ff = gu.shape[1] // 2
        f = layer.w_down(act(gu[:, :n_ff]) * gu[:, n_ff:], r)
        return ops.rms_norm(f, layer.post_ffn_norm, c.eps) if layer.post_ffn_norm is not None else f


Loader = Callable[[ModelFile], Transformer]


def _loaders() -> dict[str, Loader]:
    # Imported here: the architecture modules import this one for Config and Layer.
    from registry.runner import gemma3, llama, qwen

    return {
        "llama": llama.load,
        "gemma3": gemma3.load,
        "qwen2": qwen.load_qwen2,
        "qwen3": qwen.load_qwen3,
    }


def supported_architectures() -> tuple[str, ...]:
    return tuple(sorted(_loaders()))


def load_model(
    mf: ModelFile, *, ggml_rounding: bool = True, max_weight_bytes: int | None = None
) -> Transformer:
    """Build the forward pass for the file's architecture, every weight dequantized once.

    With `max_weight_bytes`, weight matrices are dequantized (in the order they are
    loaded: layer by layer, then embeddings and output) while their float32 bytes stay
    within it, and the rest are kept
    quantized (weights.KeptMatrix): the same values, in about the file's size plus the
    budget, but every forward pass dequantizes those again. `Transformer.kept_matrices`
    counts them.
    """
    arch = mf.arch
    loader = _loaders().get(arch)
    if loader is None:
        raise UnsupportedArchitecture(arch)
    if max_weight_bytes is not None and max_weight_bytes < 0:
        raise ValueError(f"max_weight_bytes must be 0 or more, got {max_weight_bytes}")
    mf.float32_budget, mf.kept_matrices = max_weight_bytes, 0
    try:
        model = loader(mf)
    finally:
        kept, mf.float32_budget = mf.kept_matrices, None
    model.ggml_rounding = ggml_rounding
    model.kept_matrices = kept
    return model
