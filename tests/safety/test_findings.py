from __future__ import annotations

import pytest

from registry.safety import (
    SEVERITIES,
    Finding,
    findings_from_json,
    findings_to_json,
    max_severity,
    max_severity_rank,
    severity_at_least,
    severity_rank,
)


def test_severities_are_ordered() -> None:
    assert SEVERITIES == ("info", "low", "medium", "high", "critical")
    assert [severity_rank(s) for s in SEVERITIES] == [0, 1, 2, 3, 4]
    assert severity_at_least("high", "medium")
    assert severity_at_least("medium", "medium")
    assert not severity_at_least("low", "medium")


def test_unknown_severity_is_rejected() -> None:
    with pytest.raises(ValueError, match="unknown severity"):
        severity_rank("severe")
    with pytest.raises(ValueError):
        Finding("x", "severe", "m", "e")  # type: ignore[arg-type]


def test_max_severity_of_objects_and_json() -> None:
    findings = [Finding("a", "low", "m", "e"), Finding("b", "high", "m", "e"), Finding("c", "info", "m", "e")]
    assert max_severity(findings) == "high"
    assert max_severity(findings_to_json(findings)) == "high"
    assert max_severity_rank(findings) == 3
    assert max_severity([]) is None
    assert max_severity_rank([]) is None


def test_json_round_trip_is_sorted_worst_first_and_tolerant() -> None:
    findings = [Finding("a", "low", "m", "e", "tool_use"), Finding("b", "critical", "m", "x" * 500)]
    data = findings_to_json(findings)
    assert [d["code"] for d in data] == ["b", "a"]
    assert set(data[0]) == {"code", "severity", "message", "excerpt", "template"}
    assert len(data[0]["excerpt"]) <= 200  # hostile templates cannot bloat the catalog row
    data[1]["added_by_a_newer_scanner"] = "ignored"
    assert findings_from_json(data) == [Finding(**data[0]), findings[0]]
    assert findings_from_json(data)[0].excerpt.endswith("\u2026")
    assert findings_to_json([]) == []


def test_excerpts_are_valid_unicode() -> None:
    f = Finding("a", "low", "m\ud800", "bad \udcff\x00 text")
    assert f.excerpt.encode("utf-8") and "\x00" not in f.excerpt
    assert f.message.encode("utf-8")
