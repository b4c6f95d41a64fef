"""Settings, corrupted model copies and tiny GGUF files for the verification tests."""

from __future__ import annotations

import dataclasses
import shutil
import struct
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import pytest

from registry.config import HubSettings, Settings, VerifySettings
from registry.gguf.model import TensorInfo
from registry.gguf.reader import parse_header

# The API's fixtures (app over SQLite and PostgreSQL) for the Verifier tests.
from tests.api.conftest import (  # noqa: F401
    db,
    db_url,
    make_api,
    postgresql_url,
    sqlite_url,
    temp_databases,
)
from tests.fakehub.testing import TOKEN


def make_settings(tmp_path: Path, endpoint: str = "http://127.0.0.1:9", **verify: Any) -> Settings:
    hub = HubSettings(endpoint=endpoint, token=TOKEN, max_attempts=4, backoff_base=0.01, backoff_max=0.05)
    return dataclasses.replace(
        Settings(),
        general=dataclasses.replace(Settings().general, data_dir=str(tmp_path / "data")),
        hub=hub,
        verify=VerifySettings(**verify),
    )


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return make_settings(tmp_path)


def header_of(path: Path) -> Any:
    with path.open("rb") as f:
        head = f.read(8 << 20)
    return parse_header(head)


def copy_model(src: Path, dest: Path) -> Path:
    shutil.copyfile(src, dest)
    return dest


def first_tensor(path: Path, type_name: str) -> TensorInfo:
    return next(t for t in header_of(path).tensors if t.type.name == type_name)


def patch(path: Path, offset: int, data: bytes) -> None:
    with path.open("r+b") as f:
        f.seek(offset)
        f.write(data)


def offset_field(info: TensorInfo) -> int:
    """Byte offset of the u64 data offset in a (little-endian, v3) tensor info record."""
    name_len = len(info.name.encode())
    return info.info_offset + 8 + name_len + 4 + 8 * len(info.shape) + 4


def write_tiny(path: Path, arch: str = "mamba", *, nan: bool = False, rows: int = 64) -> Path:
    """A small GGUF of `arch` with three float tensors and no tokenizer."""
    w = gguf.GGUFWriter(str(path), arch)
    w.add_uint32(f"{arch}.context_length", 64)
    w.add_uint32(f"{arch}.embedding_length", 32)
    w.add_uint32(f"{arch}.block_count", 1)
    rng = np.random.default_rng(0)
    emb = rng.standard_normal((rows, 32)).astype(np.float32)
    if nan:
        emb[3, 5] = np.nan
    w.add_tensor("token_embd.weight", emb)
    w.add_tensor("blk.0.ssm_in.weight", rng.standard_normal((64, 32)).astype(np.float16))
    w.add_tensor("output_norm.weight", np.ones(32, np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def f32_at(path: Path, info: TensorInfo, values: np.ndarray) -> None:
    patch(path, info.file_offset, values.astype("<f4").tobytes())


def u64(value: int) -> bytes:
    return struct.pack("<Q", value)
