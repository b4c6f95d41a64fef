"""Q2_0 against ggml, bit for bit.

gguf-py has no Q2_0, so the references are ggml's C code (stored vectors, and live when
the library is installed; NaN payloads included), a scalar per-block transcription of
`dequantize_row_q2_0` written here, and hand-computed blocks.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from registry.gguf.types import TENSOR_TYPES, GGMLType
from registry.quant import dequantize, kernels, q2
from tests.quant.refgen import SPECIAL_F16, pattern_blocks, random_blocks
from tests.quant.test_iquants import PROPERTY, assert_same_bits, c_reference, check_spec, stored_reference

T = GGMLType.Q2_0
FN = q2.KERNELS[T].fn


def _f16_bytes(value: float) -> np.ndarray:
    return np.frombuffer(np.float16(value).tobytes(), dtype=np.uint8)


def q2_0_scalar(blocks: np.ndarray) -> np.ndarray:
    """ggml-quants.c dequantize_row_q2_0, one value at a time: ((int)q - 1) * d.

    d is converted as ggml does (a signalling NaN comes back quiet); the product is one
    float32 multiply, as in C.
    """
    out = np.empty(blocks.shape[0] * 64, dtype=np.float32)
    for i, block in enumerate(blocks):
        d = np.frombuffer(block[0:2].tobytes(), "<f2").astype(np.float32)
        bits = d.view(np.uint32)
        if np.isnan(d[0]):
            bits |= np.uint32(0x00400000)
        for j in range(64):
            q = (int(block[2 + j // 4]) >> (2 * (j % 4))) & 3
            with np.errstate(invalid="ignore"):  # 0 * inf is NaN, as in C
                out[i * 64 + j] = np.float32(q - 1) * d[0]
    return out


def blocks_strategy(max_blocks: int = 6) -> st.SearchStrategy[np.ndarray]:
    """Random blocks whose fp16 scale is drawn from the specials half the time."""
    scale = st.one_of(st.sampled_from([int(x) for x in SPECIAL_F16]), st.integers(0, 0xFFFF))

    @st.composite
    def build(draw: st.DrawFn) -> np.ndarray:
        n = draw(st.integers(1, max_blocks))
        raw = draw(st.binary(min_size=n * 18, max_size=n * 18))
        blocks = np.frombuffer(raw, dtype=np.uint8).reshape(n, 18).copy()
        scales = np.array(draw(st.lists(scale, min_size=n, max_size=n)), dtype="<u2")
        blocks[:, 0:2] = scales.view(np.uint8).reshape(n, 2)
        return blocks

    return build()


def test_contract_and_layout() -> None:
    check_spec(T, q2.KERNELS[T])
    assert q2.KERNELS[T].swap_fields == ((0, 1, 2),)
    # ggml-common.h: block_q2_0 = fp16 d + QK2_0/4 bytes, QK2_0 = 64
    assert (TENSOR_TYPES[T].block_size, TENSOR_TYPES[T].type_size) == (64, 18)
    assert kernels()[T] is q2.KERNELS[T]


def test_known_block() -> None:
    qs = np.zeros(16, dtype=np.uint8)
    qs[0] = 0b11_10_01_00  # codes 0, 1, 2, 3 -> -1, 0, 1, 2
    qs[15] = 0b10_00_00_11  # value 60: code 3, value 63: code 2
    block = np.concatenate([_f16_bytes(0.5), qs])[None, :]
    want = np.full(64, -0.5, dtype=np.float32)
    want[[0, 1, 2, 3]] = [-0.5, 0.0, 0.5, 1.0]
    want[60], want[63] = 1.0, 0.5
    assert_same_bits(FN(block), want)


def test_zero_code_times_infinite_scale_is_nan_and_signs_follow_ggml() -> None:
    block = np.zeros((2, 18), dtype=np.uint8)
    block[0, 0:2] = _f16_bytes(np.inf)
    block[1, 0:2] = _f16_bytes(-0.0)
    block[:, 2] = 0b11_10_01_00
    assert_same_bits(FN(block), q2_0_scalar(block))
    out = FN(block)
    assert np.isnan(out[1]) and out[0] == -np.inf and out[2] == np.inf
    assert out.view(np.uint32)[64] == 0  # -1 * -0.0 is +0.0


def test_every_byte_against_scalar_reference() -> None:
    blocks = pattern_blocks(T, np.random.default_rng(13))[:64]
    specials = random_blocks(T, 64, np.random.default_rng(14), special_fraction=0.6)
    blocks = np.concatenate([blocks, specials])
    assert_same_bits(FN(blocks), q2_0_scalar(blocks))


@PROPERTY
@given(data=st.data())
def test_property_against_scalar_reference(data: st.DataObject) -> None:
    blocks = data.draw(blocks_strategy())
    assert_same_bits(FN(blocks), q2_0_scalar(blocks))


def test_every_fp16_scale() -> None:
    # all 65536 scale bit patterns, NaNs included, against every code
    n = 1 << 16
    blocks = np.zeros((n, 18), dtype=np.uint8)
    blocks[:, 2:] = 0b11_10_01_00
    blocks[:, 0:2] = np.arange(n, dtype="<u2").view(np.uint8).reshape(n, 2)
    out = FN(blocks).reshape(n, 64)
    d = np.arange(n, dtype=np.uint16).view(np.float16).astype(np.float32)
    nan = np.isnan(d)
    d.view(np.uint32)[nan] |= 0x00400000
    for code in range(4):
        with np.errstate(invalid="ignore"):
            want = np.float32(code - 1) * d
        assert_same_bits(np.ascontiguousarray(out[:, code]), want)


# ---------------------------------------------------------------- against ggml's C code


def test_stored_ggml_vectors() -> None:
    blocks, values = stored_reference(T)
    assert_same_bits(FN(blocks), values)


def test_live_ggml_on_random_blocks() -> None:
    blocks = random_blocks(T, 512, np.random.default_rng([4, int(T)]), special_fraction=0.3)
    assert_same_bits(FN(blocks), c_reference(T, blocks))


def test_live_ggml_every_fp16_scale() -> None:
    n = 1 << 16
    blocks = random_blocks(T, n, np.random.default_rng(15))
    blocks[:, 0:2] = np.arange(n, dtype="<u2").view(np.uint8).reshape(n, 2)
    assert_same_bits(FN(blocks), c_reference(T, blocks))


@PROPERTY
@given(data=st.data())
def test_property_against_ggml(data: st.DataObject) -> None:
    blocks = data.draw(blocks_strategy())
    assert_same_bits(FN(blocks), c_reference(T, blocks))


# ---------------------------------------------------------------- plumbing


def test_chunks_join_seamlessly() -> None:
    blocks = random_blocks(T, 41, np.random.default_rng(8))
    whole = FN(blocks)
    assert_same_bits(FN(blocks, chunk_elements=5 * 64), whole)


def test_public_api_little_and_big_endian() -> None:
    blocks = random_blocks(T, 300, np.random.default_rng([9, int(T)]))
    want = FN(blocks)
    n = blocks.shape[0] * 64
    assert_same_bits(dequantize(blocks.tobytes(), T, n), want)
    big = blocks.copy()
    big[:, 0:2] = blocks[:, 1::-1]  # what a big-endian ggml writes: d byte-swapped
    assert_same_bits(dequantize(big.tobytes(), T, n, big_endian=True), want)


def test_out_parameter_and_strided_input() -> None:
    blocks = random_blocks(T, 20, np.random.default_rng(10))
    want = FN(blocks)
    out = np.full(want.size, np.nan, dtype=np.float32)
    assert FN(blocks, out=out) is out  # type: ignore[call-arg]
    assert_same_bits(out, want)
    wide = np.zeros((20, 21), dtype=np.uint8)
    wide[:, 1:19] = blocks
    assert_same_bits(FN(wide[:, 1:19]), want)
    with pytest.raises(ValueError, match="out must be"):
        FN(blocks, out=np.empty(want.size + 1, dtype=np.float32))  # type: ignore[call-arg]
