"""What a chat template can do, read off renders of probe conversations in the sandbox.

A capability is claimed only when the probe's own marker reaches the rendered prompt, so
a template that mentions tools only to reject them, or drops a system message, lacks it:

| capability   | the probe                                                              |
|--------------|------------------------------------------------------------------------|
| `system`     | a system message's text reaches the prompt (merged into the first user |
|              | turn counts; a template that raises on the role or drops it lacks it)  |
| `tools`      | given one tool definition, its name reaches the prompt                 |
| `tool_calls` | an assistant message's tool call reaches the prompt (its argument      |
|              | value), with the arguments as an object or, that failing, a JSON text  |
| `thinking`   | an assistant message's `reasoning_content` (or `thinking`) reaches the |
|              | prompt, or the generation prompt opens a `<think>` block, or the       |
|              | template reads a switch for it (`enable_thinking`, `thinking`,         |
|              | `reasoning_effort`)                                                    |
| `parallel_tool_calls` | an assistant message with two tool calls: both reach the      |
|              | prompt, in order (a template that renders the first only, or raises on |
|              | more than one, lacks it)                                               |

Probes that cannot apply are not rendered: the tool probes only when the source mentions
`tools` / `tool_calls`, the thinking probes only when it mentions `think` or `reasoning`.
Capabilities are stored as a bit mask (`mask`), bit i for `CAPABILITIES[i]`.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from registry.safety.hidden import Conversation
from registry.safety.sandbox import RenderResult

__all__ = ["CAPABILITIES", "Probe", "capabilities_found", "from_mask", "in_order", "mask", "probes"]

# Bit i of the stored mask: a new name goes last, so that stored masks keep their meaning.
CAPABILITIES = ("system", "tools", "tool_calls", "thinking", "parallel_tool_calls")
# Variables whose reading means the template switches reasoning on or off.
THINKING_SWITCHES = frozenset({"enable_thinking", "thinking", "reasoning_effort"})
THINK_OPEN = "<think>"
# Nine letters and digits: Mistral's templates reject any other tool call id.
CALL_ID = "c4ll1d0k9"
SECOND_CALL_ID = "c4ll2d0k9"


@dataclass(frozen=True, slots=True)
class Probe:
    capability: str
    context: Mapping[str, Any]  # the render context, JSON-able
    marker: str  # present in the output when the template has the capability
    follows: str = ""  # and, when set, present after the marker too


def _text() -> str:
    # Shaped like a real message, as the safety conversations are (hidden.py).
    return f"Hello, this is message {secrets.token_hex(6)} of the conversation."


def _context(messages: Sequence[Mapping[str, Any]], *, bos: str, eos: str, generation: bool,
             tools: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any]:  # fmt: skip
    """The render context of a probe, built as the safety conversations' are."""
    return Conversation("probe", tuple(messages), generation, tuple(tools)).context(bos, eos)


def probes(source: str, *, bos: str = "", eos: str = "") -> list[Probe]:
    """The probe renders worth doing for this template source."""
    system = _text()
    messages: list[dict[str, Any]] = [{"role": "system", "content": system}, {"role": "user", "content": _text()}]
    out = [Probe("system", _context(messages, bos=bos, eos=eos, generation=True), system)]
    name = f"get_weather_{secrets.token_hex(4)}"
    tool = {
        "type": "function",
        "function": {
            "name": name,
            "description": "Get the current weather in a city.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
    if "tools" in source:
        ctx = _context([{"role": "user", "content": _text()}], bos=bos, eos=eos, generation=True, tools=[tool])
        out.append(Probe("tools", ctx, name))
    if "tool_calls" in source:
        for ids in ((CALL_ID,), (CALL_ID, SECOND_CALL_ID)):
            for as_text in (False, True):
                cities = [f"City {secrets.token_hex(6)}" for _ in ids]
                calls = [_call(i, name, city, as_text) for i, city in zip(ids, cities, strict=True)]
                messages = [
                    {"role": "user", "content": _text()},
                    {"role": "assistant", "content": "", "tool_calls": calls},
                    *({"role": "tool", "tool_call_id": i, "name": name, "content": _text()} for i in ids),
                ]
                ctx = _context(messages, bos=bos, eos=eos, generation=True, tools=[tool])
                if len(ids) == 1:
                    out.append(Probe("tool_calls", ctx, cities[0]))
                else:  # both calls, in order
                    out.append(Probe("parallel_tool_calls", ctx, cities[0], follows=cities[1]))
    if "think" in source or "reasoning" in source:
        reasoning = _text()
        answer = {"role": "assistant", "content": _text(), "reasoning_content": reasoning, "thinking": reasoning}
        # The assistant turn comes last: templates keep the reasoning of turns after the
        # last user message only.
        ctx = _context([{"role": "user", "content": _text()}, answer], bos=bos, eos=eos, generation=False)
        out.append(Probe("thinking", ctx, reasoning))
        user = _text()
        ctx = _context([{"role": "user", "content": user}], bos=bos, eos=eos, generation=True)
        out.append(Probe("thinking", ctx, user, follows=THINK_OPEN))  # the generation prompt opens a think block
    return out


def _call(call_id: str, name: str, city: str, as_text: bool) -> dict[str, Any]:
    """A tool call asking `name` for a city, the arguments an object or a JSON text."""
    arguments: Any = json.dumps({"city": city}) if as_text else {"city": city}
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def _found(probe: Probe, result: RenderResult) -> bool:
    if result.error is not None or result.output is None:
        return False
    at = result.output.find(probe.marker)
    return at >= 0 and probe.follows in result.output[at + len(probe.marker) :]


def capabilities_found(found: Iterable[Probe], results: Sequence[RenderResult], names: Iterable[str]) -> frozenset[str]:
    """Capabilities the renders of `found` (in order, one result each) and the template's
    variable names show."""
    caps = {p.capability for p, r in zip(found, results, strict=True) if _found(p, r)}
    if THINKING_SWITCHES.intersection(names):
        caps.add("thinking")
    return frozenset(caps)


def mask(capabilities: Iterable[str]) -> int:
    """The stored bit mask of these capability names."""
    bits = 0
    for name in capabilities:
        bits |= 1 << CAPABILITIES.index(name)
    return bits


def from_mask(bits: int) -> list[str]:
    """Capability names of a stored mask, in CAPABILITIES order (unknown bits ignored)."""
    return [name for i, name in enumerate(CAPABILITIES) if bits >> i & 1]


def in_order(capabilities: Iterable[str]) -> list[str]:
    """These capability names in CAPABILITIES order, as hits and `inspect` list them."""
    return from_mask(mask(capabilities))
