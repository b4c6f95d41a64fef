"""The header parser against gguf-py's reader and writer, and hand-built v1/v2 headers."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import pytest

from registry.gguf.array import GGUFArray
from registry.gguf.errors import NeedMoreData, TruncatedFile
from registry.gguf.model import GGUFHeader
from registry.gguf.reader import next_window, parse_header
from registry.gguf.types import GGMLType, ValueType
from tests.gguf.builders import Arr, HeaderBuilder, minimal

MiB = 1024 * 1024


def read_prefix(path: Path, n: int) -> bytes:
    with path.open("rb") as f:
        return f.read(n)


def parse_with_driver(path: Path, *, first: int = 2 * MiB, margin: int = 64 * 1024) -> tuple[GGUFHeader, int]:
    """What the I/O layer does: a first window, then one read per NeedMoreData."""
    size = path.stat().st_size
    window, reads = min(first, size), 1
    while True:
        try:
            return parse_header(read_prefix(path, window), file_size=size), reads
        except NeedMoreData as exc:
            assert exc.needed > exc.have
            window, reads = min(next_window(exc, margin=margin), size), reads + 1


# -- the real models against gguf.GGUFReader ----------------------------------------------------


def _reference_value(f: Any) -> Any:
    return f.contents()


def assert_same_as_reference(header: GGUFHeader, path: Path) -> None:
    ref = gguf.GGUFReader(path)
    ref_fields = {k: f for k, f in ref.fields.items() if not k.startswith("GGUF.")}
    assert list(header.fields) == list(ref_fields)
    for key, rf in ref_fields.items():
        ours = header.fields[key]
        assert int(ours.type) == int(rf.types[0]), key
        if ours.type is ValueType.ARRAY:
            assert isinstance(ours.value, GGUFArray)
            assert int(ours.value.element_type) == int(rf.types[1]), key
            assert len(ours.value) == len(rf.data), key
            assert ours.value.to_list() == _reference_value(rf), key
        else:
            assert ours.value == _reference_value(rf), key
    assert header.alignment == ref.alignment
    assert header.data_offset == ref.data_offset
    assert len(header.tensors) == len(ref.tensors)
    for ours_t, rt in zip(header.tensors, ref.tensors, strict=True):
        assert ours_t.name == rt.name
        assert ours_t.shape == tuple(int(d) for d in rt.shape)
        assert int(ours_t.type) == int(rt.tensor_type)
        assert ours_t.file_offset == rt.data_offset
        assert ours_t.n_elements == rt.n_elements
        # gguf-py sizes Q8_1 at 40 bytes a block (ggml: 36); neither sample uses Q8_1.
        assert ours_t.n_bytes == rt.n_bytes, ours_t.name


def test_real_model_matches_gguf_py(sample_model_path: Path) -> None:
    size = sample_model_path.stat().st_size
    header = parse_header(read_prefix(sample_model_path, 8 * MiB), file_size=size)
    assert header.version == 3 and header.endianness == "little"
    assert header.file_size == size
    assert_same_as_reference(header, sample_model_path)
    assert header.tensor(header.tensors[-1].name) is header.tensors[-1]


def test_gemma_vocabulary_is_lazy_and_complete(gemma3_path: Path) -> None:
    header = parse_header(read_prefix(gemma3_path, 8 * MiB))
    tokens = header.get("tokenizer.ggml.tokens")
    assert isinstance(tokens, GGUFArray) and tokens.element_type is ValueType.STRING
    assert len(tokens) == 262_144
    every = tokens.to_list()
    for i in (0, 1, 2, 1000, 131_072, 262_143, -1):
        assert tokens[i] == every[i]
    assert tokens[10:13] == every[10:13]
    scores = header.get("tokenizer.ggml.scores").to_numpy()
    assert scores.dtype == np.dtype("<f4") and scores.shape == (262_144,)
    assert not scores.flags.owndata  # a view over the header bytes, not a copy


def test_driver_needs_at_most_two_reads(sample_model_path: Path) -> None:
    header, reads = parse_with_driver(sample_model_path)
    assert reads <= 2
    whole = parse_header(read_prefix(sample_model_path, header.data_offset))
    assert [t.name for t in whole.tensors] == [t.name for t in header.tensors]


def test_every_cut_of_a_real_header_asks_for_more(smollm2_path: Path) -> None:
    full = read_prefix(smollm2_path, 2 * MiB)
    end = parse_header(full).data_offset
    size = smollm2_path.stat().st_size
    for cut in [0, 3, 4, 7, 8, 20, 23, 24, 100, *range(1000, end, end // 40), end - 1]:
        data = full[:cut]
        with pytest.raises(NeedMoreData) as info:
            parse_header(data, file_size=size)
        assert info.value.have == cut and info.value.needed > cut
        with pytest.raises(TruncatedFile):
            parse_header(data, file_size=cut)


def test_mutating_the_callers_buffer_does_not_change_the_result(smollm2_path: Path) -> None:
    data = bytearray(read_prefix(smollm2_path, 2 * MiB))
    header = parse_header(data)
    tokens = header.get("tokenizer.ggml.tokens")
    before = tokens[5]
    data[:] = bytes(len(data))
    assert tokens[5] == before


def test_memoryview_input(smollm2_path: Path) -> None:
    data = read_prefix(smollm2_path, 2 * MiB)
    assert parse_header(memoryview(data)).data_offset == parse_header(data).data_offset


# -- files written by gguf.GGUFWriter -------------------------------------------------------


def _write(path: Path, build: Any, *, endian: gguf.GGUFEndian = gguf.GGUFEndian.LITTLE) -> bytes:
    writer = gguf.GGUFWriter(path, "llama", endianess=endian)
    build(writer)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path.read_bytes()


ALL_SCALARS: list[tuple[str, ValueType, Any]] = [
    ("v.u8", ValueType.UINT8, 255),
    ("v.i8", ValueType.INT8, -128),
    ("v.u16", ValueType.UINT16, 65535),
    ("v.i16", ValueType.INT16, -32768),
    ("v.u32", ValueType.UINT32, 2**32 - 1),
    ("v.i32", ValueType.INT32, -(2**31)),
    ("v.f32", ValueType.FLOAT32, 0.5),
    ("v.bool", ValueType.BOOL, True),
    ("v.str", ValueType.STRING, "héllo ✓"),
    ("v.u64", ValueType.UINT64, 2**64 - 1),
    ("v.i64", ValueType.INT64, -(2**63)),
    ("v.f64", ValueType.FLOAT64, math.pi),
]


def _all_values(w: gguf.GGUFWriter) -> None:
    for key, vtype, value in ALL_SCALARS:
        w.add_key_value(key, value, gguf.GGUFValueType(int(vtype)))
    w.add_array("a.str", ["abc", "", "déf"])
    w.add_array("a.f32", [1.5, -2.0])
    w.add_array("a.bool", [True, False, True])
    w.add_key_value("a.u64", [1, 2**64 - 1], gguf.GGUFValueType.ARRAY, sub_type=gguf.GGUFValueType.UINT64)
    w.add_key_value("a.i8", [-1, 2], gguf.GGUFValueType.ARRAY, sub_type=gguf.GGUFValueType.INT8)
    w.add_array("a.nested", [[1, 2, 3], ["abc", "def"]])
    w.add_array("a.deep", [[[1.0], [2.0, 3.0]], [["x"]]])
    w.add_tensor("t.f32", np.arange(12, dtype=np.float32).reshape(3, 4))
    w.add_tensor("t.f16", np.ones(64, dtype=np.float16))
    w.add_tensor("t.q8_0", np.zeros((2, 34), dtype=np.uint8), raw_dtype=gguf.GGMLQuantizationType.Q8_0)


@pytest.mark.parametrize("endian", [gguf.GGUFEndian.LITTLE, gguf.GGUFEndian.BIG])
def test_gguf_writer_round_trip_every_value_type(tmp_path: Path, endian: gguf.GGUFEndian) -> None:
    data = _write(tmp_path / "m.gguf", _all_values, endian=endian)
    header = parse_header(data, file_size=len(data))
    assert header.endianness == ("big" if endian == gguf.GGUFEndian.BIG else "little")
    for key, vtype, value in ALL_SCALARS:
        assert header.fields[key].type is vtype
        assert header.get(key) == value
    assert header.get("a.str") == ["abc", "", "déf"]
    assert header.get("a.f32").to_list() == [1.5, -2.0]
    assert header.get("a.bool").to_list() == [True, False, True]
    assert header.get("a.u64").element_type is ValueType.UINT64
    assert header.get("a.u64").to_list() == [1, 2**64 - 1]
    assert header.get("a.i8").to_numpy().tolist() == [-1, 2]
    nested = header.get("a.nested")
    assert nested.element_type is ValueType.ARRAY
    assert nested.to_list() == [[1, 2, 3], ["abc", "def"]]
    assert [a.element_type for a in nested] == [ValueType.INT32, ValueType.STRING]
    assert nested[1][0] == "abc" and nested[-2][2] == 3
    deep = header.get("a.deep")
    assert deep.to_list() == [[[1.0], [2.0, 3.0]], [["x"]]]
    assert deep[1][0].element_type is ValueType.STRING
    t = {t.name: t for t in header.tensors}
    assert t["t.f32"].shape == (4, 3) and t["t.f32"].n_bytes == 48
    assert t["t.f16"].type is GGMLType.F16 and t["t.f16"].n_bytes == 128
    assert t["t.q8_0"].shape == (32, 2) and t["t.q8_0"].n_bytes == 68
    # The data each tensor info points at is the array that was written.
    f32 = np.frombuffer(
        data, dtype=">f4" if header.endianness == "big" else "<f4", count=12, offset=t["t.f32"].file_offset
    )
    assert f32.tolist() == list(range(12))


@pytest.mark.parametrize("alignment", [8, 16, 32, 64, 128, 256, 512, 1024])
def test_gguf_writer_alignments(tmp_path: Path, alignment: int) -> None:
    def build(w: gguf.GGUFWriter) -> None:
        w.add_custom_alignment(alignment)
        for i in range(5):
            w.add_tensor(f"t{i}", np.full(3 + i, i, dtype=np.float32))

    data = _write(tmp_path / "m.gguf", build)
    header = parse_header(data, file_size=len(data))
    assert header.alignment == alignment and header.data_offset % alignment == 0
    for i, t in enumerate(header.tensors):
        assert t.offset % alignment == 0
        assert np.frombuffer(data, "<f4", 3 + i, t.file_offset).tolist() == [float(i)] * (3 + i)


def test_gguf_writer_many_tensors(tmp_path: Path) -> None:
    def build(w: gguf.GGUFWriter) -> None:
        for i in range(2000):
            w.add_tensor(f"blk.{i}.weight", np.zeros((2, 16), dtype=np.float16))

    data = _write(tmp_path / "m.gguf", build)
    header = parse_header(data, file_size=len(data))
    assert header.tensor_count == 2000
    assert header.tensor("blk.1999.weight") is header.tensors[-1]
    assert header.data_size == header.tensors[-1].offset + 64


def test_gguf_writer_split_model_every_shard_parses(tmp_path: Path) -> None:
    writer = gguf.GGUFWriter(tmp_path / "m.gguf", "llama", split_max_tensors=2)
    for i in range(5):
        writer.add_tensor(f"t{i}", np.zeros(8, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    shards = sorted(tmp_path.glob("m-*-of-*.gguf"))
    assert len(shards) == 3
    names = []
    for i, shard in enumerate(shards):
        data = shard.read_bytes()
        header = parse_header(data, file_size=len(data))
        assert header.get("split.no") == i and header.get("split.count") == 3
        assert header.get("split.tensors.count") == 5
        names += [t.name for t in header.tensors]
    assert names == [f"t{i}" for i in range(5)]


# -- hand-built headers ---------------------------------------------------------------------


@pytest.mark.parametrize("version", [1, 2, 3])
@pytest.mark.parametrize("endian", ["<", ">"])
def test_hand_built_versions(version: int, endian: str) -> None:
    b = minimal(version, endian)
    b.kv(
        "nested",
        ValueType.ARRAY,
        Arr(ValueType.ARRAY, [Arr(ValueType.INT32, [1, 2, 3]), Arr(ValueType.STRING, ["abc", "def"])]),
    )
    data = b.build(with_data=True)
    header = parse_header(data, file_size=len(data))
    assert header.version == version
    assert header.endianness == ("little" if endian == "<" else "big")
    assert header.get("llama.context_length") == 2048
    assert header.get("tokenizer.ggml.tokens").to_list() == ["<s>", "</s>", "a", "bc", "déf"]
    assert header.get("tokenizer.ggml.tokens")[4] == "déf"
    assert header.get("tokenizer.ggml.scores").to_list() == [0.0, -1.0, -2.5, 3.25, 4.0]
    assert header.get("flag") is True
    nested = header.get("nested")
    assert nested.to_list() == [[1, 2, 3], ["abc", "def"]]
    assert [a.element_type for a in nested] == [ValueType.INT32, ValueType.STRING]
    emb, norm = header.tensors
    assert emb.shape == (64, 5) and emb.type is GGMLType.Q8_0 and emb.n_bytes == 5 * 2 * 34
    assert norm.offset == 352 and norm.n_bytes == 256
    assert header.data_offset % 32 == 0 and norm.file_offset == header.data_offset + 352


def test_array_equality_keeps_inner_types() -> None:
    def nested(inner: ValueType) -> GGUFArray:
        b = HeaderBuilder().kv("x", ValueType.ARRAY, Arr(ValueType.ARRAY, [Arr(inner, [1, 2])]))
        return parse_header(b.build()).get("x")

    assert nested(ValueType.INT32) == nested(ValueType.INT32)
    assert nested(ValueType.INT32) != nested(ValueType.UINT8)
    assert nested(ValueType.INT32) == [[1, 2]]


def test_empty_header_and_default_alignment() -> None:
    data = HeaderBuilder().build()
    header = parse_header(data, file_size=len(data))
    assert header.kv_count == 0 and header.tensor_count == 0
    assert header.alignment == 32 and header.data_offset == 32


def test_string_array_views() -> None:
    b = HeaderBuilder().kv("s", ValueType.ARRAY, Arr(ValueType.STRING, ["a", "bb", "", "dddd"]))
    arr = parse_header(b.build()).get("s")
    assert list(arr) == ["a", "bb", "", "dddd"]
    assert arr[2] == "" and arr[-1] == "dddd"
    assert arr.nbytes == 4 * 8 + 7 and bytes(arr.raw[8:9]) == b"a"
    with pytest.raises(IndexError):
        arr[4]
    with pytest.raises(TypeError):
        arr.to_numpy()


def test_next_window_always_grows() -> None:
    assert next_window(NeedMoreData(10, have=5), margin=100) == 110
    assert next_window(NeedMoreData(3, have=5), margin=0) == 6


# -- NeedMoreData estimates -------------------------------------------------------------------


def _vocab_model(n_tokens: int) -> bytes:
    b = HeaderBuilder()
    b.kv("general.architecture", ValueType.STRING, "llama")
    b.kv("tokenizer.ggml.model", ValueType.STRING, "llama")
    b.kv(
        "tokenizer.ggml.tokens", ValueType.ARRAY, Arr(ValueType.STRING, [f"tok{i}" for i in range(n_tokens)])
    )
    b.kv(
        "tokenizer.ggml.scores", ValueType.ARRAY, Arr(ValueType.FLOAT32, [float(-i) for i in range(n_tokens)])
    )
    b.kv("tokenizer.ggml.token_type", ValueType.ARRAY, Arr(ValueType.INT32, [1] * n_tokens))
    b.kv("tokenizer.chat_template", ValueType.STRING, "{{ messages }}" * 20)
    for i in range(50):
        b.tensor(f"blk.{i}.attn_q.weight", [64, 64], GGMLType.F16)
    return b.build()


@pytest.mark.parametrize("fraction", [0.1, 0.3, 0.6])
def test_estimate_inside_a_vocabulary_covers_the_arrays_after_it(fraction: float) -> None:
    data = _vocab_model(100_000)
    end = parse_header(data).data_offset
    tokens_end = data.index(b"tokenizer.ggml.scores")
    with pytest.raises(NeedMoreData) as info:
        parse_header(data[: int(tokens_end * fraction)])
    assert info.value.field is not None and info.value.field.startswith("tokenizer.ggml.tokens[")
    # Enough for the whole header in one more read, and not wildly more.
    assert end <= info.value.needed <= 1.5 * end


def test_estimate_inside_tensor_infos_uses_the_tensor_count() -> None:
    b = HeaderBuilder()
    for i in range(2000):
        b.tensor(f"blk.{i}.ffn_down.weight", [32, 8], GGMLType.Q8_0)
    data = b.build()
    end = parse_header(data).data_offset
    with pytest.raises(NeedMoreData) as info:
        parse_header(data[: len(data) // 3])
    assert info.value.field is not None and info.value.field.startswith("tensors[")
    assert end <= info.value.needed <= 1.2 * end


def test_estimate_never_passes_the_file_size() -> None:
    data = _vocab_model(10_000)
    with pytest.raises(NeedMoreData) as info:
        parse_header(data[:5000], file_size=len(data))
    assert 5000 < info.value.needed <= len(data)
