"""TQ1_0, TQ2_0, MXFP4, NVFP4 and Q1_0 against ggml, bit for bit.

Same references as test_iquants.py: ggml's C code (stored vectors, and live when the
library is installed; NaN payloads included) and gguf-py (NaN only has to be NaN). gguf-py
has no Q1_0, so Q1_0 is checked against ggml's C code, a scalar per-block transcription
of the format written here, and hand-computed blocks.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from registry.gguf.types import TENSOR_TYPES, GGMLType
from registry.quant import fp4, q1, ternary
from tests.quant.refgen import pattern_blocks, random_blocks
from tests.quant.test_iquants import (
    PROPERTY,
    assert_same_bits,
    blocks_strategy,
    c_reference,
    check_spec,
    gguf_reference,
    set_f16_scale,
    stored_reference,
)

KERNELS = {**ternary.KERNELS, **fp4.KERNELS, **q1.KERNELS}
TYPES = (GGMLType.TQ1_0, GGMLType.TQ2_0, GGMLType.MXFP4, GGMLType.NVFP4, GGMLType.Q1_0)
GGUF_PY_TYPES = (GGMLType.TQ1_0, GGMLType.TQ2_0, GGMLType.MXFP4, GGMLType.NVFP4)
ids = lambda t: t.name  # noqa: E731


def _f16_bytes(value: float) -> np.ndarray:
    return np.frombuffer(np.float16(value).tobytes(), dtype=np.uint8)


# ---------------------------------------------------------------- contract


@pytest.mark.parametrize("t", TYPES, ids=ids)
def test_contract(t: GGMLType) -> None:
    assert set(KERNELS) == set(TYPES)
    check_spec(t, KERNELS[t])


def test_block_layouts_agree_with_ggml_and_gguf_py() -> None:
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

    for t in TYPES:
        info = TENSOR_TYPES[t]
        assert GGML_QUANT_SIZES[GGMLQuantizationType(int(t))] == (info.block_size, info.type_size)
    # ggml-common.h: block_q1_0 = fp16 d + QK1_0/8 bytes, QK1_0 = 128; block_nvfp4 = 4 UE4M3
    # scales + QK_NVFP4/2 bytes, QK_NVFP4 = 64
    assert (TENSOR_TYPES[GGMLType.Q1_0].block_size, TENSOR_TYPES[GGMLType.Q1_0].type_size) == (128, 18)
    assert (TENSOR_TYPES[GGMLType.NVFP4].block_size, TENSOR_TYPES[GGMLType.NVFP4].type_size) == (64, 36)


@pytest.mark.parametrize("t", TYPES, ids=ids)
def test_chunks_join_seamlessly(t: GGMLType) -> None:
    blocks = random_blocks(t, 41, np.random.default_rng(8))
    whole = KERNELS[t].fn(blocks)
    assert_same_bits(KERNELS[t].fn(blocks, chunk_elements=5 * TENSOR_TYPES[t].block_size), whole)


# ---------------------------------------------------------------- against ggml's C code


@pytest.mark.parametrize("t", TYPES, ids=ids)
def test_stored_ggml_vectors(t: GGMLType) -> None:
    blocks, values = stored_reference(t)
    assert_same_bits(KERNELS[t].fn(blocks), values)


@pytest.mark.parametrize("t", TYPES, ids=ids)
def test_live_ggml_on_random_blocks(t: GGMLType) -> None:
    blocks = random_blocks(t, 512, np.random.default_rng([4, int(t)]), special_fraction=0.3)
    assert_same_bits(KERNELS[t].fn(blocks), c_reference(t, blocks))


@pytest.mark.parametrize("t", TYPES, ids=ids)
@PROPERTY
@given(data=st.data())
def test_property_against_ggml(t: GGMLType, data: st.DataObject) -> None:
    blocks = data.draw(blocks_strategy(t))
    assert_same_bits(KERNELS[t].fn(blocks), c_reference(t, blocks))


def test_fp4_every_scale_byte_against_ggml() -> None:
    for t in (GGMLType.MXFP4, GGMLType.NVFP4):
        blocks = _every_scale_and_nibble(t)
        assert_same_bits(KERNELS[t].fn(blocks), c_reference(t, blocks))


# ---------------------------------------------------------------- against gguf-py


@pytest.mark.parametrize("t", GGUF_PY_TYPES, ids=ids)
@PROPERTY
@given(data=st.data())
def test_property_against_gguf_py(t: GGMLType, data: st.DataObject) -> None:
    blocks = data.draw(blocks_strategy(t))
    assert_same_bits(KERNELS[t].fn(blocks), gguf_reference(t, blocks), nan_payload=False)


@pytest.mark.parametrize("t", GGUF_PY_TYPES, ids=ids)
def test_every_byte_value_in_every_position(t: GGMLType) -> None:
    blocks = pattern_blocks(t, np.random.default_rng(12))
    assert_same_bits(KERNELS[t].fn(blocks), gguf_reference(t, blocks), nan_payload=False)


def _every_scale_and_nibble(t: GGMLType) -> np.ndarray:
    """For MXFP4 every E8M0 byte, for NVFP4 every UE4M3 byte, each with all 256 qs bytes."""
    size = TENSOR_TYPES[t].type_size
    n_scales = 1 if t is GGMLType.MXFP4 else 4
    n = 256 * 16  # 256 scale values x 16 blocks to cover every qs byte in every position
    blocks = np.zeros((n, size), dtype=np.uint8)
    blocks[:, :n_scales] = (np.arange(n) // 16)[:, None]
    blocks[:, n_scales:] = (np.arange(n)[:, None] * 16 + np.arange(size - n_scales)) % 256
    return blocks


@pytest.mark.parametrize("t", [GGMLType.MXFP4, GGMLType.NVFP4], ids=ids)
def test_fp4_every_scale_byte_against_gguf_py(t: GGMLType) -> None:
    blocks = _every_scale_and_nibble(t)
    assert_same_bits(KERNELS[t].fn(blocks), gguf_reference(t, blocks))


def test_e8m0_edges() -> None:
    table = fp4.e8m0_half_table()
    # ggml_e8m0_to_fp32_half: 2^(e-128); 0 and 1 are denormals, 255 is not NaN
    assert table.view(np.uint32)[0] == 0x00200000 and table[0] == np.float32(2.0**-128)
    assert table[1] == np.float32(2.0**-127)
    assert table[127] == np.float32(0.5) and table[128] == np.float32(1.0)
    assert table[255] == np.float32(2.0**127)
    block = np.zeros((1, 17), dtype=np.uint8)
    block[0, 0] = 255
    block[0, 1] = 0x07  # value 0: kvalue 12 (6.0 doubled) -> 12 * 2^127 overflows to inf
    out = KERNELS[GGMLType.MXFP4].fn(block)
    assert out[0] == np.inf and out[16] == 0.0


def test_ue4m3_edges() -> None:
    table = fp4.ue4m3_half_table()
    # ggml_ue4m3_to_fp32 (already halved): 0x7F is 0 rather than NaN; the top bit is ignored
    assert table[0x00] == 0 and table[0x7F] == 0 and table[0x80] == 0
    assert table[0x7E] == np.float32(448 * 0.5)
    assert table[0xFF] == np.float32(480 * 0.5) and table[0xFE] == table[0x7E]
    assert table[0x01] == np.float32(2.0**-9 * 0.5)  # smallest subnormal
    assert table[0x38] == np.float32(0.5)  # exponent 7 = 2^0
    assert np.isfinite(table).all()


# ---------------------------------------------------------------- ternary


def test_tq1_0_digits_decode_the_stored_fraction() -> None:
    # TQ1_0 stores five base-3 digits v as the byte ceil(v * 256 / 243) (gguf-py's and
    # ggml's quantizer): with d = 1 every one of the 243 values must decode to its digits
    v = np.arange(243)
    byte = ((v * 256 + 242) // 243).astype(np.uint8)
    digits = np.stack([(v // 3 ** (4 - n)) % 3 for n in range(5)], axis=1) - 1  # (243, 5)
    n_blocks = -(-243 // 48)
    qs = np.zeros(n_blocks * 48, dtype=np.uint8)
    qs[:243] = byte
    blocks = np.zeros((n_blocks, 54), dtype=np.uint8)
    blocks[:, :48] = qs.reshape(n_blocks, 48)
    blocks[:, 52:54] = _f16_bytes(1.0)
    out = KERNELS[GGMLType.TQ1_0].fn(blocks).reshape(n_blocks, 256)
    # byte m < 32 of a block: digit n at 32 n + m; byte 32 <= m < 48: at 160 + 16 n + m - 32
    got = np.concatenate(
        [out[:, :160].reshape(n_blocks, 5, 32), out[:, 160:240].reshape(n_blocks, 5, 16)], axis=2
    )
    got = got.transpose(0, 2, 1).reshape(-1, 5)[:243]
    np.testing.assert_array_equal(got, digits.astype(np.float32))


def test_tq2_0_known_block() -> None:
    # d = 0.5; byte m of each 32-byte half holds values m, 32 + m, 64 + m, 96 + m (2 bits each)
    qs = np.zeros(64, dtype=np.uint8)
    qs[0] = 0b11_10_01_00  # codes 0, 1, 2, 3 -> -1, 0, 1, 2
    qs[33] = 0b00_00_00_10  # second half, byte 1, l = 0: code 2 -> value 128 + 1
    block = np.concatenate([qs, _f16_bytes(0.5)])[None, :]
    out = KERNELS[GGMLType.TQ2_0].fn(block)
    want = np.full(256, -0.5, dtype=np.float32)
    want[[0, 32, 64, 96]] = [-0.5, 0.0, 0.5, 1.0]
    want[129] = 0.5
    assert_same_bits(out, want)


# ---------------------------------------------------------------- Q1_0


def q1_0_scalar(blocks: np.ndarray) -> np.ndarray:
    """ggml-quants.c dequantize_row_q1_0, one value at a time: bit ? d : -d.

    d is converted as ggml does (a signalling NaN comes back quiet); -d is a sign flip.
    """
    out = np.empty(blocks.shape[0] * 128, dtype=np.uint32)
    for i, block in enumerate(blocks):
        d = int(np.frombuffer(block[0:2].tobytes(), "<f2").astype(np.float32).view(np.uint32)[0])
        if (d & 0x7F800000) == 0x7F800000 and d & 0x007FFFFF:
            d |= 0x00400000
        for j in range(128):
            bit = (int(block[2 + j // 8]) >> (j % 8)) & 1
            out[i * 128 + j] = d if bit else d ^ 0x80000000
    return out.view(np.float32)


def test_q1_0_known_block() -> None:
    qs = np.zeros(16, dtype=np.uint8)
    qs[0] = 0b0000_0101  # values 0 and 2 are +d
    qs[15] = 0b1000_0000  # value 127 is +d
    block = np.concatenate([_f16_bytes(0.25), qs])[None, :]
    want = np.full(128, -0.25, dtype=np.float32)
    want[[0, 2, 127]] = 0.25
    assert_same_bits(KERNELS[GGMLType.Q1_0].fn(block), want)


def test_q1_0_zero_scale_keeps_signed_zeros() -> None:
    block = np.zeros((1, 18), dtype=np.uint8)
    block[0, 2] = 1
    bits = KERNELS[GGMLType.Q1_0].fn(block).view(np.uint32)
    assert bits[0] == 0 and (bits[1:] == 0x80000000).all()


def test_q1_0_every_byte_against_scalar_reference() -> None:
    blocks = pattern_blocks(GGMLType.Q1_0, np.random.default_rng(13))[:64]
    specials = random_blocks(GGMLType.Q1_0, 64, np.random.default_rng(14), special_fraction=0.6)
    blocks = np.concatenate([blocks, specials])
    assert_same_bits(KERNELS[GGMLType.Q1_0].fn(blocks), q1_0_scalar(blocks))


@PROPERTY
@given(data=st.data())
def test_q1_0_property_against_scalar_reference(data: st.DataObject) -> None:
    blocks = data.draw(blocks_strategy(GGMLType.Q1_0))
    assert_same_bits(KERNELS[GGMLType.Q1_0].fn(blocks), q1_0_scalar(blocks))


def test_q1_0_every_fp16_scale() -> None:
    # all 65536 scale bit patterns, NaNs included, with alternating signs
    n = 1 << 16
    blocks = np.zeros((n, 18), dtype=np.uint8)
    blocks[:, 2:] = 0x55
    set_f16_scale(GGMLType.Q1_0, blocks, np.arange(n, dtype=np.uint16))
    out = KERNELS[GGMLType.Q1_0].fn(blocks).reshape(n, 128)
    d = np.arange(n, dtype=np.uint16).view(np.float16).astype(np.float32).view(np.uint32)
    nan = np.isnan(d.view(np.float32))
    d[nan] |= 0x00400000
    assert (out.view(np.uint32)[:, 0] == d).all()
    assert (out.view(np.uint32)[:, 1] == d ^ 0x80000000).all()


# ---------------------------------------------------------------- through the public API

ALL_MINE = (*TYPES, GGMLType.IQ1_S, GGMLType.IQ1_M, GGMLType.IQ2_XXS, GGMLType.IQ2_XS, GGMLType.IQ2_S)
ALL_MINE += (GGMLType.IQ3_XXS, GGMLType.IQ3_S, GGMLType.IQ4_NL, GGMLType.IQ4_XS)


def _big_endian(blocks: np.ndarray, fields: tuple[tuple[int, int, int], ...]) -> np.ndarray:
    """What a big-endian ggml would have written: every listed field byte-reversed per item."""
    swapped = blocks.copy()
    for offset, count, size in fields:
        items = swapped[:, offset : offset + count * size].reshape(-1, count, size)
        swapped[:, offset : offset + count * size] = items[:, :, ::-1].reshape(-1, count * size)
    return swapped


@pytest.mark.parametrize("t", ALL_MINE, ids=ids)
def test_public_api_little_and_big_endian(t: GGMLType) -> None:
    from registry.quant import dequantize, kernels

    info = TENSOR_TYPES[t]
    spec = kernels()[t]
    blocks = random_blocks(t, 300, np.random.default_rng([9, int(t)]))
    want = spec.fn(blocks)
    n = blocks.shape[0] * info.block_size
    assert_same_bits(dequantize(blocks.tobytes(), t, n), want)
    be = _big_endian(blocks, spec.swap_fields)
    assert_same_bits(dequantize(be.tobytes(), t, n, big_endian=True), want)


@pytest.mark.parametrize("t", ALL_MINE, ids=ids)
def test_out_parameter_and_strided_input(t: GGMLType) -> None:
    from registry.quant import kernels

    info = TENSOR_TYPES[t]
    fn = kernels()[t].fn
    blocks = random_blocks(t, 20, np.random.default_rng(10))
    want = fn(blocks)
    out = np.full(want.size, np.nan, dtype=np.float32)
    assert fn(blocks, out=out) is out  # type: ignore[call-arg]
    assert_same_bits(out, want)
    wide = np.zeros((20, info.type_size + 3), dtype=np.uint8)
    wide[:, 1 : 1 + info.type_size] = blocks
    assert_same_bits(fn(wide[:, 1 : 1 + info.type_size]), want)
    with pytest.raises(ValueError, match="out must be"):
        fn(blocks, out=np.empty(want.size + 1, dtype=np.float32))  # type: ignore[call-arg]
