"""Gemma 3: llama's shape with gemma's details.

Differences from llama: input embeddings scaled by sqrt(n_embd); GELU(tanh)-gated FFN;
RMS norms on q and k per head; extra norms after attention and after the FFN; NeoX rope;
five of every six layers attend within a sliding window with their own rope base; an
optional soft cap on the final logits. Norm weights are used as stored: llama.cpp's
converter already folded gemma's `1 + weight` into them.
"""

from __future__ import annotations

import math

from registry.runner import ops
from registry.runner.errors import BadMetadata
from registry.runner.llama import build, read_dims, read_layer, read_rope
from registry.runner.model import Transformer
from registry.runner.weights import ModelFile

# Every SWA_PERIOD-th layer (the last of each group) attends globally.
SWA_PERIOD = 6
# The local layers' rope base when the file does not name one (gemma3's default).
LOCAL_ROPE_BASE = 10000.0


def load(mf: ModelFile) -> Transformer:
    a = mf.arch
    d = read_dims(mf)
    window = mf.require_int(f"{a}.attention.sliding_window")
    if window == 0:  # a query would see no key at all, not even itself
        raise BadMetadata(f"{a}.attention.sliding_window", "a window of 0 positions")
    layers = [read_layer(mf, d, il, qk_norm=True, post_norms=True) for il in range(d.n_layer)]
    rope = read_rope(mf, d, neox=True)
    local = ops.Rope(
        n_rot=rope.n_rot,
        base=mf.get_float(f"{a}.rope.freq_base_swa", LOCAL_ROPE_BASE, positive=True),
        neox=True,
    )
    # Gemma 3 27B scales queries by its hidden size per head, the others by head size.
    per_head = d.n_embd / d.n_head if d.n_layer == 62 else d.head_dim_k
    softcap = mf.get_float(f"{a}.final_logit_softcapping", 0.0)  # 0: no soft cap
    return build(
        mf,
        d,
        layers,
        rope=rope,
        activation="gelu_tanh",
        attn_scale=1.0 / math.sqrt(per_head),
        embed_scale=math.sqrt(d.n_embd),
        logit_softcap=softcap or None,
        rope_swa=local,
        swa_window=window,
        swa_layers=tuple(il % SWA_PERIOD < SWA_PERIOD - 1 for il in range(d.n_layer)),
    )
