"""`check_files` on small models whose metadata lies: a verdict with a reason, never an
exception escaping or a report that cannot be sent back from the child process."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from tests.runner.reference64 import Spec
from tests.runner.synthetic import make_weights, spm_vocab, write_gguf
from workers.verify_checks import CheckReport, check_files

N_VOCAB = 262


def _model(tmp_path: Path, extra: dict[str, object] | None = None, *, spec: Spec | None = None) -> Path:
    spec = spec or Spec("llama", n_vocab=N_VOCAB)
    make_weights(spec, np.random.default_rng(0), np.float32)
    return write_gguf(spec, tmp_path / "m.gguf", extra={**spm_vocab(N_VOCAB), **(extra or {})})


def _check(path: Path) -> CheckReport:
    report = check_files([path])
    json.dumps(report.to_dict())  # what the child process sends back
    return report


def test_the_synthetic_model_runs_to_a_perplexity(tmp_path: Path) -> None:
    # Random weights: the smoke text is unpredictable, but every stage ran.
    r = _check(_model(tmp_path))
    assert (r.status, r.reason) == ("failed", "perplexity_too_high"), r.message
    assert r.perplexity is not None and len(r.generated_tokens) == 8


def test_architecture_that_is_not_a_string_is_invalid_model(tmp_path: Path) -> None:
    r = _check(_model(tmp_path, {"general.architecture": ["llama"]}))
    assert (r.status, r.reason) == ("failed", "invalid_model"), r.message
    assert "general.architecture" in (r.message or "") and r.architecture is None


@pytest.mark.parametrize("rows", [200, N_VOCAB + 100], ids=["more-tokens", "fewer-tokens"])
def test_vocabulary_size_other_than_the_embedding_rows_is_invalid_model(rows: int, tmp_path: Path) -> None:
    # More tokens than rows: the text encodes to ids the forward pass has no row for;
    # fewer: generation may pick ids the tokenizer cannot decode. llama.cpp refuses both.
    r = _check(_model(tmp_path, spec=Spec("llama", n_vocab=rows)))
    assert (r.status, r.reason) == ("failed", "invalid_model"), r.message
    assert "token_embd.weight" in (r.message or "") and str(rows) in (r.message or "")


def test_overflowing_perplexity_is_perplexity_too_high(tmp_path: Path) -> None:
    spec = Spec("llama", n_vocab=N_VOCAB)
    make_weights(spec, np.random.default_rng(0), np.float32)
    spec.weights["output.weight"] *= 1e6
    path = write_gguf(spec, tmp_path / "m.gguf", extra=spm_vocab(N_VOCAB))
    r = _check(path)
    assert (r.status, r.reason) == ("failed", "perplexity_too_high"), r.message
    assert r.perplexity == math.inf


def test_vocabulary_that_encodes_the_text_to_nothing_is_invalid_model(tmp_path: Path) -> None:
    # Byte-level BPE without the byte alphabet: every character of the text is dropped.
    tokens = ["<|endoftext|>", *(f"[{i}]" for i in range(1, N_VOCAB))]
    vocab = {
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.pre": "gpt2",
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.token_type": [3, *([1] * (N_VOCAB - 1))],
        "tokenizer.ggml.merges": ["[ 1"],
        "tokenizer.ggml.bos_token_id": 0,
        "tokenizer.ggml.eos_token_id": 0,
    }
    r = _check(_model(tmp_path, vocab))
    assert (r.status, r.reason) == ("failed", "invalid_model"), r.message
    assert "smoke text" in (r.message or "")


def test_mixture_of_experts_llama_is_skipped_not_invalid(tmp_path: Path) -> None:
    # Mixtral's files say "llama" and hold expert tensors in place of the dense FFN.
    spec = Spec("llama", n_vocab=N_VOCAB)
    make_weights(spec, np.random.default_rng(0), np.float32)
    rng, n_expert = np.random.default_rng(1), 4
    for il in range(spec.n_layer):
        p = f"blk.{il}."
        gate, up, down = (spec.weights.pop(p + f"ffn_{n}.weight") for n in ("gate", "up", "down"))
        spec.weights[p + "ffn_gate_inp.weight"] = rng.standard_normal((n_expert, spec.n_embd)).astype(
            np.float32
        )
        spec.weights[p + "ffn_gate_exps.weight"] = np.stack([gate] * n_expert)
        spec.weights[p + "ffn_up_exps.weight"] = np.stack([up] * n_expert)
        spec.weights[p + "ffn_down_exps.weight"] = np.stack([down] * n_expert)
    moe = {"llama.expert_count": n_expert, "llama.expert_used_count": 2}
    r = _check(write_gguf(spec, tmp_path / "moe.gguf", extra={**spm_vocab(N_VOCAB), **moe}))
    assert (r.status, r.reason) == ("skipped", "unsupported_architecture"), r.message
    assert "expert" in (r.message or "")


def test_yarn_rope_scaling_is_skipped_not_judged(tmp_path: Path) -> None:
    # The runner has no YaRN: ignored, it scored the text with the wrong positions.
    yarn = {"llama.rope.scaling.type": "yarn", "llama.rope.scaling.factor": 4.0}
    r = _check(_model(tmp_path, yarn))
    assert (r.status, r.reason) == ("skipped", "unsupported_architecture"), r.message
    assert "yarn" in (r.message or "")
