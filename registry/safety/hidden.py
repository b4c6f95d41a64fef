"""Hidden instructions: text a chat template adds to the conversation that no message asked for.

Every message content is a unique random marker, so in the rendered output everything
that is not a marker was written by the template. Between consecutive markers sits the
template's wrapper text. Structural pieces are removed from it: bos/eos, special-token
shaped strings (`<|im_start|>`, `<start_of_turn>`, `[INST]`, `<<SYS>>`), role names and
short labels (they fail the sentence test), and known metadata lines such as Llama 3.1's
"Cutting Knowledge Date: ...". What is left and reads like natural language (>= 3 words
and >= 15 letters, or >= 6 CJK characters, per line) is *added text*, judged by where it
sits:

| where the added text is                                          | finding                 |
|------------------------------------------------------------------|-------------------------|
| before the first message, only in conversations with no system   | none: a default system  |
| message, never when one is given (SmolLM2's "You are a helpful   | prompt (medium if it    |
| AI assistant named SmolLM ...")                                  | looks malicious)        |
| only when tools are given (tool-use instructions)                | info (medium if         |
|                                                                  | it looks malicious)     |
| glued to a user message (no special token between them)          | high                    |
| invisible characters (Unicode tags, bidi, zero-width), decoded    | high                    |
| glued to an assistant message or in the generation prompt        | medium                  |
| anywhere else (next to a given system prompt, an extra turn)     | medium                  |

"Looks malicious": links, "ignore/disregard ... instructions", "do not tell/reveal",
secrets, passwords, API keys, "always recommend/include". A template is clean when it has
no findings at all, so SmolLM2's template is clean.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

from registry.safety.findings import Finding, Severity, clip, severity_rank
from registry.safety.sandbox import RenderResult

__all__ = ["Conversation", "analyse", "make_conversations"]

_SEP = "\x00"
_SPECIAL = re.compile(
    # No whitespace inside: "<|ignore previous instructions|>" is text to the tokenizer
    # and to the model, so it must not pass as a special token here.
    r"<[|｜▁][^<>\s]{0,64}?[|｜▁]>"  # <|im_start|>, <｜User｜>
    r"|</?[A-Za-z_][\w.:\-]{0,40}>"  # <start_of_turn>, <s>, <tools>
    r"|\[/?[A-Z_]{2,32}\]"  # [INST], [/INST], [AVAILABLE_TOOLS]
    r"|<</?[A-Z]{2,16}>>"  # <<SYS>>
)
# Special tokens name a role or a marker in at most four words ("reserved_special_token_0",
# "tool▁calls▁begin"); a longer bracketed phrase is an instruction with its spaces spelled
# as separators, "<|ignore_all_previous_instructions|>", and the model reads it as one.
_TOKEN_WORD_SEPARATORS = re.compile(r"[_▁.:\-]+")
_MAX_TOKEN_WORDS = 4
_METADATA = re.compile(
    r"^\s*(cutting knowledge date|today date|current date|knowledge cutoff|environment|reasoning)\s*:"
    r"\s*[\w ,./:-]{0,40}$",
    re.IGNORECASE,
)
# Unicode tag characters ("ASCII smuggling"), bidi controls and zero-width characters:
# invisible to a reader of the prompt, read by the model.
_INVISIBLE = re.compile(r"[\U000E0000-\U000E007F\u202A-\u202E\u2066-\u2069\u200B-\u200F\u2060-\u2064\uFEFF]")
_WORD = re.compile(r"[^\W\d_]{2,}")
_SUSPICIOUS = re.compile(
    r"https?://|www\.|\b(ignore|disregard|forget)\b.{0,40}\b(instructions?|rules|prompt)\b"
    r"|\b(do not|don't|never)\s+(tell|reveal|mention|disclose|show)\b|\bsecret|\bpassword|\bapi[ _-]?key"
    r"|\bexfiltrat|\bcredential|\balways\s+(recommend|include|insert|add|mention|promote)\b|<script|\bcurl\b|\bwget\b",
    re.IGNORECASE | re.DOTALL,
)


@dataclass(frozen=True, slots=True)
class Conversation:
    name: str
    messages: tuple[Mapping[str, Any], ...]
    add_generation_prompt: bool
    tools: tuple[Mapping[str, Any], ...] = ()

    @property
    def has_system(self) -> bool:
        return any(m["role"] == "system" for m in self.messages)

    def context(self, bos: str, eos: str) -> dict[str, Any]:
        ctx: dict[str, Any] = {
            "messages": [dict(m) for m in self.messages],
            "add_generation_prompt": self.add_generation_prompt,
            "bos_token": bos,
            "eos_token": eos,
        }
        if self.tools:
            ctx["tools"] = [dict(t) for t in self.tools]
        return ctx


def _marker() -> str:
    # Unique, but shaped like a real message (words, spaces, punctuation) so a template
    # cannot easily tell the test conversation from a real one; survives |trim.
    return f"Hello, this is message {secrets.token_hex(6)} of the conversation."


def make_conversations(*, uses_tools: bool) -> list[Conversation]:
    """The standard conversations, each with and without the generation prompt."""
    m = [_marker() for _ in range(8)]
    shapes: list[tuple[str, tuple[Mapping[str, str], ...], tuple[Mapping[str, Any], ...]]] = [
        ("system+user", ({"role": "system", "content": m[0]}, {"role": "user", "content": m[1]}), ()),
        ("user", ({"role": "user", "content": m[2]},), ()),
        (
            "multi-turn",
            (
                {"role": "user", "content": m[3]},
                {"role": "assistant", "content": m[4]},
                {"role": "user", "content": m[5]},
            ),
            (),
        ),
    ]
    if uses_tools:
        tool = {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": m[7],
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
            },
        }
        shapes.append(("user+tools", ({"role": "user", "content": m[6]},), (tool,)))
    return [
        Conversation(f"{name}{' +generation' if agp else ''}", msgs, agp, tools)
        for name, msgs, tools in shapes
        for agp in (False, True)
    ]


def is_sentence(text: str) -> bool:
    words = _WORD.findall(text)
    cjk = sum(1 for ch in text if "\u3040" <= ch <= "\u9fff" or "\uac00" <= ch <= "\ud7af")
    return (len(words) >= 3 and sum(map(len, words)) >= 15) or cjk >= 6


@dataclass(frozen=True, slots=True)
class _Added:
    text: str
    conversation: Conversation
    prev_role: str | None  # role of the message just before, None at the start
    next_role: str | None  # role of the message just after, None at the end
    glued_prev: bool  # no special token between the previous message and the text
    glued_next: bool
    invisible: bool = False  # text in invisible characters, shown decoded


def _reveal(segment: str) -> str:
    """Invisible characters made visible: tag characters decoded to ASCII, others named."""
    out = []
    for ch in segment:
        cp = ord(ch)
        if 0xE0020 <= cp <= 0xE007E:
            out.append(chr(cp - 0xE0000))
        elif _INVISIBLE.match(ch):
            out.append(f"<U+{cp:04X}>")
    return "".join(out)


def _pieces(segment: str, tokens: Sequence[str], strip_json: bool) -> list[str]:
    text = segment
    for tok in tokens:
        if tok:
            text = text.replace(tok, _SEP)
    if strip_json:
        # Tool definitions rendered as JSON or Python reprs: innermost braces first.
        for _ in range(32):
            new = re.sub(r"\{[^{}]*\}", _SEP, text)
            if new == text:
                break
            text = new
    return _SPECIAL.sub(_structural, text).split(_SEP)


def _structural(token: re.Match[str]) -> str:
    """A special-token shaped match: a separator, or its words when it is a phrase."""
    words = _TOKEN_WORD_SEPARATORS.sub(" ", token.group().strip("<>[]/|｜▁")).strip()
    if len(words.split()) > _MAX_TOKEN_WORDS and is_sentence(words):
        return words
    return _SEP


def _added_text(conv: Conversation, output: str, bos: str, eos: str) -> list[_Added]:
    roles = {m["content"]: m["role"] for m in conv.messages}
    found = [(mt.start(), mt.end(), roles[mt.group()]) for mt in re.finditer("|".join(map(re.escape, roles)), output)]
    tool_markers = [str(t["function"]["description"]) for t in conv.tools]
    bounds = [(0, 0, None), *found, (len(output), len(output), None)]
    out = []
    for (_, start, prev_role), (end, _, next_role) in pairwise(bounds):
        if _INVISIBLE.search(output, start, end):
            out.append(_Added(_reveal(output[start:end]), conv, prev_role, next_role, False, False, invisible=True))
        pieces = _pieces(output[start:end], (bos, eos, *tool_markers), bool(conv.tools))
        for i, piece in enumerate(pieces):
            for line in piece.splitlines():
                line = line.strip()
                if line and not _METADATA.match(line) and is_sentence(line):
                    out.append(_Added(line, conv, prev_role, next_role, i == 0, i == len(pieces) - 1))
    return out


_ESCALATE: dict[Severity, Severity] = {"medium": "high", "high": "critical"}


def _judge(a: _Added, in_system_convs: set[str], in_plain_convs: set[str]) -> tuple[str, Severity, str] | None:
    if a.invisible:
        return "invisible-text", "high", "the template adds invisible characters (hidden text or reordering)"
    suspicious = _SUSPICIOUS.search(a.text) is not None
    if a.conversation.tools and a.text not in in_plain_convs:
        if suspicious:
            return "suspicious-tool-instructions", "medium", "tool-use instructions added by the template look malicious"
        return "tool-instructions", "info", "the template adds tool-use instructions when tools are given"
    if a.prev_role is None and not a.conversation.has_system and a.text not in in_system_convs:
        if suspicious:
            return ("suspicious-default-system-prompt", "medium",
                    "the default system prompt (used when none is given) looks malicious")
        return None  # an ordinary default system prompt: not a finding (see module docstring)
    verdict: tuple[str, Severity, str]
    if (a.glued_prev and a.prev_role == "user") or (a.glued_next and a.next_role == "user"):
        verdict = "hidden-text-user-turn", "high", "the template adds text to user messages"
    elif a.next_role is None and a.conversation.add_generation_prompt and a.prev_role is not None:
        verdict = "hidden-text-generation-prompt", "medium", "the template adds text to the generation prompt"
    elif (a.glued_prev and a.prev_role == "assistant") or (a.glued_next and a.next_role == "assistant"):
        verdict = "hidden-text-assistant-turn", "medium", "the template adds text to assistant messages"
    else:
        verdict = "hidden-text-system", "medium", "the template adds instructions next to the conversation's own"
    if suspicious:  # links, secrecy, "ignore previous instructions": one step worse
        return verdict[0], _ESCALATE.get(verdict[1], verdict[1]), verdict[2] + ", and the text looks malicious"
    return verdict


def analyse(
    conversations: Sequence[Conversation],
    results: Sequence[RenderResult],
    *,
    bos: str,
    eos: str,
    template: str = "default",
) -> list[Finding]:
    """Findings about added text, from the rendered outputs of `make_conversations()`."""
    added: list[_Added] = []
    for conv, res in zip(conversations, results, strict=False):
        if res.output is None:
            continue
        added.extend(_added_text(conv, res.output, bos, eos))
        missing = [m["content"] for m in conv.messages if m["role"] == "user" and m["content"] not in res.output]
        if missing:
            added.append(_Added("", conv, None, None, False, False))  # marks a dropped user message
    in_system = {a.text for a in added if a.conversation.has_system}
    in_plain = {a.text for a in added if not a.conversation.tools}
    # One finding per code: its worst severity, every distinct added line, every conversation.
    grouped: dict[str, tuple[Severity, str, dict[str, None], dict[str, None]]] = {}
    for a in added:
        verdict: tuple[str, Severity, str] | None
        if not a.text:
            verdict = "user-message-dropped", "low", "the template leaves a user message out of the prompt"
        else:
            verdict = _judge(a, in_system, in_plain)
        if verdict is None:
            continue
        code, sev, msg = verdict
        prev = grouped.get(code)
        if prev is None:
            grouped[code] = prev = (sev, msg, {}, {})
        elif severity_rank(sev) > severity_rank(prev[0]):
            grouped[code] = prev = (sev, msg, prev[2], prev[3])
        prev[2][a.text or "(user message content missing from the output)"] = None
        prev[3][a.conversation.name] = None
    return [
        Finding(code, sev, f"{msg} (conversations: {clip(', '.join(convs), 120)})", " / ".join(lines), template)
        for code, (sev, msg, lines, convs) in grouped.items()
    ]
