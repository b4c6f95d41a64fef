"""llama.cpp compatibility findings from GGUF headers alone (stdlib and numpy only).

`header_findings(headers)` checks the parsed headers of one artifact (its shards in order);
`error_findings(exc)` turns a parse or shard error llama.cpp would refuse the same way into
its finding. Codes, severities and titles live in `codes.CODES`; the chat template checks,
which need the sandbox, are in `registry.safety.compat`.
"""

from __future__ import annotations

from collections.abc import Sequence

from registry.gguf.compat.codes import (
    BY_CODE,
    CODES,
    Code,
    CompatFinding,
    Severity,
    compat_lines,
    finding,
    worst_first,
)
from registry.gguf.compat.loader import anomaly_findings, error_findings
from registry.gguf.compat.tensors import architecture_findings
from registry.gguf.compat.tokenizer import tokenizer_findings
from registry.gguf.model import GGUFHeader

__all__ = [
    "BY_CODE",
    "CODES",
    "Code",
    "CompatFinding",
    "Severity",
    "base_model_finding",
    "compat_lines",
    "error_findings",
    "finding",
    "header_findings",
    "runs_in_llama_cpp",
    "worst_first",
]


def header_findings(headers: Sequence[GGUFHeader], kind: str = "model") -> tuple[CompatFinding, ...]:
    """Every finding of one artifact's headers, worst first.

    `kind` is the facts' (`facts_model.KINDS`): a model gets every check; a vocabulary-only
    file no tensor checks; projectors, adapters and importance matrices, which llama.cpp
    loads beside a model and not as one, only the loader's."""
    if not headers:
        return ()
    out: list[CompatFinding] = []
    for h in headers:
        out += anomaly_findings(h)
    if kind in ("model", "vocab"):
        out += architecture_findings(headers, tensors=kind == "model")
        out += tokenizer_findings(headers[0])
    return worst_first(out)


def runs_in_llama_cpp(findings: Sequence[CompatFinding]) -> bool:
    """Yes when no finding says llama.cpp refuses the file."""
    return not any(f.severity == "error" for f in findings)


def base_model_finding(render_sha256: str | None, base_renders: list[str]) -> CompatFinding | None:
    """L022 when the base model's files render the standard conversation and none renders it
    as this file does; None when either side has no render to compare."""
    if render_sha256 is None or not base_renders or render_sha256 in base_renders:
        return None
    return finding("L022", "tokenizer.chat_template", "the chat template renders the standard conversation differently "
                   "from the base model's")  # fmt: skip
