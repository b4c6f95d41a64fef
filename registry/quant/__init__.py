"""Dequantization of every ggml tensor type to float32, bit for bit as ggml does it."""

from registry.quant.api import (
    DEFAULT_MAX_BYTES,
    TensorRows,
    dequantize,
    dequantize_chunks,
    kernels,
    supported_types,
    tensor_rows,
)
from registry.quant.base import BadTensorData, DequantError, KernelSpec, UnsupportedType

__all__ = [
    "DEFAULT_MAX_BYTES",
    "BadTensorData",
    "DequantError",
    "KernelSpec",
    "TensorRows",
    "UnsupportedType",
    "dequantize",
    "dequantize_chunks",
    "kernels",
    "supported_types",
    "tensor_rows",
]
