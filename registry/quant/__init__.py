"""Dequantization of every ggml tensor type to float32, bit for bit as ggml does it."""

from registry.quant.api import DEFAULT_MAX_BYTES, dequantize, dequantize_chunks, kernels, supported_types
from registry.quant.base import BadTensorData, DequantError, KernelSpec, UnsupportedType

__all__ = [
    "DEFAULT_MAX_BYTES",
    "BadTensorData",
    "DequantError",
    "KernelSpec",
    "UnsupportedType",
    "dequantize",
    "dequantize_chunks",
    "kernels",
    "supported_types",
]
