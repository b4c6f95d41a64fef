"""SentencePiece-style BPE with scores and byte fallback (`tokenizer.ggml.model = "llama"`).

Spaces become "▁"; adjacent symbols are merged greedily by the score of the merged token
(highest first, leftmost among equal scores) for as long as the merged text is a token;
symbols that never became a token are emitted as <0xXX> byte tokens.
"""

from __future__ import annotations

from collections.abc import Sequence

from registry.runner.errors import TokenizerUnsupported
from registry.runner.tokenizer import (
    TokenType,
    Vocab,
    byte_value,
    decode_bytes,
    merge_pairs,
    partition_special,
)

SPACE = "\u2581"


class SPMTokenizer:
    def __init__(self, vocab: Vocab) -> None:
        if vocab.scores is None:
            raise TokenizerUnsupported("a SentencePiece vocabulary needs tokenizer.ggml.scores")
        self.vocab = vocab
        self._scores = vocab.scores.tolist()
        self._byte_ids: list[int | None] = [vocab.token_to_id.get(f"<0x{b:02X}>") for b in range(256)]

    def encode(self, text: str, *, add_special: bool = True, parse_special: bool = False) -> list[int]:
        v = self.vocab
        out: list[int] = []
        prev_special = True  # the space prefix goes before the first text and after specials
        if add_special and v.add_bos and v.bos_id is not None:
            out.append(v.bos_id)
        for frag in partition_special(v, text, parse_special=parse_special):
            if isinstance(frag, int):
                out.append(frag)
                prev_special = True
                continue
            if v.add_space_prefix and prev_special:
                frag = " " + frag
            self._tokenize(frag.replace(" ", SPACE), out)
            prev_special = False
        if add_special and v.add_eos and v.eos_id is not None:
            out.append(v.eos_id)
        return out

    def _tokenize(self, text: str, out: list[int]) -> None:
        t2i = self.vocab.token_to_id
        scores = self._scores

        def priority(left: str, right: str) -> float | None:
            # the higher score first (a min-heap on its negation); ties to the leftmost pair
            tid = t2i.get(left + right)
            return None if tid is None else -scores[tid]

        for s in merge_pairs(list(text), priority):
            tid = t2i.get(s)
            if tid is not None:
                out.append(tid)
                continue
            for b in s.encode("utf-8"):
                bid = self._byte_ids[b]
                if bid is None:
                    raise TokenizerUnsupported(f"no byte-fallback token <0x{b:02X}> for {s!r}")
                out.append(bid)

    def token_bytes(self, token_id: int, *, special: bool = False) -> bytes:
        v = self.vocab
        kind = int(v.types[token_id])
        text = v.tokens[token_id]
        if kind in (TokenType.CONTROL, TokenType.UNKNOWN):
            return text.encode() if special else b""
        if kind == TokenType.BYTE and (b := byte_value(text)) is not None:
            return bytes([b])
        if kind == TokenType.USER_DEFINED:
            return text.encode()
        return text.replace(SPACE, " ").encode()

    def decode(self, ids: Sequence[int], *, special: bool = False) -> str:
        text = decode_bytes(self, ids, special=special)
        # The space prefix the encoder added is not part of the text.
        if self.vocab.add_space_prefix and text.startswith(" "):
            text = text[1:]
        return text
