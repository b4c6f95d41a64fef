"""ggml's own C dequantizers (`ggml_get_type_traits(type)->to_float`) through ctypes.

A reference for tests and a peer for benchmarks; never used by `registry/`. The library
is the `libggml-base.so` that llama-cpp-python bundles. Where it lives: the
`REGISTRY_GGML_LIB` environment variable (read when `load()` is called, never at import),
else the first match under the peer virtualenv (`make refvenv`, .cache/refvenv) or the current interpreter's site-packages.
"""

from __future__ import annotations

import ctypes
import os
import site
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

ENV_VAR = "REGISTRY_GGML_LIB"
_LIB_NAMES = ("libggml-base.so", "libggml-base.dylib")

# void (*)(const void * x, float * y, int64_t k)
_ToFloat = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)


class _TypeTraits(ctypes.Structure):
    # struct ggml_type_traits in ggml/include/ggml.h (ggml 0.9 / llama-cpp-python 0.3.x).
    _fields_ = (
        ("type_name", ctypes.c_char_p),
        ("blck_size", ctypes.c_int64),
        ("blck_size_interleave", ctypes.c_int64),
        ("type_size", ctypes.c_size_t),
        ("is_quantized", ctypes.c_bool),
        ("to_float", ctypes.c_void_p),
        ("from_float_ref", ctypes.c_void_p),
    )


class GGMLUnavailable(RuntimeError):
    """The C library cannot be found or loaded; the message says why."""


@dataclass(frozen=True)
class TypeTraits:
    name: str
    block_size: int
    type_size: int
    is_quantized: bool
    has_to_float: bool
    has_from_float_ref: bool


def peer_venv() -> Path:
    """The separate virtualenv holding llama-cpp-python (`make refvenv`), or $REGISTRY_PEER_VENV."""
    default = Path(__file__).resolve().parent.parent / ".cache" / "refvenv"
    return Path(os.environ.get("REGISTRY_PEER_VENV", default))


def _candidates() -> list[Path]:
    env = os.environ.get(ENV_VAR)
    if env:
        return [Path(env)]
    roots = [peer_venv()]
    roots += [Path(p) for p in [*site.getsitepackages(), site.getusersitepackages()]]
    roots += [Path(sys.prefix)]
    found: list[Path] = []
    for root in roots:
        if not root.is_dir():
            continue
        for name in _LIB_NAMES:
            found.extend(sorted(root.rglob(name)))
    return found


class GGML:
    """A loaded libggml-base: type traits and the C `to_float` of every type that has one."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self._lib = ctypes.CDLL(str(path))
        except OSError as exc:
            raise GGMLUnavailable(f"cannot load {path}: {exc}") from exc
        self._lib.ggml_get_type_traits.restype = ctypes.POINTER(_TypeTraits)
        self._lib.ggml_get_type_traits.argtypes = (ctypes.c_int,)
        self._to_float: dict[int, Any] = {}

    def _raw(self, type_id: int) -> _TypeTraits:
        return self._lib.ggml_get_type_traits(type_id).contents

    def traits(self, type_id: int) -> TypeTraits:
        t = self._raw(type_id)
        name = t.type_name.decode() if t.type_name else ""
        return TypeTraits(
            name,
            int(t.blck_size),
            int(t.type_size),
            bool(t.is_quantized),
            bool(t.to_float),
            bool(t.from_float_ref),
        )

    def _pointer(self, type_id: int) -> int | None:
        t = self._raw(type_id)
        if t.blck_size <= 0:
            return None
        if t.to_float:
            return int(t.to_float)
        # Q8_K has a dequantizer that the traits table does not list (ggml never needs it
        # at run time); the exported symbol is the same C code.
        name = t.type_name.decode() if t.type_name else ""
        try:
            return ctypes.cast(getattr(self._lib, f"dequantize_row_{name}"), ctypes.c_void_p).value
        except AttributeError:
            return None

    def to_float_source(self, type_id: int) -> str:
        """Where the C dequantizer of a type comes from, for provenance notes."""
        t = self._raw(type_id)
        if t.to_float:
            return "ggml_get_type_traits(type)->to_float"
        name = t.type_name.decode() if t.type_name else "?"
        return f"exported dequantize_row_{name}" if self.has_to_float(type_id) else "none"

    def has_to_float(self, type_id: int) -> bool:
        return self._pointer(type_id) is not None

    def _fn(self, type_id: int) -> Any:
        fn = self._to_float.get(type_id)
        if fn is None:
            ptr = self._pointer(type_id)
            if ptr is None:
                raise GGMLUnavailable(f"ggml has no to_float for type {type_id}")
            fn = _ToFloat(ptr)
            self._to_float[type_id] = fn
        return fn

    def to_float(
        self,
        type_id: int,
        raw: bytes | memoryview | np.ndarray,
        n_elements: int,
        out: np.ndarray | None = None,
    ) -> np.ndarray:
        """Dequantize `n_elements` values of `raw` with ggml's C code, in one thread."""
        t = self._raw(type_id)
        if n_elements % t.blck_size:
            raise ValueError(f"{n_elements} is not a multiple of block size {t.blck_size}")
        need = n_elements // t.blck_size * t.type_size
        src = np.ascontiguousarray(
            np.frombuffer(raw, dtype=np.uint8) if not isinstance(raw, np.ndarray) else raw
        )
        if src.nbytes != need:
            raise ValueError(f"{src.nbytes} bytes given, {need} needed")
        if out is None:
            out = np.empty(n_elements, dtype=np.float32)
        fn = self._fn(type_id)
        fn(src.ctypes.data, out.ctypes.data, n_elements)
        return out

    def quantize_ref(self, type_id: int, values: np.ndarray) -> bytes:
        """ggml's reference quantizer (`from_float_ref`): floats -> blocks."""
        t = self._raw(type_id)
        if not t.from_float_ref:
            raise GGMLUnavailable(f"ggml has no from_float_ref for type {type_id}")
        x = np.ascontiguousarray(values, dtype=np.float32)
        if x.size % t.blck_size:
            raise ValueError(f"{x.size} is not a multiple of block size {t.blck_size}")
        out = np.zeros(x.size // t.blck_size * t.type_size, dtype=np.uint8)
        _ToFloat(t.from_float_ref)(x.ctypes.data, out.ctypes.data, x.size)  # same C signature shape
        return out.tobytes()


@cache
def load() -> GGML:
    """The first loadable libggml-base; GGMLUnavailable says why there is none."""
    candidates = _candidates()
    if not candidates:
        where = os.environ.get(ENV_VAR) or f"{peer_venv()} (make refvenv) or site-packages"
        raise GGMLUnavailable(f"no libggml-base found ({ENV_VAR} unset; searched {where})")
    errors = []
    for path in candidates:
        if not path.exists():
            errors.append(f"{path}: missing")
            continue
        try:
            return GGML(path)
        except GGMLUnavailable as exc:
            errors.append(str(exc))
    raise GGMLUnavailable("; ".join(errors))


def to_float(type_id: int, raw: bytes | memoryview | np.ndarray, n_elements: int) -> np.ndarray:
    """ggml's C dequantization of `raw` (type id `type_id`) to float32."""
    return load().to_float(type_id, raw, n_elements)


def library_version(lib: GGML) -> str:
    """llama-cpp-python's version when the library is one it bundles, else the file name."""
    for parent in lib.path.parents:
        for info in parent.glob("llama_cpp_python-*.dist-info"):
            return "llama-cpp-python " + info.name.removeprefix("llama_cpp_python-").removesuffix(
                ".dist-info"
            )
    return lib.path.name
