"""Byte-level BPE (GPT-2 style, `tokenizer.ggml.model = "gpt2"`)."""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache

from registry.runner import pretokenize
from registry.runner.tokenizer import (
    TokenType,
    Vocab,
    byte_value,
    decode_bytes,
    merge_pairs,
    partition_special,
)


@cache
def byte_to_unicode() -> dict[int, str]:
    """GPT-2's reversible map from bytes to printable characters (the vocab's alphabet)."""
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    mapping = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in mapping:
            mapping[b] = chr(256 + extra)
            extra += 1
    return mapping


@cache
def unicode_to_byte() -> dict[str, int]:
    return {c: b for b, c in byte_to_unicode().items()}


class BPETokenizer:
    def __init__(self, vocab: Vocab) -> None:
        self.vocab = vocab
        self._patterns = pretokenize.compiled(vocab.pre)
        self._ranks: dict[tuple[str, str], int] = {}
        for rank, merge in enumerate(vocab.merges):
            left, sep, right = merge.partition(" ")
            if sep:
                self._ranks.setdefault((left, right), rank)
        self._cache: dict[str, list[int]] = {}
        self._whole_words = vocab.pre in pretokenize.IGNORE_MERGES

    def encode(self, text: str, *, add_special: bool = True, parse_special: bool = False) -> list[int]:
        v = self.vocab
        out: list[int] = []
        if add_special and v.add_bos and v.bos_id is not None:
            out.append(v.bos_id)
        for frag in partition_special(v, text, parse_special=parse_special):
            if isinstance(frag, int):
                out.append(frag)
                continue
            for word in pretokenize.split(frag, self._patterns):
                out.extend(self._word(word))
        if add_special and v.add_eos and v.eos_id is not None:
            out.append(v.eos_id)
        return out

    def _word(self, word: str) -> list[int]:
        hit = self._cache.get(word)
        if hit is None:
            b2u = byte_to_unicode()
            mapped = "".join(b2u[b] for b in word.encode("utf-8"))
            whole = self.vocab.token_to_id.get(mapped) if self._whole_words else None
            if whole is not None:
                hit = [whole]
            else:
                hit = [tid for sym in self._merge(mapped) for tid in self._lookup(sym)]
            if len(self._cache) < 100_000:
                self._cache[word] = hit
        return hit

    def _merge(self, word: str) -> list[str]:
        """Apply merges lowest rank first, leftmost first among equal ranks."""
        ranks = self._ranks
        return merge_pairs(list(word), lambda left, right: ranks.get((left, right)))

    def _lookup(self, sym: str) -> list[int]:
        tid = self.vocab.token_to_id.get(sym)
        if tid is not None:
            return [tid]
        # Not in the vocabulary (a merge result missing from tokens): fall back to the
        # single characters that are, dropping any that are not, as llama.cpp does.
        return [t for c in sym if (t := self.vocab.token_to_id.get(c)) is not None]

    def token_bytes(self, token_id: int, *, special: bool = False) -> bytes:
        v = self.vocab
        kind = int(v.types[token_id])
        text = v.tokens[token_id]
        if kind in (TokenType.CONTROL, TokenType.UNKNOWN):
            return text.encode() if special else b""
        if kind == TokenType.USER_DEFINED:
            return text.encode()
        if kind == TokenType.BYTE and (b := byte_value(text)) is not None:
            return bytes([b])
        u2b = unicode_to_byte()
        # Characters outside GPT-2's byte alphabet should not occur; keep them as UTF-8.
        return b"".join(bytes([u2b[c]]) if c in u2b else c.encode() for c in text)

    def decode(self, ids: Sequence[int], *, special: bool = False) -> str:
        return decode_bytes(self, ids, special=special)
