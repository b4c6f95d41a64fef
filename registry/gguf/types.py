"""Type tables of the GGUF format: tensor types, file types and metadata value types.

The ids follow ggml's `enum ggml_type` (0..42 as of this writing) and `enum llama_ftype`. Ids that ggml has removed
stay in the tables, marked `removed`, so that a file using one gets a precise error
("Q4_0_4_4 was removed from GGUF") instead of "unknown type 31".
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class GGMLType(enum.IntEnum):
    F32 = 0
    F16 = 1
    Q4_0 = 2
    Q4_1 = 3
    Q4_2 = 4  # removed
    Q4_3 = 5  # removed
    Q5_0 = 6
    Q5_1 = 7
    Q8_0 = 8
    Q8_1 = 9
    Q2_K = 10
    Q3_K = 11
    Q4_K = 12
    Q5_K = 13
    Q6_K = 14
    Q8_K = 15
    IQ2_XXS = 16
    IQ2_XS = 17
    IQ3_XXS = 18
    IQ1_S = 19
    IQ4_NL = 20
    IQ3_S = 21
    IQ2_S = 22
    IQ4_XS = 23
    I8 = 24
    I16 = 25
    I32 = 26
    I64 = 27
    F64 = 28
    IQ1_M = 29
    BF16 = 30
    Q4_0_4_4 = 31  # removed
    Q4_0_4_8 = 32  # removed
    Q4_0_8_8 = 33  # removed
    TQ1_0 = 34
    TQ2_0 = 35
    IQ4_NL_4_4 = 36  # removed
    IQ4_NL_4_8 = 37  # removed
    IQ4_NL_8_8 = 38  # removed
    MXFP4 = 39
    NVFP4 = 40
    Q1_0 = 41
    Q2_0 = 42


@dataclass(frozen=True, slots=True)
class TensorTypeInfo:
    type: GGMLType
    block_size: int  # elements per block
    type_size: int  # bytes per block
    removed: bool = False
    quantized: bool = True

    @property
    def name(self) -> str:
        return self.type.name

    @property
    def bits_per_weight(self) -> float:
        return self.type_size * 8 / self.block_size


def _t(t: GGMLType, block: int, size: int, *, removed: bool = False) -> TensorTypeInfo:
    return TensorTypeInfo(t, block, size, removed=removed, quantized=block > 1)


# Block layouts as in ggml-common.h. Removed types keep their last known layout so that
# tooling can still describe them; the parser rejects them.
TENSOR_TYPES: dict[GGMLType, TensorTypeInfo] = {
    info.type: info
    for info in (
        _t(GGMLType.F32, 1, 4),
        _t(GGMLType.F16, 1, 2),
        _t(GGMLType.Q4_0, 32, 18),
        _t(GGMLType.Q4_1, 32, 20),
        _t(GGMLType.Q4_2, 16, 10, removed=True),
        _t(GGMLType.Q4_3, 16, 12, removed=True),
        _t(GGMLType.Q5_0, 32, 22),
        _t(GGMLType.Q5_1, 32, 24),
        _t(GGMLType.Q8_0, 32, 34),
        _t(GGMLType.Q8_1, 32, 36),
        _t(GGMLType.Q2_K, 256, 84),
        _t(GGMLType.Q3_K, 256, 110),
        _t(GGMLType.Q4_K, 256, 144),
        _t(GGMLType.Q5_K, 256, 176),
        _t(GGMLType.Q6_K, 256, 210),
        _t(GGMLType.Q8_K, 256, 292),
        _t(GGMLType.IQ2_XXS, 256, 66),
        _t(GGMLType.IQ2_XS, 256, 74),
        _t(GGMLType.IQ3_XXS, 256, 98),
        _t(GGMLType.IQ1_S, 256, 50),
        _t(GGMLType.IQ4_NL, 32, 18),
        _t(GGMLType.IQ3_S, 256, 110),
        _t(GGMLType.IQ2_S, 256, 82),
        _t(GGMLType.IQ4_XS, 256, 136),
        _t(GGMLType.I8, 1, 1),
        _t(GGMLType.I16, 1, 2),
        _t(GGMLType.I32, 1, 4),
        _t(GGMLType.I64, 1, 8),
        _t(GGMLType.F64, 1, 8),
        _t(GGMLType.IQ1_M, 256, 56),
        _t(GGMLType.BF16, 1, 2),
        _t(GGMLType.Q4_0_4_4, 32, 18, removed=True),
        _t(GGMLType.Q4_0_4_8, 32, 18, removed=True),
        _t(GGMLType.Q4_0_8_8, 32, 18, removed=True),
        _t(GGMLType.TQ1_0, 256, 54),
        _t(GGMLType.TQ2_0, 256, 66),
        _t(GGMLType.IQ4_NL_4_4, 32, 18, removed=True),
        _t(GGMLType.IQ4_NL_4_8, 32, 18, removed=True),
        _t(GGMLType.IQ4_NL_8_8, 32, 18, removed=True),
        _t(GGMLType.MXFP4, 32, 17),
        _t(GGMLType.NVFP4, 64, 36),
        _t(GGMLType.Q1_0, 128, 18),
        _t(GGMLType.Q2_0, 64, 18),
    )
}

assert set(TENSOR_TYPES) == set(GGMLType)


def plain_tensor(
    type_id: int, shape: tuple[int, ...], n_elements: int, offset: int, alignment: int, max_bytes: int
) -> tuple[GGMLType, int] | None:
    """The type and data size of a tensor record a parser can take as it stands: a known,
    current type whose block divides the first dimension, a size within `max_bytes` and
    int64, an aligned offset. None for anything else, which is read field by field to name
    what is wrong."""
    info = TENSOR_TYPES.get(type_id)  # type: ignore[call-overload]  # an IntEnum key is found by its int value
    if info is None or info.removed or not 0 < n_elements <= MAX_I64 or shape[0] % info.block_size:
        return None
    n_bytes = n_elements // info.block_size * info.type_size
    if n_bytes > max_bytes or offset % alignment or offset + n_bytes > MAX_I64:
        return None
    return info.type, n_bytes


def tensor_type_info(type_id: int) -> TensorTypeInfo | None:
    """The table row for a ggml type id, or None when the id is not a ggml type."""
    try:
        return TENSOR_TYPES[GGMLType(type_id)]
    except ValueError:
        return None


class FileType(enum.IntEnum):
    """`general.file_type`: the dominant quantization the file was made with."""

    ALL_F32 = 0
    MOSTLY_F16 = 1
    MOSTLY_Q4_0 = 2
    MOSTLY_Q4_1 = 3
    MOSTLY_Q4_1_SOME_F16 = 4  # removed
    MOSTLY_Q4_2 = 5  # removed
    MOSTLY_Q4_3 = 6  # removed
    MOSTLY_Q8_0 = 7
    MOSTLY_Q5_0 = 8
    MOSTLY_Q5_1 = 9
    MOSTLY_Q2_K = 10
    MOSTLY_Q3_K_S = 11
    MOSTLY_Q3_K_M = 12
    MOSTLY_Q3_K_L = 13
    MOSTLY_Q4_K_S = 14
    MOSTLY_Q4_K_M = 15
    MOSTLY_Q5_K_S = 16
    MOSTLY_Q5_K_M = 17
    MOSTLY_Q6_K = 18
    MOSTLY_IQ2_XXS = 19
    MOSTLY_IQ2_XS = 20
    MOSTLY_Q2_K_S = 21
    MOSTLY_IQ3_XS = 22
    MOSTLY_IQ3_XXS = 23
    MOSTLY_IQ1_S = 24
    MOSTLY_IQ4_NL = 25
    MOSTLY_IQ3_S = 26
    MOSTLY_IQ3_M = 27
    MOSTLY_IQ2_S = 28
    MOSTLY_IQ2_M = 29
    MOSTLY_IQ4_XS = 30
    MOSTLY_IQ1_M = 31
    MOSTLY_BF16 = 32
    MOSTLY_Q4_0_4_4 = 33  # removed
    MOSTLY_Q4_0_4_8 = 34  # removed
    MOSTLY_Q4_0_8_8 = 35  # removed
    MOSTLY_TQ1_0 = 36
    MOSTLY_TQ2_0 = 37
    MOSTLY_MXFP4_MOE = 38
    MOSTLY_NVFP4 = 39
    MOSTLY_Q1_0 = 40
    GUESSED = 1024


REMOVED_FILE_TYPES = frozenset(
    {
        FileType.MOSTLY_Q4_1_SOME_F16,
        FileType.MOSTLY_Q4_2,
        FileType.MOSTLY_Q4_3,
        FileType.MOSTLY_Q4_0_4_4,
        FileType.MOSTLY_Q4_0_4_8,
        FileType.MOSTLY_Q4_0_8_8,
    }
)


def file_type_label(value: int) -> str | None:
    """`general.file_type` as the label people use in file names: 15 -> "Q4_K_M"."""
    try:
        ft = FileType(value)
    except ValueError:
        return None
    if ft is FileType.ALL_F32:
        return "F32"
    if ft is FileType.GUESSED:
        return None
    return ft.name.removeprefix("MOSTLY_")


class ValueType(enum.IntEnum):
    """The 13 metadata value types."""

    UINT8 = 0
    INT8 = 1
    UINT16 = 2
    INT16 = 3
    UINT32 = 4
    INT32 = 5
    FLOAT32 = 6
    BOOL = 7
    STRING = 8
    ARRAY = 9
    UINT64 = 10
    INT64 = 11
    FLOAT64 = 12


INTEGER_VALUE_TYPES = frozenset(
    {
        ValueType.UINT8,
        ValueType.INT8,
        ValueType.UINT16,
        ValueType.INT16,
        ValueType.UINT32,
        ValueType.INT32,
        ValueType.UINT64,
        ValueType.INT64,
    }
)


# struct format character and byte width of every fixed-size value type.
SCALAR_FORMATS: dict[ValueType, tuple[str, int]] = {
    ValueType.UINT8: ("B", 1),
    ValueType.INT8: ("b", 1),
    ValueType.UINT16: ("H", 2),
    ValueType.INT16: ("h", 2),
    ValueType.UINT32: ("I", 4),
    ValueType.INT32: ("i", 4),
    ValueType.FLOAT32: ("f", 4),
    ValueType.BOOL: ("?", 1),
    ValueType.UINT64: ("Q", 8),
    ValueType.INT64: ("q", 8),
    ValueType.FLOAT64: ("d", 8),
}

GGUF_MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32
MAX_I64 = 2**63 - 1  # ggml keeps element counts and byte sizes in int64_t
MAX_DIMS = 4
