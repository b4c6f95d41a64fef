"""bos and eos text for template rendering, from vocabularies a hostile file may mistype."""

from __future__ import annotations

import pytest

from registry.gguf.reader import parse_header
from registry.gguf.types import ValueType
from registry.safety import SandboxPool, scan_header, special_tokens
from tests.gguf.builders import Arr, HeaderBuilder
from tests.safety.templates import CVE_2024_34359


def _header(tokens_type: ValueType, tokens: object, bos: object = 0, eos: object = 1) -> object:
    b = HeaderBuilder()
    b.kv("tokenizer.ggml.tokens", tokens_type, tokens)
    b.kv("tokenizer.ggml.bos_token_id", ValueType.BOOL if isinstance(bos, bool) else ValueType.UINT32, bos)
    b.kv("tokenizer.ggml.eos_token_id", ValueType.UINT32, eos)
    b.kv("tokenizer.chat_template", ValueType.STRING, CVE_2024_34359)
    data = b.build()
    return parse_header(data, file_size=len(data))


def test_vocabulary_gives_bos_and_eos() -> None:
    assert special_tokens(_header(ValueType.ARRAY, Arr(ValueType.STRING, ["<s>", "</s>"]))) == ("<s>", "</s>")


@pytest.mark.parametrize(
    ("tokens_type", "tokens"),
    [
        (ValueType.UINT32, 5),
        (ValueType.FLOAT32, 1.0),
        (ValueType.STRING, "ab"),
        (ValueType.ARRAY, Arr(ValueType.INT32, [7, 8])),
    ],
)
def test_tokens_that_are_not_an_array_of_strings_give_no_special_tokens(
    tokens_type: ValueType, tokens: object, pool: SandboxPool
) -> None:
    header = _header(tokens_type, tokens)
    assert special_tokens(header) == ("", "")
    # The template is still scanned and reported, not lost to an error.
    assert any(f.severity == "critical" for f in scan_header(header, runner=pool))


def test_bool_token_id_is_not_an_index() -> None:
    header = _header(ValueType.ARRAY, Arr(ValueType.STRING, ["<s>", "</s>"]), bos=True)
    assert special_tokens(header) == ("", "</s>")
