"""llama.cpp compatibility findings of a chat template: rendered in the sandbox.

Three checks on the default template (`tokenizer.chat_template`), from one render job of a
fixed standard conversation with and without the generation prompt:
- L019: it fails to parse or render (llama.cpp then guesses a format);
- L020: `add_generation_prompt` changes nothing (the assistant turn is never opened);
- L021: the render starts with the BOS text while `tokenizer.ggml.add_bos_token` is true:
  llama.cpp adds BOS when it tokenizes the prompt, so the model sees two.
The render's digest is kept for L022, which the catalog compares with the base model's
(`registry.catalog.compat`). The codes are declared in `registry.gguf.compat.codes`.
"""

from __future__ import annotations

import hashlib
from typing import Any, NamedTuple

from registry.gguf.compat import CompatFinding, finding
from registry.safety.sandbox import Renderer, RenderJob

TEMPLATE_KEY = "tokenizer.chat_template"
# A fixed conversation, so that two files' renders of one template are equal.
STANDARD_MESSAGES = (
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "Hello! What is the capital of France?"},
    {"role": "assistant", "content": "The capital of France is Paris."},
    {"role": "user", "content": "And of Italy?"},
)


class TemplateCheck(NamedTuple):
    findings: tuple[CompatFinding, ...]
    # sha256 of the standard conversation's render with the generation prompt: two files whose
    # templates render alike have the same (L022 compares a file's with its base model's).
    render_sha256: str | None


def template_findings(header: Any, runner: Renderer) -> tuple[CompatFinding, ...]:
    """The chat template findings of a parsed header (none without a template). Blocking."""
    return template_check(header, runner).findings


def template_check(header: Any, runner: Renderer) -> TemplateCheck:
    """The findings and the render digest of the header's default chat template. Blocking."""
    source = header.get(TEMPLATE_KEY)
    if not isinstance(source, str):
        return TemplateCheck((), None)
    bos, eos = token_text(header, "bos"), token_text(header, "eos")
    contexts = [
        {"messages": [dict(m) for m in STANDARD_MESSAGES], "add_generation_prompt": agp,
         "bos_token": bos, "eos_token": eos}
        for agp in (False, True)
    ]  # fmt: skip
    outcome = runner.render(RenderJob(source, contexts))
    failed = next((r for r in outcome.results if r.output is None), None)
    if outcome.status != "ok" or len(outcome.results) != 2 or failed is not None:
        why = failed.message if failed is not None and failed.message else outcome.message or outcome.status
        message = f"the chat template fails on a standard conversation: {why}"[:300]
        return TemplateCheck((finding("L019", TEMPLATE_KEY, message),), None)
    plain, prompted = (r.output or "" for r in outcome.results)
    out = []
    if plain == prompted:
        out.append(
            finding("L020", TEMPLATE_KEY, "add_generation_prompt changes nothing in the rendered prompt")
        )
    if bos and header.get("tokenizer.ggml.add_bos_token") is True and prompted.lstrip().startswith(bos):
        out.append(
            finding(
                "L021",
                TEMPLATE_KEY,
                f"the template starts with {bos!r} and add_bos_token is true: double BOS",
            )
        )
    digest = hashlib.sha256(prompted.encode("utf-8", "surrogatepass")).hexdigest()
    return TemplateCheck(tuple(out), digest)


def token_text(header: Any, name: str) -> str:
    """The text of the special token `name` (bos, eos), "" when the file names none."""
    tokens = header.get("tokenizer.ggml.tokens")
    tid = header.get(f"tokenizer.ggml.{name}_token_id")
    if tokens is None or isinstance(tokens, str | bytes) or not isinstance(tid, int) or isinstance(tid, bool):
        return ""
    try:
        return str(tokens[tid]) if 0 <= tid < len(tokens) else ""
    except (TypeError, ValueError):
        return ""
