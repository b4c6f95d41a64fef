"""A tiny hand-written GGUF byte builder for tests: any version, either byte order, and
headers no well-behaved writer would produce (hostile counts, bad types, bad offsets).

Written from the format description, independent of the parser and of gguf-py, so the
tests do not check the parser against itself.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from registry.gguf.types import SCALAR_FORMATS, TENSOR_TYPES, GGMLType, ValueType


@dataclass(frozen=True)
class Arr:
    """An array value with an explicit element type (nested `Arr`s keep their own)."""

    type: ValueType
    values: Sequence[Any]


@dataclass
class HeaderBuilder:
    version: int = 3
    endian: str = "<"  # "<" little, ">" big
    magic: bytes = b"GGUF"
    alignment: int = 32  # used for automatic tensor offsets and data padding only
    kv_count: int | None = None  # override the counts written in the preamble
    tensor_count: int | None = None
    _kvs: list[bytes] = field(default_factory=list)
    _tensors: list[bytes] = field(default_factory=list)
    _next_offset: int = 0

    # -- primitives ------------------------------------------------------------------------

    @property
    def lw(self) -> int:
        return 4 if self.version == 1 else 8

    def u32(self, value: int) -> bytes:
        return struct.pack(self.endian + "I", value)

    def u64(self, value: int) -> bytes:
        return struct.pack(self.endian + "Q", value)

    def length(self, value: int) -> bytes:
        return self.u32(value) if self.lw == 4 else self.u64(value)

    def string(self, value: str | bytes) -> bytes:
        raw = value.encode() if isinstance(value, str) else value
        return self.length(len(raw)) + raw

    def value(self, vtype: ValueType, value: Any) -> bytes:
        """The encoding of a value without its type id."""
        if vtype is ValueType.STRING:
            return self.string(value)
        if vtype is ValueType.ARRAY:
            arr = value if isinstance(value, Arr) else Arr(_infer(value), value)
            out = self.u32(arr.type) + self.length(len(arr.values))
            return out + b"".join(self.value(arr.type, v) for v in arr.values)
        fmt, _ = SCALAR_FORMATS[vtype]
        return struct.pack(self.endian + fmt, value)

    # -- records ---------------------------------------------------------------------------

    def kv(self, key: str | bytes, vtype: ValueType, value: Any) -> HeaderBuilder:
        return self.kv_raw(key, int(vtype), self.value(vtype, value))

    def kv_raw(self, key: str | bytes, type_id: int, payload: bytes) -> HeaderBuilder:
        self._kvs.append(self.string(key) + self.u32(type_id) + payload)
        return self

    def tensor(
        self,
        name: str | bytes,
        shape: Sequence[int],
        ggml_type: int = GGMLType.F32,
        offset: int | None = None,
        *,
        n_dims: int | None = None,
    ) -> HeaderBuilder:
        """Add a tensor info; without `offset`, the next aligned offset after the last."""
        if offset is None:
            offset = self._next_offset
        info = TENSOR_TYPES.get(GGMLType(ggml_type)) if ggml_type in GGMLType._value2member_map_ else None
        n_bytes = 0
        if info is not None and all(d > 0 for d in shape):
            n = 1
            for d in shape:
                n *= d
            n_bytes = n // info.block_size * info.type_size
        self._next_offset = _pad(offset + n_bytes, self.alignment)
        dim = self.u32 if self.version == 1 else self.u64
        record = self.string(name) + self.u32(len(shape) if n_dims is None else n_dims)
        record += b"".join(dim(d) for d in shape) + self.u32(ggml_type) + self.u64(offset)
        self._tensors.append(record)
        return self

    def tensor_raw(self, record: bytes) -> HeaderBuilder:
        self._tensors.append(record)
        return self

    # -- output ----------------------------------------------------------------------------

    def header(self) -> bytes:
        n_kv = len(self._kvs) if self.kv_count is None else self.kv_count
        n_tensors = len(self._tensors) if self.tensor_count is None else self.tensor_count
        out = self.magic + struct.pack(self.endian + "I", self.version)
        out += self.length(n_tensors) + self.length(n_kv)
        return out + b"".join(self._kvs) + b"".join(self._tensors)

    def build(self, *, with_data: bool = False) -> bytes:
        """The header; with `with_data`, padding and zeroed tensor data make a whole file."""
        head = self.header()
        if not with_data:
            return head
        return head + bytes(_pad(len(head), self.alignment) - len(head)) + bytes(self._next_offset)


def _pad(n: int, alignment: int) -> int:
    return -(-n // alignment) * alignment


def _infer(values: Sequence[Any]) -> ValueType:
    first = values[0] if values else 0
    if isinstance(first, Arr | list):
        return ValueType.ARRAY
    if isinstance(first, str | bytes):
        return ValueType.STRING
    if isinstance(first, bool):
        return ValueType.BOOL
    if isinstance(first, float):
        return ValueType.FLOAT32
    return ValueType.INT32


def minimal(version: int = 3, endian: str = "<") -> HeaderBuilder:
    """A small valid model: a few keys of every kind and two tensors."""
    b = HeaderBuilder(version=version, endian=endian)
    b.kv("general.architecture", ValueType.STRING, "llama")
    b.kv("general.name", ValueType.STRING, "tiny")
    b.kv("llama.context_length", ValueType.UINT32, 2048)
    b.kv("general.alignment", ValueType.UINT32, 32)
    b.kv("tokenizer.ggml.tokens", ValueType.ARRAY, Arr(ValueType.STRING, ["<s>", "</s>", "a", "bc", "déf"]))
    b.kv("tokenizer.ggml.scores", ValueType.ARRAY, Arr(ValueType.FLOAT32, [0.0, -1.0, -2.5, 3.25, 4.0]))
    b.kv("flag", ValueType.BOOL, True)
    b.tensor("token_embd.weight", [64, 5], GGMLType.Q8_0)
    b.tensor("output_norm.weight", [64], GGMLType.F32)
    return b
