"""Safety findings for the chat templates carried in GGUF files.

    with SandboxPool() as pool:                      # one per indexing run, reused
        cache = ScanCache()                          # a repo's files share templates
        findings = await asyncio.to_thread(scan_header, header, runner=pool, cache=cache)
        row.chat_template_findings = findings_to_json(findings)
        row.chat_template_max_severity = max_severity_rank(findings)

Three independent looks at each template: the parsed AST (`ast_scan`), a render of
standard conversations in a separate limited process (`sandbox`), and the text the
template adds around the messages (`hidden`). Templates are never rendered in this
process: only `SandboxPool` children render. `scan_header_report` also says what the
templates can do (`capabilities`: system, tools, tool_calls, thinking, parallel_tool_calls),
from probe renders.

A template is clean when its findings list is empty. Finding codes:

| code                                | severity  | from    |
|-------------------------------------|-----------|---------|
| dunder-attribute, dunder-name       | critical  | AST     |
| private-keyword                     | high/crit | AST     |
| private-attribute, dangerous-attribute, computed-attribute-name, dunder-string, escaped-underscore, ssti-global, namespace-internals | high | AST |
| template-loading, template-syntax-error, template-too-complex, template-too-large | medium | AST |
| suspicious-keyword (unparseable only) | high/crit | source |
| attr-filter                         | low       | AST     |
| sandbox-security-error              | critical  | sandbox |
| render-timeout, render-memory, render-output-limit, sandbox-crashed | high | sandbox |
| sandbox-blocked-operation, render-recursion, template-compile-error | medium | sandbox |
| render-error, render-rejected       | info      | sandbox |
| hidden-text-user-turn, invisible-text | high    | hidden  |
| hidden-text-system, hidden-text-assistant-turn, hidden-text-generation-prompt | medium (high if malicious-looking) | hidden |
| suspicious-default-system-prompt, suspicious-tool-instructions | medium | hidden |
| user-message-dropped                | low       | hidden  |
| tool-instructions                   | info      | hidden  |
"""

from __future__ import annotations

import hashlib
import re
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from registry.gguf.array import GGUFArray
from registry.gguf.types import ValueType
from registry.safety.ast_scan import keyword_scan, scan_source
from registry.safety.capabilities import CAPABILITIES, Probe, capabilities_found, probes
from registry.safety.findings import (
    SEVERITIES,
    Finding,
    Severity,
    findings_from_json,
    findings_to_json,
    max_severity,
    max_severity_rank,
    severity_at_least,
    severity_rank,
    sort_findings,
)
from registry.safety.hidden import analyse, make_conversations
from registry.safety.sandbox import (
    Renderer,
    RenderJob,
    RenderOutcome,
    RenderResult,
    SandboxLimits,
    SandboxPool,
)

__all__ = [
    "CAPABILITIES",
    "SEVERITIES",
    "Finding",
    "RenderJob",
    "Renderer",
    "SandboxLimits",
    "SandboxPool",
    "ScanCache",
    "Severity",
    "TemplateReport",
    "cached_header_report",
    "chat_templates",
    "findings_from_json",
    "findings_to_json",
    "max_severity",
    "max_severity_rank",
    "scan_header",
    "scan_header_report",
    "scan_template",
    "scan_template_report",
    "scan_templates",
    "scan_templates_report",
    "severity_at_least",
    "severity_rank",
    "special_tokens",
]

CHAT_TEMPLATE_KEY = "tokenizer.chat_template"
MAX_TEMPLATE_CHARS = 256 * 1024
_UNSAFE_ATTR = re.compile(r"attribute '(_[^']*)'")


def chat_templates(header: Any) -> dict[str, str]:
    """Templates of a parsed GGUF header by name: "default" and each named variant."""
    out: dict[str, str] = {}
    for key, field in header.fields.items():
        if key == CHAT_TEMPLATE_KEY:
            name = "default"
        elif key.startswith(CHAT_TEMPLATE_KEY + "."):
            name = key[len(CHAT_TEMPLATE_KEY) + 1 :]
        else:
            continue
        if isinstance(field.value, str):
            out[name] = field.value
    return out


def special_tokens(header: Any) -> tuple[str, str]:
    """(bos_token, eos_token) text from the vocabulary, "" when absent."""
    tokens = header.get("tokenizer.ggml.tokens")
    # The file may give the key any type; only an array of strings is a vocabulary.
    vocab = tokens if isinstance(tokens, GGUFArray) and tokens.element_type is ValueType.STRING else None
    result = []
    for key in ("tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id"):
        tid = header.get(key)
        ok = isinstance(tid, int) and not isinstance(tid, bool)
        result.append(str(vocab[tid]) if vocab is not None and ok and 0 <= tid < len(vocab) else "")
    return result[0], result[1]


def outcome_findings(outcome: RenderOutcome, template: str, *, parsed: bool) -> list[Finding]:
    """What the sandbox run itself says: blocked accesses, limits hit, crashes."""
    status_findings: dict[str, tuple[str, Severity, str]] = {
        "timeout": ("render-timeout", "high", "rendering exceeded the time limit; the sandbox was killed"),
        "memory": ("render-memory", "high", "rendering exceeded the memory limit"),
        "crashed": ("sandbox-crashed", "high", "the sandbox process died while rendering"),
    }
    if outcome.status in status_findings:
        code, sev, msg = status_findings[outcome.status]
        return [Finding(code, sev, msg, outcome.message, template)]
    if outcome.status == "compile_error":
        # Already reported by the parser when it failed there too.
        return [] if not parsed else [Finding("template-compile-error", "medium", "template does not compile",
                                              outcome.message, template)]
    out: dict[tuple[str, str], Finding] = {}
    for r in outcome.results:
        f: Finding | None = None
        if r.error == "security":
            attr = _UNSAFE_ATTR.search(r.message)
            if attr is not None:
                f = Finding("sandbox-security-error", "critical", "the sandbox blocked access to a Python "
                            "internal during rendering", r.message, template)
            else:
                f = Finding("sandbox-blocked-operation", "medium", "the sandbox blocked an operation "
                            "(mutation or unsafe call) during rendering", r.message, template)
        elif r.error == "output_limit":
            f = Finding("render-output-limit", "high", "rendering builds output or values beyond the size cap",
                        r.message, template)
        elif r.error == "memory":
            f = Finding("render-memory", "high", "rendering exceeded the memory limit", r.message, template)
        elif r.error == "recursion":
            f = Finding("render-recursion", "medium", "rendering recursed without bound", r.message, template)
        elif r.error in ("template", "error"):
            f = Finding("render-error", "info", "rendering a standard conversation failed", r.message, template)
        if f is not None:
            out.setdefault((f.code, f.excerpt), f)
    if outcome.results and all(r.error == "raised" for r in outcome.results):
        msg = outcome.results[0].message
        out[("render-rejected", msg)] = Finding("render-rejected", "info", "the template rejects every standard "
                                                "conversation, so added text could not be checked", msg, template)
    return list(out.values())


@dataclass(frozen=True, slots=True)
class TemplateReport:
    """What scanning found in a template (worst first) and what the template can do."""

    findings: tuple[Finding, ...]
    capabilities: frozenset[str] = frozenset()


def scan_template(source: str, *, bos: str = "", eos: str = "", runner: Renderer, name: str = "default") -> list[Finding]:
    """All findings for one template: static, sandbox and added text. Blocking."""
    return list(scan_template_report(source, bos=bos, eos=eos, runner=runner, name=name).findings)


def scan_template_report(
    source: str, *, bos: str = "", eos: str = "", runner: Renderer, name: str = "default"
) -> TemplateReport:
    """Findings and capabilities of one template. Blocking.

    The capability probes (`capabilities.probes`) render as a second job with its own time
    budget, after the standard conversations and only when those rendered. A probe that
    fails to render adds no finding; one that hits a sandbox limit (time, memory, output,
    recursion) or is blocked adds the same finding a standard conversation would.
    """
    if len(source) > MAX_TEMPLATE_CHARS:
        # Real chat templates are a few KiB; parsing megabytes in this process is not worth it.
        return TemplateReport(tuple(sort_findings([
            Finding("template-too-large", "medium", f"template of {len(source)} characters was not analysed "
                    f"(limit {MAX_TEMPLATE_CHARS})", source[:200], name),
            *keyword_scan(source[:MAX_TEMPLATE_CHARS], name),
        ])))  # fmt: skip
    # `tools` in the text at all is enough to add the tools conversation: rendering is cheap,
    # and deciding before parsing lets the child render while this process parses.
    conversations = make_conversations(uses_tools="tools" in source)
    job = RenderJob(source, [c.context(bos, eos) for c in conversations])
    submit = getattr(runner, "submit", None)
    wait: Callable[[], RenderOutcome] | None = submit(job) if callable(submit) else None
    try:
        report = scan_source(source, name)
    except BaseException:
        if wait is not None:
            wait()  # hand the worker back before failing
        raise
    outcome = wait() if wait is not None else runner.render(job)
    findings = list(report.findings)
    findings.extend(outcome_findings(outcome, name, parsed=report.parsed))
    found: list[Probe] = []
    results: tuple[RenderResult, ...] = ()
    if outcome.status == "ok":
        findings.extend(analyse(conversations, outcome.results, bos=bos, eos=eos, template=name))
        extra = probes(source, bos=bos, eos=eos)
        probed = runner.render(RenderJob(source, [p.context for p in extra]))
        # A probe that does not render only shows a capability the template lacks (info
        # findings, dropped); one that breaks a limit or reaches for internals is reported
        # as the standard conversations' renders are.
        known = {(f.code, f.excerpt) for f in findings}
        findings.extend(
            f for f in outcome_findings(probed, name, parsed=report.parsed)
            if f.severity != "info" and (f.code, f.excerpt) not in known
        )  # fmt: skip
        if probed.status == "ok" and len(probed.results) == len(extra):
            found, results = extra, probed.results
    capabilities = capabilities_found(found, results, report.names)
    return TemplateReport(tuple(sort_findings(findings)), capabilities)


class ScanCache:
    """Reports by (template name, source hash, bos, eos), least recently used dropped.

    The quantizations of one repo carry the same template; scoping one cache to an
    indexing run scans it once. Thread-safe enough for `asyncio.to_thread` callers: a
    race costs a duplicate scan, never a wrong result.
    """

    def __init__(self, maxsize: int = 1024) -> None:
        self.maxsize = maxsize
        self._data: OrderedDict[tuple[str, str, str, str], TemplateReport] = OrderedDict()

    @staticmethod
    def key(name: str, source: str, bos: str, eos: str) -> tuple[str, str, str, str]:
        return name, hashlib.sha256(source.encode("utf-8", "surrogatepass")).hexdigest(), bos, eos

    def get(self, key: tuple[str, str, str, str]) -> TemplateReport | None:
        try:
            self._data.move_to_end(key)
            return self._data[key]
        except KeyError:
            return None

    def put(self, key: tuple[str, str, str, str], report: TemplateReport) -> None:
        self._data[key] = report
        while len(self._data) > self.maxsize:
            self._data.popitem(last=False)


def scan_templates(
    templates: Mapping[str, str],
    *,
    bos: str = "",
    eos: str = "",
    runner: Renderer | None = None,
    cache: ScanCache | None = None,
) -> list[Finding]:
    """Findings for every template of one file, worst first. Blocking."""
    return list(scan_templates_report(templates, bos=bos, eos=eos, runner=runner, cache=cache).findings)


def scan_templates_report(
    templates: Mapping[str, str],
    *,
    bos: str = "",
    eos: str = "",
    runner: Renderer | None = None,
    cache: ScanCache | None = None,
) -> TemplateReport:
    """Findings for every template of one file, worst first, and the capabilities any of
    them has (a `tool_use` variant that renders tools gives the file `tools`). Blocking.

    Pass a long-lived `SandboxPool` as `runner`; without one a pool is started and closed
    for this call, which costs a process start-up (~50-100 ms).
    """
    if runner is None:
        with SandboxPool() as pool:
            return scan_templates_report(templates, bos=bos, eos=eos, runner=pool, cache=cache)
    reports = []
    for name, source in templates.items():
        key = ScanCache.key(name, source, bos, eos) if cache is not None else None
        result = cache.get(key) if cache is not None and key is not None else None
        if result is None:
            result = scan_template_report(source, bos=bos, eos=eos, runner=runner, name=name)
            if cache is not None and key is not None:
                cache.put(key, result)
        reports.append(result)
    return _combined(reports)


def _combined(reports: Iterable[TemplateReport]) -> TemplateReport:
    findings: list[Finding] = []
    capabilities: set[str] = set()
    for report in reports:
        findings.extend(report.findings)
        capabilities |= report.capabilities
    return TemplateReport(tuple(sort_findings(findings)), frozenset(capabilities))


def cached_header_report(header: Any, cache: ScanCache) -> TemplateReport | None:
    """`scan_header_report`'s answer when `cache` holds every template of the header (or it
    has none), without the sandbox; None when one of them still needs a scan."""
    templates = chat_templates(header)
    if not templates:
        return TemplateReport(())
    bos, eos = special_tokens(header)
    reports = []
    for name, source in templates.items():
        hit = cache.get(ScanCache.key(name, source, bos, eos))
        if hit is None:
            return None
        reports.append(hit)
    return _combined(reports)


def scan_header(header: Any, *, runner: Renderer | None = None, cache: ScanCache | None = None) -> list[Finding]:
    """Findings for all chat templates of a parsed GGUF header ([] when it has none)."""
    return list(scan_header_report(header, runner=runner, cache=cache).findings)


def scan_header_report(header: Any, *, runner: Renderer | None = None, cache: ScanCache | None = None) -> TemplateReport:
    """Findings and capabilities of all chat templates of a parsed GGUF header (none when
    it has no template)."""
    templates = chat_templates(header)
    if not templates:
        return TemplateReport(())
    bos, eos = special_tokens(header)
    return scan_templates_report(templates, bos=bos, eos=eos, runner=runner, cache=cache)
