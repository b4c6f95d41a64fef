"""A deliberately plain float64 reference of the supported architectures, for tests.

Written from the model descriptions, not from registry.runner: one position at a time,
explicit loops over heads and keys, rope as complex rotation, no KV cache. It takes the
hyper-parameters and weights the test generated, before they went into a GGUF file.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np


@dataclass
class Spec:
    arch: str  # "llama", "gemma3", "qwen2", "qwen3"
    n_vocab: int = 96
    n_embd: int = 32
    n_layer: int = 2
    n_head: int = 4
    n_head_kv: int = 2
    head_dim: int = 8
    n_ff: int = 48
    eps: float = 1e-5
    rope_base: float = 10000.0
    rope_base_swa: float = 10000.0
    rope_scale: float = 1.0  # positions multiplied by it (linear scaling); not on gemma3's local layers
    n_rot: int | None = None  # None: the whole head
    window: int = 3  # gemma3 sliding window
    tied: bool = False
    softcap: float | None = None
    weights: dict[str, np.ndarray] = field(default_factory=dict)


def _rms(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    return x / math.sqrt(float(np.mean(x * x)) + eps) * w


def _rotate(v: np.ndarray, pos: float, base: float, n_rot: int, neox: bool) -> np.ndarray:
    out = v.copy()
    half = n_rot // 2
    for i in range(half):
        angle = pos * base ** (-2.0 * i / n_rot)
        a, b = (i, i + half) if neox else (2 * i, 2 * i + 1)
        z = complex(v[a], v[b]) * complex(math.cos(angle), math.sin(angle))
        out[a], out[b] = z.real, z.imag
    return out


def _gelu(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


def _silu(x: np.ndarray) -> np.ndarray:
    return x / (1.0 + np.exp(-x))


def logits(s: Spec, tokens: list[int]) -> np.ndarray:
    w = {k: v.astype(np.float64) for k, v in s.weights.items()}
    gemma = s.arch == "gemma3"
    neox = s.arch != "llama"
    n_rot = s.n_rot or s.head_dim
    group = s.n_head // s.n_head_kv
    xs = [w["token_embd.weight"][t] * (math.sqrt(s.n_embd) if gemma else 1.0) for t in tokens]
    for il in range(s.n_layer):
        p = f"blk.{il}."
        local = gemma and il % 6 != 5
        base = s.rope_base_swa if local else s.rope_base
        scale = 1.0 if local else s.rope_scale
        qs, ks, vs = [], [], []
        for pos, x in enumerate(xs):
            h = _rms(x, w[p + "attn_norm.weight"], s.eps)
            q = w[p + "attn_q.weight"] @ h
            k = w[p + "attn_k.weight"] @ h
            v = w[p + "attn_v.weight"] @ h
            if s.arch == "qwen2":
                q, k, v = q + w[p + "attn_q.bias"], k + w[p + "attn_k.bias"], v + w[p + "attn_v.bias"]
            q = q.reshape(s.n_head, s.head_dim)
            k = k.reshape(s.n_head_kv, s.head_dim)
            if gemma or s.arch == "qwen3":
                q = np.stack([_rms(qh, w[p + "attn_q_norm.weight"], s.eps) for qh in q])
                k = np.stack([_rms(kh, w[p + "attn_k_norm.weight"], s.eps) for kh in k])
            qs.append(np.stack([_rotate(qh, pos * scale, base, n_rot, neox) for qh in q]))
            ks.append(np.stack([_rotate(kh, pos * scale, base, n_rot, neox) for kh in k]))
            vs.append(v.reshape(s.n_head_kv, s.head_dim))
        new_xs = []
        for pos, x in enumerate(xs):
            heads = []
            for hd in range(s.n_head):
                kv = hd // group
                visible = [j for j in range(pos + 1) if not (local and pos - j >= s.window)]
                scores = np.array([qs[pos][hd] @ ks[j][kv] / math.sqrt(s.head_dim) for j in visible])
                probs = np.exp(scores - scores.max())
                probs /= probs.sum()
                heads.append(sum(pr * vs[j][kv] for pr, j in zip(probs, visible, strict=True)))
            o = w[p + "attn_output.weight"] @ np.concatenate(heads)
            if gemma:
                o = _rms(o, w[p + "post_attention_norm.weight"], s.eps)
            x = x + o
            h = _rms(x, w[p + "ffn_norm.weight"], s.eps)
            act = _gelu if gemma else _silu
            f = w[p + "ffn_down.weight"] @ (act(w[p + "ffn_gate.weight"] @ h) * (w[p + "ffn_up.weight"] @ h))
            if gemma:
                f = _rms(f, w[p + "post_ffw_norm.weight"], s.eps)
            new_xs.append(x + f)
        xs = new_xs
    out_w = w["token_embd.weight"] if s.tied else w["output.weight"]
    rows = [out_w @ _rms(x, w["output_norm.weight"], s.eps) for x in xs]
    result = np.stack(rows)
    if s.softcap:
        result = s.softcap * np.tanh(result / s.softcap)
    return result
