"""What chat templates can do (`registry.safety.capabilities`): probe renders in the sandbox."""

from __future__ import annotations

from pathlib import Path

import pytest

from registry.gguf.reader import parse_header
from registry.safety import (
    CAPABILITIES,
    SandboxPool,
    TemplateReport,
    scan_header_report,
    scan_template,
    scan_template_report,
    scan_templates_report,
)
from registry.safety.capabilities import from_mask, mask, probes
from registry.safety.sandbox import RenderJob, RenderOutcome
from tests.safety import templates as T

# Written for these tests, each with one way a template handles the probes.
DEEPSEEK_R1_LIKE = (
    "{% for m in messages %}{% if m.role == 'user' %}<｜User｜>{{ m.content }}{% elif m.role == 'assistant' %}"
    "<｜Assistant｜>{{ m.content }}<｜end▁of▁sentence｜>{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<｜Assistant｜><think>\n{% endif %}"
)
NO_SYSTEM_ROLE = (
    "{% for m in messages %}{% if m.role == 'system' %}{{ raise_exception('System role not supported') }}"
    "{% endif %}<start_of_turn>{{ m.role }}\n{{ m.content }}<end_of_turn>\n{% endfor %}"
)
DROPS_SYSTEM = "{% for m in messages %}{% if m.role != 'system' %}[{{ m.role }}] {{ m.content }}\n{% endif %}{% endfor %}"
REJECTS_TOOLS = (
    "{% if tools %}{{ raise_exception('tools are not supported') }}{% endif %}"
    "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{% endfor %}"
)
# Concatenates the arguments: an object fails to render, a JSON text works.
STRING_ARGUMENTS = (
    "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{% if m.tool_calls %}{% for c in m.tool_calls %}"
    "<call>{{ c.function.name + ' ' + c.function.arguments }}</call>{% endfor %}{% endif %}{% endfor %}"
)
# Mistral's check on tool call ids (nine letters and digits), on the assistant's call and the answer.
MISTRAL_IDS = (
    "{% for m in messages %}{% if m.tool_calls %}{% for c in m.tool_calls %}"
    "{% if c.id is not string or c.id|length != 9 %}{{ raise_exception('Tool call IDs should be alphanumeric "
    "strings with length 9!') }}{% endif %}[TOOL_CALLS]{{ [{'name': c.function.name, 'arguments': "
    "c.function.arguments}]|tojson }}{% endfor %}{% elif m.role == 'tool' %}{% if m.tool_call_id|length != 9 %}"
    "{{ raise_exception('bad id') }}{% endif %}[TOOL_RESULTS]{{ m.content }}[/TOOL_RESULTS]{% else %}"
    "[INST]{{ m.content }}[/INST]{% endif %}{% endfor %}"
)
# Renders an assistant's first tool call only: one call at a time reaches the prompt, not two.
FIRST_CALL_ONLY = (
    "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{% if m.tool_calls %}"
    "<call>{{ m.tool_calls[0].function.arguments|tojson }}</call>{% endif %}{% endfor %}"
)
# Reasoning shown back as `thinking` (not `reasoning_content`), and a switch for it.
THINKING_FIELD = (
    "{% for m in messages %}<|{{ m.role }}|>{% if m.thinking %}<|channel|>analysis {{ m.thinking }}"
    "{% endif %}{{ m.content }}{% endfor %}{% if reasoning_effort %}effort {{ reasoning_effort }}{% endif %}"
)
# Handles a tool call in a way that reaches Python internals: only the probe renders have one.
INTERNALS_IN_TOOL_CALLS = (
    "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{% if m.tool_calls %}"
    "{{ m.tool_calls[0].function.name.__class__ }}{% endif %}{% endfor %}"
)


def caps(source: str, pool: SandboxPool) -> set[str]:
    return set(scan_template_report(source, runner=pool).capabilities)


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        (T.CHATML, {"system"}),
        (T.LLAMA3, {"system"}),
        (T.GEMMA3, {"system"}),  # folds the system message into the first user turn: it still arrives
        (T.QWEN25_TOOLS, {"system", "tools"}),  # this abridged copy renders no tool calls
        (T.LLAMA32, {"system", "tools", "tool_calls"}),  # raises on more than one call at once
        (T.QWEN3, {"system", "tools", "tool_calls", "thinking", "parallel_tool_calls"}),
        (DEEPSEEK_R1_LIKE, {"thinking"}),  # no system role; the generation prompt opens <think>
        (NO_SYSTEM_ROLE, set()),
        (DROPS_SYSTEM, set()),
        (REJECTS_TOOLS, {"system"}),
        (STRING_ARGUMENTS, {"system", "tool_calls", "parallel_tool_calls"}),
        (THINKING_FIELD, {"system", "thinking"}),
        (MISTRAL_IDS, {"system", "tool_calls", "parallel_tool_calls"}),
        (FIRST_CALL_ONLY, {"system", "tool_calls"}),
    ],
    ids=["chatml", "llama3", "gemma3", "qwen2.5-abridged", "llama3.2", "qwen3", "r1-like", "no-system-role",
         "drops-system", "rejects-tools", "string-arguments", "thinking-field", "mistral-ids",
         "first-call-only"],
)
def test_capabilities_of_templates(source: str, expected: set[str], pool: SandboxPool) -> None:
    assert caps(source, pool) == expected


def test_a_switch_alone_is_thinking(pool: SandboxPool) -> None:
    # Reads `enable_thinking` without rendering any reasoning back.
    source = "{% for m in messages %}{{ m.content }}{% endfor %}{% if enable_thinking %}/think{% endif %}"
    assert caps(source, pool) == {"system", "thinking"}
    # A `<think>` the template writes before the user's message is not a think block it opens.
    assert caps("<think>{% for m in messages %}{{ m.content }}{% endfor %}", pool) == {"system"}


def test_probes_only_what_the_source_can_do() -> None:
    assert [p.capability for p in probes(T.CHATML)] == ["system"]
    assert [p.capability for p in probes(T.QWEN25_TOOLS)] == ["system", "tools"]
    # Two tool-call probes (object and JSON text arguments), the same two with two calls, and
    # two thinking probes.
    assert [p.capability for p in probes(T.QWEN3)] == ["system", "tools", "tool_calls", "tool_calls",
                                                        "parallel_tool_calls", "parallel_tool_calls",
                                                        "thinking", "thinking"]
    markers = [p.marker for p in probes(T.QWEN3)]
    assert len(set(markers)) == len(markers)  # every probe looks for its own text


def test_probes_do_not_change_the_findings(pool: SandboxPool) -> None:
    # Every probe render of these fails (the template raises on a tool call, or rejects tools),
    # and the standard conversations are clean: so is the template.
    raises_on_calls = (
        "{% for m in messages %}{% if m.tool_calls %}{{ raise_exception('no tool calls') }}{% endif %}"
        "<|{{ m.role }}|>{{ m.content }}{% endfor %}"
    )
    for source in (raises_on_calls, REJECTS_TOOLS, STRING_ARGUMENTS):
        assert scan_template(source, runner=pool) == []
    assert "tool_calls" not in caps(raises_on_calls, pool)


def test_a_probe_that_reaches_internals_is_a_finding(pool: SandboxPool) -> None:
    report = scan_template_report(INTERNALS_IN_TOOL_CALLS, runner=pool)
    codes = [f.code for f in report.findings]
    assert "sandbox-security-error" in codes  # only a probe conversation carries a tool call
    assert codes.count("sandbox-security-error") == 1
    assert report.findings[0].severity == "critical"


def test_a_probe_that_breaks_a_limit_is_a_finding(pool: SandboxPool) -> None:
    # Builds an endless string only for an assistant's tool call, which only a probe has.
    source = (
        "{% for m in messages %}{% if m.tool_calls %}{{ 'A' * 50000000 }}{% endif %}"
        "<|{{ m.role }}|>{{ m.content }}{% endfor %}"
    )
    report = scan_template_report(source, runner=pool)
    codes = {f.code for f in report.findings}
    assert codes & {"render-output-limit", "render-memory"}, codes
    assert report.findings[0].severity == "high"
    assert "tool_calls" not in report.capabilities and "system" in report.capabilities


class _Refuses:
    """A renderer whose every job ends as `status`: the probes then show nothing."""

    def __init__(self, status: str) -> None:
        self.status = status
        self.jobs: list[RenderJob] = []

    def render(self, job: RenderJob) -> RenderOutcome:
        self.jobs.append(job)
        return RenderOutcome(self.status, message="test")  # type: ignore[arg-type]


def test_no_render_no_rendered_capabilities() -> None:
    runner = _Refuses("timeout")
    report = scan_template_report(T.QWEN3, runner=runner)
    # Rendering timed out: the probes are not sent at all, and only the switch Qwen 3 reads
    # (`enable_thinking`) shows a capability.
    assert len(runner.jobs) == 1
    assert report.capabilities == {"thinking"}
    assert "render-timeout" in {f.code for f in report.findings}


def test_named_templates_add_up(pool: SandboxPool) -> None:
    # A plain default with a `tool_use` variant (as Hermes and Command R ship): the file can use tools.
    report = scan_templates_report({"default": T.CHATML, "tool_use": T.LLAMA32}, runner=pool)
    assert report.capabilities == {"system", "tools", "tool_calls"}


def test_real_smollm2_and_gemma3(smollm2_path: Path, gemma3_path: Path, pool: SandboxPool) -> None:
    def header(path: Path):  # type: ignore[no-untyped-def]
        with path.open("rb") as f:
            return parse_header(f.read(8 << 20), file_size=path.stat().st_size)

    smol = scan_header_report(header(smollm2_path), runner=pool)
    assert smol == TemplateReport((), frozenset({"system"}))
    # The 270m base model ships no template: clean, and no capabilities.
    assert scan_header_report(header(gemma3_path), runner=pool) == TemplateReport(())


def test_mask_round_trip() -> None:
    for bits in range(1 << len(CAPABILITIES)):
        assert mask(from_mask(bits)) == bits
    assert mask(["system", "thinking"]) == 0b1001
    assert from_mask(0b1001 | 1 << 9) == ["system", "thinking"]  # an unknown bit is ignored
    with pytest.raises(ValueError):
        mask(["vision"])
