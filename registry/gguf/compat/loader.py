"""Findings of what llama.cpp's GGUF loader refuses: from the parser's anomalies and errors."""

from __future__ import annotations

from registry.gguf.compat.codes import CompatFinding, finding
from registry.gguf.errors import (
    BadAlignment,
    BlockSizeMismatch,
    GGUFError,
    InconsistentShards,
    TensorOutOfBounds,
    UnknownTensorType,
)
from registry.gguf.model import GGUFHeader

_ANOMALY_CODES = {
    "alignment_type": "L001",
    "duplicate_key": "L003",
    "duplicate_tensor": "L004",
    "invalid_utf8": "L018",
}
# Most specific class first: TensorOutOfBounds is a TruncatedFile, BlockSizeMismatch an
# InvalidTensor, BadAlignment an InvalidValue.
_ERROR_CODES: tuple[tuple[type[GGUFError], str], ...] = (
    (BadAlignment, "L002"),
    (UnknownTensorType, "L005"),
    (TensorOutOfBounds, "L006"),
    (BlockSizeMismatch, "L007"),
    (InconsistentShards, "L008"),
)


def anomaly_findings(header: GGUFHeader) -> list[CompatFinding]:
    return [finding(_ANOMALY_CODES[a.kind], a.field, a.message) for a in header.anomalies]


def error_findings(exc: GGUFError) -> tuple[CompatFinding, ...]:
    """The finding a parse or shard error stands for, if llama.cpp refuses the same file."""
    for cls, code in _ERROR_CODES:
        if isinstance(exc, cls):
            return (finding(code, exc.field or "", exc.message),)
    return ()
