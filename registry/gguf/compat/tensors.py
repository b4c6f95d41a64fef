"""Findings about the architecture and its tensors: supported, required tensors, vocabulary rows."""

from __future__ import annotations

from collections.abc import Sequence

from registry.gguf.compat.codes import CompatFinding, finding
from registry.gguf.compat.tables import ARCHITECTURES, NOT_A_MODEL, REQUIRED
from registry.gguf.model import GGUFHeader

# One finding per missing name is enough to act on; a file missing whole layers would
# otherwise list thousands.
_MAX_MISSING = 8


def architecture_findings(headers: Sequence[GGUFHeader], *, tensors: bool = True) -> list[CompatFinding]:
    first = headers[0]
    arch = first.get("general.architecture")
    if not isinstance(arch, str):
        return [
            finding("L009", "general.architecture", "no general.architecture: llama.cpp cannot pick a model")
        ]
    if arch not in ARCHITECTURES or arch in NOT_A_MODEL:
        return [
            finding(
                "L009", "general.architecture", f"architecture {arch!r} is not one llama.cpp loads as a model"
            )
        ]
    if not tensors:
        return []
    names = {t.name for h in headers for t in h.tensors}
    out = _missing(arch, first, names)
    out += _embedding_rows(first, headers)
    return out


def _missing(arch: str, header: GGUFHeader, names: set[str]) -> list[CompatFinding]:
    req = REQUIRED.get(arch)
    if req is None:
        return []
    def has(name: str) -> bool:
        # Most tensors are `<name>.weight`; a few carry no suffix (mamba's ssm_a and ssm_d).
        return f"{name}.weight" in names or name in names

    missing = [g for g in req.globals if not has(g)]
    blocks = header.get(f"{arch}.block_count")
    if isinstance(blocks, int) and 0 <= blocks <= 4096:
        for i in range(blocks):
            for group in req.layer:
                if not any(all(has(f"blk.{i}.{n}") for n in alt) for alt in group):
                    # Name the first alternative's first absent tensor: what a loader reports.
                    missing.append(next(f"blk.{i}.{n}" for n in group[0] if not has(f"blk.{i}.{n}")))
    return [
        finding("L010", f"{name}.weight", f"{arch} requires tensor {name}.weight, which the file lacks")
        for name in missing[:_MAX_MISSING]
    ]


def _embedding_rows(header: GGUFHeader, headers: Sequence[GGUFHeader]) -> list[CompatFinding]:
    tokens = header.get("tokenizer.ggml.tokens")
    if tokens is None or isinstance(tokens, str | int | float):
        return []
    embd = next((t for h in headers for t in h.tensors if t.name == "token_embd.weight"), None)
    if embd is None or len(embd.shape) < 2:
        return []
    rows, vocab = embd.shape[1], len(tokens)
    if rows == vocab:
        return []
    return [
        finding("L011", "token_embd.weight", f"token_embd has {rows} rows for a vocabulary of {vocab} tokens")
    ]
