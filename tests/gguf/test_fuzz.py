"""Mutated and truncated headers: the parser raises only its own errors, asks for more
bytes only forward, and allocates no more than a small multiple of its input.

`REGISTRY_FUZZ_EXAMPLES` raises the example counts (`make fuzz`); the defaults keep this
file to a few seconds. Work is bounded by allocation (tracemalloc), never by wall clock.
"""

from __future__ import annotations

import os
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from registry.gguf.array import GGUFArray
from registry.gguf.errors import GGUFError, NeedMoreData
from registry.gguf.model import GGUFHeader
from registry.gguf.reader import parse_header
from registry.gguf.types import GGMLType, ValueType
from tests.gguf.builders import Arr, HeaderBuilder, minimal

EXAMPLES = int(os.environ.get("REGISTRY_FUZZ_EXAMPLES", "200"))
REAL_EXAMPLES = max(10, EXAMPLES // 10)

# Room for the parser's own bookkeeping (structs, dicts, error messages) on tiny inputs.
ALLOC_CONSTANT = 256 * 1024
ALLOC_FACTOR = 8

BIG_NUMBERS = [0, 1, 2**31, 2**32 - 1, 2**32, 2**62, 2**63 - 1, 2**63, 2**64 - 1]


def _seeds() -> list[bytes]:
    seeds = []
    for version in (1, 2, 3):
        for endian in ("<", ">"):
            b = minimal(version, endian)
            b.kv(
                "nested",
                ValueType.ARRAY,
                Arr(
                    ValueType.ARRAY, [Arr(ValueType.INT32, [1, 2, 3]), Arr(ValueType.STRING, ["abc", "def"])]
                ),
            )
            b.kv("bools", ValueType.ARRAY, Arr(ValueType.BOOL, [True, False]))
            b.kv("u64", ValueType.UINT64, 7)
            b.tensor("blk.0.ffn.weight", [256, 2], GGMLType.Q4_K)
            seeds.append(b.build(with_data=True))
    return seeds


SEEDS = _seeds()

mutation = st.one_of(
    st.tuples(st.just("flip"), st.integers(0, 2**20), st.integers(0, 7)),
    st.tuples(st.just("set"), st.integers(0, 2**20), st.integers(0, 255)),
    st.tuples(st.just("truncate"), st.integers(0, 2**20), st.just(0)),
    st.tuples(st.just("insert"), st.integers(0, 2**20), st.binary(min_size=1, max_size=16)),
    st.tuples(
        st.just("length"), st.integers(0, 2**20), st.sampled_from(BIG_NUMBERS) | st.integers(0, 2**64 - 1)
    ),
)


def mutate(data: bytes, ops: list[tuple[str, int, Any]]) -> bytes:
    buf = bytearray(data)
    for op, where, arg in ops:
        if not buf:
            break
        pos = where % len(buf)
        if op == "flip":
            buf[pos] ^= 1 << arg
        elif op == "set":
            buf[pos] = arg
        elif op == "truncate":
            del buf[pos:]
        elif op == "insert":
            buf[pos:pos] = arg
        else:
            width = 4 if arg < 2**32 and where % 2 else 8
            order = "big" if where % 3 == 0 else "little"
            buf[pos : pos + width] = arg.to_bytes(width, order)
    return bytes(buf)


def check_parse(data: bytes, file_size: int | None) -> GGUFHeader | None:
    """Parse; only the parser's own exceptions may come out, with sane fields."""
    try:
        header = parse_header(data, file_size=file_size)
    except NeedMoreData as exc:
        assert file_size is None or file_size > len(data)
        assert exc.have == len(data) and exc.needed > len(data)
        return None
    except GGUFError as exc:
        assert exc.field and exc.offset is not None and exc.offset >= 0
        return None
    assert header.data_offset % header.alignment == 0
    end = 0
    for t in header.tensors:
        assert t.offset >= end and t.n_elements > 0
        end = t.offset + t.n_bytes
    return header


def touch_values(header: GGUFHeader) -> None:
    """A parsed header's arrays decode without error (their bytes were validated)."""
    for f in header.fields.values():
        if isinstance(f.value, GGUFArray) and f.value.count <= 10_000:
            values = f.value.to_list()
            assert len(values) == f.value.count
            if values:
                assert f.value[-1] is not None


@settings(max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.sampled_from(SEEDS),
    ops=st.lists(mutation, min_size=1, max_size=6),
    more=st.none() | st.integers(0, 2**64),  # bytes of the file past `data`, None: unknown
)
def test_mutated_synthetic_headers(seed: bytes, ops: list[tuple[str, int, Any]], more: int | None) -> None:
    data = mutate(seed, ops)
    tracemalloc.start()
    try:
        header = check_parse(data, None if more is None else len(data) + more)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak <= ALLOC_FACTOR * len(data) + ALLOC_CONSTANT, f"peak {peak} for {len(data)} input bytes"
    if header is not None:
        touch_values(header)


@settings(max_examples=EXAMPLES, deadline=None, database=None)
@given(
    count=st.sampled_from(BIG_NUMBERS) | st.integers(0, 2**64 - 1),
    etype=st.sampled_from(list(ValueType)) | st.integers(0, 2**32 - 1),
    tail=st.binary(max_size=64),
    version=st.sampled_from([1, 2, 3]),
)
def test_hostile_array_headers(count: int, etype: int, tail: bytes, version: int) -> None:
    """Random element types and counts straight after an array tag."""
    b = HeaderBuilder(version=version)
    count &= (1 << (8 * b.lw)) - 1
    data = b.kv_raw("k", ValueType.ARRAY, b.u32(etype) + b.length(count) + tail).build()
    tracemalloc.start()
    try:
        check_parse(data, None)
        check_parse(data, len(data))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak <= ALLOC_FACTOR * len(data) + ALLOC_CONSTANT


@pytest.fixture(scope="module")
def real_header(sample_model_path: Path) -> bytes:
    with sample_model_path.open("rb") as f:
        data = f.read(8 * 1024 * 1024)
    return data[: parse_header(data).data_offset]


@settings(
    max_examples=REAL_EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.function_scoped_fixture,
        HealthCheck.data_too_large,
    ],
)
@given(ops=st.lists(mutation, min_size=1, max_size=4), whole=st.booleans(), spread=st.integers(1, 64))
def test_mutated_real_headers(
    real_header: bytes, ops: list[tuple[str, int, Any]], whole: bool, spread: int
) -> None:
    # Mutation offsets are drawn up to 1 MiB; spread them over the whole header.
    scaled = [(op, where * spread, arg) for op, where, arg in ops]
    data = mutate(real_header, scaled)
    check_parse(data, len(data) if whole else None)
