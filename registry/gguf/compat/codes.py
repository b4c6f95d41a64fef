"""Every llama.cpp compatibility finding code, declared once: code, severity, title, doc line.

Severities: `error` (llama.cpp refuses to load the file), `warning` (it loads but
misbehaves: wrong stop token, garbled text, a degraded tokenizer), `info` (worth knowing).
`docs/compatibility.md` is checked against this table by the tests.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

Severity = Literal["error", "warning", "info"]
SEVERITIES: tuple[Severity, ...] = ("error", "warning", "info")  # worst first


@dataclass(frozen=True, slots=True)
class Code:
    code: str
    severity: Severity
    title: str
    doc: str  # what to do about it, one line


@dataclass(frozen=True, slots=True)
class CompatFinding:
    """One finding about one artifact: the code, its severity, the field and a one-line message."""

    code: str
    severity: Severity
    field: str
    message: str

    def to_dict(self) -> dict[str, str]:
        return {"code": self.code, "severity": self.severity, "field": self.field, "message": self.message}


CODES: tuple[Code, ...] = (
    Code("L001", "error", "general.alignment is not a uint32",
         "Rewrite the key as UINT32 (gguf-py's GGUFWriter does); llama.cpp refuses other types."),
    Code("L002", "error", "general.alignment is not a power of two",
         "Re-export the file; no runtime can place tensor data on such an alignment."),
    Code("L003", "error", "a metadata key appears twice",
         "Re-export with each key written once; llama.cpp refuses duplicate keys."),
    Code("L004", "error", "a tensor name appears twice",
         "Re-export with unique tensor names; llama.cpp refuses duplicate tensors."),
    Code("L005", "error", "a tensor type llama.cpp does not know",
         "Requantize to a ggml type llama.cpp ships (Q4_K_M, Q8_0, ...)."),
    Code("L006", "error", "tensor data past the end of the file",
         "The file is truncated or its tensor offsets are wrong: download or export again."),
    Code("L007", "error", "a row length that is not a multiple of its type's block size",
         "Quantize that tensor to a type whose block size divides the row (or keep it F16)."),
    Code("L008", "error", "the shards of a split model disagree",
         "Download all shards of one export (split.count, split.no and tensor counts must agree)."),
    Code("L009", "error", "an architecture llama.cpp does not support",
         "Use a runtime that supports it, or wait for llama.cpp to add it."),
    Code("L010", "error", "a tensor the architecture requires is missing",
         "The conversion dropped a tensor: convert again with llama.cpp's convert_hf_to_gguf.py."),
    Code("L011", "error", "token_embd rows differ from the vocabulary size",
         "The vocabulary and the embeddings come from different models: convert again."),
    Code("L012", "error", "a tokenizer.ggml.pre llama.cpp does not know",
         "Convert with a llama.cpp release that knows the pre-tokenizer, or set a known one."),
    Code("L013", "warning", "a BPE vocabulary without tokenizer.ggml.pre",
         "llama.cpp falls back to the default pre-tokenizer and output degrades: convert again."),
    Code("L014", "error", "a tokenizer.ggml.model llama.cpp does not know",
         "Convert the tokenizer to one llama.cpp supports (llama, gpt2, bert, t5, ...)."),
    Code("L015", "warning", "a special token id out of the vocabulary",
         "llama.cpp ignores the id and uses its default: fix the id in the metadata."),
    Code("L016", "warning", "a special token of the wrong token type",
         "Mark the token as control (or user-defined) so it is not printed or split."),
    Code("L017", "warning", "no end-of-sequence and no end-of-turn token",
         "Generation never stops on its own: set tokenizer.ggml.eos_token_id."),
    Code("L018", "warning", "a string that is not valid UTF-8",
         "Shown with U+FFFD; fix the text at its source and export again."),
    Code("L019", "warning", "the chat template fails on a standard conversation",
         "llama.cpp falls back to a guessed format: fix the template or pass one with --chat-template."),
    Code("L020", "warning", "add_generation_prompt has no effect",
         "The model is not prompted to answer: the template should open the assistant turn."),
    Code("L021", "warning", "the template adds BOS and so does the tokenizer (double BOS)",
         "Remove bos_token from the template or set tokenizer.ggml.add_bos_token to false."),
    Code("L022", "info", "the chat template renders differently from the base model's",
         "Check that the conversion kept the base model's chat format."),
)  # fmt: skip

BY_CODE: dict[str, Code] = {c.code: c for c in CODES}


def finding(code: str, field: str, message: str) -> CompatFinding:
    """A finding of `code`, its severity taken from the table."""
    return CompatFinding(code, BY_CODE[code].severity, field, message)


def worst_first(findings: list[CompatFinding]) -> tuple[CompatFinding, ...]:
    """Findings sorted by severity, then code, then field; duplicates dropped."""
    rank = {s: i for i, s in enumerate(SEVERITIES)}
    unique = {(f.code, f.field, f.message): f for f in findings}
    return tuple(sorted(unique.values(), key=lambda f: (rank[f.severity], f.code, f.field)))


def compat_lines(findings: Sequence[Mapping[str, Any]] | None, runs: bool | None) -> list[tuple[str, str]]:
    """(label, text) lines for `inspect` and `show`: whether llama.cpp loads it, then each finding."""
    if findings is None or runs is None:
        return [("llama.cpp", "not checked")]
    verdict = "loads" if runs else "refuses to load"
    lines = [
        ("llama.cpp", f"{verdict}, {len(findings)} finding(s)" if findings else f"{verdict}, no findings")
    ]
    lines += [("", f"{f['code']} {f['severity']} {f['field']}: {f['message']}") for f in findings]
    return lines
