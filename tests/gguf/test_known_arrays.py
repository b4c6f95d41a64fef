"""`parse_header(known=...)` and `vocab_sha256(known=...)`: a sibling's header parsed with
the leader's arrays, without walking or hashing them again."""

from __future__ import annotations

from dataclasses import replace

from registry.gguf.array import GGUFArray
from registry.gguf.model import GGUFHeader
from registry.gguf.reader import parse_header
from registry.gguf.vocab import vocab_sha256
from tests.fakehub.synth import ModelSpec, build

SPEC = ModelSpec(vocab_size=4096, tokenizer="gpt2", pre="qwen2")


def _arrays_at(header: GGUFHeader) -> dict[int, GGUFArray]:
    out = {}
    for f in header.fields.values():
        value = f.value
        if isinstance(value, GGUFArray) and value.nbytes > 1024:
            out[value.offset - 4 - value.length_width] = value
    return out


def test_a_known_array_is_taken_where_its_type_and_count_agree() -> None:
    leader = build(SPEC).header
    sibling = build(replace(SPEC, quant="Q8_0")).header
    lead = parse_header(leader)
    known = _arrays_at(lead)
    header = parse_header(sibling, known=known)
    tokens = header.fields["tokenizer.ggml.tokens"].value
    assert any(tokens is v for v in known.values())
    # The same header as parsed on its own, field by field and tensor by tensor.
    alone = parse_header(sibling)
    assert {k: f.value for k, f in header.fields.items()} == {k: f.value for k, f in alone.fields.items()}
    assert header.tensors == alone.tensors and header.data_offset == alone.data_offset
    key = vocab_sha256(lead)
    assert vocab_sha256(header, known=(lead, key)) == key == vocab_sha256(alone)


def test_a_known_array_of_another_count_is_not_taken() -> None:
    leader = build(SPEC).header
    other = build(replace(SPEC, vocab_size=4160)).header
    header = parse_header(other, known=_arrays_at(parse_header(leader)))
    tokens = header.fields["tokenizer.ggml.tokens"].value
    assert len(tokens) == 4160 and tokens == parse_header(other).fields["tokenizer.ggml.tokens"].value


def test_the_vocabulary_key_is_hashed_again_when_the_settings_differ() -> None:
    lead = parse_header(build(SPEC).header)
    bytes_ = build(replace(SPEC, extra=(("tokenizer.ggml.add_bos_token", True),))).header
    other = parse_header(bytes_, known=_arrays_at(lead))
    # The very same token array, but another add-BOS setting: another key.
    assert other.fields["tokenizer.ggml.tokens"].value is lead.fields["tokenizer.ggml.tokens"].value
    known_key = vocab_sha256(other, known=(lead, vocab_sha256(lead)))
    assert known_key == vocab_sha256(parse_header(bytes_)) != vocab_sha256(lead)
