"""The public API: checks and typed errors, input kinds, number types, byte order, streaming."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from registry.gguf.types import TENSOR_TYPES, GGMLType
from registry.quant import (
    BadTensorData,
    UnsupportedType,
    dequantize,
    dequantize_chunks,
    kernels,
    supported_types,
    tensor_rows,
)
from tests.quant.helpers import assert_same_bits
from tests.quant.refgen import random_blocks

MINE = [
    GGMLType.F32, GGMLType.F16, GGMLType.BF16, GGMLType.F64,
    GGMLType.I8, GGMLType.I16, GGMLType.I32, GGMLType.I64,
    GGMLType.Q4_0, GGMLType.Q4_1, GGMLType.Q5_0, GGMLType.Q5_1, GGMLType.Q8_0, GGMLType.Q8_1,
    GGMLType.Q2_K, GGMLType.Q3_K, GGMLType.Q4_K, GGMLType.Q5_K, GGMLType.Q6_K, GGMLType.Q8_K,
]  # fmt: skip

# Multi-byte fields per block as ggml-common.h declares them: (offset, count, size). Written
# out independently of the kernels' swap_fields so that the byte-order test checks them.
BIG_ENDIAN_FIELDS: dict[GGMLType, tuple[tuple[int, int, int], ...]] = {
    GGMLType.F32: ((0, 1, 4),),
    GGMLType.F16: ((0, 1, 2),),
    GGMLType.BF16: ((0, 1, 2),),
    GGMLType.F64: ((0, 1, 8),),
    GGMLType.I8: (),
    GGMLType.I16: ((0, 1, 2),),
    GGMLType.I32: ((0, 1, 4),),
    GGMLType.I64: ((0, 1, 8),),
    GGMLType.Q4_0: ((0, 1, 2),),  # d
    GGMLType.Q4_1: ((0, 2, 2),),  # d, m
    GGMLType.Q5_0: ((0, 1, 2),),  # d; qh is uint8_t[4]
    GGMLType.Q5_1: ((0, 2, 2),),  # d, m
    GGMLType.Q8_0: ((0, 1, 2),),  # d
    GGMLType.Q8_1: ((0, 2, 2),),  # d, s
    GGMLType.Q2_K: ((80, 2, 2),),  # d, dmin after scales and qs
    GGMLType.Q3_K: ((108, 1, 2),),  # d last
    GGMLType.Q4_K: ((0, 2, 2),),  # d, dmin
    GGMLType.Q5_K: ((0, 2, 2),),  # d, dmin
    GGMLType.Q6_K: ((208, 1, 2),),  # d last
    GGMLType.Q8_K: ((0, 1, 4), (260, 16, 2)),  # float d, int16 bsums
}


def _blocks(t: GGMLType, n_blocks: int, seed: int = 0) -> np.ndarray:
    return random_blocks(t, n_blocks, np.random.default_rng(seed))


def _n(t: GGMLType, n_blocks: int) -> int:
    return n_blocks * TENSOR_TYPES[t].block_size


def _swap(blocks: np.ndarray, fields: tuple[tuple[int, int, int], ...]) -> np.ndarray:
    out = blocks.copy()
    for offset, count, size in fields:
        seg = out[:, offset : offset + count * size].reshape(-1, count, size)
        out[:, offset : offset + count * size] = seg[:, :, ::-1].reshape(-1, count * size)
    return out


# --- types and errors ---------------------------------------------------------------


def test_all_my_types_are_supported_and_removed_ones_are_not() -> None:
    supported = set(supported_types())
    assert set(MINE) <= supported
    assert not {t for t in supported if TENSOR_TYPES[t].removed}
    assert list(supported_types()) == sorted(supported)


@pytest.mark.parametrize("type_id", [99, -1, int(max(GGMLType)) + 1, 1 << 40, "Q4_0", 2.0, None, True])
def test_unknown_type_is_unsupported(type_id: object) -> None:
    with pytest.raises(UnsupportedType) as exc:
        dequantize(b"\0" * 18, type_id, 32)  # type: ignore[arg-type]
    assert exc.value.code == "unsupported_type"


@pytest.mark.parametrize("t", [t for t in GGMLType if TENSOR_TYPES[t].removed], ids=lambda t: t.name)
def test_removed_type_is_unsupported_with_its_name(t: GGMLType) -> None:
    with pytest.raises(UnsupportedType, match=t.name) as exc:
        dequantize(b"\0" * 18, int(t), 32)
    assert exc.value.ggml_type == int(t)


@pytest.mark.parametrize(
    ("n_bytes", "n_elements"),
    [(18, 64), (36, 32), (17, 32), (0, 32), (18, 0), (0, 0), (18, -32), (18, 16), (18, 33)],
)
def test_length_and_count_mismatch_is_bad_tensor_data(n_bytes: int, n_elements: int) -> None:
    with pytest.raises(BadTensorData) as exc:
        dequantize(b"\0" * n_bytes, GGMLType.Q4_0, n_elements)
    assert exc.value.code == "bad_tensor_data"
    assert exc.value.ggml_type == int(GGMLType.Q4_0)


@pytest.mark.parametrize("n_elements", [True, 32.0, "32", None])
def test_non_integer_count_is_bad_tensor_data(n_elements: object) -> None:
    with pytest.raises(BadTensorData):
        dequantize(b"\0" * 18, GGMLType.Q4_0, n_elements)  # type: ignore[arg-type]


@pytest.mark.parametrize("data", [[0] * 18, "x" * 18, 18, None, np.zeros(18, dtype=object)])
def test_non_buffer_data_is_bad_tensor_data(data: object) -> None:
    with pytest.raises(BadTensorData):
        dequantize(data, GGMLType.Q4_0, 32)  # type: ignore[arg-type]


def test_huge_claimed_count_fails_before_allocating() -> None:
    with pytest.raises(BadTensorData):
        dequantize(b"\0" * 18, GGMLType.F32, 1 << 62)


# --- inputs -------------------------------------------------------------------------


def test_every_input_kind_gives_the_same_values(tmp_path: Path) -> None:
    t = GGMLType.Q4_K
    blocks = _blocks(t, 8)
    n = _n(t, 8)
    expected = dequantize(blocks.tobytes(), t, n)
    path = tmp_path / "t.bin"
    path.write_bytes(b"\x55" * 3 + blocks.tobytes())
    mm = np.memmap(path, dtype=np.uint8, mode="r")
    padded = np.zeros((8, 200), np.uint8)
    padded[:, : blocks.shape[1]] = blocks
    for data in (
        blocks,
        blocks.reshape(-1),
        bytearray(blocks.tobytes()),
        memoryview(blocks.tobytes()),
        memoryview(blocks),  # type: ignore[arg-type]
        mm[3:],  # unaligned memmap slice
        padded[:, : blocks.shape[1]],  # not contiguous
        blocks.reshape(-1).view(np.uint16),  # another dtype: its bytes
        memoryview(blocks.reshape(-1).view(np.uint16)),
    ):
        assert_same_bits(dequantize(data, t, n), expected, type(data).__name__)


def test_gguf_type_as_plain_int_or_enum() -> None:
    blocks = _blocks(GGMLType.Q8_0, 4)
    assert_same_bits(dequantize(blocks, 8, 128), dequantize(blocks, GGMLType.Q8_0, 128))


def test_result_is_fresh_1d_float32() -> None:
    raw = np.arange(8, dtype=np.float32)
    out = dequantize(raw.view(np.uint8), GGMLType.F32, 8)
    assert out.dtype == np.float32 and out.shape == (8,)
    assert not np.shares_memory(out, raw)


# --- number types -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("t", "dtype"), [(GGMLType.I8, "i1"), (GGMLType.I16, "<i2"), (GGMLType.I32, "<i4"), (GGMLType.I64, "<i8")]
)
def test_integers_become_their_float32_values(t: GGMLType, dtype: str) -> None:
    info = np.iinfo(dtype)
    values = np.array(
        [0, 1, -1, info.min, info.max, 12345 % info.max, 2**24 + 1 if info.bits > 16 else 7], dtype
    )
    got = dequantize(values.view(np.uint8), t, values.size)
    assert_same_bits(got, values.astype(np.float32), t.name)


def test_f64_rounds_to_nearest_float32() -> None:
    values = np.array([0.1, -0.0, 1e300, -1e-300, np.inf, np.nan, 1 + 2**-30], dtype="<f8")
    with np.errstate(over="ignore"):
        expected = values.astype(np.float32)
    assert_same_bits(dequantize(values.view(np.uint8), GGMLType.F64, values.size), expected)


def test_f32_keeps_every_bit_pattern() -> None:
    bits = np.array([0x7FC00001, 0xFF800001, 0x00000001, 0x80000000, 0x3F800000], dtype="<u4")
    got = dequantize(bits.view(np.uint8), GGMLType.F32, bits.size)
    assert np.array_equal(got.view(np.uint32), bits)


def test_bf16_is_the_top_half_of_float32() -> None:
    halves = np.arange(1 << 16, dtype="<u2")
    got = dequantize(halves.view(np.uint8), GGMLType.BF16, halves.size)
    assert np.array_equal(got.view(np.uint32), halves.astype(np.uint32) << 16)


# --- byte order ---------------------------------------------------------------------


@pytest.mark.parametrize("t", MINE, ids=lambda t: t.name)
def test_big_endian_blocks_give_the_little_endian_values(t: GGMLType) -> None:
    assert kernels()[t].swap_fields == tuple(f for f in BIG_ENDIAN_FIELDS[t] if f[2] > 1)
    n_blocks = 300 if TENSOR_TYPES[t].block_size > 1 else 5000
    blocks = _blocks(t, n_blocks, seed=int(t))
    big = _swap(blocks, BIG_ENDIAN_FIELDS[t])
    n = _n(t, n_blocks)
    little = dequantize(blocks, t, n)
    assert_same_bits(dequantize(big, t, n, big_endian=True), little, t.name)
    if BIG_ENDIAN_FIELDS[t]:
        assert not np.array_equal(big, blocks)


@pytest.mark.parametrize("t", [t for t in supported_types() if t not in MINE], ids=lambda t: t.name)
def test_big_endian_round_trip_for_the_other_kernels(t: GGMLType) -> None:
    # Their fields are theirs to list; here only the plumbing: swapping what the kernel
    # declares and reading with big_endian=True gives the little-endian values back.
    blocks = _blocks(t, 64, seed=int(t))
    big = _swap(blocks, kernels()[t].swap_fields)
    n = _n(t, 64)
    assert_same_bits(dequantize(big, t, n, big_endian=True), dequantize(blocks, t, n), t.name)


def test_big_endian_floats_are_whole_swapped_elements() -> None:
    values = np.random.default_rng(1).normal(size=1000).astype(np.float32)
    got = dequantize(values.astype(">f4").view(np.uint8), GGMLType.F32, values.size, big_endian=True)
    assert_same_bits(got, values)
    halves = values.astype(np.float16)
    got = dequantize(halves.astype(">f2").view(np.uint8), GGMLType.F16, halves.size, big_endian=True)
    assert_same_bits(got, halves.astype(np.float32))


def test_big_endian_does_not_touch_the_callers_buffer() -> None:
    blocks = _blocks(GGMLType.Q4_0, 4)
    before = blocks.copy()
    dequantize(blocks, GGMLType.Q4_0, 128, big_endian=True)
    assert np.array_equal(blocks, before)


# --- streaming ----------------------------------------------------------------------


@pytest.mark.parametrize("t", [GGMLType.Q4_0, GGMLType.Q6_K, GGMLType.F16], ids=lambda t: t.name)
@pytest.mark.parametrize("max_bytes", [1, 4096, 100_000, 1 << 30])
def test_chunks_are_row_aligned_bounded_and_complete(t: GGMLType, max_bytes: int) -> None:
    row_len, n_rows = 512, 37
    n = row_len * n_rows
    blocks = _blocks(t, n // TENSOR_TYPES[t].block_size)
    whole = dequantize(blocks, t, n).reshape(n_rows, row_len)
    next_row = 0
    for first, piece in dequantize_chunks(blocks, t, (row_len, n_rows), max_bytes=max_bytes):
        assert first == next_row
        assert piece.dtype == np.float32 and piece.ndim == 2 and piece.shape[1] == row_len
        assert piece.nbytes <= max_bytes or piece.shape[0] == 1
        assert_same_bits(piece, whole[first : first + piece.shape[0]])
        next_row += piece.shape[0]
    assert next_row == n_rows


def test_chunks_of_a_4d_tensor_cover_all_rows() -> None:
    shape = (64, 3, 4, 5)
    blocks = _blocks(GGMLType.Q8_0, 64 * 60 // 32)
    rows = [p for _, p in dequantize_chunks(blocks, GGMLType.Q8_0, shape, max_bytes=64 * 4 * 7)]
    assert [p.shape[0] for p in rows] == [7] * 8 + [4]
    assert_same_bits(np.concatenate(rows), dequantize(blocks, GGMLType.Q8_0, 64 * 60))


def test_chunks_big_endian() -> None:
    t = GGMLType.Q4_K
    blocks = _blocks(t, 16)
    big = _swap(blocks, BIG_ENDIAN_FIELDS[t])
    pieces = [p for _, p in dequantize_chunks(big, t, (512, 8), big_endian=True, max_bytes=4096)]
    assert_same_bits(np.concatenate(pieces), dequantize(blocks, t, 4096))


def test_chunks_read_a_memmap_lazily(tmp_path: Path) -> None:
    # A 1 GiB sparse file: taking the first piece must not read (or copy) the rest.
    path = tmp_path / "big.bin"
    row_len, n_rows = 4096, (1 << 30) // (4096 // 32 * 34)
    with path.open("wb") as f:
        f.truncate(n_rows * (row_len // 32 * 34))
    mm = np.memmap(path, dtype=np.uint8, mode="r")
    pieces = dequantize_chunks(mm, GGMLType.Q8_0, (row_len, n_rows), max_bytes=1 << 20)
    first, piece = next(pieces)
    assert first == 0 and piece.shape == (64, row_len) and not piece.any()
    first, piece = next(pieces)
    assert first == 64


def test_tensor_rows_dequantize_any_run_of_rows() -> None:
    t = GGMLType.Q6_K
    row_len, n_rows = 512, 9
    blocks = _blocks(t, row_len * n_rows // 256)
    whole = dequantize(blocks, t, row_len * n_rows).reshape(n_rows, row_len)
    rows = tensor_rows(blocks, t, (row_len, n_rows))
    assert (rows.row_len, rows.n_rows) == (row_len, n_rows)
    assert list(rows.pieces(row_len * 4 * 4)) == [0, 4, 8]
    out = np.full(3 * row_len, np.nan, dtype=np.float32)
    assert_same_bits(rows.dequantize(2, 3, out=out), whole[2:5])
    assert_same_bits(out.reshape(3, row_len), whole[2:5])  # written into the caller's array
    assert_same_bits(rows.dequantize(8, 1, threads=2), whole[8:9])
    for first, count in [(-1, 1), (0, 0), (8, 2), (9, 1)]:
        with pytest.raises(ValueError, match="rows"):
            rows.dequantize(first, count)
    with pytest.raises(ValueError, match="values"):
        rows.dequantize(0, 2, out=out)  # 3 rows' room for 2 rows: not exactly their size
    with pytest.raises(ValueError, match="max_bytes"):
        rows.pieces(0)


@pytest.mark.parametrize(
    ("shape", "error"),
    [((), BadTensorData), ((0, 4), BadTensorData), ((16, 8), BadTensorData), ((32, -1), BadTensorData),
     ((32, 5), BadTensorData), ((32.0, 4), BadTensorData), (128, BadTensorData), ("ab", BadTensorData)],
)  # fmt: skip
def test_chunks_check_everything_before_the_first_piece(
    shape: tuple[int, ...], error: type[Exception]
) -> None:
    blocks = _blocks(GGMLType.Q4_0, 4)
    with pytest.raises(error):
        dequantize_chunks(blocks, GGMLType.Q4_0, shape)


def test_chunks_reject_unknown_type_and_bad_max_bytes() -> None:
    with pytest.raises(UnsupportedType):
        dequantize_chunks(b"\0" * 18, 4, (32,))
    with pytest.raises(ValueError):
        dequantize_chunks(b"\0" * 18, GGMLType.Q4_0, (32,), max_bytes=0)


# --- writing into a caller's array ----------------------------------------------------


@pytest.mark.parametrize("t", [GGMLType.F16, GGMLType.Q8_0, GGMLType.Q4_K, GGMLType.IQ4_XS], ids=lambda t: t.name)
@pytest.mark.parametrize("threads", [1, 2])
def test_out_receives_the_values_and_is_returned(t: GGMLType, threads: int) -> None:
    blocks = _blocks(t, 40)
    n = _n(t, 40)
    buf = np.full((2, n // 2), np.nan, dtype=np.float32)  # any shape of the right size
    got = dequantize(blocks, t, n, threads=threads, out=buf)
    assert got is buf
    assert_same_bits(buf, dequantize(blocks, t, n))


@pytest.mark.parametrize(
    ("make", "why"),
    [
        (lambda n: np.zeros(n, dtype=np.float64), "float32"),
        (lambda n: np.zeros(n + 32, dtype=np.float32), "values"),
        (lambda n: np.zeros(n - 32, dtype=np.float32), "values"),
        (lambda n: np.zeros(2 * n, dtype=np.float32)[::2], "contiguous"),
        (lambda n: np.zeros(n, dtype=np.float32).reshape(-1, 32).T, "contiguous"),
        (lambda n: [0.0] * n, "numpy array"),
    ],
)
def test_bad_out_is_refused_before_any_work(make: object, why: str) -> None:
    blocks = _blocks(GGMLType.Q4_0, 8)
    out = make(256)  # type: ignore[operator]
    with pytest.raises(ValueError, match=why):
        dequantize(blocks, GGMLType.Q4_0, 256, out=out)


def test_read_only_out_is_refused_and_left_alone() -> None:
    out = np.zeros(256, dtype=np.float32)
    out.setflags(write=False)
    with pytest.raises(ValueError, match="writeable"):
        dequantize(_blocks(GGMLType.Q4_0, 8), GGMLType.Q4_0, 256, out=out)
    assert not out.any()


def test_out_overlapping_the_tensor_bytes_is_refused() -> None:
    # F32 blocks viewed as the output would be overwritten while being read
    arena = np.zeros(256 * 4, dtype=np.uint8)
    with pytest.raises(ValueError, match="overlap"):
        dequantize(arena, GGMLType.F32, 256, out=arena.view(np.float32))


def test_bad_tensor_data_is_reported_before_out_is_checked() -> None:
    with pytest.raises(BadTensorData):
        dequantize(b"\0" * 17, GGMLType.Q4_0, 32, out=np.zeros(1, dtype=np.float64))


@pytest.mark.parametrize("t", [GGMLType.Q6_K, GGMLType.F16], ids=lambda t: t.name)
def test_chunks_into_one_buffer(t: GGMLType) -> None:
    row_len, n_rows = 512, 37
    n = row_len * n_rows
    blocks = _blocks(t, n // TENSOR_TYPES[t].block_size)
    whole = dequantize(blocks, t, n).reshape(n_rows, row_len)
    buf = np.empty(5 * row_len + 100, dtype=np.float32)  # 5 rows fit, max_bytes allows 8
    seen = 0
    for first, piece in dequantize_chunks(blocks, t, (row_len, n_rows), max_bytes=8 * row_len * 4, out=buf):
        assert np.shares_memory(piece, buf) and piece.shape[0] <= 5
        assert_same_bits(piece, whole[first : first + piece.shape[0]])  # read before the next
        seen += piece.shape[0]
    assert seen == n_rows


def test_chunks_buffer_must_hold_a_row() -> None:
    blocks = _blocks(GGMLType.Q8_0, 16)
    with pytest.raises(ValueError, match="at least 256"):
        dequantize_chunks(blocks, GGMLType.Q8_0, (256, 2), out=np.empty(255, dtype=np.float32))
