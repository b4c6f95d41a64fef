"""An artifact's tensor table, compact enough for a catalog to keep per artifact: every
tensor's name, type, shape, bytes, shard and offset, as zlib-compressed JSON.

Files have thousands of tensors and a header can declare millions; the index keeps the first
MAX_TENSORS and says how many there were (`TensorIndex.total`). A few hundred tensors cost a
few kilobytes and well under a millisecond to encode.
"""

from __future__ import annotations

import functools
import json
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

import msgspec

from registry.gguf.model import GGUFHeader
from registry.gguf.types import GGMLType

MAX_TENSORS = 65_536  # more than any published model has; a hostile header is cut here
MAX_NAME = 256  # characters of a name kept (llama.cpp's own limit is 64 bytes)
MAX_DECODED = 64 << 20  # bytes an index may inflate to when read back: a corrupt row is refused
VERSION = 1
_TYPE_NAMES = {t: t.name for t in GGMLType}  # an enum member's `.name` is slow to ask per tensor
# Compact UTF-8 JSON, the bytes json.dumps(separators=(",", ":"), ensure_ascii=False) makes, in
# a tenth of its time: a crawl encodes one table per file.
_ENCODER = msgspec.json.Encoder()


@dataclass(frozen=True, slots=True)
class TensorRow:
    name: str
    type: str
    shape: tuple[int, ...]
    bytes: int
    shard: int  # 0-based shard the tensor is in
    offset: int  # in its shard's tensor data section


@dataclass(frozen=True)
class TensorIndex:
    total: int  # tensors the artifact declares
    stored: int  # of them kept: the first MAX_TENSORS, in file order
    # The rows as the catalog stores them, encoded once where the index is made (a reader,
    # not the catalog's writer, which holds the database's write lock). A crawl only
    # writes them: `rows` are decoded when first asked for.
    data: bytes

    @functools.cached_property
    def rows(self) -> tuple[TensorRow, ...]:
        rows = _rows(self.data)
        if rows is None:
            raise ValueError("not a tensor index")  # `decode` refuses such bytes before
        return rows[1]

    @classmethod
    def encode(cls, total: int, rows: list[list[object]]) -> TensorIndex:
        """The index of `rows`, each [name, type, shape, bytes, shard, offset] as TensorRow has them."""
        return cls(total, len(rows), zlib.compress(_ENCODER.encode([VERSION, total, rows]), 1))

    @classmethod
    def decode(cls, data: bytes) -> TensorIndex | None:
        """An index `encode` made; None for bytes of another shape (a corrupt or foreign row)."""
        decoded = _rows(data)
        if decoded is None:
            return None
        index = cls(decoded[0], len(decoded[1]), data)
        index.__dict__["rows"] = decoded[1]  # the cached_property's slot: decoded once
        return index


def _rows(data: bytes) -> tuple[int, tuple[TensorRow, ...]] | None:
    try:
        inflater = zlib.decompressobj()
        raw = inflater.decompress(data, MAX_DECODED)
        if inflater.unconsumed_tail:
            return None
        version, total, rows = json.loads(raw)
        if version != VERSION:
            return None
        return int(total), tuple(
            TensorRow(str(n), str(t), tuple(int(d) for d in shape), int(b), int(s), int(o))
            for n, t, shape, b, s, o in rows
        )
    except (zlib.error, ValueError, TypeError):
        return None


def tensor_index(headers: Sequence[GGUFHeader]) -> TensorIndex:
    """The tensor table of an artifact whose shards' headers are `headers`, in split order."""
    total = sum(len(h.tensors) for h in headers)
    rows: list[list[object]] = []
    for shard, header in enumerate(headers):
        rows += [
            [t.name[:MAX_NAME], _TYPE_NAMES[t.type], t.shape, t.n_bytes, shard, t.offset]
            for t in header.tensors[: MAX_TENSORS - len(rows)]
        ]
    return TensorIndex.encode(total, rows)


__all__ = ["MAX_TENSORS", "TensorIndex", "TensorRow", "tensor_index"]
