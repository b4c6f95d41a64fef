"""Incremental, sans-IO parser of GGUF headers (versions 1 to 3, either byte order).

`parse_header(data)` parses the header from the first bytes of a file. When the bytes end
before the header does it raises `NeedMoreData` with an estimate of the whole header size,
so a caller doing range reads can fetch the rest in one more round trip:

    data = read(0, 2 * MiB)
    while True:
        try:
            header = parse_header(data, file_size=size)
            break
        except NeedMoreData as exc:
            data += read(len(data), next_window(exc, margin=64 * KiB) - len(data))

Every count and length is checked against the configured `Limits`, against what is left of
the file when its size is known, and against what the bytes seen so far can hold, before
anything is built from it. Work is linear in the bytes given.

Rules beyond the bare format, chosen where llama.cpp, gguf-py and the spec leave room:
a dimension of 0 is rejected (zero elements); tensor data offsets must be aligned, in
tensor-info order and non-overlapping (gaps allowed); keys must be non-empty ASCII; tensor
names at most 63 bytes (GGML_MAX_NAME); `general.alignment` any integer type holding a
power of two. String values are decoded as UTF-8 with replacement, as llama.cpp does not
validate them. Duplicate keys and tensor names, strings that are not valid UTF-8 and a
`general.alignment` in another integer type than uint32 do not stop the parse: they are
recorded in `GGUFHeader.anomalies` (llama.cpp refuses or mangles them; the catalog reports
them as findings, which needs the rest of the header). A declared length reaching past a known file end is `PastEndOfFile`, both a
`TruncatedFile` and a `LimitExceeded`, since the two cannot be told apart.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Mapping
from typing import Any, NoReturn

from registry.gguf.array import GGUFArray
from registry.gguf.errors import (
    BadAlignment,
    BadMagic,
    BlockSizeMismatch,
    InvalidTensor,
    InvalidValue,
    LimitExceeded,
    NeedMoreData,
    PastEndOfFile,
    TensorOutOfBounds,
    TruncatedFile,
    UnknownTensorType,
    UnknownValueType,
    UnsupportedVersion,
)
from registry.gguf.limits import DEFAULT_LIMITS, Limits
from registry.gguf.model import Anomaly, Endianness, Field, GGUFHeader, TensorInfo
from registry.gguf.strings import walk_strings
from registry.gguf.tensor_template import RawTensor, TensorTemplate
from registry.gguf.types import (
    DEFAULT_ALIGNMENT,
    GGUF_MAGIC,
    INTEGER_VALUE_TYPES,
    MAX_I64,
    SCALAR_FORMATS,
    GGMLType,
    ValueType,
    plain_tensor,
    tensor_type_info,
)

__all__ = ["GGML_MAX_NAME", "Limits", "next_window", "parse_header"]

GGML_MAX_NAME = 64  # a tensor name plus its terminating NUL
SUPPORTED_VERSIONS = (1, 2, 3)


# Guesses that only size the next read after NeedMoreData; too big costs a few KiB of
# transfer, too small costs a round trip, so they lean generous.
_KV_GUESS = 256
_TENSOR_INFO_GUESS = 96
_CHAT_TEMPLATE_GUESS = 16 * 1024
_PREAMBLE_GUESS = 64 * 1024
_STRING_GUESS = 16
# Means taken over the part read so far undershoot when later items are longer (tokens
# further into a vocabulary, tensor names with more digits); 10% slack on the remainder
# costs a little transfer and saves the round trip a low sample mean would cost.
_SAMPLE_SLACK = 1.1

# Vocabulary arrays that follow `tokenizer.ggml.tokens` with one 4-byte element per token.
# BPE ("gpt2") vocabularies carry no scores: llama.cpp's converter writes them only for
# SentencePiece-style tokenizers, so counting them for BPE overshot by 4 bytes a token.
_SCORES_KEY = "tokenizer.ggml.scores"
_PARALLEL_VOCAB_KEYS = (_SCORES_KEY, "tokenizer.ggml.token_type")
_TOKENS_KEY = "tokenizer.ggml.tokens"
_MERGES_KEY = "tokenizer.ggml.merges"
_PRE_KEY = "tokenizer.ggml.pre"
# Merges per token of a BPE vocabulary, by `tokenizer.ggml.pre` (written before the
# tokens). Most BPE vocabularies have about one merge per token (gpt2 50000/50257, qwen2
# 151387/151643, smollm 48900/49152); tiktoken-derived ones list every way to build a
# token, e.g. llama3's 280147 merges for 128256 tokens. Guessing one per token for those
# costs a round trip; guessing two for the rest would double the merges transfer.
_MERGES_PER_TOKEN = {"llama-bpe": 2.2, "smaug-bpe": 2.2}
_DEFAULT_MERGES_PER_TOKEN = 1.0

_PREAMBLE, _KVS, _TENSORS = 0, 1, 2


class ParseProgress:
    """What the attempts on shorter prefixes of one file have walked already.

    A reader that grows its buffer and parses again after each `NeedMoreData` passes the
    same object to every attempt: a string array cut by the end of an earlier buffer is
    walked on from the element where that walk stopped, not again from its start (the
    first window of a large vocabulary ends inside it). Valid only while each buffer
    starts with the previous one's bytes and the limits stay the same.
    """

    __slots__ = ("strings",)

    def __init__(self) -> None:
        self.strings: dict[int, tuple[int, int]] = {}  # array start -> (elements walked, offset)


def parse_header(
    data: bytes | bytearray | memoryview,
    *,
    file_size: int | None = None,
    limits: Limits | None = None,
    progress: ParseProgress | None = None,
    known: Mapping[int, GGUFArray] | None = None,
    tensors_like: TensorTemplate | None = None,
) -> GGUFHeader:
    """Parse the header at the start of `data`, the first bytes of a GGUF file.

    Raises `NeedMoreData` when `data` ends before the header and the file may go on, and a
    `GGUFError` subclass for anything wrong with the file. When `file_size` is given and
    `data` holds the whole file, running out of bytes is a `TruncatedFile`. `progress`
    carries walks from one attempt to the next (see `ParseProgress`).

    `known` maps the offset of an array value (its element type) to an array already parsed
    from bytes the caller has proven equal to those at that offset (a sibling's vocabulary
    read from the leader): where the element type and count agree it is taken as the value
    without walking its elements again. `data` must reach past its end, but its bytes there
    are not read (a sibling's reader leaves zeros in their place). `tensors_like` is the
    leader's tensor infos, which a sibling's are read against (see `TensorTemplate`).

    A non-`bytes` input is copied once, so that arrays in the result cannot change if the
    caller later mutates its buffer (a few MiB copy in about a millisecond).
    """
    buf = data if isinstance(data, bytes) else bytes(data)
    if file_size is not None:
        if file_size < 0:
            raise ValueError(f"file_size must be >= 0, got {file_size}")
        if len(buf) > file_size:
            buf = buf[:file_size]
    parser = _Parser(buf, file_size, limits or DEFAULT_LIMITS, progress)
    parser.known, parser.like = known or {}, tensors_like
    return parser.parse()


@functools.cache
def _shape_structs(prefix: str, dim: str, most: int) -> tuple[struct.Struct, ...]:
    """Structs of a tensor shape of 0..`most` dimensions, made once, not per parse."""
    return tuple(struct.Struct(prefix + dim * n) for n in range(most + 1))


def next_window(exc: NeedMoreData, *, margin: int) -> int:
    """How many bytes from the file start to have for the next attempt."""
    return max(exc.needed + margin, exc.have + 1)


class _Parser:
    """One parse over one buffer. Holds the position bookkeeping used for estimates."""

    def __init__(
        self, buf: bytes, file_size: int | None, limits: Limits, progress: ParseProgress | None = None
    ) -> None:
        self.limits = limits
        self.progress = progress
        # Bytes past max_header_bytes are never looked at, so a read past it fails the
        # same way whether or not the caller sent them.
        self.buf = buf if len(buf) <= limits.max_header_bytes else buf[: limits.max_header_bytes]
        self.n = len(self.buf)
        self.have = len(buf)
        self.file_size = file_size
        self.phase = _PREAMBLE
        self.kv_count = 0
        self.kv_index = 0
        self.tensor_count = 0
        self.tensor_index = 0
        self.tensors_start = 0
        self.tensor_pos = 0
        self.key = ""
        self.fields: dict[str, Field] = {}
        self.anomalies: list[Anomaly] = []
        self.vocab_count = 0
        self.vocab_mean = float(_STRING_GUESS)
        self.alignment = DEFAULT_ALIGNMENT
        self.known: Mapping[int, GGUFArray] = {}
        self.like: TensorTemplate | None = None
        self._init_format("<", 8, 3)

    def _init_format(self, prefix: str, length_width: int, version: int) -> None:
        self.prefix = prefix
        self.endianness: Endianness = "little" if prefix == "<" else "big"
        self.version = version
        self.lw = length_width
        self.dim_width = 4 if version == 1 else 8
        self.u32 = struct.Struct(prefix + "I")
        self.u64 = struct.Struct(prefix + "Q")
        self.length = struct.Struct(prefix + ("I" if length_width == 4 else "Q"))
        self.scalars = {vt: struct.Struct(prefix + fmt) for vt, (fmt, _) in SCALAR_FORMATS.items()}
        self.type_and_offset = struct.Struct(prefix + "IQ")
        self.shapes = _shape_structs(prefix, "I" if self.dim_width == 4 else "Q", min(self.limits.max_dims, 8))

    # -- entry -----------------------------------------------------------------------------

    def parse(self) -> GGUFHeader:
        pos = self._preamble()
        pos = self._kvs(pos)
        infos, end = self._like_infos(pos) or self._tensor_infos(pos)
        # Absolute offsets wait for the end of the last tensor info, which fixes data_offset.
        data_offset = -(-end // self.alignment) * self.alignment
        tensors = tuple(
            TensorInfo(name, shape, ttype, offset, data_offset + offset, n_elements, n_bytes, info_offset)
            for name, shape, ttype, offset, n_elements, n_bytes, info_offset in infos
        )
        if self.file_size is not None and tensors:
            # Offsets are in order and never overlap, so the last tensor ends last.
            last = len(tensors) - 1
            t = tensors[last]
            if t.file_offset + t.n_bytes > self.file_size:
                raise TensorOutOfBounds(
                    f"tensor {t.name!r} data ends at {t.file_offset + t.n_bytes}, past the end of the "
                    f"{self.file_size}-byte file",
                    field=f"tensors[{last}].offset",
                    offset=t.info_offset,
                )
        return GGUFHeader(
            version=self.version,
            endianness=self.endianness,
            fields=self.fields,
            tensors=tensors,
            alignment=self.alignment,
            data_offset=data_offset,
            file_size=self.file_size,
            anomalies=tuple(self.anomalies),
            _by_name={t.name: t for t in tensors},
        )

    def _preamble(self) -> int:
        buf = self.buf
        # Wrong leading bytes are a BadMagic even before all four have arrived.
        if not GGUF_MAGIC.startswith(buf[:4]):
            raise BadMagic(f"not a GGUF file: magic {bytes(buf[:4])!r}", field="magic", offset=0)
        self._need(0, 4, "magic")
        self._need(4, 4, "version")
        little = int.from_bytes(buf[4:8], "little")
        big = int.from_bytes(buf[4:8], "big")
        # The version is the only field that tells the byte order: a big-endian file read
        # as little-endian shows a version of 2**24 or more.
        if little in SUPPORTED_VERSIONS:
            prefix, version = "<", little
        elif big in SUPPORTED_VERSIONS:
            prefix, version = ">", big
        else:
            raise UnsupportedVersion(f"unsupported GGUF version {little}", field="version", offset=4)
        self._init_format(prefix, 4 if version == 1 else 8, version)
        lw = self.lw
        self._need(8, 2 * lw, "tensor_count")
        self.tensor_count = self.length.unpack_from(buf, 8)[0]
        self.kv_count = self.length.unpack_from(buf, 8 + lw)[0]
        pos = 8 + 2 * lw
        self._check_counts(pos)
        self.phase = _KVS
        return pos

    def _check_counts(self, pos: int) -> None:
        lim = self.limits
        lw = self.lw
        if self.tensor_count > lim.max_tensor_count:
            raise LimitExceeded(f"tensor count {self.tensor_count} is above the limit {lim.max_tensor_count}",
                                field="tensor_count", offset=8)  # fmt: skip
        if self.kv_count > lim.max_kv_count:
            raise LimitExceeded(f"kv count {self.kv_count} is above the limit {lim.max_kv_count}",
                                field="kv_count", offset=8 + lw)  # fmt: skip
        # The smallest possible records: a one-byte key with a one-byte value, and a
        # tensor with an empty name and one dimension.
        min_kv = lw + 1 + 4 + 1
        min_tensor = lw + 4 + self.dim_width + 4 + 8
        for name, need, where in (
            ("tensor_count", self.tensor_count * min_tensor, 8),
            ("kv_count", self.kv_count * min_kv + self.tensor_count * min_tensor, 8 + lw),
        ):
            if self.file_size is not None and pos + need > self.file_size:
                raise PastEndOfFile(
                    f"{name} needs at least {need} bytes but the file has {self.file_size - pos} left",
                    field=name,
                    offset=where,
                )
            if pos + need > lim.max_header_bytes:
                raise LimitExceeded(
                    f"{name} needs at least {need} bytes, more than max_header_bytes {lim.max_header_bytes}",
                    field=name,
                    offset=where,
                )

    # -- bounds and estimates --------------------------------------------------------------

    def _need(self, pos: int, size: int, field: str) -> None:
        """Fixed-size read of `size` bytes at `pos`."""
        if pos + size > self.n:
            self._short(pos + size, pos + size, field, pos)

    def _declared(self, pos: int, size: int, field: str, what: str) -> None:
        """A length or count read from the file claims `size` bytes from `pos` on."""
        end = pos + size
        if self.file_size is not None and end > self.file_size:
            raise PastEndOfFile(
                f"{what} needs {size} bytes but the file has {max(self.file_size - pos, 0)} left",
                field=field,
                offset=pos,
            )
        if end > self.limits.max_header_bytes:
            raise LimitExceeded(
                f"{what} needs {size} bytes, past max_header_bytes {self.limits.max_header_bytes}",
                field=field,
                offset=pos,
            )

    def _short(self, end: int, estimate: int, field: str, offset: int) -> NoReturn:
        """The structure at `offset` needs bytes up to `end`; we have fewer."""
        if self.file_size is not None and end > self.file_size:
            raise TruncatedFile(
                f"the file ends at {self.file_size} bytes, inside {field}", field=field, offset=offset
            )
        if end > self.limits.max_header_bytes:
            raise LimitExceeded(
                f"the header goes on past max_header_bytes {self.limits.max_header_bytes}",
                field=field,
                offset=offset,
            )
        raise NeedMoreData(self._estimate(max(end, estimate)), have=self.have, field=field)

    def _estimate(self, end: int) -> int:
        """Best guess of the whole header size, given the current item ends near `end`."""
        rest = 0
        if self.phase == _PREAMBLE:
            rest = _PREAMBLE_GUESS
        elif self.phase == _KVS:
            rest = (self.kv_count - self.kv_index - 1) * _KV_GUESS + self.tensor_count * _TENSOR_INFO_GUESS
            rest += self._vocab_guess()
            if "tokenizer.chat_template" not in self.fields and self.key != "tokenizer.chat_template":
                rest += _CHAT_TEMPLATE_GUESS
        else:
            done = self.tensor_index
            avg = (self.tensor_pos - self.tensors_start) / done if done else _TENSOR_INFO_GUESS
            end = max(end, int(self.tensor_pos + avg))
            rest = int((self.tensor_count - done - 1) * avg * _SAMPLE_SLACK)
        needed = end + rest + self.alignment
        cap = self.limits.max_header_bytes
        if self.file_size is not None:
            cap = min(cap, self.file_size)
        return max(end, min(needed, cap), self.have + 1)

    def _vocab_guess(self) -> int:
        """Bytes of vocabulary arrays still to come, sized from the token count.

        Real files put the scores, token types and merges right after the tokens, and they
        are as long as the vocabulary; counting them avoids one round trip per array.
        """
        n = self.vocab_count
        if not n:
            return 0
        model = self.fields.get("tokenizer.ggml.model")
        bpe = model is not None and model.value == "gpt2"
        guess = 0
        for key in _PARALLEL_VOCAB_KEYS:
            if key not in self.fields and key != self.key and not (bpe and key == _SCORES_KEY):
                guess += 4 * n
        if bpe and _MERGES_KEY not in self.fields and self.key != _MERGES_KEY:
            pre = self.fields.get(_PRE_KEY)
            per_token = _MERGES_PER_TOKEN.get(pre.value if pre is not None else "", _DEFAULT_MERGES_PER_TOKEN)
            # A merge "a b" joins two pieces into one token: its text is about one token
            # long plus the space, not two tokens long.
            guess += int(n * per_token * (self.lw + self.vocab_mean + 1))
        return guess

    # -- key/value section -----------------------------------------------------------------

    def _kvs(self, pos: int) -> int:
        u32 = self.u32.unpack_from
        for index in range(self.kv_count):
            self.kv_index = index
            key_offset = pos
            key, pos = self._key(pos, index)
            self.key = key
            self._need(pos, 4, key)
            type_id = u32(self.buf, pos)[0]
            vtype = self._value_type(type_id, key, pos)
            value, pos = self._value(pos + 4, vtype, key)
            if key in self.fields:
                # The value is walked (and checked) to find the next key; the first one stays.
                self.anomalies.append(Anomaly("duplicate_key", key, f"key {key!r} appears twice"))
                continue
            if key == "general.alignment":
                self._check_alignment(vtype, value, key_offset)
            self.fields[key] = Field(key, vtype, value, key_offset)
        self.key = ""
        return pos

    def _key(self, pos: int, index: int) -> tuple[str, int]:
        field = f"kv[{index}].key"
        self._need(pos, self.lw, field)
        size = self.length.unpack_from(self.buf, pos)[0]
        if size == 0:
            raise InvalidValue("empty key", field=field, offset=pos)
        if size > self.limits.max_string_length:
            raise LimitExceeded(
                f"key length {size} is above the limit {self.limits.max_string_length}",
                field=field,
                offset=pos,
            )
        start = pos + self.lw
        self._declared(start, size, field, "key")
        self._need(start, size, field)
        raw = self.buf[start : start + size]
        if not raw.isascii():
            raise InvalidValue(f"key {raw[:64]!r} is not ASCII", field=field, offset=pos)
        return raw.decode("ascii"), start + size

    def _value_type(self, type_id: int, field: str, offset: int) -> ValueType:
        try:
            return ValueType(type_id)
        except ValueError:
            raise UnknownValueType(f"unknown value type id {type_id}", field=field, offset=offset) from None

    def _value(self, pos: int, vtype: ValueType, field: str) -> tuple[Any, int]:
        if vtype is ValueType.STRING:
            return self._string(pos, field)
        if vtype is ValueType.ARRAY:
            reused = self._known_array(pos, field)
            if reused is not None:
                return reused, pos + 4 + self.lw + reused.nbytes
            etype, count, body, end = self._array(pos, field, 1)
            value = GGUFArray(
                self.buf, body, etype, count, end - body, endianness=self.endianness, length_width=self.lw
            )
            return value, end
        packer = self.scalars[vtype]
        self._need(pos, packer.size, field)
        value = packer.unpack_from(self.buf, pos)[0]
        if vtype is ValueType.BOOL:
            byte = self.buf[pos]
            if byte > 1:
                raise InvalidValue(f"bool byte {byte}, expected 0 or 1", field=field, offset=pos)
        return value, pos + packer.size

    def _known_array(self, pos: int, field: str) -> GGUFArray | None:
        """The caller's parsed array for the value at `pos`, if its type and count agree."""
        arr = self.known.get(pos)
        if arr is None or arr.endianness != self.endianness or arr.length_width != self.lw:
            return None
        self._need(pos, 4 + self.lw, field)
        if self.u32.unpack_from(self.buf, pos)[0] != arr.element_type or (
            self.length.unpack_from(self.buf, pos + 4)[0] != arr.count
        ):
            return None
        body = pos + 4 + self.lw
        self._declared(body, arr.nbytes, field, f"array of {arr.count} {arr.element_type.name}")
        self._need(body, arr.nbytes, field)
        if field == _TOKENS_KEY:
            self.vocab_count = arr.count
        return arr

    def _string(self, pos: int, field: str) -> tuple[str, int]:
        self._need(pos, self.lw, field)
        size = self.length.unpack_from(self.buf, pos)[0]
        if size > self.limits.max_string_length:
            raise LimitExceeded(
                f"string length {size} is above the limit {self.limits.max_string_length}",
                field=field,
                offset=pos,
            )
        start = pos + self.lw
        self._declared(start, size, field, "string")
        self._need(start, size, field)
        # llama.cpp does not validate UTF-8 in values; replacing keeps a catalog row
        # readable instead of rejecting the whole file over one odd byte, and the anomaly
        # says the text shown is not the text stored.
        return self._text(self.buf[start : start + size], field), start + size

    def _text(self, raw: bytes, field: str) -> str:
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            self.anomalies.append(
                Anomaly("invalid_utf8", field, f"{field} is not valid UTF-8 (byte {exc.start}); shown with U+FFFD")
            )
            return raw.decode("utf-8", "replace")

    def _array(self, pos: int, field: str, depth: int) -> tuple[ValueType, int, int, int]:
        """Validate one array at `pos`: element type, count, body start, end offset."""
        lim = self.limits
        if depth > lim.max_nesting_depth:
            raise LimitExceeded(
                f"arrays nested deeper than the limit {lim.max_nesting_depth}", field=field, offset=pos
            )
        lw = self.lw
        self._need(pos, 4 + lw, field)
        etype = self._value_type(self.u32.unpack_from(self.buf, pos)[0], field, pos)
        count = self.length.unpack_from(self.buf, pos + 4)[0]
        body = pos + 4 + lw
        if count > lim.max_array_length:
            raise LimitExceeded(
                f"array length {count} is above the limit {lim.max_array_length}", field=field, offset=pos + 4
            )
        if etype is ValueType.STRING:
            self._declared(body, count * lw, field, f"array of {count} strings")
            if field == _TOKENS_KEY:
                self.vocab_count = count
            return etype, count, body, self._skip_strings(body, count, field)
        if etype is ValueType.ARRAY:
            self._declared(body, count * (4 + lw), field, f"array of {count} arrays")
            end = body
            for i in range(count):
                end = self._array(end, f"{field}[{i}]", depth + 1)[3]
            return etype, count, body, end
        size = count * SCALAR_FORMATS[etype][1]
        self._declared(body, size, field, f"array of {count} {etype.name}")
        self._need(body, size, field)
        end = body + size
        if etype is ValueType.BOOL:
            self._check_bools(body, end, field)
        return etype, count, body, end

    def _check_bools(self, body: int, end: int, field: str) -> None:
        chunk = self.buf[body:end]
        if chunk.translate(None, b"\x00\x01"):
            bad = next(i for i, b in enumerate(chunk) if b > 1)
            raise InvalidValue(
                f"bool byte {chunk[bad]}, expected 0 or 1", field=f"{field}[{bad}]", offset=body + bad
            )

    def _skip_strings(self, start: int, count: int, field: str) -> int:
        """End of an array of `count` strings at `start`, walked without decoding.

        The fast walk (registry.gguf.strings: numpy over the length prefixes, ~0.3 ns a
        byte against ~43 ns a string in a Python loop) accepts only elements that are
        complete inside the buffer and within the length limit, and stops at the first one
        that is not. The checked walk resumes there, at that exact element, so errors and
        the NeedMoreData estimate (position and mean so far) are those of a walk from the
        array start, without re-walking a 262k-token vocabulary in Python.
        """
        # The buffer is already cut at file_size and max_header_bytes, so an element that
        # ends inside it passes the checks of _declared too.
        walked = self.progress.strings if self.progress is not None else None
        resume = walked.get(start) if walked is not None else None
        done, pos = walk_strings(
            self.buf, start, count, self.lw, self.endianness == "big", self.limits.max_string_length,
            resume=resume,
        )  # fmt: skip
        if done < count:
            if walked is not None:
                walked[start] = (done, pos)  # every element before `done` is complete and checked
            return self._skip_strings_checked(start, count, field, done, pos)
        if field == _TOKENS_KEY and count:
            self.vocab_mean = (pos - start) / count - self.lw
        return pos

    def _skip_strings_checked(self, start: int, count: int, field: str, first: int = 0, at: int = -1) -> int:
        buf, unpack, lw, n = self.buf, self.length.unpack_from, self.lw, self.n
        max_len = self.limits.max_string_length
        pos = start if at < 0 else at
        for i in range(first, count):
            if pos + lw > n:
                self._short_in_strings(start, pos, pos + lw, i, count, field)
            size = unpack(buf, pos)[0]
            if size > max_len:
                raise LimitExceeded(
                    f"string length {size} is above the limit {max_len}", field=f"{field}[{i}]", offset=pos
                )
            self._declared(pos + lw, size, f"{field}[{i}]", "string")
            if pos + lw + size > n:
                self._short_in_strings(start, pos, pos + lw + size, i, count, field)
            pos += lw + size
        return pos

    def _short_in_strings(self, start: int, pos: int, end: int, i: int, count: int, field: str) -> NoReturn:
        """Out of bytes at element `i`: estimate the array's end from the mean so far."""
        mean = (pos - start) / i if i else self.lw + _STRING_GUESS
        if field == _TOKENS_KEY:
            self.vocab_mean = mean - self.lw
        estimate = int(pos + mean * (count - i) * _SAMPLE_SLACK)
        self._short(end, estimate, f"{field}[{i}]", pos)

    def _check_alignment(self, vtype: ValueType, value: Any, offset: int) -> None:
        field = "general.alignment"
        if vtype not in INTEGER_VALUE_TYPES:
            raise BadAlignment(f"alignment must be an integer, not {vtype.name}", field=field, offset=offset)
        if value <= 0 or value & (value - 1):
            raise BadAlignment(f"alignment {value} is not a power of two", field=field, offset=offset)
        if vtype is not ValueType.UINT32:
            self.anomalies.append(
                Anomaly("alignment_type", field, f"general.alignment is a {vtype.name}, llama.cpp wants UINT32")
            )
        self.alignment = value

    # -- tensor info section ---------------------------------------------------------------

    def _like_infos(self, pos: int) -> tuple[list[RawTensor], int] | None:
        like, lim = self.like, self.limits
        if like is None or like.encoding != (self.prefix, self.lw) or like.most_dims > lim.max_dims:
            return None
        return like.read(self.buf, pos, self.tensor_count, self.alignment, lim.max_tensor_bytes)

    def _tensor_infos(self, pos: int) -> tuple[list[RawTensor], int]:
        """Tensor infos with offsets aligned, in data order and not overlapping, as tuples:
        each becomes one TensorInfo once the data offset is known, not two.

        Gaps between tensors are allowed: the format does not forbid them and gguf-py
        reads them, although llama.cpp's own loader wants the data packed exactly.
        """
        self.phase = _TENSORS
        self.tensors_start = pos
        infos: list[RawTensor] = []
        names: set[bytes] = set()
        prev_offset, prev_end = 0, 0
        for index in range(self.tensor_count):
            self.tensor_index = index
            self.tensor_pos = pos
            info, pos = self._tensor_info(pos, index, names)
            name, _, _, offset, _, n_bytes, info_offset = info
            if offset < prev_offset or offset < prev_end:  # the field's name is built only then
                where = f"tensors[{index}].offset"
                if offset < prev_offset:
                    raise InvalidTensor(f"tensor {name!r} at offset {offset} comes before the previous "
                                        f"tensor's offset {prev_offset}: tensor infos must be in data order",
                                        field=where, offset=info_offset)  # fmt: skip
                raise InvalidTensor(f"tensor {name!r} at offset {offset} overlaps the previous tensor, which ends "
                                    f"at {prev_end}", field=where, offset=info_offset)  # fmt: skip
            prev_offset, prev_end = offset, offset + n_bytes
            infos.append(info)
        return infos, pos

    def _tensor_info(self, pos: int, index: int, names: set[bytes]) -> tuple[RawTensor, int]:
        fast = self._plain_tensor_info(pos, names)
        if fast is not None:
            return fast
        buf, lw = self.buf, self.lw
        base = f"tensors[{index}]"
        info_offset = pos
        self._need(pos, lw, base + ".name")
        size = self.length.unpack_from(buf, pos)[0]
        if size >= GGML_MAX_NAME:
            raise InvalidTensor(
                f"tensor name of {size} bytes; at most {GGML_MAX_NAME - 1} allowed",
                field=base + ".name",
                offset=pos,
            )
        pos += lw
        self._need(pos, size, base + ".name")
        raw = buf[pos : pos + size]
        name = self._text(raw, base + ".name")
        if raw in names:
            self.anomalies.append(Anomaly("duplicate_tensor", name, f"tensor name {name!r} appears twice"))
        names.add(raw)
        pos += size

        self._need(pos, 4, base + ".n_dims")
        n_dims = self.u32.unpack_from(buf, pos)[0]
        if not 1 <= n_dims <= self.limits.max_dims:
            raise InvalidTensor(
                f"tensor {name!r} has {n_dims} dimensions; 1..{self.limits.max_dims} allowed",
                field=base + ".n_dims",
                offset=pos,
            )
        pos += 4
        dims_size = n_dims * self.dim_width
        self._need(pos, dims_size, base + ".shape")
        shape = struct.unpack_from(self.prefix + ("I" if self.dim_width == 4 else "Q") * n_dims, buf, pos)
        n_elements = self._element_count(name, shape, base + ".shape", pos)
        pos += dims_size

        self._need(pos, 4, base + ".type")
        ttype, n_bytes = self._tensor_type(name, shape, n_elements, base, pos)
        pos += 4

        self._need(pos, 8, base + ".offset")
        offset = self.u64.unpack_from(buf, pos)[0]
        if offset % self.alignment:
            raise InvalidTensor(
                f"tensor {name!r} offset {offset} is not a multiple of the alignment {self.alignment}",
                field=base + ".offset",
                offset=pos,
            )
        if offset + n_bytes > MAX_I64:
            raise InvalidTensor(
                f"tensor {name!r} offset {offset} + {n_bytes} bytes overflows int64",
                field=base + ".offset",
                offset=pos,
            )
        pos += 8
        return (name, shape, ttype, offset, n_elements, n_bytes, info_offset), pos

    def _plain_tensor_info(self, pos: int, names: set[bytes]) -> tuple[RawTensor, int] | None:
        """The common record in one pass (about twice as fast): all of it in the buffer, a new
        UTF-8 name, a known type whose block divides the first dimension, an aligned offset.
        None for anything else, read field by field by `_tensor_info` to name what is wrong."""
        buf, n, lw = self.buf, self.n, self.lw
        if pos + lw > n:
            return None
        size = self.length.unpack_from(buf, pos)[0]
        at = pos + lw + size
        if size >= GGML_MAX_NAME or at + 4 > n:
            return None
        raw = buf[pos + lw : at]
        n_dims = self.u32.unpack_from(buf, at)[0]
        if raw in names or not 1 <= n_dims < len(self.shapes):
            return None
        at += 4
        end = at + n_dims * self.dim_width + 12
        if end > n:
            return None
        shape = self.shapes[n_dims].unpack_from(buf, at)
        type_id, offset = self.type_and_offset.unpack_from(buf, end - 12)
        n_elements = 1
        for dim in shape:
            n_elements *= dim
        sized = plain_tensor(type_id, shape, n_elements, offset, self.alignment, self.limits.max_tensor_bytes)
        if sized is None:
            return None
        try:
            name = raw.decode("utf-8")
        except UnicodeDecodeError:
            return None
        names.add(raw)
        return (name, shape, sized[0], offset, n_elements, sized[1], pos), end

    def _element_count(self, name: str, shape: tuple[int, ...], field: str, offset: int) -> int:
        n_elements = 1
        for dim in shape:
            if dim == 0:
                raise InvalidTensor(
                    f"tensor {name!r} shape {shape} has zero elements", field=field, offset=offset
                )
            if dim > MAX_I64:
                raise InvalidTensor(
                    f"tensor {name!r} dimension {dim} overflows int64", field=field, offset=offset
                )
            n_elements *= dim
            if n_elements > MAX_I64:
                raise InvalidTensor(
                    f"tensor {name!r} shape {shape} has an element count that overflows int64",
                    field=field,
                    offset=offset,
                )
        return n_elements

    def _tensor_type(
        self, name: str, shape: tuple[int, ...], n_elements: int, base: str, pos: int
    ) -> tuple[GGMLType, int]:
        field = base + ".type"
        type_id = self.u32.unpack_from(self.buf, pos)[0]
        info = tensor_type_info(type_id)
        if info is None:
            raise UnknownTensorType(
                f"tensor {name!r} has unknown ggml type id {type_id}", field=field, offset=pos
            )
        if info.removed:
            raise UnknownTensorType(
                f"tensor {name!r} has type {info.name} (id {type_id}), which was removed from ggml",
                field=field,
                offset=pos,
            )
        if shape[0] % info.block_size:
            raise BlockSizeMismatch(
                f"tensor {name!r} first dimension {shape[0]} is not a multiple of the {info.name} "
                f"block size {info.block_size}",
                field=base + ".shape",
                offset=pos,
            )
        n_bytes = n_elements // info.block_size * info.type_size
        if n_bytes > MAX_I64:
            raise InvalidTensor(
                f"tensor {name!r} of {n_elements} {info.name} elements needs {n_bytes} bytes, overflowing int64",
                field=field,
                offset=pos,
            )
        if n_bytes > self.limits.max_tensor_bytes:
            raise LimitExceeded(
                f"tensor {name!r} needs {n_bytes} bytes, above the limit {self.limits.max_tensor_bytes}",
                field=field,
                offset=pos,
            )
        return info.type, n_bytes
