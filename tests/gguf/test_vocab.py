"""The vocabulary key (`registry.gguf.vocab`): what it hashes, what it leaves out."""

from __future__ import annotations

import hashlib
import json
import struct
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from registry.gguf.facts import derive_facts
from registry.gguf.reader import parse_header
from registry.gguf.types import ValueType
from registry.gguf.vocab import _KEY_VERSION, FIRST_COMPARED, MAX_PADS, vocab_sha256
from tests.gguf.builders import Arr, HeaderBuilder
from tests.gguf.gguf_py import gguf_reader

FAMILY = [f"tok{i}" for i in range(300)]  # the real tokens every file below shares


def _key(
    tokens: Sequence[str | bytes] | None,
    *,
    version: int = 3,
    endian: str = "<",
    settings: dict[str, tuple[ValueType, Any]] | None = None,
) -> str | None:
    b = HeaderBuilder(version=version, endian=endian)
    b.kv("general.architecture", ValueType.STRING, "llama")
    b.kv("general.alignment", ValueType.UINT32, 32)
    if tokens is not None:
        b.kv("tokenizer.ggml.tokens", ValueType.ARRAY, Arr(ValueType.STRING, tokens))
    given = {
        "tokenizer.ggml.model": (ValueType.STRING, "gpt2"),
        "tokenizer.ggml.bos_token_id": (ValueType.UINT32, 1),
        "tokenizer.ggml.eos_token_id": (ValueType.UINT32, 2),
        "tokenizer.ggml.add_bos_token": (ValueType.BOOL, False),
    }
    given.update(settings or {})
    for key, (vtype, value) in given.items():
        if value is not None:
            b.kv(key, vtype, value)
    return vocab_sha256(parse_header(b.build()))


def _expected(settings: list[Any], texts: list[bytes]) -> str:
    """The key as the module's docstring defines it, computed the plain way."""
    digest = hashlib.sha256(_KEY_VERSION)
    digest.update(json.dumps([settings, len(texts)], separators=(",", ":")).encode())
    for text in texts[FIRST_COMPARED:]:
        digest.update(struct.pack("<Q", len(text)) + text)
    return digest.hexdigest()


@pytest.mark.parametrize("model", ["smollm2", "gemma3"])
def test_real_models_key_their_token_texts_as_gguf_py_reads_them(model: str, request: pytest.FixtureRequest) -> None:
    path: Path = request.getfixturevalue(f"{model}_path")
    reader = gguf_reader(path)
    field = reader.fields["tokenizer.ggml.tokens"]
    texts = [bytes(field.parts[i]) for i in field.data]
    assert not texts[-1].startswith(b"[PAD")  # neither sample model is padded

    def scalar(key: str) -> Any:
        f = reader.fields.get(key)
        return None if f is None else f.contents()

    settings = [scalar(k) for k in ("tokenizer.ggml.model", "tokenizer.ggml.bos_token_id",
                                    "tokenizer.ggml.eos_token_id", "tokenizer.ggml.add_bos_token",
                                    "tokenizer.ggml.add_eos_token")]  # fmt: skip
    header = parse_header(path.read_bytes()[: 8 << 20])
    assert vocab_sha256(header) == _expected(settings, texts)
    assert derive_facts([header]).vocab_sha256 == vocab_sha256(header)


def test_the_two_sample_models_have_different_keys(smollm2_path: Path, gemma3_path: Path) -> None:
    keys = {vocab_sha256(parse_header(p.read_bytes()[: 8 << 20])) for p in (smollm2_path, gemma3_path)}
    assert len(keys) == 2


def test_pads_named_by_id_are_cut_whatever_their_number() -> None:
    bare = _key(FAMILY)
    assert bare is not None
    assert _key(FAMILY + [f"[PAD{i}]" for i in range(300, 400)]) == bare
    assert _key(FAMILY + [f"[PAD{i}]" for i in range(300, 428)]) == bare
    assert _key([*FAMILY, "[PAD300]"]) == bare


def test_pads_counted_from_one_are_cut() -> None:
    bare = _key(FAMILY)
    assert _key(FAMILY + [f"[PAD{i}]" for i in range(1, 65)]) == bare
    assert _key([*FAMILY, "[PAD1]"]) == bare


def test_a_tail_that_follows_neither_scheme_is_hashed_as_tokens() -> None:
    bare = _key(FAMILY)
    odd_tails = [
        ["[PAD7]", "[PAD9]"],  # counted, but with a gap
        ["[PAD300]", "[PAD302]"],  # by id, but the last one is not its id
        ["[PAD0300]"],  # a leading zero is not how either scheme writes numbers
        ["[PAD301]"],  # ends like an id pad, one id off
        ["[pad300]"],
    ]
    keys = {_key(FAMILY + tail) for tail in odd_tails}
    assert bare not in keys and len(keys) == len(odd_tails)


def test_id_pads_stop_at_the_first_real_token() -> None:
    # A real token that looks like a counted pad ends the id pads' run, and stays a token.
    key = _key([*FAMILY, "[PAD1]", "[PAD301]"])
    assert key == _key([*FAMILY, "[PAD1]", "[PAD301]", "[PAD302]"])
    assert key not in (_key(FAMILY), _key([*FAMILY, "[PAD1]"]))


def test_at_most_max_pads_are_cut() -> None:
    bare = _key(FAMILY)
    assert _key(FAMILY + [f"[PAD{i}]" for i in range(300, 300 + MAX_PADS)]) == bare
    assert _key(FAMILY + [f"[PAD{i}]" for i in range(1, MAX_PADS + 1)]) == bare
    # Past the cap the rest of the tail counts as tokens: two such files differ.
    longer = {_key(FAMILY + [f"[PAD{i}]" for i in range(300, 300 + MAX_PADS + n)]) for n in (1, 2)}
    longer |= {_key(FAMILY + [f"[PAD{i}]" for i in range(1, MAX_PADS + 1 + n)]) for n in (1, 2)}
    assert len(longer) == 4 and bare not in longer


def test_the_first_tokens_are_not_compared() -> None:
    bare = _key(FAMILY)
    changed_early = [f"other{i}" for i in range(FIRST_COMPARED)] + FAMILY[FIRST_COMPARED:]
    assert _key(changed_early) == bare
    changed = list(FAMILY)
    changed[FIRST_COMPARED] = "other"
    assert _key(changed) != bare
    assert _key(FAMILY[:-1]) != bare  # a real token fewer


def test_token_boundaries_count_not_just_the_bytes() -> None:
    a = [*FAMILY[:10], "ab", "c", *FAMILY[12:]]
    b = [*FAMILY[:10], "a", "bc", *FAMILY[12:]]
    assert _key(a) != _key(b)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("tokenizer.ggml.model", (ValueType.STRING, "llama")),
        ("tokenizer.ggml.bos_token_id", (ValueType.UINT32, 5)),
        ("tokenizer.ggml.eos_token_id", (ValueType.UINT32, None)),
        ("tokenizer.ggml.add_bos_token", (ValueType.BOOL, True)),
        ("tokenizer.ggml.add_bos_token", (ValueType.BOOL, None)),  # stated default and absence differ
        ("tokenizer.ggml.add_eos_token", (ValueType.BOOL, False)),
    ],
)
def test_each_special_token_setting_is_part_of_the_key(key: str, value: tuple[ValueType, Any]) -> None:
    assert _key(FAMILY, settings={key: value}) != _key(FAMILY)


def test_a_setting_of_the_wrong_type_counts_as_absent() -> None:
    assert _key(FAMILY, settings={"tokenizer.ggml.bos_token_id": (ValueType.STRING, "1")}) == _key(
        FAMILY, settings={"tokenizer.ggml.bos_token_id": (ValueType.UINT32, None)}
    )


@pytest.mark.parametrize(("version", "endian"), [(1, "<"), (2, ">"), (3, ">"), (1, ">")])
def test_the_key_is_the_same_in_every_byte_order_and_version(version: int, endian: str) -> None:
    tokens: list[str | bytes] = [*FAMILY, "é", b"\xff\x00raw", "", *(f"[PAD{i}]" for i in range(303, 310))]
    assert _key(tokens, version=version, endian=endian) == _key(tokens)
    assert _key(tokens[:-7], version=version, endian=endian) == _key(tokens)


def test_no_string_token_array_no_key() -> None:
    assert _key(None) is None
    b = HeaderBuilder()
    b.kv("tokenizer.ggml.tokens", ValueType.ARRAY, Arr(ValueType.INT32, [1, 2, 3]))
    assert vocab_sha256(parse_header(b.build())) is None


def test_tiny_vocabularies_are_keyed_too() -> None:
    keys = {_key([]), _key(["a"]), _key(["a", "b", "c", "d", "e"]), _key(["a", "b", "c", "d", "e", "f"])}
    assert None not in keys
    # Below FIRST_COMPARED tokens only the count tells them apart; at it, the texts too.
    assert len(keys) == 4
    assert _key(["x", "y"]) == _key(["a", "b"])
