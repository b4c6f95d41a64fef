"""The sandbox process: limits, recovery, and what its results turn into."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

from registry.safety import RenderJob, SandboxLimits, SandboxPool, max_severity, scan_templates
from registry.safety.sandbox import _child_env
from tests.safety import templates as T

USER = [{"messages": [{"role": "user", "content": "hi"}], "add_generation_prompt": True}]


def codes(findings: list) -> set[str]:  # type: ignore[type-arg]
    return {f.code for f in findings}


def test_renders_in_a_child_process(pool: SandboxPool) -> None:
    outcome = pool.render(RenderJob("{{ messages[0].content }}|{{ strftime_now('%Y') }}", USER))
    assert outcome.status == "ok"
    assert outcome.results[0].output == "hi|2024"  # a fixed clock: reproducible findings


def test_cve_payload_is_blocked_by_the_sandbox(pool: SandboxPool) -> None:
    outcome = pool.render(RenderJob(T.CVE_2024_34359, USER))
    assert outcome.results[0].error == "security"
    findings = scan_templates({"default": T.CVE_2024_34359}, runner=pool)
    assert "sandbox-security-error" in codes(findings)
    assert max_severity(findings) == "critical"
    assert not Path("/tmp/retr0reg").exists()


def test_endless_loop_times_out_and_the_pool_recovers(pool: SandboxPool) -> None:
    starts = pool.starts
    findings = scan_templates({"default": T.INFINITE}, runner=pool)
    assert [(f.code, f.severity) for f in findings] == [("render-timeout", "high")]
    assert pool.starts == starts  # killed, restarted lazily by the next scan
    assert scan_templates({"default": T.CHATML}, runner=pool) == []
    assert pool.starts == starts + 1


def test_huge_string_hits_the_output_cap(pool: SandboxPool) -> None:
    findings = scan_templates({"default": T.HUGE_STRING}, runner=pool)
    assert ("render-output-limit", "high") in {(f.code, f.severity) for f in findings}


def test_huge_allocation_hits_the_memory_limit_and_the_pool_recovers(pool: SandboxPool) -> None:
    findings = scan_templates({"default": T.HUGE_CENTER}, runner=pool)
    assert ("render-memory", "high") in {(f.code, f.severity) for f in findings}
    assert pool.render(RenderJob("ok", USER)).results[0].output == "ok"


def test_killed_child_is_replaced(pool: SandboxPool) -> None:
    pool.render(RenderJob("warm", USER))
    (worker,) = pool._all
    assert worker.proc is not None
    os.kill(worker.proc.pid, 9)
    worker.proc.wait()
    assert pool.render(RenderJob("again", USER)).results[0].output == "again"


def test_child_runs_with_limits_and_a_scrubbed_environment(pool: SandboxPool) -> None:
    pool.render(RenderJob("x", USER))
    (worker,) = pool._all
    assert worker.proc is not None
    limits = Path(f"/proc/{worker.proc.pid}/limits").read_text()
    address_space = next(line for line in limits.splitlines() if line.startswith("Max address space"))
    assert str(256 << 20) in address_space
    file_size = next(line for line in limits.splitlines() if line.startswith("Max file size"))
    assert file_size.split()[3] == "0"
    env = Path(f"/proc/{worker.proc.pid}/environ").read_bytes().split(b"\0")
    assert {e.split(b"=", 1)[0].decode() for e in env if e} == set(_child_env()) == {
        "PATH", "PYTHONPATH", "LANG", "PYTHONDONTWRITEBYTECODE"}
    assert os.getsid(worker.proc.pid) == worker.proc.pid  # own session: killed as a group


def test_raise_exception_is_not_a_finding_unless_every_conversation_raises(pool: SandboxPool) -> None:
    assert scan_templates({"default": T.GEMMA3}, runner=pool) == []  # raises for some shapes only
    findings = scan_templates({"default": "{{ raise_exception('no') }}"}, runner=pool)
    assert [(f.code, f.severity) for f in findings] == [("render-rejected", "info")]


def test_pool_is_usable_from_threads_off_the_event_loop() -> None:
    async def main(pool: SandboxPool) -> list[list[object]]:
        jobs = [asyncio.to_thread(scan_templates, {"default": t}, runner=pool) for t in T.TYPICAL.values()]
        return await asyncio.gather(*jobs)

    with SandboxPool(size=2) as pool:
        results = asyncio.run(main(pool))
        assert pool.starts == 2
    assert all(r == [] or {f.severity for f in r} == {"info"} for r in results)  # type: ignore[attr-defined]


def test_child_entry_point_runs_as_a_module() -> None:
    # `python -m registry.safety.sandbox` is what the pool starts; a closed stdin ends it.
    proc = subprocess.run(
        [sys.executable, "-m", "registry.safety.sandbox", str(256 << 20), "1000"],
        input=b"", capture_output=True, timeout=30, env=_child_env(), check=False,
    )
    assert proc.returncode == 0
    assert b"ready" in proc.stdout


def test_limits_are_configurable() -> None:
    with SandboxPool(limits=SandboxLimits(output=100)) as pool:
        outcome = pool.render(RenderJob("{% for i in range(50) %}abc{% endfor %}", USER))
    assert outcome.results[0].error == "output_limit"


def test_pool_needs_a_worker() -> None:
    with pytest.raises(ValueError):
        SandboxPool(size=0)


def test_templates_are_never_rendered_in_this_process(monkeypatch: pytest.MonkeyPatch, pool: SandboxPool) -> None:
    import jinja2

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("a template was compiled in the scanning process")

    monkeypatch.setattr(jinja2.Environment, "compile", refuse)
    monkeypatch.setattr(jinja2.Environment, "from_string", refuse)
    findings = scan_templates({"default": T.INJECTS_USER, "evil": T.CVE_2024_34359}, runner=pool)
    assert {"hidden-text-user-turn", "sandbox-security-error"} <= codes(findings)


def test_lone_surrogates_in_output_do_not_break_the_protocol(pool: SandboxPool) -> None:
    outcome = pool.render(RenderJob("{{ '\\ud800' }}ok", USER))
    assert outcome.status == "ok" and outcome.results[0].output == "\ud800ok"


def test_oversized_template_is_a_finding_without_analysis(pool: SandboxPool) -> None:
    findings = scan_templates({"default": "{{ x.__class__ }}" + "a" * (300 * 1024)}, runner=pool)
    assert {"template-too-large", "suspicious-keyword"} <= codes(findings)


def test_compile_errors_do_not_cost_a_restart(pool: SandboxPool) -> None:
    pool.render(RenderJob("warm", USER))
    starts = pool.starts
    outcome = pool.render(RenderJob("{% for %}", USER))
    assert outcome.status == "compile_error"
    assert pool.render(RenderJob("next", USER)).results[0].output == "next"
    assert pool.starts == starts


def test_mutation_blocked_by_the_immutable_sandbox_is_medium(pool: SandboxPool) -> None:
    findings = scan_templates({"default": "{% set _ = messages.append(1) %}{{ messages|length }}"}, runner=pool)
    assert [(f.code, f.severity) for f in findings] == [("sandbox-blocked-operation", "medium")]
