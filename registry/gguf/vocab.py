"""The vocabulary key: which models can draft for which in speculative decoding.

A small model drafts tokens that a big one checks, so both must number the same texts the
same way. llama.cpp accepts a draft model without translating its tokens when both
vocabularies have the same type (`tokenizer.ggml.model`), the same BOS and EOS ids and
add-BOS/add-EOS flags, at most `MAX_SIZE_DIFFERENCE` tokens more or fewer, and the same
text for every id from `FIRST_COMPARED` up to the smaller size.

`vocab_sha256` hashes what that check compares, so that one indexed equality finds the
candidates: the tokenizer model, the four special-token settings as the file states them,
and the texts of tokens `FIRST_COMPARED` onwards, without trailing padding. Converters pad a
vocabulary to its embedding's row count with `[PAD<id>]` tokens, or with `[PAD1]` to
`[PAD<count>]`; two sizes of one family then differ only in how many pads they carry (a
small model's 151,936 tokens against a bigger sibling's 152,064). One key plus a size
difference of at most `MAX_SIZE_DIFFERENCE` passes llama.cpp's test, except when one file's
pads follow one scheme and the other's the other: their pad texts differ where both have
pads (a family converted by one tool uses one scheme). The key misses pairs that llama.cpp
accepts when one vocabulary has a few more real tokens at its end than the other (a
fine-tune that appended special tokens). A tail of pads that follows neither scheme is
hashed as ordinary tokens, and so is a tail of more than `MAX_PADS`.

Settings are hashed as stated in the file, not as llama.cpp defaults missing ones: a file
that leaves out `add_bos_token` and one that states its default get different keys.
"""

from __future__ import annotations

import hashlib
import json
import re
import struct
from typing import Any

import numpy as np

from registry.gguf.array import GGUFArray
from registry.gguf.model import GGUFHeader
from registry.gguf.types import ValueType

__all__ = ["FIRST_COMPARED", "MAX_SIZE_DIFFERENCE", "vocab_sha256"]

FIRST_COMPARED = 5  # llama.cpp's SPEC_VOCAB_CHECK_START_TOKEN_ID
MAX_SIZE_DIFFERENCE = 128  # llama.cpp's SPEC_VOCAB_MAX_SIZE_DIFFERENCE
# Changing what is hashed changes every key: a new version keeps old and new keys apart.
_KEY_VERSION = b"gguf-registry vocab key 1\n"
_PAD = re.compile(rb"\[PAD([1-9][0-9]{0,18}|0)\]")
_PAD_END = re.compile(rb"\[PAD[0-9]{1,19}\]\Z")  # may end in a pad: then looked at token by token
_PAD_LONGEST = len(b"[PAD]") + 19
_LENGTH = struct.Struct("<Q")
# Pads cut at most: converters pad to a multiple of 64 to 256 rows, or a few thousand
# tokens at the very most. A longer tail is checked one token at a time (~1 us each), so a
# hostile file of millions of pads stops here and the rest of its tail counts as tokens.
MAX_PADS = 1 << 16
_SETTINGS = (
    ("tokenizer.ggml.model", str),
    ("tokenizer.ggml.bos_token_id", int),
    ("tokenizer.ggml.eos_token_id", int),
    ("tokenizer.ggml.add_bos_token", bool),
    ("tokenizer.ggml.add_eos_token", bool),
)


def vocab_sha256(header: GGUFHeader, *, known: tuple[GGUFHeader, str | None] | None = None) -> str | None:
    """The vocabulary key of a parsed header (64 hex digits), or None without a string
    array `tokenizer.ggml.tokens`.

    `known` is another header and its key: when both hold the very same token array (a
    sibling parsed with the leader's arrays) and state the same settings, its key is
    this one's too and the tokens are not hashed again.
    """
    field = header.fields.get("tokenizer.ggml.tokens")
    if field is None or field.type is not ValueType.ARRAY:
        return None
    tokens: GGUFArray = field.value
    if tokens.element_type is not ValueType.STRING:
        return None
    if known is not None and known[1] is not None:
        other = known[0].fields.get("tokenizer.ggml.tokens")
        if other is not None and other.value is tokens and all(
            _setting(header, key, kind) == _setting(known[0], key, kind) for key, kind in _SETTINGS
        ):
            return known[1]
    texts = _Texts(tokens)
    # Without a pad-like end (most vocabularies) nothing is cut, and no token but the first
    # five needs finding: the walk over every length (~6 ms for 262,144 tokens) is skipped.
    kept = _without_padding(texts, tokens.count) if _PAD_END.search(texts.tail) else tokens.count
    settings = [_setting(header, key, kind) for key, kind in _SETTINGS]
    digest = hashlib.sha256(_KEY_VERSION)
    digest.update(json.dumps([settings, kept], separators=(",", ":")).encode())
    texts.feed(digest, min(FIRST_COMPARED, kept), kept)
    return digest.hexdigest()


def _setting(header: GGUFHeader, key: str, kind: type) -> Any:
    value = header.get(key)
    if kind is int:
        return value if isinstance(value, int) and not isinstance(value, bool) else None
    return value if isinstance(value, kind) else None


class _Texts:
    """Token texts as bytes, read straight from the header buffer."""

    def __init__(self, tokens: GGUFArray) -> None:
        self._tokens = tokens
        self._bytes = tokens.raw
        self._raw = np.frombuffer(self._bytes, dtype=np.uint8)
        self._lw = tokens.length_width
        self._native = tokens.endianness == "little" and tokens.length_width == 8
        self._offsets: np.ndarray[Any, np.dtype[np.int64]] | None = None

    @property
    def tail(self) -> bytes:
        """The last bytes of the array: enough to hold any `[PAD<n>]` token."""
        return self._raw[-_PAD_LONGEST:].tobytes()

    def _offset(self, i: int) -> int:
        """Where token i starts, relative to the first (i == count: the end)."""
        if i == self._tokens.count:
            return int(self._raw.size)
        if self._offsets is None and i <= FIRST_COMPARED:
            pos, unpack = 0, self._tokens.length_struct.unpack_from
            for _ in range(i):
                pos += self._lw + int(unpack(self._bytes, pos)[0])
            return pos
        if self._offsets is None:
            self._offsets = self._tokens.element_offsets() - self._tokens.offset
        return int(self._offsets[i])

    def __getitem__(self, i: int) -> bytes:
        return self._raw[self._offset(i) + self._lw : self._offset(i + 1)].tobytes()

    def feed(self, digest: Any, first: int, stop: int) -> None:
        """Hash tokens first..stop-1 as a little-endian GGUF v2+ file stores them (a uint64
        length, then the text): a slice of such a file's own bytes, rebuilt for others."""
        if stop <= first:
            return
        if self._native:
            digest.update(self._raw[self._offset(first) : self._offset(stop)])
            return
        for i in range(first, stop):
            text = self[i]
            digest.update(_LENGTH.pack(len(text)))
            digest.update(text)


def _without_padding(texts: _Texts, count: int) -> int:
    """How many tokens are left once the trailing pads are cut: `[PAD<id>]` tokens, or
    `[PAD1]` to `[PAD<n>]` as the last n tokens; any other tail is kept whole."""
    if count == 0 or (last := _PAD.fullmatch(texts[count - 1])) is None:
        return count
    number = int(last.group(1))
    floor = max(0, count - MAX_PADS)
    if number == count - 1:
        i = count - 1
        while i >= floor and texts[i] == b"[PAD%d]" % i:
            i -= 1
        return i + 1
    if 1 <= number <= count:
        start = count - number  # where [PAD1] must be
        i = count - 1
        while i >= max(start, floor) and texts[i] == b"[PAD%d]" % (i - start + 1):
            i -= 1
        if i < start:
            return start
    return count
