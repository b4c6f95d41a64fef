"""Smoke inference: does a model file produce sane text predictions on the CPU?

`perplexity` scores a text the way the done-when figures were made with llama.cpp:
tokenize with the vocabulary's own BOS setting, run the whole text in one context, and
average the negative log-likelihood of every token after the first. `greedy_generate`
continues a prompt with the most likely token at each step. Both raise
`NonFiniteLogits` when the model produces NaN or infinity.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from registry.runner.errors import BadMetadata, BadTensor, NonFiniteLogits
from registry.runner.model import Transformer
from registry.runner.ops import token_nll
from registry.runner.tokenizer import Tokenizer

# A plain English paragraph every model of any size should find predictable.
SMOKE_TEXT = (
    "The library opens at nine in the morning and closes at six in the evening. "
    "Visitors may borrow up to five books at a time for a period of three weeks. "
    "Children under twelve must be accompanied by an adult. "
    "Please return all books to the front desk before the due date. "
    "If a book is returned late, a small fee is charged for each day it is overdue. "
    "The reading room on the second floor is reserved for quiet study, and mobile phones "
    "should be switched off there. Computers are available near the entrance, and staff "
    "are always happy to help visitors find what they are looking for."
)
SMOKE_PROMPT = "The capital of France is"
SMOKE_N_GENERATE = 8

# Logits of a chunk of positions are (chunk, n_vocab) float32: 64 rows of a 256k
# vocabulary are 64 MiB, which bounds memory for long texts.
_CHUNK = 64
_MAX_LOG_FLOAT = math.log(sys.float_info.max)


def _check_finite(logits: np.ndarray, first_position: int) -> None:
    bad = ~np.isfinite(logits)
    if bad.any():
        rows = np.flatnonzero(bad.any(axis=-1))
        raise NonFiniteLogits(first_position + int(rows[0]), int(bad.sum()))


def mean_nll(model: Transformer, tokens: Sequence[int], *, chunk: int = _CHUNK) -> float:
    """Mean negative log-likelihood (nats) of tokens[1:] each given all tokens before it."""
    ids = np.asarray(tokens, dtype=np.int64)
    if ids.size < 2:
        raise ValueError("perplexity needs at least two tokens")
    cache = model.new_cache(int(ids.size))
    total = 0.0
    for start in range(0, ids.size - 1, chunk):
        part = ids[start : min(start + chunk, ids.size - 1)]
        logits = model.forward(part, cache, all_logits=True)
        _check_finite(logits, start)
        targets = ids[start + 1 : start + 1 + part.size]
        total += float(token_nll(logits, targets).sum())
    return total / (ids.size - 1)


def perplexity(model: Transformer, tokens: Sequence[int]) -> float:
    nll = mean_nll(model, tokens)
    # Finite logits can still be far enough apart for exp() to overflow (above 709 nats).
    return math.exp(nll) if nll < _MAX_LOG_FLOAT else math.inf


def greedy_generate(
    model: Transformer, prompt_tokens: Sequence[int], n: int, *, stop: Sequence[int] = ()
) -> list[int]:
    """The next `n` most likely tokens after the prompt (fewer if a `stop` token comes)."""
    if not prompt_tokens:
        raise ValueError("greedy generation needs a non-empty prompt")
    cache = model.new_cache(len(prompt_tokens) + n)
    logits = model.forward(list(prompt_tokens), cache)
    out: list[int] = []
    for i in range(n):
        _check_finite(logits, len(prompt_tokens) + i - 1)
        tok = int(np.argmax(logits[-1]))
        out.append(tok)
        if tok in stop or i == n - 1:
            break
        logits = model.forward([tok], cache)
    return out


@dataclass(frozen=True, slots=True)
class SmokeResult:
    perplexity: float
    n_text_tokens: int
    prompt: str
    generated_tokens: list[int]
    generated_text: str
    perplexity_seconds: float
    generate_seconds: float


def run_smoke(
    model: Transformer,
    tokenizer: Tokenizer,
    *,
    text: str = SMOKE_TEXT,
    prompt: str = SMOKE_PROMPT,
    n_generate: int = SMOKE_N_GENERATE,
) -> SmokeResult:
    """Perplexity of `text` and a greedy continuation of `prompt`."""
    n_tokens = len(tokenizer.vocab)
    if n_tokens != model.n_vocab:
        # llama.cpp refuses such a file too: some token ids would have no embedding row,
        # or the model could predict ids the tokenizer cannot decode.
        raise BadTensor("token_embd.weight", f"{model.n_vocab} rows for a vocabulary of {n_tokens} tokens")
    ids, prompt_ids = tokenizer.encode(text), tokenizer.encode(prompt)
    if len(ids) < 2 or not prompt_ids:
        # Byte-level BPE drops characters its vocabulary lacks (bpe.py): none may be left.
        raise BadMetadata(
            "tokenizer.ggml.tokens",
            f"the smoke text encodes to {len(ids)} tokens and the prompt to {len(prompt_ids)}",
        )
    t0 = time.perf_counter()
    ppl = perplexity(model, ids)
    t1 = time.perf_counter()
    eos = tokenizer.vocab.eos_id
    gen = greedy_generate(model, prompt_ids, n_generate, stop=() if eos is None else (eos,))
    t2 = time.perf_counter()
    return SmokeResult(
        perplexity=ppl,
        n_text_tokens=len(ids),
        prompt=prompt,
        generated_tokens=gen,
        generated_text=tokenizer.decode(gen),
        perplexity_seconds=t1 - t0,
        generate_seconds=t2 - t1,
    )
