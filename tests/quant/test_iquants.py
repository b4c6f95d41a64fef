"""The i-quant kernels against ggml: bit for bit.

References, strongest first:
- ggml's own C `to_float` (libggml-base of llama-cpp-python, via bench/ggml_ref.py): the
  stored vectors of tests/data/quant_ref/ always, and live property tests when the
  library is installed. Compared bit for bit, NaN payloads and signs included.
- gguf-py's numpy `dequantize` (the reference of the issue): property tests and
  exhaustive index enumerations. Compared bit for bit except inside NaNs: gguf-py keeps a
  signalling fp16 NaN signalling and multiplies NaN scales by -1.0 where ggml flips the
  sign bit, so for gguf-py a NaN only has to be a NaN in the same place.
"""

from __future__ import annotations

import warnings
from functools import cache
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from registry.gguf.types import TENSOR_TYPES, GGMLType
from registry.quant import iquants, tables
from registry.quant.base import KernelSpec
from tests.quant.refgen import SPECIAL_F16, pattern_blocks, random_blocks

IQ_TYPES = (
    GGMLType.IQ1_S,
    GGMLType.IQ1_M,
    GGMLType.IQ2_XXS,
    GGMLType.IQ2_XS,
    GGMLType.IQ2_S,
    GGMLType.IQ3_XXS,
    GGMLType.IQ3_S,
    GGMLType.IQ4_NL,
    GGMLType.IQ4_XS,
)
REF_DIR = Path(__file__).resolve().parent.parent / "data" / "quant_ref"
PROPERTY = settings(max_examples=40, deadline=None)

# sha256 of each grid array's bytes as stored in registry/quant/data/iq_grids.npz
GRID_SHA256 = {
    "iq2xxs_grid": "05826b5d3e472a3a78f196be62ac78acf81df0f909626e12ab9fa2a5d490dd54",
    "iq2xs_grid": "06e47aaca60b4dc1d9b5a3f34540437058a6b142b4d7a59d5ded769b4d1bf1de",
    "iq2s_grid": "e1aa1473412b0552c2174c30ef22ab4073f6a181b85a17056e8249bd2932fd88",
    "iq3xxs_grid": "46e35f5a997efdee6c99ce57854c8a0d4f0ff8ca57e5e8a60c0793ea580acf5d",
    "iq3s_grid": "bd1af4945a1717c65610b0284e4628b9a1ba3b306fae3a06f6e5f597356e349f",
    "iq1s_grid": "07540ffc1aeaf6ad4d97e96b0fcc765aae39671d4ae4a27bbd0e796fde167c6a",
}
GRID_SHAPES = {
    "iq2xxs_grid": (256, 8),
    "iq2xs_grid": (512, 8),
    "iq2s_grid": (1024, 8),
    "iq3xxs_grid": (256, 4),
    "iq3s_grid": (512, 4),
    "iq1s_grid": (2048, 8),
}


# ---------------------------------------------------------------- shared helpers


def assert_same_bits(got: np.ndarray, ref: np.ndarray, *, nan_payload: bool = True) -> None:
    """float32 arrays equal bit for bit; with nan_payload=False a NaN need only match a NaN."""
    assert got.dtype == np.float32
    assert got.shape == ref.shape
    g, r = got.view(np.uint32), np.ascontiguousarray(ref, dtype=np.float32).view(np.uint32)
    differ = g != r
    if not nan_payload:
        differ &= ~(np.isnan(got) & np.isnan(ref))
    if differ.any():
        i = np.flatnonzero(differ)[:8]
        pytest.fail(
            f"{int(differ.sum())} of {got.size} values differ; first at {i.tolist()}: "
            f"got {[hex(x) for x in g[i]]} ({got[i].tolist()}), want {[hex(x) for x in r[i]]} ({ref[i].tolist()})"
        )


def gguf_reference(t: GGMLType, blocks: np.ndarray) -> np.ndarray:
    from gguf.constants import GGMLQuantizationType
    from gguf.quants import dequantize

    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        out = dequantize(np.ascontiguousarray(blocks).reshape(-1), GGMLQuantizationType(int(t)))
    return np.asarray(out, dtype=np.float32).reshape(-1)


@cache
def _ggml() -> object | None:
    try:
        from bench.ggml_ref import GGMLUnavailable, load
    except ImportError:
        return None
    try:
        return load()
    except GGMLUnavailable:
        return None


def c_reference(t: GGMLType, blocks: np.ndarray) -> np.ndarray:
    lib = _ggml()
    if lib is None:
        pytest.skip("ggml's C library (llama-cpp-python's libggml-base) is not installed")
    info = TENSOR_TYPES[t]
    if not lib.has_to_float(int(t)):  # type: ignore[attr-defined]
        pytest.skip(f"this ggml has no dequantizer for {t.name}")
    raw = np.ascontiguousarray(blocks)
    return lib.to_float(int(t), raw.reshape(-1), raw.shape[0] * info.block_size)  # type: ignore[attr-defined, no-any-return]


def stored_reference(t: GGMLType) -> tuple[np.ndarray, np.ndarray]:
    path = REF_DIR / f"{t.name}.npz"
    assert path.exists(), f"{path} missing: run `python -m tests.quant.refgen {t.name}`"
    with np.load(path) as z:
        return z["blocks"], z["values"]


def blocks_strategy(t: GGMLType, max_blocks: int = 6) -> st.SearchStrategy[np.ndarray]:
    """Random blocks whose fp16 scale fields are drawn from the specials half the time."""
    size = TENSOR_TYPES[t].type_size
    scale = st.one_of(st.sampled_from([int(x) for x in SPECIAL_F16]), st.integers(0, 0xFFFF))

    @st.composite
    def build(draw: st.DrawFn) -> np.ndarray:
        n = draw(st.integers(1, max_blocks))
        raw = draw(st.binary(min_size=n * size, max_size=n * size))
        blocks = np.frombuffer(raw, dtype=np.uint8).reshape(n, size).copy()
        scales = np.array(draw(st.lists(scale, min_size=n, max_size=n)), dtype=np.uint16)
        set_f16_scale(t, blocks, scales)
        return blocks

    return build()


def set_f16_scale(t: GGMLType, blocks: np.ndarray, bits: np.ndarray) -> None:
    """Write the fp16 super-block scale of each block (IQ1_M spreads it over 4 nibbles)."""
    if t is GGMLType.IQ1_M:
        sc = np.ascontiguousarray(blocks[:, 48:56]).view("<u2")
        for i in range(4):
            sc[:, i] = (sc[:, i] & 0x0FFF) | (((bits >> (4 * i)) & 0xF) << 12)
        blocks[:, 48:56] = sc.view(np.uint8)
        return
    offset = D_OFFSET.get(t)
    if offset is not None:
        blocks[:, offset : offset + 2] = bits.astype("<u2").view(np.uint8).reshape(-1, 2)


D_OFFSET: dict[GGMLType, int] = {
    **{t: 0 for t in IQ_TYPES if t is not GGMLType.IQ1_M},
    GGMLType.TQ1_0: 52,
    GGMLType.TQ2_0: 64,
    GGMLType.Q1_0: 0,
}


def check_spec(t: GGMLType, spec: KernelSpec) -> None:
    """A kernel's contract: shape, dtype, empty input, swap fields inside the block."""
    info = TENSOR_TYPES[t]
    empty = spec.fn(np.zeros((0, info.type_size), dtype=np.uint8))
    assert empty.dtype == np.float32 and empty.shape == (0,)
    out = spec.fn(np.zeros((3, info.type_size), dtype=np.uint8))
    assert out.dtype == np.float32 and out.shape == (3 * info.block_size,)
    with pytest.raises(ValueError, match="blocks must be"):
        spec.fn(np.zeros((3, info.type_size + 1), dtype=np.uint8))
    covered = np.zeros(info.type_size, dtype=int)
    for offset, count, size in spec.swap_fields:
        assert size in (2, 4, 8) and count >= 1
        covered[offset : offset + count * size] += 1
        assert offset + count * size <= info.type_size
    assert covered.max(initial=0) <= 1, "swap fields overlap"
    if t in D_OFFSET:
        assert (D_OFFSET[t], 1, 2) in spec.swap_fields


# ---------------------------------------------------------------- tables


def test_grid_data_shapes_and_checksums() -> None:
    import hashlib

    g = tables.grids()
    assert set(g) == set(GRID_SHAPES)
    for name, arr in g.items():
        assert arr.dtype == np.uint8 and arr.shape == GRID_SHAPES[name], name
        assert hashlib.sha256(arr.tobytes()).hexdigest() == GRID_SHA256[name], name


@pytest.mark.parametrize(
    ("name", "cls_name"),
    [
        ("iq2xxs_grid", "IQ2_XXS"),
        ("iq2xs_grid", "IQ2_XS"),
        ("iq2s_grid", "IQ2_S"),
        ("iq3xxs_grid", "IQ3_XXS"),
        ("iq3s_grid", "IQ3_S"),
        ("iq1s_grid", "IQ1_S"),
    ],
)
def test_grids_match_gguf_py(name: str, cls_name: str) -> None:
    # gguf-py stores the same tables packed 2-3 bits per value: an independent copy
    import gguf.quants

    cls = getattr(gguf.quants, cls_name)
    if cls.grid is None:
        cls.init_grid()
    theirs = np.asarray(cls.grid, dtype=np.float32).reshape(GRID_SHAPES[name])
    ours = tables.grids()[name]
    ours_values = ours.view(np.int8) if name == "iq1s_grid" else ours
    np.testing.assert_array_equal(ours_values.astype(np.float32), theirs)


def test_ksigns_is_the_even_parity_table() -> None:
    import gguf.quants

    assert tables.ksigns_iq2xs().tobytes() == gguf.quants.IQ2_XXS.ksigns
    bits = np.unpackbits(tables.ksigns_iq2xs()[:, None], axis=1)
    assert (bits.sum(axis=1) % 2 == 0).all()


def test_signed_tables_fold_grid_and_signs() -> None:
    grid = tables.grids()["iq2xxs_grid"].astype(np.float32)
    t = tables.iq2xxs_table()
    for s7 in (0, 1, 77, 127):
        signs = tables.ksigns_iq2xs()[s7]
        sign = np.where((signs >> np.arange(8)) & 1, -1.0, 1.0).astype(np.float32)
        for g in (0, 5, 255):
            np.testing.assert_array_equal(t[g | (s7 << 8)], grid[g] * sign)
    d = tables.iq1s_table()
    raw = tables.grids()["iq1s_grid"].view(np.int8).astype(np.float32)
    np.testing.assert_array_equal(d[7], raw[7] + np.float32(0.125))
    np.testing.assert_array_equal(d[2048 + 7], raw[7] - np.float32(0.125))


# ---------------------------------------------------------------- contract


@pytest.mark.parametrize("t", IQ_TYPES, ids=lambda t: t.name)
def test_contract(t: GGMLType) -> None:
    assert set(iquants.KERNELS) == set(IQ_TYPES)
    check_spec(t, iquants.KERNELS[t])


@pytest.mark.parametrize("t", IQ_TYPES, ids=lambda t: t.name)
def test_chunks_join_seamlessly(t: GGMLType) -> None:
    blocks = random_blocks(t, 37, np.random.default_rng(7))
    whole = iquants.KERNELS[t].fn(blocks)
    assert_same_bits(iquants.KERNELS[t].fn(blocks, chunk_elements=3 * TENSOR_TYPES[t].block_size), whole)


# ---------------------------------------------------------------- against ggml's C code


@pytest.mark.parametrize("t", IQ_TYPES, ids=lambda t: t.name)
def test_stored_ggml_vectors(t: GGMLType) -> None:
    blocks, values = stored_reference(t)
    assert_same_bits(iquants.KERNELS[t].fn(blocks), values)


@pytest.mark.parametrize("t", IQ_TYPES, ids=lambda t: t.name)
def test_live_ggml_on_random_blocks(t: GGMLType) -> None:
    blocks = random_blocks(t, 512, np.random.default_rng([3, int(t)]), special_fraction=0.3)
    assert_same_bits(iquants.KERNELS[t].fn(blocks), c_reference(t, blocks))


@pytest.mark.parametrize("t", IQ_TYPES, ids=lambda t: t.name)
@PROPERTY
@given(data=st.data())
def test_property_against_ggml(t: GGMLType, data: st.DataObject) -> None:
    blocks = data.draw(blocks_strategy(t))
    assert_same_bits(iquants.KERNELS[t].fn(blocks), c_reference(t, blocks))


# ---------------------------------------------------------------- against gguf-py


@pytest.mark.parametrize("t", IQ_TYPES, ids=lambda t: t.name)
@PROPERTY
@given(data=st.data())
def test_property_against_gguf_py(t: GGMLType, data: st.DataObject) -> None:
    blocks = data.draw(blocks_strategy(t))
    assert_same_bits(iquants.KERNELS[t].fn(blocks), gguf_reference(t, blocks), nan_payload=False)


@pytest.mark.parametrize("t", IQ_TYPES, ids=lambda t: t.name)
def test_every_byte_value_in_every_position(t: GGMLType) -> None:
    blocks = pattern_blocks(t, np.random.default_rng(11))
    assert_same_bits(iquants.KERNELS[t].fn(blocks), gguf_reference(t, blocks), nan_payload=False)


def _with_scale(t: GGMLType, blocks: np.ndarray, value: float = 1.5) -> np.ndarray:
    bits = np.full(blocks.shape[0], np.float16(value).view(np.uint16), dtype=np.uint16)
    set_f16_scale(t, blocks, bits)
    return blocks


def test_iq2_xxs_every_grid_and_sign_index() -> None:
    # 256 grid indices x 128 sign patterns x 16 block scales, 32 groups per block
    g = np.arange(256 * 128) % 256
    s = np.arange(256 * 128) // 256
    n = g.size // 32
    words = np.zeros((n, 8, 2), dtype=np.uint32)
    gg, ss = g.reshape(n, 8, 4), s.reshape(n, 8, 4)
    words[:, :, 0] = (gg << np.array([0, 8, 16, 24])).sum(axis=2)
    words[:, :, 1] = (ss << np.array([0, 7, 14, 21])).sum(axis=2)
    words[:, :, 1] |= (np.arange(n * 8).reshape(n, 8) % 16).astype(np.uint32) << 28
    blocks = np.concatenate([np.zeros((n, 2), np.uint8), words.view(np.uint8).reshape(n, 64)], axis=1)
    blocks = _with_scale(GGMLType.IQ2_XXS, blocks)
    t = GGMLType.IQ2_XXS
    assert_same_bits(iquants.KERNELS[t].fn(blocks), gguf_reference(t, blocks))


def test_iq2_xs_every_qs_value() -> None:
    qs = np.arange(1 << 16, dtype="<u2").reshape(-1, 32)
    n = qs.shape[0]
    scales = (np.arange(n * 8) % 256).astype(np.uint8).reshape(n, 8)
    blocks = np.concatenate([np.zeros((n, 2), np.uint8), qs.view(np.uint8), scales], axis=1)
    t = GGMLType.IQ2_XS
    blocks = _with_scale(t, blocks, 0.75)
    assert_same_bits(iquants.KERNELS[t].fn(blocks), gguf_reference(t, blocks))


def test_iq2_s_every_grid_index_and_sign_byte() -> None:
    t = GGMLType.IQ2_S
    combos = np.arange(1024 * 256)
    grid, sign = combos % 1024, combos // 1024
    n = combos.size // 32
    blocks = np.zeros((n, TENSOR_TYPES[t].type_size), dtype=np.uint8)
    blocks[:, 2:34] = (grid & 0xFF).reshape(n, 32)
    blocks[:, 34:66] = sign.reshape(n, 32)
    high = (grid >> 8).reshape(n, 8, 4) << np.array([0, 2, 4, 6])
    blocks[:, 66:74] = high.sum(axis=2)
    blocks[:, 74:82] = (np.arange(n * 8) % 256).reshape(n, 8)
    blocks = _with_scale(t, blocks)
    assert_same_bits(iquants.KERNELS[t].fn(blocks), gguf_reference(t, blocks))


def test_iq1_s_every_grid_index_delta_and_scale() -> None:
    t = GGMLType.IQ1_S
    combos = np.arange(2048 * 2 * 8)
    grid, delta, scale = combos % 2048, (combos // 2048) % 2, combos // 4096
    n = combos.size // 32
    blocks = np.zeros((n, TENSOR_TYPES[t].type_size), dtype=np.uint8)
    blocks[:, 2:34] = (grid & 0xFF).reshape(n, 32)
    # one qh word per 4 groups: their high grid bits; delta and scale of its first group
    high = (grid >> 8).reshape(n, 8, 4) << np.array([0, 3, 6, 9])
    qh = high.sum(axis=2) | (scale.reshape(n, 8, 4)[:, :, 0] << 12) | (delta.reshape(n, 8, 4)[:, :, 0] << 15)
    blocks[:, 34:50] = qh.astype("<u2").view(np.uint8).reshape(n, 16)
    blocks = _with_scale(t, blocks)
    assert_same_bits(iquants.KERNELS[t].fn(blocks), gguf_reference(t, blocks))


@pytest.mark.parametrize("t", [GGMLType.IQ4_NL, GGMLType.IQ4_XS], ids=lambda t: t.name)
def test_iq4_every_byte_with_every_scale(t: GGMLType) -> None:
    size = TENSOR_TYPES[t].type_size
    n = 4096
    blocks = np.random.default_rng(5).integers(0, 256, (n, size), dtype=np.uint8)
    qs_start = 2 if t is GGMLType.IQ4_NL else 8
    blocks[:, qs_start:] = (np.arange(n)[:, None] + np.arange(size - qs_start)) % 256
    bits = np.random.default_rng(6).integers(0, 1 << 16, n, dtype=np.uint16)
    bits[:256] = np.arange(0x3C00, 0x3D00)  # a range of ordinary scales, all mantissas
    set_f16_scale(t, blocks, bits)
    assert_same_bits(iquants.KERNELS[t].fn(blocks), gguf_reference(t, blocks), nan_payload=False)


# ---------------------------------------------------------------- known values


def test_iq4_nl_known_block() -> None:
    # d = 2: values are 2 * kvalues_iq4nl[nibble]; low nibbles first, then high nibbles
    qs = np.array([0x10 * (15 - j) + j for j in range(16)], dtype=np.uint8)
    block = np.concatenate([np.frombuffer(np.float16(2).tobytes(), np.uint8), qs])[None, :]
    kv = tables.KVALUES_IQ4NL.astype(np.float32)
    want = np.concatenate([2 * kv[np.arange(16)], 2 * kv[15 - np.arange(16)]])
    assert_same_bits(iquants.KERNELS[GGMLType.IQ4_NL].fn(block), want)


def test_iq2_xxs_known_group() -> None:
    # d = 1, scale nibble 3: db = (1 * 3.5) * 0.25 = 0.875; grid 0 is eight 8s; sign index
    # 1 -> ksigns 0x81 -> values 0 and 7 negative
    block = np.zeros((1, 66), dtype=np.uint8)
    block[0, 0:2] = np.frombuffer(np.float16(1).tobytes(), np.uint8)
    aux1 = np.array([1 | (3 << 28)], dtype="<u4").view(np.uint8)
    block[0, 6:10] = aux1
    out = iquants.KERNELS[GGMLType.IQ2_XXS].fn(block)
    want = np.full(8, 0.875 * 8, dtype=np.float32)
    want[[0, 7]] *= -1
    assert_same_bits(out[:8], want)


def test_nan_scale_keeps_ggml_bits() -> None:
    # a signalling NaN scale: ggml quiets it and flips its sign where the value is negative
    t = GGMLType.IQ2_XS
    block = np.zeros((1, 74), dtype=np.uint8)
    block[0, 0:2] = np.frombuffer(np.uint16(0x7D01).tobytes(), np.uint8)
    block[0, 2:4] = np.frombuffer(np.uint16(1 << 9).tobytes(), np.uint8)  # sign index 1: 0x81
    out = iquants.KERNELS[t].fn(block).view(np.uint32)
    assert out[0] == 0xFFE02000 and out[1] == 0x7FE02000 and out[7] == 0xFFE02000
