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
from registry.gguf.types import GGMLType, plain_tensor

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

    encoding: tuple[str, int]  # struct byte order; width of lengths and dimensions alike
    records: tuple[_Record, ...]
    size: int  # bytes of all records
    most_dims: int
    type_and_offset: struct.Struct  # what each record has of its own

    @classmethod
    def of(cls, header: GGUFHeader) -> TensorTemplate | None:
        """The template of a parsed header; None without tensors, or with a tensor name twice
        (the parser reports each repeat as an anomaly, which a template would not)."""
        tensors = header.tensors
        if not tensors or len({t.name for t in tensors}) != len(tensors):
            return None
        prefix = "<" if header.endianness == "little" else ">"
        width = "I" if header.version == 1 else "Q"
        length, u32 = struct.Struct(prefix + width), struct.Struct(prefix + "I")
        records, at = [], 0
        for t in tensors:
            name = t.name.encode("utf-8")
            shape = struct.pack(prefix + width * len(t.shape), *t.shape)
            fixed = length.pack(len(name)) + name + u32.pack(len(t.shape)) + shape
            records.append(_Record(at, fixed, t.name, t.shape, t.n_elements))
            at += len(fixed) + 12  # the type (uint32) and the offset (uint64)
        most = max(len(t.shape) for t in tensors)
        return cls((prefix, length.size), tuple(records), at, most, struct.Struct(prefix + "IQ"))

    def read(
        self, buf: bytes, pos: int, count: int, alignment: int, max_tensor_bytes: int
    ) -> tuple[list[RawTensor], int] | None:
        """The `count` records from `pos` and where they end, if they repeat the template's
        names and shapes and every type and offset is one the parser would accept as is."""
        end = pos + self.size
        if count != len(self.records) or end > len(buf):
            return None
        unpack = self.type_and_offset.unpack_from
        infos: list[RawTensor] = []
        prev_end = 0
        for r in self.records:
            at = pos + r.at
            if not buf.startswith(r.fixed, at):
                return None
            type_id, offset = unpack(buf, at + len(r.fixed))
            sized = plain_tensor(type_id, r.shape, r.n_elements, offset, alignment, max_tensor_bytes)
            # In data order, not overlapping: each tensor starts at or after the previous one's end.
            if sized is None or offset < prev_end:
                return None
            prev_end = offset + sized[1]
            infos.append((r.name, r.shape, sized[0], offset, r.n_elements, sized[1], at))
        return infos, end


__all__ = ["RawTensor", "TensorTemplate"]
