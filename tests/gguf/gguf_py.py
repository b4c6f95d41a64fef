"""gguf-py (llama.cpp's reference reader and writer) as the independent side of tests.

Files it writes are what converters really produce, and what its reader says about a file
is what we check our facts against, so neither side is checked against itself.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import gguf
import numpy as np

from registry.gguf.model import GGUFHeader
from registry.gguf.reader import parse_header

Q = gguf.GGMLQuantizationType


def quant(rows: int, cols: int, qtype: gguf.GGMLQuantizationType) -> tuple[np.ndarray, Any]:
    """Zero bytes of a (rows, cols) tensor of a quantized type; gguf-py takes the byte shape."""
    block, type_size = gguf.GGML_QUANT_SIZES[qtype]
    assert cols % block == 0
    return np.zeros((rows, cols // block * type_size), dtype=np.uint8), qtype


def _add_kv(w: gguf.GGUFWriter, key: str, value: Any) -> None:
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[1], gguf.GGUFValueType):
        w.add_key_value(key, value[0], value[1])
    elif isinstance(value, bool):
        w.add_bool(key, value)
    elif isinstance(value, int):
        w.add_uint32(key, value)
    elif isinstance(value, float):
        w.add_float32(key, value)
    elif isinstance(value, str):
        w.add_string(key, value)
    elif isinstance(value, list):
        w.add_array(key, value)
    else:
        raise TypeError(f"no writer for {key}={value!r}")


def write_gguf(
    path: Path,
    *,
    arch: str = "llama",
    kv: Mapping[str, Any] | None = None,
    tensors: Sequence[tuple[str, Any]] = (),
    split_max_tensors: int = 0,
) -> list[Path]:
    """Write a GGUF file (or the shards of a split one) with gguf-py; returns the paths.

    A tensor is a float numpy array, or the `quant(...)` triple for a quantized type.
    """
    w = gguf.GGUFWriter(path, arch, split_max_tensors=split_max_tensors)
    for key, value in (kv or {}).items():
        _add_kv(w, key, value)
    for name, t in tensors:
        if isinstance(t, tuple):
            data, qtype = t
            w.add_tensor(name, data, raw_dtype=qtype)
        else:
            w.add_tensor(name, t)
    paths = w.format_shard_names(path)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return paths


def parse_file(path: Path) -> GGUFHeader:
    data = path.read_bytes()
    return parse_header(data, file_size=len(data))


@functools.cache
def gguf_reader(path: Path) -> gguf.GGUFReader:
    """One gguf-py reader per file per test run: reading gemma's vocabulary takes seconds."""
    return gguf.GGUFReader(path)
