"""Numpy building blocks of the forward passes, all float32 on (tokens, features) arrays."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

_GELU_C = math.sqrt(2.0 / math.pi)


def rms_norm(x: np.ndarray, weight: np.ndarray | None, eps: float) -> np.ndarray:
    """RMSNorm over the last axis; the weight is used as stored in the GGUF file."""
    ms = np.mean(np.square(x), axis=-1, keepdims=True, dtype=np.float32)
    y = x / np.sqrt(ms + np.float32(eps))
    return y * weight if weight is not None else y


def identity(x: np.ndarray) -> np.ndarray:
    return x


def to_f16(x: np.ndarray) -> np.ndarray:
    """x rounded to float16 precision (nearest even), kept as float32.

    Done on the bits: ten times faster than a round trip through numpy's float16. It
    keeps full relative precision below float16's normal range (6e-5), where real
    float16 loses digits; those values are attention weights too small to matter.
    """
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    u = (u + (np.uint32(0xFFF) + ((u >> np.uint32(13)) & np.uint32(1)))) & np.uint32(0xFFFFE000)
    return u.view(np.float32)


def silu(x: np.ndarray) -> np.ndarray:
    return x / (np.float32(1.0) + np.exp(-x))


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    # The tanh approximation is what gemma was trained with and what ggml_gelu computes.
    return (
        np.float32(0.5)
        * x
        * (np.float32(1.0) + np.tanh(np.float32(_GELU_C) * (x + np.float32(0.044715) * x**3)))
    )


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    m = np.max(x, axis=axis, keepdims=True)
    e = np.exp(x - m)
    return e / np.sum(e, axis=axis, keepdims=True)


def token_nll(logits: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """-log softmax(logits)[row, target] per row, as float64.

    Never materialises the log-softmax matrix: with a 256k vocabulary that would be
    hundreds of MiB per chunk. Sums run in float64 for the same reason perplexity
    tools do: thousands of small terms.
    """
    m = np.max(logits, axis=-1)
    lse = m.astype(np.float64) + np.log(np.sum(np.exp(logits - m[:, None]), axis=-1, dtype=np.float64))
    return lse - logits[np.arange(logits.shape[0]), targets].astype(np.float64)


@dataclass(frozen=True, slots=True)
class Rope:
    """Rotary position embedding of the first `n_rot` features of each head.

    `neox` rotates the pairs (i, i + n_rot/2) (GPT-NeoX, gemma, qwen); otherwise the
    adjacent pairs (2i, 2i+1) (llama: its converter permutes q/k weights to suit).
    """

    n_rot: int
    base: float
    neox: bool
    freq_scale: float = 1.0
    freq_factors: np.ndarray | None = None  # llama3-style per-frequency divisors

    def inv_freq(self) -> np.ndarray:
        i = np.arange(self.n_rot // 2, dtype=np.float64)
        f = self.freq_scale * self.base ** (-2.0 * i / self.n_rot)
        if self.freq_factors is not None:
            f = f / self.freq_factors.astype(np.float64)
        return f

    def tables(self, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """cos and sin of shape (tokens, 1, n_rot/2), to broadcast over heads."""
        theta = positions.astype(np.float64)[:, None] * self.inv_freq()[None, :]
        return np.cos(theta).astype(np.float32)[:, None, :], np.sin(theta).astype(np.float32)[:, None, :]

    def apply(self, x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
        """Rotate x of shape (tokens, heads, head_dim); returns a new array."""
        out = x.copy()
        half = self.n_rot // 2
        if self.neox:
            a, b = x[..., :half], x[..., half : self.n_rot]
            out[..., :half] = a * cos - b * sin
            out[..., half : self.n_rot] = a * sin + b * cos
        else:
            a, b = x[..., 0 : self.n_rot : 2], x[..., 1 : self.n_rot : 2]
            out[..., 0 : self.n_rot : 2] = a * cos - b * sin
            out[..., 1 : self.n_rot : 2] = a * sin + b * cos
        return out


def attention(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    q_pos: np.ndarray,
    k_pos: np.ndarray,
    scale: float,
    window: int | None = None,
    round_probs: Callable[[np.ndarray], np.ndarray] | None = None,
) -> np.ndarray:
    """Causal grouped-query attention.

    q: (T, n_head, d_k), k: (S, n_kv, d_k), v: (S, n_kv, d_v) -> (T, n_head * d_v).
    Query head h reads kv head h // (n_head / n_kv). `window`: a query at position p
    sees keys at positions > p - window only (sliding-window layers).
    """
    t, n_head, d_k = q.shape
    _, n_kv, d_v = v.shape
    g = n_head // n_kv
    # Fold the heads sharing one kv head into the row axis: one batched matmul per kv head.
    qg = q.reshape(t, n_kv, g, d_k).transpose(1, 2, 0, 3).reshape(n_kv, g * t, d_k)
    # Contiguous operands: numpy's batched matmul only hands aligned, contiguous stacks to BLAS.
    kt = np.ascontiguousarray(k.transpose(1, 2, 0))
    scores = np.matmul(qg, kt) * np.float32(scale)
    qp = np.tile(q_pos, g)
    masked = k_pos[None, :] > qp[:, None]
    if window is not None:
        masked |= (qp[:, None] - k_pos[None, :]) >= window
    if masked.any():
        scores[:, masked] = -np.inf
    probs = softmax(scores, axis=-1)
    if round_probs is not None:
        probs = round_probs(probs)
    out = np.matmul(probs, np.ascontiguousarray(v.transpose(1, 0, 2)))  # (n_kv, g*T, d_v)
    return out.reshape(n_kv, g, t, d_v).transpose(2, 0, 1, 3).reshape(t, n_head * d_v)


# How ggml's CPU backend rounds the activations entering a matmul, per weight type: it
# converts them to the weight's "vec_dot" type before the dot products. Replaying that
# rounding makes our logits track llama.cpp's closely enough for greedy tokens to agree.
Rounding = str | None  # None (exact float32), "f16", "bf16", "q8_0", "q8_1" or "q8_k"

_ROUNDING_BY_TYPE: dict[str, Rounding] = {
    "F32": None,
    "F16": "f16",
    "BF16": "bf16",
    **dict.fromkeys(("Q4_0", "Q5_0", "Q8_0", "IQ4_NL", "MXFP4"), "q8_0"),
    **dict.fromkeys(("Q4_1", "Q5_1", "Q8_1"), "q8_1"),
    **dict.fromkeys(
        (
            "Q2_K",
            "Q3_K",
            "Q4_K",
            "Q5_K",
            "Q6_K",
            "Q8_K",
            "IQ2_XXS",
            "IQ2_XS",
            "IQ2_S",
            "IQ3_XXS",
            "IQ3_S",
            "IQ1_S",
            "IQ1_M",
            "IQ4_XS",
            "TQ1_0",
            "TQ2_0",
        ),
        "q8_k",
    ),
}


def rounding_for(type_name: str) -> Rounding:
    return _ROUNDING_BY_TYPE.get(type_name)


def round_activations(x: np.ndarray, kind: Rounding) -> np.ndarray:
    """x (rows, n) rounded the way ggml quantizes a matmul's float input for `kind`."""
    if kind is None:
        return x
    if kind == "f16":
        return x.astype(np.float16).astype(np.float32)
    if kind == "bf16":
        # Round to nearest even on the upper 16 bits, as ggml's fp32 -> bf16 does.
        u = x.astype(np.float32).view(np.uint32)
        u = (u + (np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1)))) & np.uint32(0xFFFF0000)
        return u.view(np.float32)
    block = 256 if kind == "q8_k" else 32
    rows, n = x.shape
    if n % block:
        return x
    xb = x.reshape(rows, n // block, block)
    if kind == "q8_k":
        # Scale by the signed value of largest magnitude, q = round(-127/max * x) <= 127.
        idx = np.argmax(np.abs(xb), axis=-1)[..., None]
        mx = np.take_along_axis(xb, idx, axis=-1)
        with np.errstate(divide="ignore", invalid="ignore"):
            iscale = np.where(mx != 0, np.float32(-127.0) / mx, np.float32(0.0)).astype(np.float32)
            d = np.where(mx != 0, np.float32(1.0) / iscale, np.float32(0.0)).astype(np.float32)
        q = np.minimum(np.rint(xb * iscale), np.float32(127.0))
        return (q * d).reshape(rows, n)
    amax = np.max(np.abs(xb), axis=-1, keepdims=True)
    d = amax / np.float32(127.0)
    with np.errstate(divide="ignore"):
        inv = np.where(amax > 0, np.float32(127.0) / amax, np.float32(0.0)).astype(np.float32)
    q = np.rint(xb * inv)
    # The block scale is stored as float16.
    return (q * d.astype(np.float16).astype(np.float32)).reshape(rows, n)


class QuantMatrix(Protocol):
    """A weight matrix kept in its file's quantized bytes (weights.KeptMatrix): used a piece
    of rows at a time, never held whole as float32."""

    shape: tuple[int, int]

    def matmul_t(self, x: np.ndarray) -> np.ndarray:
        """x @ W.T, float32 (rows of x, rows of W)."""
        ...

    def take(self, rows: np.ndarray) -> np.ndarray:
        """W[rows], float32."""
        ...


Weight = np.ndarray | QuantMatrix


class Linear:
    """y = x @ W.T for W stacked from row blocks, each with its own input rounding.

    Blocks with the same rounding are fused into one matrix: one BLAS call per group.
    Blocks kept quantized (QuantMatrix) are not fused: each is multiplied a piece at a
    time, so the layer never holds its float32 weights whole.
    """

    def __init__(self, parts: list[tuple[Weight, Rounding]]) -> None:
        groups: list[tuple[list[Weight], Rounding]] = []
        for w, kind in parts:
            fusable = isinstance(w, np.ndarray)
            if fusable and groups and groups[-1][1] == kind and isinstance(groups[-1][0][-1], np.ndarray):
                groups[-1][0].append(w)
            else:
                groups.append(([w], kind))
        self.groups: list[tuple[Weight, Rounding]] = [
            (ws[0] if len(ws) == 1 else np.concatenate(ws), kind) for ws, kind in groups  # type: ignore[arg-type]
        ]
        self.out_features = sum(w.shape[0] for w, _ in self.groups)

    def __call__(self, x: np.ndarray, ggml_rounding: bool) -> np.ndarray:
        rounded: dict[Rounding, np.ndarray] = {}
        outs = []
        for w, kind in self.groups:
            if kind not in rounded:
                rounded[kind] = round_activations(x, kind) if ggml_rounding else x
            xr = rounded[kind]
            outs.append(xr @ w.T if isinstance(w, np.ndarray) else w.matmul_t(xr))
        return outs[0] if len(outs) == 1 else np.concatenate(outs, axis=-1)
