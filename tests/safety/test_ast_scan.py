"""Static findings: decided from the parsed template, without rendering it."""

from __future__ import annotations

import time

import pytest

from registry.safety.ast_scan import scan_source
from registry.safety.findings import max_severity
from tests.safety import templates as T


def codes(source: str) -> set[str]:
    return {f.code for f in scan_source(source).findings}


def test_cve_2024_34359_payload_is_critical() -> None:
    report = scan_source(T.CVE_2024_34359)
    assert max_severity(report.findings) == "critical"
    attrs = " ".join(f.message for f in report.findings if f.code == "dunder-attribute")
    for name in ("__class__", "__base__", "__subclasses__", "__builtins__", "__import__"):
        assert name in attrs
    assert "dangerous-attribute" in codes(T.CVE_2024_34359)  # .popen


@pytest.mark.parametrize("name", sorted(T.OBFUSCATED))
def test_obfuscated_variants_are_at_least_high(name: str) -> None:
    findings = scan_source(T.OBFUSCATED[name]).findings
    assert max_severity(findings) in ("high", "critical"), findings


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("string-built", {"dunder-attribute"}),
        ("attr-join", {"dunder-attribute", "ssti-global"}),
        ("x5f-escapes", {"dunder-attribute", "escaped-underscore"}),
        ("format-chars", {"dunder-attribute"}),
        ("reverse", {"dunder-attribute"}),
        ("set-variables", {"dunder-attribute"}),
        ("map-attribute", {"dunder-attribute"}),
        ("joiner-init", {"ssti-global", "dunder-attribute"}),
        ("namespace-internals", {"namespace-internals", "dunder-attribute"}),
        ("self-context", {"ssti-global"}),
        ("config", {"ssti-global"}),
        ("request", {"ssti-global"}),
    ],
)
def test_obfuscations_are_seen_through(name: str, expected: set[str]) -> None:
    assert expected <= codes(T.OBFUSCATED[name])


def test_built_name_is_reported_as_the_name_it_builds() -> None:
    (f,) = [f for f in scan_source("{{ x|attr('__glo' ~ 'bals__') }}").findings if f.code == "dunder-attribute"]
    assert "__globals__" in f.message
    assert "'__glo' ~ 'bals__'" in f.excerpt


@pytest.mark.parametrize(
    "source",
    [
        "{{ x|attr(name ~ suffix) }}",
        "{{ x[a ~ 'b'] }}",
        "{% set n %}__class__{% endset %}{{ x|attr(n) }}",
        "{{ dict(__class__=1) }}",
        "{% include 'other' %}",
    ],
)
def test_other_evasions_are_findings(source: str) -> None:
    assert max_severity(scan_source(source).findings) in ("medium", "high", "critical")


def test_syntax_error_is_a_finding_with_the_parser_message() -> None:
    report = scan_source("{% for m in messages %}{{ m.content }}")
    assert not report.parsed
    (f,) = report.findings
    assert f.code == "template-syntax-error" and f.severity == "medium"
    assert "endfor" in f.message or "end of template" in f.message


def test_unparseable_template_is_still_searched_for_keywords() -> None:
    report = scan_source("{{ ().__cla' ~ 'ss__ }} {% for")
    assert {"template-syntax-error", "suspicious-keyword"} <= {f.code for f in report.findings}


@pytest.mark.parametrize("name", sorted(T.TYPICAL))
def test_typical_templates_have_no_static_findings(name: str) -> None:
    assert scan_source(T.TYPICAL[name]).findings == []


def test_ordinary_uses_are_not_findings() -> None:
    # namespace() calls, literal text mentioning dunders, loop helpers, tojson, slicing.
    source = (
        "{% set ns = namespace(found=false) %}Python's __init__ is a method."
        "{% for m in messages[::-1] %}{% set ns.found = true %}{{ m.content|trim }}{{ loop.index }}{% endfor %}"
        "{{ tools|tojson if tools }}"
    )
    assert scan_source(source).findings == []


def test_tools_use_is_detected() -> None:
    assert scan_source(T.TYPICAL["qwen2.5-tools"]).uses_tools
    assert not scan_source(T.CHATML).uses_tools


def test_deep_nesting_does_not_crash_the_scanner() -> None:
    source = "{{ " + "(" * 3000 + "1" + ")" * 3000 + " }}"
    report = scan_source(source)
    assert report.findings == [] or max_severity(report.findings) == "medium"


def test_name_built_in_a_loop_and_used_as_subscript_is_a_finding() -> None:
    source = (
        "{% set ns = namespace(s='') %}{% for c in ['_','_','cl','ass','_','_'] %}{% set ns.s = ns.s ~ c %}"
        "{% endfor %}{{ messages[ns.s] }}"
    )
    assert "computed-attribute-name" in codes(source)
    assert "dunder-attribute" in codes("{% set ns = namespace() %}{% set ns.__class__ = 1 %}")
    # Ordinary dynamic subscripts (tool parameter tables, index arithmetic) are not findings.
    assert codes("{% for k in props %}{{ props[k] }}{% endfor %}") == set()
    assert codes("{% for m in messages %}{{ messages[loop.index0 + 1] }}{{ messages[i * 2] }}{% endfor %}") == set()


def test_long_variable_chains_stay_cheap() -> None:
    chain = "{% set a0 = x ~ 'y' %}" + "".join(f"{{% set a{i} = a{i - 1} %}}" for i in range(1, 2000))
    started = time.perf_counter()
    assert "computed-attribute-name" in codes(chain + "{{ m[a1999] }}")
    assert time.perf_counter() - started < 5  # generous: linear work, not a timing assertion


def test_number_literal_the_lexer_cannot_convert_is_a_finding() -> None:
    # Python refuses to convert integers of more than 4300 digits; the ValueError escaped
    # the parser, so the template (and the payload after it) was never scanned.
    report = scan_source("{{ " + "1" * 5000 + " }}{{ lipsum.__globals__['os'].popen('id').read() }}")
    assert not report.parsed
    found = {(f.code, f.severity) for f in report.findings}
    assert ("template-syntax-error", "medium") in found
    assert ("suspicious-keyword", "critical") in found  # __globals__, from the keyword search
