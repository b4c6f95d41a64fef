"""The tensor table a catalog keeps per artifact: what it encodes, and what it refuses to decode."""

from __future__ import annotations

import json
import zlib

from registry.gguf.reader import parse_header
from registry.gguf.tensor_index import VERSION, TensorIndex, TensorRow, tensor_index
from registry.gguf.types import GGMLType, ValueType
from tests.gguf.builders import HeaderBuilder


def _header(names: list[str], shard_type: GGMLType) -> bytes:
    b = HeaderBuilder()
    b.kv("general.architecture", ValueType.STRING, "llama")
    for i, name in enumerate(names):
        b.tensor(name, [32 * (i + 1), 4], shard_type, None)
    return b.build()


def test_a_split_artifacts_table_lists_every_shards_tensors_in_order() -> None:
    first = parse_header(_header(["token_embd.weight", "blk.0.ffn_é.weight"], GGMLType.Q8_0))
    second = parse_header(_header(["output.weight"], GGMLType.F16))
    index = tensor_index([first, second])
    assert (index.total, index.stored) == (3, 3)
    assert index.rows == (
        TensorRow("token_embd.weight", "Q8_0", (32, 4), 136, 0, 0),
        TensorRow("blk.0.ffn_é.weight", "Q8_0", (64, 4), 272, 0, 160),
        TensorRow("output.weight", "F16", (32, 4), 256, 1, 0),
    )
    # What the catalog reads back is what was made.
    again = TensorIndex.decode(index.data)
    assert again is not None and again.rows == index.rows and again.total == 3


def test_the_stored_bytes_are_compact_utf8_json_as_rows_written_before_are() -> None:
    rows: list[list[object]] = [["blk.0.ffn_é.weight", "Q4_K", (4096, 11008), 25362432, 0, 0]]
    index = TensorIndex.encode(1, rows)
    before = json.dumps([VERSION, 1, rows], separators=(",", ":"), ensure_ascii=False).encode()
    assert zlib.decompress(index.data) == before


def test_bytes_of_another_shape_are_refused() -> None:
    def packed(value: object) -> bytes:
        return zlib.compress(json.dumps(value).encode())

    assert TensorIndex.decode(b"not zlib") is None
    assert TensorIndex.decode(packed([VERSION + 1, 0, []])) is None  # another version
    assert TensorIndex.decode(packed({"rows": []})) is None
    assert TensorIndex.decode(packed([VERSION, 1, [["a", "F32", [1]]]])) is None  # a short row
    assert TensorIndex.decode(packed([VERSION, 1, [["a", "F32", [1], 4, 0, 0]]])) is not None
