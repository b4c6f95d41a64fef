"""Static findings: decided from the parsed template, without rendering it."""

from __future__ import annotations

import pytest
from jinja2 import nodes

from registry.safety.ast_scan import _apply, _Folder, scan_source
from registry.safety.findings import max_severity
from registry.safety.sandbox import template_environment
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


def test_long_variable_chains_are_bounded() -> None:
    # 2,000 names resolving each other need more folding steps than the scan allows: the
    # work stops at the budget (template-too-complex) and the built name is still flagged.
    chain = "{% set a0 = x ~ 'y' %}" + "".join(f"{{% set a{i} = a{i - 1} %}}" for i in range(1, 2000))
    found = codes(chain + "{{ m[a1999] }}")
    assert {"computed-attribute-name", "template-too-complex"} <= found
    # A short chain is within the budget and only the built name is a finding.
    short = "{% set a0 = x ~ 'y' %}" + "".join(f"{{% set a{i} = a{i - 1} %}}" for i in range(1, 20))
    assert codes(short + "{{ m[a19] }}") == {"computed-attribute-name"}


def test_number_literal_the_lexer_cannot_convert_is_a_finding() -> None:
    # Python refuses to convert integers of more than 4300 digits; the ValueError escaped
    # the parser, so the template (and the payload after it) was never scanned.
    report = scan_source("{{ " + "1" * 5000 + " }}{{ lipsum.__globals__['os'].popen('id').read() }}")
    assert not report.parsed
    found = {(f.code, f.severity) for f in report.findings}
    assert ("template-syntax-error", "medium") in found
    assert ("suspicious-keyword", "critical") in found  # __globals__, from the keyword search


def test_nested_lists_built_through_variables_do_not_crash_the_scanner() -> None:
    # Each `set` wraps the previous list once more; joining the last one with `~` needed a
    # repr thousands of levels deep (RecursionError in the indexing process).
    source = "{% set a0 = ['x'] %}" + "".join(f"{{% set a{i + 1} = [a{i}] %}}" for i in range(2000))
    report = scan_source(source + "{{ a2000 ~ 'y' }}")
    assert ("template-too-complex", "medium") in {(f.code, f.severity) for f in report.findings}


def test_a_variable_reassigned_many_times_ends_in_a_finding() -> None:
    # Every read of `v` resolved all of its assignments, each reading `v` again: work
    # quadratic in the template's size (a 256 KiB template kept a worker busy for minutes).
    source = "{{ x|attr('__cla' ~ 'ss__') }}" + "".join("{% set v = v ~ ('a' if c else 'b') %}" for _ in range(600))
    findings = scan_source(source).findings
    assert ("template-too-complex", "medium") in {(f.code, f.severity) for f in findings}
    # Folded after the budget ran out, the payload is still seen from its constant pieces.
    assert max_severity(findings) in ("high", "critical")


def test_folded_numbers_and_lists_stay_small() -> None:
    # Squaring a number or doubling a list at every `set` grew values without bound in the
    # indexing process, which folding runs in (25 steps: hundreds of MiB, minutes of CPU).
    squares = "{% set a0 = 999999999 %}" + "".join(f"{{% set a{i + 1} = a{i} * a{i} %}}" for i in range(8))
    doubles = "{% set b0 = [1, 2, 3, 4, 5, 6, 7, 8] %}" + "".join(f"{{% set b{i + 1} = b{i} + b{i} %}}" for i in range(12))
    root = template_environment().parse(squares + doubles)
    assigns = {n.target.name: [n.node] for n in root.find_all(nodes.Assign) if isinstance(n.target, nodes.Name)}
    folder = _Folder(assigns)
    assert folder.fold(assigns["a1"][0]) == [999999999**2]
    assert folder.fold(assigns["a8"][0]) == []
    assert folder.fold(assigns["b3"][0]) == [(1, 2, 3, 4, 5, 6, 7, 8) * 8]
    assert folder.fold(assigns["b12"][0]) == []
    # Strings are refused before they are built, not after: each folding step stays cheap.
    assert _apply("replace", "a" * 4000, ["", "b" * 200]) is None
    assert _apply("join", tuple("a" * 4000), ["b" * 4000]) is None
    assert _apply("format", "%s" * 100, ["a" * 4000] * 100) is None
    assert _apply("replace", "__cl_ss__", ["_", "a"]) == "aaclassaa"
