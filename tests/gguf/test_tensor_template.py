"""`parse_header(tensors_like=...)`: a sibling's tensor infos read against its leader's.

Whatever the template takes or leaves to the parser, the result is that of a plain parse:
the same tensors, or the same error."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

import pytest

from registry.gguf.errors import GGUFError, NeedMoreData
from registry.gguf.limits import DEFAULT_LIMITS
from registry.gguf.model import GGUFHeader
from registry.gguf.reader import parse_header
from registry.gguf.tensor_template import TensorTemplate
from registry.gguf.types import GGMLType, ValueType
from tests.gguf.builders import HeaderBuilder

Q = GGMLType
# name, shape, type, offset (None: packed after the previous tensor)
Tensor = tuple[str, Sequence[int], int, int | None]
LEADER: list[Tensor] = [
    ("token_embd.weight", [96, 8], Q.Q8_0, None),
    ("blk.0.attn_norm.weight", [256], Q.F32, None),
    ("blk.0.attn_q.weight", [256, 256], Q.Q4_K, None),
    ("output.weight", [256, 8], Q.Q6_K, None),
]
SIBLING: list[Tensor] = [(n, s, t, None) for (n, s, _, _), t in zip(LEADER, [Q.F16, Q.F32, Q.IQ4_XS, Q.Q8_0], strict=True)]


def _header(tensors: Sequence[Tensor], version: int = 3, endian: str = "<") -> bytes:
    b = HeaderBuilder(version=version, endian=endian)
    b.kv("general.architecture", ValueType.STRING, "llama")
    b.kv("general.alignment", ValueType.UINT32, 32)
    for name, shape, ttype, offset in tensors:
        b.tensor(name, shape, ttype, offset)
    return b.build()


def _template(version: int = 3, endian: str = "<") -> TensorTemplate:
    template = TensorTemplate.of(parse_header(_header(LEADER, version, endian)))
    assert template is not None
    return template


def _outcome(parse: Callable[[], GGUFHeader]) -> object:
    """What a parse gives: the parts of its header that tensor infos make, or its error."""
    try:
        h = parse()
    except (GGUFError, NeedMoreData) as exc:
        return type(exc), str(exc), getattr(exc, "field", None), getattr(exc, "offset", None)
    return h.tensors, h.data_offset, h.anomalies


def _read(template: TensorTemplate, data: bytes) -> object:
    """The template's own answer for `data`, at the offset where a plain parse found its
    first tensor info."""
    plain = parse_header(data)
    return template.read(data, plain.tensors[0].info_offset, len(plain.tensors), plain.alignment, DEFAULT_LIMITS.max_tensor_bytes)


@pytest.mark.parametrize("version", [1, 2, 3])
@pytest.mark.parametrize("endian", ["<", ">"])
def test_a_sibling_with_the_leaders_names_and_shapes_is_read_from_the_template(version: int, endian: str) -> None:
    template = _template(version, endian)
    data = _header(SIBLING, version, endian)
    plain = parse_header(data)
    assert _read(template, data) is not None  # the template was used, not the parser's own path
    assert _outcome(lambda: parse_header(data, tensors_like=template)) == _outcome(lambda: plain)
    assert [t.type for t in plain.tensors] == [Q.F16, Q.F32, Q.IQ4_XS, Q.Q8_0]


def _renamed() -> list[Tensor]:
    return [("blk.0.attn_k.weight", *SIBLING[0][1:]), *SIBLING[1:]]


def _reshaped() -> list[Tensor]:
    return [SIBLING[0], SIBLING[1], ("blk.0.attn_q.weight", [256, 128], Q.Q4_K, None), SIBLING[3]]


def _longer() -> list[Tensor]:
    return [*SIBLING, ("blk.0.ffn_norm.weight", [256], Q.F32, None)]


def _unknown_type() -> list[Tensor]:
    return [SIBLING[0], ("blk.0.attn_norm.weight", [256], 1000, None), *SIBLING[2:]]


def _misaligned() -> list[Tensor]:
    return [SIBLING[0], ("blk.0.attn_norm.weight", [256], Q.F32, 2056), *SIBLING[2:]]


def _overlapping() -> list[Tensor]:
    return [SIBLING[0], ("blk.0.attn_norm.weight", [256], Q.F32, 0), *SIBLING[2:]]


def _block_mismatch() -> list[Tensor]:
    # Q4_K's blocks are 256 wide: a first dimension of 96 cannot hold them.
    return [("token_embd.weight", [96, 8], Q.Q4_K, None), *SIBLING[1:]]


@pytest.mark.parametrize(
    "tensors",
    [_renamed, _reshaped, _longer, _unknown_type, _misaligned, _overlapping, _block_mismatch],
    ids=["renamed", "reshaped", "one tensor more", "unknown type", "misaligned", "overlapping", "block size"],
)
def test_what_the_template_does_not_cover_is_left_to_the_parser(tensors: Callable[[], list[Tensor]]) -> None:
    template = _template()
    data = _header(tensors())
    expected = _outcome(lambda: parse_header(data))
    assert _outcome(lambda: parse_header(data, tensors_like=template)) == expected
    try:
        parse_header(data)
    except GGUFError:
        return  # the plain parse fails: the parser's own error, checked above
    assert _read(template, data) is None


def test_a_sibling_cut_short_needs_the_same_bytes_as_without_the_template() -> None:
    template = _template()
    data = _header(SIBLING)
    cut = data[: len(data) - 20]
    expected = _outcome(lambda: parse_header(cut))
    assert expected[0] is NeedMoreData
    assert _outcome(lambda: parse_header(cut, tensors_like=template)) == expected


def test_a_template_with_more_dimensions_than_the_limits_allow_is_not_used() -> None:
    template = _template()
    data = _header(SIBLING)
    limits = replace(DEFAULT_LIMITS, max_dims=1)
    expected = _outcome(lambda: parse_header(data, limits=limits))
    assert expected[0] is not None and "dimensions" in str(expected[1])
    assert _outcome(lambda: parse_header(data, limits=limits, tensors_like=template)) == expected


def test_a_template_of_another_encoding_is_not_used() -> None:
    # The leader is version 3 little-endian; the sibling version 2 big-endian.
    template = _template()
    data = _header(SIBLING, 2, ">")
    assert _outcome(lambda: parse_header(data, tensors_like=template)) == _outcome(lambda: parse_header(data))


def test_no_template_of_a_header_naming_a_tensor_twice_or_none() -> None:
    twice = [*LEADER, ("output.weight", [256], Q.F32, None)]
    header = parse_header(_header(twice))
    assert [a.kind for a in header.anomalies] == ["duplicate_tensor"]
    assert TensorTemplate.of(header) is None
    assert TensorTemplate.of(parse_header(HeaderBuilder().build())) is None
