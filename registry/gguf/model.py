"""What the header parser produces: the parsed header of one GGUF file.

Plain frozen dataclasses (and a named tuple per tensor), no I/O. Large arrays stay as `GGUFArray` views over the bytes
they came from and are decoded only when asked (see `registry.gguf.array`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

from registry.gguf.types import GGMLType, ValueType

Endianness = Literal["little", "big"]


@dataclass(frozen=True, slots=True)
class Field:
    """One metadata key/value pair as stored in the file."""

    key: str
    type: ValueType
    value: Any  # int | float | bool | str | GGUFArray
    offset: int  # byte offset of the key's length prefix in the file


class TensorInfo(NamedTuple):
    """One tensor's record. A named tuple rather than a frozen dataclass: a header makes
    hundreds to thousands of them, and a tuple is built several times faster."""

    name: str
    shape: tuple[int, ...]  # ggml order: shape[0] is the fastest-varying dimension (ne[0])
    type: GGMLType
    offset: int  # relative to the start of the tensor data section
    file_offset: int  # absolute offset in the file (data_offset + offset)
    n_elements: int
    n_bytes: int
    info_offset: int  # byte offset of this tensor info record in the file


@dataclass(frozen=True, slots=True)
class Anomaly:
    """Something llama.cpp would refuse or mangle that the parser read past, to report it.

    `kind` is one of `ANOMALY_KINDS`; `field` names the key or tensor it concerns.
    """

    kind: str
    field: str
    message: str


# duplicate_key: a key seen again (the first value is kept, as gguf-py does);
# duplicate_tensor: a tensor name seen again (both are kept in `tensors`);
# invalid_utf8: a string value or tensor name that is not valid UTF-8 (decoded with U+FFFD);
# alignment_type: general.alignment held in an integer type other than uint32.
ANOMALY_KINDS = ("duplicate_key", "duplicate_tensor", "invalid_utf8", "alignment_type")


@dataclass(frozen=True, slots=True)
class GGUFHeader:
    version: int
    endianness: Endianness
    fields: Mapping[str, Field]
    tensors: tuple[TensorInfo, ...]
    alignment: int
    # Offset where the tensor data section starts (end of tensor infos, padded to the
    # alignment): the number of bytes a reader needs to have the whole header.
    data_offset: int
    file_size: int | None = None
    # What the parser read past rather than rejecting the file, in file order.
    anomalies: tuple[Anomaly, ...] = ()
    _by_name: Mapping[str, TensorInfo] = field(default_factory=dict, repr=False, compare=False)

    @property
    def header_bytes(self) -> int:
        return self.data_offset

    @property
    def kv_count(self) -> int:
        return len(self.fields)

    @property
    def tensor_count(self) -> int:
        return len(self.tensors)

    @property
    def data_size(self) -> int:
        """Bytes of tensor data the tensor infos describe (end of the last tensor: the parser
        holds them in data order and not overlapping)."""
        last = self.tensors[-1] if self.tensors else None
        return last.offset + last.n_bytes if last else 0

    def get(self, key: str, default: Any = None) -> Any:
        f = self.fields.get(key)
        return default if f is None else f.value

    def tensor(self, name: str) -> TensorInfo | None:
        if self._by_name:
            return self._by_name.get(name)
        return next((t for t in self.tensors if t.name == name), None)
