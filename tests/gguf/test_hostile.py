"""Hostile and broken headers: each class of bad field gets its typed error, naming the field.

The llama.cpp advisories each name a field class of `gguf_init_from_file`; the tests below
that carry an advisory id rebuild that class of input. The public write-ups found for the
TALOS-2024-1912..1916 series give the function and the kind of bug (unchecked counts and
lengths sizing allocations) but not a field per id we could confirm, so those ids are mapped
to the closest field class, as each docstring says. CVE-2025-53630, CVE-2026-27940 and
CVE-2026-33298 are described publicly as integer overflows in tensor and data sizing.
"""

from __future__ import annotations

import struct

import pytest

from registry.gguf.errors import (
    BadMagic,
    GGUFError,
    InvalidTensor,
    InvalidValue,
    LimitExceeded,
    NeedMoreData,
    PastEndOfFile,
    TruncatedFile,
    UnknownTensorType,
    UnknownValueType,
    UnsupportedVersion,
)
from registry.gguf.limits import Limits
from registry.gguf.reader import parse_header
from registry.gguf.types import GGMLType, ValueType
from tests.gguf.builders import Arr, HeaderBuilder, minimal

U64_MAX = 2**64 - 1
I64_MAX = 2**63 - 1


def expect(
    cls: type[GGUFError], field: str, data: bytes, *, whole: bool = False, limits: Limits | None = None
) -> GGUFError:
    """Parse `data` (as a whole file when `whole`) and check the error class and field."""
    with pytest.raises(cls) as info:
        parse_header(data, file_size=len(data) if whole else None, limits=limits)
    assert info.value.field == field, str(info.value)
    assert info.value.offset is not None
    return info.value


def one_kv(vtype_id: int, payload: bytes, key: str = "k", version: int = 3) -> bytes:
    return HeaderBuilder(version=version).kv_raw(key, vtype_id, payload).build()


# -- preamble ---------------------------------------------------------------------------------


def test_bad_magic() -> None:
    err = expect(BadMagic, "magic", HeaderBuilder(magic=b"GGML").build())
    assert "GGML" in err.message


@pytest.mark.parametrize("version", [0, 4, 2**31])
def test_unsupported_version(version: int) -> None:
    err = expect(UnsupportedVersion, "version", HeaderBuilder(version=version).build()[:24])
    assert str(version) in err.message


def test_kv_count_overflow_talos_2024_1912() -> None:
    """TALOS-2024-1912: a huge `n_kv` made llama.cpp allocate kv structs by an untrusted count."""
    expect(LimitExceeded, "kv_count", HeaderBuilder(kv_count=U64_MAX).build())
    expect(LimitExceeded, "kv_count", HeaderBuilder(kv_count=70_000).build())
    # Under the configured limit but more than the file could hold.
    err = expect(PastEndOfFile, "kv_count", HeaderBuilder(kv_count=1000).build(), whole=True)
    assert isinstance(err, TruncatedFile) and isinstance(err, LimitExceeded)


def test_tensor_count_overflow_talos_2024_1914() -> None:
    """TALOS-2024-1914: a huge `n_tensors` sized the tensor-info allocation (closest class:
    the tensor count; the advisory text names the count and an overflowed multiplication)."""
    expect(LimitExceeded, "tensor_count", HeaderBuilder(tensor_count=U64_MAX).build())
    expect(LimitExceeded, "tensor_count", HeaderBuilder(tensor_count=2_000_000).build())
    expect(PastEndOfFile, "tensor_count", HeaderBuilder(tensor_count=100).build(), whole=True)
    # 700k tensor infos of at least 32 bytes cannot fit in a 16 MiB header limit.
    expect(
        LimitExceeded,
        "tensor_count",
        HeaderBuilder(tensor_count=700_000).build(),
        limits=Limits(max_header_bytes=16 << 20),
    )


# -- strings and keys -------------------------------------------------------------------------


def test_string_length_overflow_talos_2024_1913() -> None:
    """TALOS-2024-1913: `gguf_fread_str` trusted the string length (closest class: key and
    value string lengths)."""
    b = HeaderBuilder()
    hostile_key = HeaderBuilder(kv_count=1).build() + b.u64(U64_MAX) + b"k"
    expect(LimitExceeded, "kv[0].key", hostile_key)
    value = one_kv(ValueType.STRING, b.u64(2**40) + b"abc")
    expect(LimitExceeded, "k", value)
    # Within the limits but past the end of a file of known size.
    value = one_kv(ValueType.STRING, b.u64(1000) + b"abc")
    expect(PastEndOfFile, "k", value, whole=True)
    # Over a configured limit even though the bytes are there.
    value = one_kv(ValueType.STRING, b.string("x" * 100))
    expect(LimitExceeded, "k", value, limits=Limits(max_string_length=50))


def test_string_length_without_file_size_asks_for_at_most_the_header_limit() -> None:
    b = HeaderBuilder()
    data = one_kv(ValueType.STRING, b.u64(10 << 20) + b"abc")
    with pytest.raises(NeedMoreData) as info:
        parse_header(data)
    assert data.__len__() < info.value.needed <= Limits().max_header_bytes
    expect(LimitExceeded, "k", data, limits=Limits(max_header_bytes=1 << 20))


def test_empty_key() -> None:
    expect(InvalidValue, "kv[0].key", one_kv(ValueType.UINT8, b"\x01", key=""))


@pytest.mark.parametrize("key", ["clé", "k\u2028"])
def test_non_ascii_key(key: str) -> None:
    err = expect(InvalidValue, "kv[0].key", one_kv(ValueType.UINT8, b"\x01", key=key))
    assert "ASCII" in err.message


def test_duplicate_key_is_read_past() -> None:
    """llama.cpp refuses it; the parser keeps the first value and records it, to report it."""
    b = HeaderBuilder().kv("a", ValueType.UINT8, 1).kv("b", ValueType.UINT8, 2).kv("a", ValueType.UINT8, 3)
    header = parse_header(b.build())
    assert header.get("a") == 1 and header.get("b") == 2
    assert [(a.kind, a.field) for a in header.anomalies] == [("duplicate_key", "a")]


# -- value types ------------------------------------------------------------------------------


def test_unknown_value_type() -> None:
    err = expect(UnknownValueType, "k", one_kv(13, b"\x00" * 8))
    assert "13" in err.message
    b = HeaderBuilder()
    err = expect(UnknownValueType, "k", one_kv(ValueType.ARRAY, b.u32(99) + b.u64(1) + b"\x00"))
    assert "99" in err.message


@pytest.mark.parametrize("byte", [2, 0xFF])
def test_bool_bytes_other_than_0_or_1(byte: int) -> None:
    expect(InvalidValue, "k", one_kv(ValueType.BOOL, bytes([byte])))
    b = HeaderBuilder()
    payload = b.u32(ValueType.BOOL) + b.u64(4) + bytes([0, 1, byte, 0])
    expect(InvalidValue, "k[2]", one_kv(ValueType.ARRAY, payload))


def test_array_length_overflow_talos_2024_1916() -> None:
    """TALOS-2024-1916: the array length of a kv sized an allocation (closest class: array
    counts of every element type, checked before anything is allocated)."""
    b = HeaderBuilder()
    for etype in (ValueType.UINT64, ValueType.STRING, ValueType.ARRAY):
        payload = b.u32(etype) + b.u64(U64_MAX)
        expect(LimitExceeded, "k", one_kv(ValueType.ARRAY, payload))
        # Under the count limit, but the elements cannot fit in what is left of the file.
        payload = b.u32(etype) + b.u64(1000) + bytes(16)
        expect(PastEndOfFile, "k", one_kv(ValueType.ARRAY, payload), whole=True)
    # CVE-2025-53630 follow-ups added "file size check for arrays": 2**61 uint64 elements
    # overflow a 64-bit byte count; the Python product is exact and over every limit.
    payload = b.u32(ValueType.UINT64) + b.u64(2**61)
    expect(LimitExceeded, "k", one_kv(ValueType.ARRAY, payload), limits=Limits(max_array_length=2**62))
    payload = b.u32(ValueType.INT32) + b.u64(100) + bytes(400)
    expect(LimitExceeded, "k", one_kv(ValueType.ARRAY, payload), limits=Limits(max_array_length=99))


def test_string_in_array_over_the_limit() -> None:
    b = HeaderBuilder().kv("k", ValueType.ARRAY, Arr(ValueType.STRING, ["a", "b" * 100, "c"]))
    expect(LimitExceeded, "k[1]", b.build(), limits=Limits(max_string_length=64))
    b = HeaderBuilder()
    payload = b.u32(ValueType.STRING) + b.u64(3) + b.string("a") + b.u64(U64_MAX) + b"x"
    expect(LimitExceeded, "k[1]", one_kv(ValueType.ARRAY, payload))
    expect(
        PastEndOfFile,
        "k[1]",
        one_kv(ValueType.ARRAY, b.u32(ValueType.STRING) + b.u64(2) + b.string("a") + b.u64(500) + bytes(8)),
        whole=True,
    )


def test_nesting_deeper_than_the_limit() -> None:
    value: Arr = Arr(ValueType.INT32, [1])
    for _ in range(8):
        value = Arr(ValueType.ARRAY, [value])
    data = HeaderBuilder().kv("deep", ValueType.ARRAY, value).build()
    expect(LimitExceeded, "deep[0][0][0][0][0][0][0][0]", data)
    assert parse_header(data, limits=Limits(max_nesting_depth=9)).get("deep").to_list() == [[[[[[[[[1]]]]]]]]]


def test_nested_arrays_as_deep_as_a_python_stack_cannot_recurse() -> None:
    """gguf-py's reader hits RecursionError on deeply nested arrays; the depth limit stops
    the walk long before Python's stack does."""
    b = HeaderBuilder()
    payload = (b.u32(ValueType.ARRAY) + b.u64(1)) * 5000 + b.u32(ValueType.UINT8) + b.u64(0)
    err = expect(LimitExceeded, "k" + "[0]" * 8, one_kv(ValueType.ARRAY, payload))
    assert "nested" in err.message


@pytest.mark.parametrize(
    ("vtype", "value"),
    [
        (ValueType.UINT32, 0),
        (ValueType.UINT32, 48),
        (ValueType.INT32, -32),
        (ValueType.FLOAT32, 32.0),
        (ValueType.STRING, "32"),
    ],
)
def test_bad_alignment(vtype: ValueType, value: object) -> None:
    data = HeaderBuilder().kv("general.alignment", vtype, value).build()
    expect(InvalidValue, "general.alignment", data)


def test_header_larger_than_the_limit() -> None:
    data = minimal().build()
    expect(LimitExceeded, "tensor_count", data[:40], limits=Limits(max_header_bytes=30))
    big = HeaderBuilder().kv("k", ValueType.STRING, "x" * 5000).build()
    expect(LimitExceeded, "k", big, limits=Limits(max_header_bytes=4096))


# -- tensor infos -----------------------------------------------------------------------------


def one_tensor(shape: list[int], ggml_type: int = GGMLType.F32, offset: int | None = 0, **kw: int) -> bytes:
    return HeaderBuilder().tensor("t", shape, ggml_type, offset, **kw).build()


@pytest.mark.parametrize("n_dims", [0, 5, 2**32 - 1])
def test_n_dims_out_of_range_talos_2024_1915(n_dims: int) -> None:
    """TALOS-2024-1915: tensor info `n_dims` indexed a fixed array of GGML_MAX_DIMS (closest
    class: the dimension count of a tensor info)."""
    shape = [32] * min(n_dims, 6)
    expect(InvalidTensor, "tensors[0].n_dims", one_tensor(shape, n_dims=n_dims))


def test_zero_dimension_means_zero_elements() -> None:
    err = expect(InvalidTensor, "tensors[0].shape", one_tensor([32, 0]))
    assert "zero elements" in err.message


def test_dimension_beyond_int64() -> None:
    expect(InvalidTensor, "tensors[0].shape", one_tensor([I64_MAX + 1]))


def test_element_count_overflow_cve_2026_33298() -> None:
    """CVE-2026-33298: tensor sizing overflowed so that a logical exabyte tensor got a tiny
    allocation. Dimensions whose product wraps a 64-bit integer are refused."""
    # 2**32 * 2**32 wraps to 0 in uint64 arithmetic.
    err = expect(InvalidTensor, "tensors[0].shape", one_tensor([2**32, 2**32]))
    assert "overflow" in err.message
    expect(InvalidTensor, "tensors[0].shape", one_tensor([2**31, 2**31, 2**31, 2]))


def test_byte_size_overflow_cve_2025_53630() -> None:
    """CVE-2025-53630: the byte size of tensor data (ggml_nbytes) overflowed in
    gguf_init_from_file_impl. Elements fit in int64 but bytes do not."""
    err = expect(InvalidTensor, "tensors[0].type", one_tensor([2**62], GGMLType.F32))
    assert "overflowing int64" in err.message
    expect(
        LimitExceeded,
        "tensors[0].type",
        one_tensor([2**40], GGMLType.F32),
        limits=Limits(max_tensor_bytes=2**41),
    )


def test_data_section_size_overflow_cve_2026_27940() -> None:
    """CVE-2026-27940 bypassed the CVE-2025-53630 fix in gguf_init_from_file_impl (undersized
    allocation from an overflowed total). Closest class: each tensor size fits, but the
    running total of the data section (offset + size) overflows. Refused per tensor."""
    b = HeaderBuilder().tensor("a", [2**60], GGMLType.F32, 0).tensor("b", [2**60], GGMLType.F32, 2**62)
    err = expect(InvalidTensor, "tensors[1].offset", b.build())
    assert "overflows" in err.message


def test_first_dimension_not_a_multiple_of_the_block() -> None:
    err = expect(InvalidTensor, "tensors[0].shape", one_tensor([33, 2], GGMLType.Q4_K))
    assert "256" in err.message


@pytest.mark.parametrize("type_id", [max(GGMLType) + 1, 1000, 2**32 - 1])
def test_unknown_ggml_type(type_id: int) -> None:
    err = expect(UnknownTensorType, "tensors[0].type", one_tensor([32], type_id))
    assert str(type_id) in err.message


@pytest.mark.parametrize("ggml_type", [GGMLType.Q4_0_4_4, GGMLType.Q4_2, GGMLType.IQ4_NL_8_8])
def test_removed_ggml_type(ggml_type: GGMLType) -> None:
    err = expect(UnknownTensorType, "tensors[0].type", one_tensor([32], ggml_type))
    assert f"{ggml_type.name} (id {int(ggml_type)}), which was removed" in err.message


def test_tensor_name_length() -> None:
    ok = HeaderBuilder().tensor("x" * 63, [4], GGMLType.F32).build()
    assert parse_header(ok).tensors[0].name == "x" * 63
    bad = HeaderBuilder().tensor("x" * 64, [4], GGMLType.F32).build()
    expect(InvalidTensor, "tensors[0].name", bad)
    b = HeaderBuilder(tensor_count=1).build()
    expect(InvalidTensor, "tensors[0].name", b + HeaderBuilder().u64(U64_MAX))


def test_duplicate_tensor_name_is_read_past() -> None:
    b = HeaderBuilder().tensor("a", [4]).tensor("b", [4]).tensor("a", [4])
    header = parse_header(b.build())
    assert [t.name for t in header.tensors] == ["a", "b", "a"]
    assert [(a.kind, a.field) for a in header.anomalies] == [("duplicate_tensor", "a")]


def test_tensor_offset_not_aligned() -> None:
    expect(InvalidTensor, "tensors[0].offset", one_tensor([4], offset=8))
    b = HeaderBuilder().kv("general.alignment", ValueType.UINT32, 64).tensor("a", [4], offset=32)
    expect(InvalidTensor, "tensors[0].offset", b.build())


def test_tensor_overlap() -> None:
    b = HeaderBuilder().tensor("a", [64], offset=0).tensor("b", [4], offset=128)
    err = expect(InvalidTensor, "tensors[1].offset", b.build())
    assert "overlaps" in err.message


def test_tensor_out_of_order() -> None:
    b = HeaderBuilder().tensor("a", [4], offset=64).tensor("b", [4], offset=0)
    err = expect(InvalidTensor, "tensors[1].offset", b.build())
    assert "order" in err.message


def test_tensor_data_past_the_end_of_the_file() -> None:
    b = HeaderBuilder().tensor("a", [8]).tensor("b", [8])
    whole = b.build(with_data=True)
    assert parse_header(whole, file_size=len(whole)).tensors[1].n_bytes == 32
    with pytest.raises(TruncatedFile) as info:
        parse_header(whole[:-1], file_size=len(whole) - 1)
    assert info.value.field == "tensors[1].offset"
    # Only the header was read, the size comes from the hub listing.
    with pytest.raises(TruncatedFile):
        parse_header(b.build(), file_size=len(whole) - 1)


# -- truncation -------------------------------------------------------------------------------


def test_whole_file_that_ends_inside_the_header_is_truncated() -> None:
    data = minimal().build()
    for cut in range(len(data)):
        with pytest.raises(TruncatedFile):
            parse_header(data[:cut], file_size=cut)
        with pytest.raises(NeedMoreData) as info:
            parse_header(data[:cut])
        assert info.value.needed > cut and info.value.have == cut


def test_file_size_smaller_than_the_bytes_given() -> None:
    data = minimal().build(with_data=True)
    with pytest.raises(TruncatedFile):
        parse_header(data, file_size=30)


def test_v1_counts_are_32_bit() -> None:
    b = HeaderBuilder(version=1)
    data = b.header()[:8] + struct.pack("<II", 0, 2) + b.string("a") + b.u32(ValueType.UINT8) + b"\x05"
    with pytest.raises(NeedMoreData):
        parse_header(data)
    # Read as 64-bit, these counts would be 2**33 tensors and no kvs.
    expect(PastEndOfFile, "kv_count", data, whole=True)


@pytest.mark.parametrize(
    "kwargs", [{"max_kv_count": -1}, {"max_dims": 5}, {"max_dims": 0}, {"max_nesting_depth": 10_000}]
)
def test_limits_reject_nonsense(kwargs: dict[str, int]) -> None:
    with pytest.raises(ValueError):
        Limits(**kwargs)


def test_empty_tensor_names_are_allowed_and_counted_as_the_smallest_record() -> None:
    b = HeaderBuilder().tensor("", [4]).tensor("x", [4])
    data = b.build(with_data=True)
    header = parse_header(data, file_size=len(data))
    assert [t.name for t in header.tensors] == ["", "x"]


def test_bad_magic_is_known_from_the_first_byte() -> None:
    expect(BadMagic, "magic", b"P")
    with pytest.raises(NeedMoreData):
        parse_header(b"GG")
