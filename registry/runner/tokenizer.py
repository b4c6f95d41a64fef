"""Tokenizers built from a GGUF file's vocabulary, giving the token ids llama.cpp gives.

`load_tokenizer(mf)` picks the algorithm named by `tokenizer.ggml.model`: "gpt2"
(byte-level BPE, `bpe.py`) or "llama" (SentencePiece BPE with byte fallback, `spm.py`).

`encode(text)` matches llama.cpp's `llama_tokenize(text, add_special=True,
parse_special=False)`: BOS/EOS only when the vocabulary asks for them; text that looks
like a control token ("<|im_start|>") is tokenized as plain text, while user-defined
tokens (gemma's runs of spaces and newlines, "<table>", ...) are always matched first,
longest first. With `parse_special=True` control tokens in the text are matched too.
"""

from __future__ import annotations

import enum
import heapq
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from registry.gguf.types import INTEGER_VALUE_TYPES, ValueType
from registry.runner.errors import BadMetadata, MissingKey, TokenizerUnsupported
from registry.runner.weights import NUMBER_TYPES, ModelFile, describe

# Tokens, and merges, a vocabulary may have: four times the largest real vocabulary
# (gemma3's 262,144 tokens; merge lists are of the same order). The tokenizer keeps about
# 150 bytes of Python objects per token (strings, the lookup table) and per merge (ranks);
# the parser's limits let a 64 MiB header hold millions of them, gigabytes before the
# vocabulary could be compared with the embedding's rows.
MAX_VOCAB = 1 << 20


class TokenType(enum.IntEnum):
    NORMAL = 1
    UNKNOWN = 2
    CONTROL = 3
    USER_DEFINED = 4
    UNUSED = 5
    BYTE = 6


@dataclass(frozen=True, slots=True)
class Vocab:
    tokens: list[str]
    types: np.ndarray  # TokenType per token
    scores: np.ndarray | None
    merges: list[str]
    token_to_id: dict[str, int]
    bos_id: int | None
    eos_id: int | None
    add_bos: bool
    add_eos: bool
    add_space_prefix: bool
    model: str
    pre: str

    def __len__(self) -> int:
        return len(self.tokens)


def read_vocab(mf: ModelFile) -> Vocab:
    model = mf.get_str("tokenizer.ggml.model")
    tokens_v = mf.get_array("tokenizer.ggml.tokens", (ValueType.STRING,), "strings")
    if tokens_v is None:
        raise MissingKey("tokenizer.ggml.tokens")
    merges_v = mf.get_array("tokenizer.ggml.merges", (ValueType.STRING,), "strings")
    for key, listed in (("tokenizer.ggml.tokens", tokens_v), ("tokenizer.ggml.merges", merges_v)):
        if listed is not None and listed.count > MAX_VOCAB:
            raise BadMetadata(key, f"{listed.count} entries, more than the {MAX_VOCAB} a vocabulary may have")
    # Empty token texts get a unique placeholder, as llama.cpp does: an empty string
    # would otherwise match everywhere as a special token and in lookups.
    tokens = [t or f"[EMPTY_{i}]" for i, t in enumerate(tokens_v.to_list())]
    n = len(tokens)
    types_v = mf.get_array("tokenizer.ggml.token_type", INTEGER_VALUE_TYPES, "integers")
    types = np.asarray(types_v.to_numpy(), dtype=np.int32) if types_v is not None else np.full(n, 1, np.int32)
    scores_v = mf.get_array("tokenizer.ggml.scores", NUMBER_TYPES, "numbers")
    scores = np.asarray(scores_v.to_numpy(), dtype=np.float32) if scores_v is not None else None
    for key, arr in (("tokenizer.ggml.token_type", types), ("tokenizer.ggml.scores", scores)):
        if arr is not None and len(arr) != n:
            raise BadMetadata(key, f"{len(arr)} entries for {n} tokens")
    # A text listed twice maps to its last id, as in llama.cpp's lookup table.
    token_to_id = {t: i for i, t in enumerate(tokens)}

    def special(key: str) -> int | None:
        v = mf.get(key)
        if v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, int):  # a BOOL true is no token 1
            raise BadMetadata(key, f"expected a token id, got {describe(v)}")
        if not 0 <= v < n:
            raise BadMetadata(key, f"token id {v} outside the vocabulary of {n}")
        return v

    spm = model == "llama"
    return Vocab(
        tokens=tokens,
        types=types,
        scores=scores,
        merges=merges_v.to_list() if merges_v is not None else [],
        token_to_id=token_to_id,
        bos_id=special("tokenizer.ggml.bos_token_id"),
        eos_id=special("tokenizer.ggml.eos_token_id"),
        # llama.cpp's defaults when the keys are absent: SentencePiece adds BOS and a
        # space prefix, byte-level BPE adds neither.
        add_bos=mf.get_bool("tokenizer.ggml.add_bos_token", spm),
        add_eos=mf.get_bool("tokenizer.ggml.add_eos_token", False),
        add_space_prefix=mf.get_bool("tokenizer.ggml.add_space_prefix", spm),
        model=model,
        pre=mf.get_str("tokenizer.ggml.pre", "default"),
    )


Fragment = str | int  # raw text, or a token id matched as a special token


def partition_special(vocab: Vocab, text: str, *, parse_special: bool) -> list[Fragment]:
    """Cut matches of special tokens out of `text`, longest token first."""
    kinds = (
        (TokenType.USER_DEFINED, TokenType.CONTROL, TokenType.UNKNOWN)
        if parse_special
        else (TokenType.USER_DEFINED,)
    )
    frags: list[Fragment] = [text] if text else []
    for tid in _special_ids(vocab, kinds, text):
        needle = vocab.tokens[tid]
        nxt: list[Fragment] = []
        for frag in frags:
            if isinstance(frag, int) or needle not in frag:
                nxt.append(frag)
                continue
            parts = frag.split(needle)
            for j, part in enumerate(parts):
                if j:
                    nxt.append(tid)
                if part:
                    nxt.append(part)
        frags = nxt
    return frags


def _special_ids(vocab: Vocab, kinds: Sequence[TokenType], text: str) -> list[int]:
    """The special tokens of `kinds` that occur in `text`, in the order they are cut out.

    Every fragment is a piece of `text`, so a token absent from it can match none: one
    substring search per token, instead of one per token and fragment (a vocabulary may
    declare a million tokens user-defined; each cut the smoke text into more pieces).
    """
    tokens = vocab.tokens
    candidates = np.flatnonzero(np.isin(vocab.types, [int(k) for k in kinds])).tolist()
    ids = [i for i in candidates if tokens[i] in text]
    # Longest first, so "\n\n\n" wins over "\n"; ties in id order for determinism.
    return sorted(ids, key=lambda i: (-len(vocab.tokens[i].encode()), i))


class Tokenizer(Protocol):
    vocab: Vocab

    def encode(self, text: str, *, add_special: bool = True, parse_special: bool = False) -> list[int]: ...

    def decode(self, ids: Sequence[int], *, special: bool = False) -> str: ...

    def token_bytes(self, token_id: int, *, special: bool = False) -> bytes: ...


def load_tokenizer(mf: ModelFile) -> Tokenizer:
    vocab = read_vocab(mf)
    if vocab.model == "gpt2":
        from registry.runner.bpe import BPETokenizer

        return BPETokenizer(vocab)
    if vocab.model == "llama":
        from registry.runner.spm import SPMTokenizer

        return SPMTokenizer(vocab)
    raise TokenizerUnsupported(f"tokenizer model {vocab.model!r} is not supported")


_HEX_DIGITS = frozenset("0123456789abcdefABCDEF")


def byte_value(text: str) -> int | None:
    """The byte a "<0xHH>" token stands for; None for any other text, whatever its type."""
    if len(text) == 6 and text.startswith("<0x") and text[5] == ">" and set(text[3:5]) <= _HEX_DIGITS:
        return int(text[3:5], 16)
    return None


def decode_bytes(tok: Tokenizer, ids: Sequence[int], *, special: bool = False) -> str:
    """Join token pieces as bytes first: byte-fallback tokens may split a UTF-8 character."""
    n = len(tok.vocab)
    for i in ids:
        if not 0 <= int(i) < n:
            raise ValueError(f"token id {i} outside the vocabulary of {n}")
    return b"".join(tok.token_bytes(int(i), special=special) for i in ids).decode("utf-8", errors="replace")


def merge_pairs(syms: list[str], priority: Callable[[str, str], float | None]) -> list[str]:
    """Join adjacent symbols pair by pair, the pair of the lowest `priority` first and the
    leftmost among equals, until no adjacent pair has one (None: the pair never joins);
    the symbols left, in order. Both BPE flavours: merge ranks (gpt2) and negated token
    scores (SentencePiece).

    Doubly linked symbols plus a heap of candidate pairs: a join pushes the two pairs it
    makes, and entries a join made stale are skipped when they come up."""
    if len(syms) < 2:
        return syms
    nxt = [*range(1, len(syms)), -1]
    prv = list(range(-1, len(syms) - 1))
    heap: list[tuple[float, int, str, str]] = []

    def push(i: int) -> None:
        j = nxt[i] if i >= 0 else -1
        if j < 0:
            return
        p = priority(syms[i], syms[j])
        if p is not None:
            heapq.heappush(heap, (p, i, syms[i], syms[j]))

    for i in range(len(syms) - 1):
        push(i)
    while heap:
        _, i, left, right = heapq.heappop(heap)
        j = nxt[i]
        if not syms[i] or j < 0 or syms[i] != left or syms[j] != right:
            continue
        syms[i] = left + right
        syms[j] = ""
        nxt[i] = nxt[j]
        if nxt[j] >= 0:
            prv[nxt[j]] = i
        push(prv[i])
        push(i)
    return [s for s in syms if s]
