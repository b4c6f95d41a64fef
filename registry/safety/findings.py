"""Findings about chat templates: what was found, how bad it is, and where.

Severities are ordered `info < low < medium < high < critical`. The catalog stores the
findings as JSON next to the artifact and, for the search filter "templates with findings
of severity >= X", the rank of the worst one (`max_severity_rank`) in an integer column.

A template is *clean* when it has no findings at all. Benign, common behaviour (a default
system prompt that appears only when the conversation has none, structural role tokens)
produces no finding, so "clean" and "empty list" mean the same thing everywhere.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any, Literal

__all__ = [
    "SEVERITIES",
    "Finding",
    "Severity",
    "findings_from_json",
    "findings_to_json",
    "max_severity",
    "max_severity_rank",
    "severity_at_least",
    "severity_rank",
    "sort_findings",
]

Severity = Literal["info", "low", "medium", "high", "critical"]
SEVERITIES: tuple[Severity, ...] = ("info", "low", "medium", "high", "critical")
_RANK: dict[str, int] = {name: rank for rank, name in enumerate(SEVERITIES)}

# Excerpts are shown in the catalog and stored per artifact; a hostile template may be
# megabytes long, so the stored excerpt is bounded.
MAX_EXCERPT = 200


def severity_rank(severity: str) -> int:
    """0 for info up to 4 for critical; ValueError for anything else."""
    try:
        return _RANK[severity]
    except KeyError:
        raise ValueError(f"unknown severity {severity!r}; expected one of {', '.join(SEVERITIES)}") from None


def severity_at_least(severity: str, threshold: str) -> bool:
    return severity_rank(severity) >= severity_rank(threshold)


def _printable(text: str) -> str:
    return text.encode("utf-8", "replace").decode("utf-8").replace("\x00", "\ufffd")


def clip(text: str, limit: int = MAX_EXCERPT) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


@dataclass(frozen=True, slots=True)
class Finding:
    code: str  # stable, kebab-case: what kind of problem (table in registry/safety/__init__.py)
    severity: Severity
    message: str  # one sentence for a human
    excerpt: str  # the offending part of the template or of its rendered output
    template: str = "default"  # "default" or the name of a tokenizer.chat_template.<name> variant

    def __post_init__(self) -> None:
        severity_rank(self.severity)  # reject typos at construction, not at query time
        # Excerpts come from hostile input: bounded, and valid Unicode (no lone surrogates)
        # so the catalog's JSON column and the API can always encode them.
        object.__setattr__(self, "excerpt", _printable(clip(self.excerpt)))
        object.__setattr__(self, "message", _printable(self.message))


def sort_findings(findings: Iterable[Finding]) -> list[Finding]:
    """Worst first, then by template and code, so stored JSON is stable across runs."""
    return sorted(findings, key=lambda f: (-severity_rank(f.severity), f.template, f.code, f.excerpt))


def max_severity(findings: Iterable[Finding | Mapping[str, Any]]) -> Severity | None:
    """The worst severity among findings (objects or their JSON form); None when clean."""
    worst: Severity | None = None
    for f in findings:
        sev = f.severity if isinstance(f, Finding) else f["severity"]
        if worst is None or severity_rank(sev) > severity_rank(worst):
            worst = SEVERITIES[severity_rank(sev)]
    return worst


def max_severity_rank(findings: Iterable[Finding | Mapping[str, Any]]) -> int | None:
    worst = max_severity(findings)
    return None if worst is None else severity_rank(worst)


def findings_to_json(findings: Iterable[Finding]) -> list[dict[str, str]]:
    """The form stored in the catalog and printed by `registry inspect --json`."""
    return [asdict(f) for f in sort_findings(findings)]


def findings_from_json(data: Iterable[Mapping[str, Any]]) -> list[Finding]:
    """Tolerates unknown keys so rows written by a newer scanner still load."""
    return [
        Finding(
            code=str(d["code"]),
            severity=SEVERITIES[severity_rank(str(d["severity"]))],
            message=str(d.get("message", "")),
            excerpt=str(d.get("excerpt", "")),
            template=str(d.get("template", "default")),
        )
        for d in data
    ]
