"""llama.cpp chat template findings (L019-L021), rendered in the real sandbox."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from registry.gguf.reader import parse_header
from registry.gguf.types import ValueType
from registry.safety.compat import template_findings
from registry.safety.sandbox import SandboxPool
from tests.gguf.builders import Arr, HeaderBuilder

CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@pytest.fixture(scope="module")
def pool() -> Iterator[SandboxPool]:
    with SandboxPool() as p:
        yield p


def codes(pool: SandboxPool, template: str | bytes, *, add_bos: bool | None = None) -> list[str]:
    b = HeaderBuilder()
    b.kv("general.architecture", ValueType.STRING, "llama")
    b.kv("tokenizer.ggml.tokens", ValueType.ARRAY, Arr(ValueType.STRING, ["<unk>", "<s>", "</s>"]))
    b.kv("tokenizer.ggml.bos_token_id", ValueType.UINT32, 1)
    b.kv("tokenizer.ggml.eos_token_id", ValueType.UINT32, 2)
    if add_bos is not None:
        b.kv("tokenizer.ggml.add_bos_token", ValueType.BOOL, add_bos)
    b.kv("tokenizer.chat_template", ValueType.STRING, template)
    return [f.code for f in template_findings(parse_header(b.build()), pool)]


def test_a_good_template_has_no_finding(pool: SandboxPool) -> None:
    assert codes(pool, CHATML, add_bos=True) == []


def test_l019_template_that_does_not_parse(pool: SandboxPool) -> None:
    assert codes(pool, "{% for m in messages %}{{ m['content'] }") == ["L019"]


def test_l019_template_that_raises(pool: SandboxPool) -> None:
    assert codes(pool, "{{ raise_exception('System role not supported') }}") == ["L019"]


def test_l020_generation_prompt_has_no_effect(pool: SandboxPool) -> None:
    assert codes(pool, "{% for m in messages %}{{ m['content'] }}\n{% endfor %}") == ["L020"]


def test_l021_double_bos(pool: SandboxPool) -> None:
    assert codes(pool, "{{ bos_token }}" + CHATML, add_bos=True) == ["L021"]
    assert codes(pool, "{{ bos_token }}" + CHATML, add_bos=False) == []


@pytest.mark.parametrize("junk", [b"\xff\xfe{{", b"{{ '\xc3' }}", "{{ '\u202e' * 3 }}".encode()])
def test_hostile_templates_never_crash(pool: SandboxPool, junk: bytes) -> None:
    assert set(codes(pool, junk)) <= {"L019", "L020", "L021"}
