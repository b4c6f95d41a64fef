"""A model file as the runner sees it: parsed header, metadata lookups, float32 tensors.

The runner does no I/O: callers hand in the whole file as a buffer (usually a numpy
memmap, so tensor bytes are paged in only when dequantized). Headers are parsed with
`registry.gguf` and tensors dequantized with `registry.quant`.

A model whose float32 weights would not fit in memory keeps some of its weight matrices
as the file's bytes (`KeptMatrix`, beyond `ModelFile.float32_budget`): each use
dequantizes them a piece of rows at a time, so a 7B model runs in its file size plus
what the budget allows, at the price of dequantizing those matrices again on every
forward pass.
"""

from __future__ import annotations

import math
from collections.abc import Collection
from typing import Any

import numpy as np

from registry.gguf.array import GGUFArray
from registry.gguf.errors import NeedMoreData
from registry.gguf.model import GGUFHeader, TensorInfo
from registry.gguf.reader import next_window, parse_header
from registry.gguf.types import INTEGER_VALUE_TYPES, ValueType
from registry.quant import TensorRows, dequantize, tensor_rows
from registry.runner.errors import BadMetadata, BadTensor, MissingKey, MissingTensor
from registry.runner.ops import Rounding, rounding_for

# First guess at the header size; vocabularies of 256k tokens need a few MiB.
_FIRST_WINDOW = 1 << 20
_MARGIN = 64 * 1024

NUMBER_TYPES = INTEGER_VALUE_TYPES | {ValueType.FLOAT32, ValueType.FLOAT64}

# Most float32 bytes a kept matrix dequantizes at once (a piece of its rows).
PIECE_BYTES = 4 * 1024 * 1024  # measured: 1-32 MiB within 10% for generation; 4 MiB best


class KeptMatrix:
    """A 2-D weight left in the file's quantized bytes, shape (rows, row length) in numpy
    order: multiplied and looked up a piece of rows at a time (ops.QuantMatrix). The values
    are those `ModelFile.tensor` gives, piece by piece."""

    __slots__ = ("big_endian", "rows", "shape")

    def __init__(self, rows: TensorRows, *, big_endian: bool) -> None:
        self.rows, self.big_endian = rows, big_endian
        self.shape = (rows.n_rows, rows.row_len)

    def _piece(self, first: int, count: int) -> np.ndarray:
        return self.rows.dequantize(first, count, big_endian=self.big_endian)

    def matmul_t(self, x: np.ndarray) -> np.ndarray:
        out = np.empty((x.shape[0], self.shape[0]), dtype=np.float32)
        starts = self.rows.pieces(PIECE_BYTES)
        for first in starts:
            count = min(starts.step, self.shape[0] - first)
            out[:, first : first + count] = x @ self._piece(first, count).T
        return out

    def take(self, rows: np.ndarray) -> np.ndarray:
        ids = np.asarray(rows, dtype=np.int64).reshape(-1)
        out = np.empty((ids.size, self.shape[1]), dtype=np.float32)
        for i, row in enumerate(ids.tolist()):
            out[i] = self._piece(row, 1)[0]
        return out


def describe(value: Any) -> str:
    """What a metadata value is, in a few words: never the value itself, which may be huge."""
    if isinstance(value, GGUFArray):
        return f"an array of {value.element_type.name}"
    return f"a {type(value).__name__}"


class ModelFile:
    """Header plus tensor data of one GGUF file held in memory or memory-mapped."""

    def __init__(self, header: GGUFHeader, data: np.ndarray) -> None:
        self.header = header
        self._data = data
        # Set by load_model: float32 bytes `matrix` may still dequantize (None: no bound);
        # a weight matrix that does not fit is left quantized (KeptMatrix) and counted.
        self.float32_budget: int | None = None
        self.kept_matrices = 0

    @classmethod
    def from_buffer(cls, buf: bytes | bytearray | memoryview | np.ndarray) -> ModelFile:
        data = (
            np.frombuffer(buf, dtype=np.uint8)
            if not isinstance(buf, np.ndarray)
            else buf.reshape(-1).view(np.uint8)
        )
        size = int(data.size)
        window = min(_FIRST_WINDOW, size)
        # Parse from growing prefixes: the parser copies its input, and copying a whole
        # memory-mapped model file would read every tensor just to get at the header.
        while True:
            try:
                header = parse_header(data[:window].tobytes(), file_size=size)
                break
            except NeedMoreData as exc:
                if window >= size:
                    raise  # the parser knows the file size, so this should not happen
                window = min(next_window(exc, margin=_MARGIN), size)
        return cls(header, data)

    @property
    def arch(self) -> str:
        return self.get_str("general.architecture")

    def get(self, key: str, default: Any = None) -> Any:
        return self.header.get(key, default)

    def get_str(self, key: str, default: str | None = None) -> str:
        """A string value; required when there is no default."""
        value = self.get(key, default) if default is not None else self.require(key)
        if not isinstance(value, str):
            raise BadMetadata(key, f"expected a string, got {describe(value)}")
        return value

    def get_array(self, key: str, element_types: Collection[ValueType], what: str) -> GGUFArray | None:
        """An array of `what` (elements of one of `element_types`), or None if absent."""
        value = self.get(key)
        if value is None:
            return None
        if not isinstance(value, GGUFArray) or value.element_type not in element_types:
            raise BadMetadata(key, f"expected an array of {what}, got {describe(value)}")
        return value

    def get_bool(self, key: str, default: bool) -> bool:
        """A GGUF BOOL, the only type gguf-py writes flags as and llama.cpp reads them as:
        the truth of a string ("no") or of an array is not what the file meant."""
        field = self.header.fields.get(key)
        if field is None:
            return default
        if field.type != ValueType.BOOL:
            raise BadMetadata(key, f"expected a bool, got {describe(field.value)}")
        return bool(field.value)

    def require(self, key: str) -> Any:
        field = self.header.fields.get(key)
        if field is None:
            raise MissingKey(key)
        return field.value

    def require_int(self, key: str, default: int | None = None) -> int:
        value = self.get(key, default) if default is not None else self.require(key)
        if isinstance(value, bool) or not isinstance(value, int | np.integer):
            raise BadMetadata(key, f"expected a non-negative integer, got {describe(value)}")
        if value < 0:
            raise BadMetadata(key, f"expected a non-negative integer, got {value}")
        return int(value)

    def get_float(self, key: str, default: float, *, positive: bool = False) -> float:
        """A finite number (above zero if `positive`): NaN or infinity in a hyper-parameter
        would only show up later as non-finite logits, blaming the weights."""
        value = self.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int | float | np.number):
            raise BadMetadata(key, f"expected a number, got {describe(value)}")
        number = float(value)
        if not math.isfinite(number) or (positive and number <= 0):
            raise BadMetadata(key, f"expected a finite{' positive' if positive else ''} number, got {number}")
        return number

    def has_tensor(self, name: str) -> bool:
        return self.header.tensor(name) is not None

    def tensor_info(self, name: str) -> TensorInfo:
        info = self.header.tensor(name)
        if info is None:
            raise MissingTensor(name)
        return info

    def rounding(self, name: str) -> Rounding:
        """How ggml rounds the input of a matmul with this weight (see ops.round_activations)."""
        return rounding_for(self.tensor_info(name).type.name)

    def tensor_infos(self) -> list[TensorInfo]:
        """Every tensor of the model (of every shard)."""
        return list(self.header.tensors)

    def _tensor_bytes(self, name: str, shape: tuple[int, ...] | None) -> tuple[TensorInfo, np.ndarray, bool]:
        """The tensor's info, its bytes and whether they are big-endian, with the shape (numpy
        order) checked when given: a wrong shape would otherwise surface as a confusing
        broadcast error deep in the forward pass."""
        info = self.tensor_info(name)
        np_shape = tuple(reversed(info.shape))
        if shape is not None and np_shape != shape:
            raise BadTensor(name, f"shape {np_shape}, expected {shape}")
        end = info.file_offset + info.n_bytes
        if end > self._data.size:
            raise BadTensor(name, f"data ends at byte {end}, past the end of the file ({self._data.size})")
        return info, self._data[info.file_offset : end], self.header.endianness == "big"

    def tensor(self, name: str, shape: tuple[int, ...] | None = None) -> np.ndarray:
        """Dequantized float32 tensor in numpy order (GGUF [ne0, ne1] -> array (ne1, ne0))."""
        info, raw, big_endian = self._tensor_bytes(name, shape)
        values = dequantize(raw, info.type, info.n_elements, big_endian=big_endian)
        return values.reshape(tuple(reversed(info.shape)))

    def matrix(self, name: str, shape: tuple[int, int]) -> np.ndarray | KeptMatrix:
        """A 2-D weight: float32 as `tensor` gives it while `float32_budget` allows (and
        then taken from it), else kept quantized (checked the same way)."""
        info, raw, big_endian = self._tensor_bytes(name, shape)
        need = 4 * info.n_elements
        if self.float32_budget is None or need <= self.float32_budget:
            if self.float32_budget is not None:
                self.float32_budget -= need
            return dequantize(raw, info.type, info.n_elements, big_endian=big_endian).reshape(shape)
        self.kept_matrices += 1
        return KeptMatrix(tensor_rows(raw, info.type, info.shape), big_endian=big_endian)
