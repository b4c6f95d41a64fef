"""Tiny random models of each supported architecture, written as real GGUF files."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import gguf
import numpy as np

from tests.runner.reference64 import Spec


def make_weights(s: Spec, rng: np.random.Generator, dtype: type[np.floating]) -> None:
    """Random weights in numpy order (rows = output features), rounded to `dtype`."""
    e, hd = s.n_embd, s.head_dim

    def mat(*shape: int, scale: float = 0.3) -> np.ndarray:
        return (rng.standard_normal(shape) * scale).astype(dtype)

    def norm(n: int) -> np.ndarray:
        # Norm weights stay float32 in real files; around 1 like trained ones.
        return (1.0 + 0.2 * rng.standard_normal(n)).astype(np.float32)

    w = s.weights
    w["token_embd.weight"] = mat(s.n_vocab, e, scale=1.0)
    w["output_norm.weight"] = norm(e)
    if not s.tied:
        w["output.weight"] = mat(s.n_vocab, e)
    for il in range(s.n_layer):
        p = f"blk.{il}."
        w[p + "attn_norm.weight"] = norm(e)
        w[p + "attn_q.weight"] = mat(s.n_head * hd, e)
        w[p + "attn_k.weight"] = mat(s.n_head_kv * hd, e)
        w[p + "attn_v.weight"] = mat(s.n_head_kv * hd, e)
        w[p + "attn_output.weight"] = mat(e, s.n_head * hd)
        w[p + "ffn_norm.weight"] = norm(e)
        w[p + "ffn_gate.weight"] = mat(s.n_ff, e)
        w[p + "ffn_up.weight"] = mat(s.n_ff, e)
        w[p + "ffn_down.weight"] = mat(e, s.n_ff)
        if s.arch == "qwen2":
            for n, rows in (("q", s.n_head * hd), ("k", s.n_head_kv * hd), ("v", s.n_head_kv * hd)):
                w[p + f"attn_{n}.bias"] = (0.1 * rng.standard_normal(rows)).astype(np.float32)
        if s.arch in ("gemma3", "qwen3"):
            w[p + "attn_q_norm.weight"] = norm(hd)
            w[p + "attn_k_norm.weight"] = norm(hd)
        if s.arch == "gemma3":
            w[p + "post_attention_norm.weight"] = norm(e)
            w[p + "post_ffw_norm.weight"] = norm(e)


def spm_vocab(n_vocab: int) -> dict[str, object]:
    """Keys of a SentencePiece vocabulary of `n_vocab` (>= 262) tokens that encodes any
    text through its byte-fallback tokens; token 1 is BOS and token 2 EOS."""
    tokens = ["<unk>", "<s>", "</s>", *(f"<0x{b:02X}>" for b in range(256)), "\u2581", "\u2581t", "he"]
    types = [2, 3, 3, *([6] * 256), 1, 1, 1]
    tokens += [f"[{i}]" for i in range(len(tokens), n_vocab)]
    types += [1] * (n_vocab - len(types))
    return {
        "tokenizer.ggml.model": "llama",
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.token_type": types,
        "tokenizer.ggml.scores": [0.0] * n_vocab,
        "tokenizer.ggml.bos_token_id": 1,
        "tokenizer.ggml.eos_token_id": 2,
    }


def add_value(wr: gguf.GGUFWriter, key: str, value: object) -> None:
    """One metadata key, typed from its Python value (non-negative ints as uint32)."""
    if isinstance(value, str):
        wr.add_string(key, value)
    elif isinstance(value, bool):
        wr.add_bool(key, value)
    elif isinstance(value, int) and value >= 0:
        wr.add_uint32(key, value)
    elif isinstance(value, int):
        wr.add_int32(key, value)
    elif isinstance(value, float):
        wr.add_float32(key, value)
    elif isinstance(value, list):
        wr.add_array(key, value)
    else:
        raise TypeError(f"no GGUF value for {value!r}")


def write_gguf(
    s: Spec,
    path: Path,
    *,
    skip_keys: tuple[str, ...] = (),
    extra: Mapping[str, object] | None = None,
    big_endian: bool = False,
) -> Path:
    """`s` as a GGUF file; `extra` keys are written last, replacing any of the same name."""
    a = s.arch
    wr = gguf.GGUFWriter(str(path), a, endianess=gguf.GGUFEndian.BIG if big_endian else gguf.GGUFEndian.LITTLE)
    kv: dict[str, int | float] = {
        f"{a}.context_length": 128,
        f"{a}.embedding_length": s.n_embd,
        f"{a}.block_count": s.n_layer,
        f"{a}.feed_forward_length": s.n_ff,
        f"{a}.attention.head_count": s.n_head,
        f"{a}.attention.head_count_kv": s.n_head_kv,
        f"{a}.attention.key_length": s.head_dim,
        f"{a}.attention.value_length": s.head_dim,
        f"{a}.attention.layer_norm_rms_epsilon": s.eps,
        f"{a}.rope.freq_base": s.rope_base,
    }
    if s.n_rot is not None:
        kv[f"{a}.rope.dimension_count"] = s.n_rot
    if a == "gemma3":
        kv[f"{a}.attention.sliding_window"] = s.window
        kv[f"{a}.rope.freq_base_swa"] = s.rope_base_swa
        if s.softcap:
            kv[f"{a}.final_logit_softcapping"] = s.softcap
    for key, value in {**kv, **(extra or {})}.items():
        if key not in skip_keys:
            add_value(wr, key, value)
    for name, arr in s.weights.items():
        wr.add_tensor(name, arr)
    wr.write_header_to_file()
    wr.write_kv_data_to_file()
    wr.write_tensors_to_file()
    wr.close()
    return path
