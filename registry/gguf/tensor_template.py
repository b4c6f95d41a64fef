"""A sibling's tensor infos read against its leader's.

Two quantizations of one model list the same tensors in the same order with the same
shapes: of each tensor info record only the type and the data offset differ. Once a leader
has been parsed, a sibling's records are checked byte for byte against the leader's names
and shapes, and only their type and offset are unpacked, instead of each record being
parsed field by field again.

Anything the template does not cover (another name or shape, a record the leader did not
have, an unknown type, a misaligned or overlapping offset) makes `read` answer None, and the
parser reads the records itself, so errors and anomalies are those of a plain parse.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from registry.gguf.model import GGUFHeader
from registry.gguf.types import MAX_I64, TENSOR_TYPES, GGMLType

# What the parser gives for one record: name, shape, type, offset, elements, bytes, and
# where the record starts.
RawTensor = tuple[str, tuple[int, ...], GGMLType, int, int, int, int]


@dataclass(frozen=True)
class _Record:
    at: int  # where the record starts, from the first record's start
    fixed: bytes  # its name's length, name, dimension count and dimensions, as encoded
    name: str
    shape: tuple[int, ...]
    n_elements: int


@dataclass(frozen=True)
class TensorTemplate:
    """The leader's tensor info records, for reading a sibling's (see the module docstring)."""

    encoding: tuple[str, int, int]  # struct byte order, length width, dimension width
    records: tuple[_Record, ...]
    size: int  # bytes of all records
    most_dims: int

    @classmethod
    def of(cls, header: GGUFHeader) -> TensorTemplate | None:
        """The template of a parsed header; None without tensors, or with a tensor name twice
        (the parser reports each repeat as an anomaly, which a template would not)."""
        tensors = header.tensors
        if not tensors or len({t.name for t in tensors}) != len(tensors):
            return None
        prefix = "<" if header.endianness == "little" else ">"
        width = 4 if header.version == 1 else 8  # of lengths and dimensions alike
        length, u32 = struct.Struct(prefix + ("I" if width == 4 else "Q")), struct.Struct(prefix + "I")
        dim = "I" if width == 4 else "Q"
        records, at = [], 0
        for t in tensors:
            name = t.name.encode("utf-8")
            fixed = (
                length.pack(len(name))
                + name
                + u32.pack(len(t.shape))
                + struct.pack(prefix + dim * len(t.shape), *t.shape)
            )
            records.append(_Record(at, fixed, t.name, t.shape, t.n_elements))
            at += len(fixed) + 12  # the type (uint32) and the offset (uint64)
        return cls((prefix, width, width), tuple(records), at, max(len(t.shape) for t in tensors))

    def read(
        self, buf: bytes, pos: int, count: int, alignment: int, max_tensor_bytes: int
    ) -> tuple[list[RawTensor], int] | None:
        """The `count` records from `pos` and where they end, if they repeat the template's
        names and shapes and every type and offset is one the parser would accept as is."""
        end = pos + self.size
        if count != len(self.records) or end > len(buf):
            return None
        type_and_offset = struct.Struct(self.encoding[0] + "IQ")
        infos: list[RawTensor] = []
        prev_end = 0
        for r in self.records:
            at = pos + r.at
            if not buf.startswith(r.fixed, at):
                return None
            type_id, offset = type_and_offset.unpack_from(buf, at + len(r.fixed))
            info = TENSOR_TYPES.get(type_id)
            if info is None or info.removed or r.shape[0] % info.block_size:
                return None
            n_bytes = r.n_elements // info.block_size * info.type_size
            # In data order, not overlapping: each tensor starts at or after the previous one's end.
            if (
                n_bytes > max_tensor_bytes
                or offset % alignment
                or offset < prev_end
                or offset + n_bytes > MAX_I64
            ):
                return None
            prev_end = offset + n_bytes
            infos.append((r.name, r.shape, info.type, offset, r.n_elements, n_bytes, at))
        return infos, end


__all__ = ["RawTensor", "TensorTemplate"]
