"""Every tensor of the two real sample models dequantizes exactly as gguf-py does it.

Our header parser locates the tensors; the file is memory-mapped and each tensor's bytes
go both to `registry.quant.dequantize` and to `gguf.quants.dequantize`.
"""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import pytest
from gguf import quants as gguf_quants

from registry.gguf.errors import NeedMoreData
from registry.gguf.model import GGUFHeader
from registry.gguf.reader import next_window, parse_header
from registry.quant import dequantize, dequantize_chunks
from tests.quant.helpers import assert_same_bits


def read_header(path: Path) -> GGUFHeader:
    size = path.stat().st_size
    want = 1 << 20
    with path.open("rb") as f:
        while True:
            f.seek(0)
            data = f.read(want)
            try:
                return parse_header(data, file_size=size)
            except NeedMoreData as exc:
                want = next_window(exc, margin=64 << 10)


def _check_model(path: Path, expected_types: set[str]) -> None:
    header = read_header(path)
    mm = np.memmap(path, dtype=np.uint8, mode="r")
    seen: dict[str, int] = {}
    for t in header.tensors:
        raw = mm[t.file_offset : t.file_offset + t.n_bytes]
        ours = dequantize(raw, t.type, t.n_elements)
        with np.errstate(all="ignore"):
            ref = gguf_quants.dequantize(np.asarray(raw), gguf.GGMLQuantizationType(int(t.type)))
        assert_same_bits(ours, ref.reshape(-1), f"{path.name}:{t.name} ({t.type.name})")
        seen[t.type.name] = seen.get(t.type.name, 0) + 1
    assert set(seen) == expected_types, seen


def test_smollm2_every_tensor_matches_gguf_py(smollm2_path: Path) -> None:
    _check_model(smollm2_path, {"F32", "Q4_1", "Q8_0"})


def test_gemma3_every_tensor_matches_gguf_py(gemma3_path: Path) -> None:
    _check_model(gemma3_path, {"F32", "Q8_0", "Q5_0", "Q4_K", "Q6_K"})


@pytest.mark.parametrize("max_bytes", [1 << 20])
def test_streaming_a_real_tensor_matches_the_whole(gemma3_path: Path, max_bytes: int) -> None:
    header = read_header(gemma3_path)
    mm = np.memmap(gemma3_path, dtype=np.uint8, mode="r")
    for t in header.tensors:
        if t.type.name in ("Q4_K", "Q6_K", "Q5_0") and len(t.shape) == 2:
            raw = mm[t.file_offset : t.file_offset + t.n_bytes]
            whole = dequantize(raw, t.type, t.n_elements).reshape(t.shape[1], t.shape[0])
            for first, piece in dequantize_chunks(raw, t.type, t.shape, max_bytes=max_bytes):
                assert piece.nbytes <= max_bytes
                assert_same_bits(piece, whole[first : first + piece.shape[0]], t.name)
