"""Configurable bounds the header parser enforces before it trusts any count or length."""

from __future__ import annotations

from dataclasses import dataclass

from registry.gguf.types import MAX_DIMS

_MiB = 1024 * 1024
_MAX_NESTING = 64


@dataclass(frozen=True, slots=True)
class Limits:
    """Upper bounds for one header parse.

    The defaults are far above anything a real model carries (the largest vocabularies
    are ~260k tokens, real headers a few MiB) yet small enough that a hostile file
    cannot make the parser hold more than `max_header_bytes` of its own input.
    """

    max_kv_count: int = 65_536
    max_tensor_count: int = 1_048_576
    max_string_length: int = 16 * _MiB
    max_array_length: int = 16 * _MiB
    max_nesting_depth: int = 8  # arrays inside arrays; a top-level array is depth 1
    max_dims: int = MAX_DIMS  # GGML_MAX_DIMS
    max_header_bytes: int = 64 * _MiB
    max_tensor_bytes: int = 2**63 - 1  # bytes of one tensor's data; int64 like ggml

    def __post_init__(self) -> None:
        for name in self.__slots__:
            value = getattr(self, name)
            if not isinstance(value, int) or value < 0:
                raise ValueError(f"Limits.{name} must be a non-negative int, got {value!r}")
        if not 1 <= self.max_dims <= MAX_DIMS:
            raise ValueError(f"Limits.max_dims must be in 1..{MAX_DIMS}")
        # Nested arrays are walked recursively; this keeps far clear of Python's stack limit.
        if self.max_nesting_depth > _MAX_NESTING:
            raise ValueError(f"Limits.max_nesting_depth must be at most {_MAX_NESTING}")


DEFAULT_LIMITS = Limits()
