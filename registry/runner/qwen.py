"""Qwen2 (q/k/v biases) and Qwen3 (per-head q/k RMS norms): llama with NeoX rope."""

from __future__ import annotations

from registry.runner.llama import build, read_dims, read_layer, read_rope
from registry.runner.model import Transformer
from registry.runner.weights import ModelFile


def load_qwen2(mf: ModelFile) -> Transformer:
    d = read_dims(mf)
    layers = [read_layer(mf, d, il, biases=True) for il in range(d.n_layer)]
    return build(mf, d, layers, rope=read_rope(mf, d, neox=True))


def load_qwen3(mf: ModelFile) -> Transformer:
    d = read_dims(mf)
    layers = [read_layer(mf, d, il, qk_norm=True) for il in range(d.n_layer)]
    return build(mf, d, layers, rope=read_rope(mf, d, neox=True))
