"""What every dequantization kernel module provides.

A kernel module exports `KERNELS: dict[GGMLType, KernelSpec]`. A kernel takes the raw
blocks of a tensor as a 2-D uint8 array of shape (n_blocks, type_size), already in
little-endian byte order, and returns a 1-D float32 array of n_blocks * block_size
values. Kernels are vectorised over blocks: no Python loop per block.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from registry.gguf.types import GGMLType

Kernel = Callable[[np.ndarray], np.ndarray]


@dataclass(frozen=True, slots=True)
class KernelSpec:
    fn: Kernel
    # Multi-byte fields of one block as (byte offset, item count, item size): what must be
    # byte-swapped to read a block written by a big-endian file.
    swap_fields: tuple[tuple[int, int, int], ...] = ()


class DequantError(Exception):
    """Base of every dequantization error."""

    code = "dequant_error"

    def __init__(self, message: str, *, ggml_type: int | None = None) -> None:
        self.message = message
        self.ggml_type = ggml_type
        super().__init__(message)


class UnsupportedType(DequantError):
    code = "unsupported_type"


class BadTensorData(DequantError):
    """Data too short or too long for the element count, or a count not a block multiple."""

    code = "bad_tensor_data"


__all__ = ["BadTensorData", "DequantError", "GGMLType", "Kernel", "KernelSpec", "UnsupportedType"]
