"""Tokenizer behaviour on small hand-made vocabularies (real models: test_real_models.py)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import gguf
import numpy as np
import pytest

from registry.runner import SMOKE_TEXT, BadMetadata, ModelFile, TokenizerUnsupported, load_tokenizer
from registry.runner.bpe import BPETokenizer, byte_to_unicode
from registry.runner.pretokenize import compiled, split, translate
from registry.runner.spm import SPMTokenizer
from registry.runner.tokenizer import MAX_VOCAB, TokenType, Vocab, partition_special
from tests.runner.synthetic import add_value

N, U, C, D, B = TokenType.NORMAL, TokenType.UNKNOWN, TokenType.CONTROL, TokenType.USER_DEFINED, TokenType.BYTE


def _vocab(entries: list[tuple[str, TokenType, float]], *, model: str, **flags: object) -> Vocab:
    tokens = [t for t, _, _ in entries]
    return Vocab(
        tokens=tokens,
        types=np.array([int(k) for _, k, _ in entries], np.int32),
        scores=np.array([s for _, _, s in entries], np.float32),
        merges=list(flags.pop("merges", [])),  # type: ignore[call-overload]
        token_to_id={t: i for i, t in enumerate(tokens)},
        bos_id=1,
        eos_id=2,
        add_bos=bool(flags.pop("add_bos", True)),
        add_eos=False,
        add_space_prefix=bool(flags.pop("add_space_prefix", True)),
        model=model,
        pre=str(flags.pop("pre", "default")),
    )


def _spm(**flags: object) -> SPMTokenizer:
    entries = [("<unk>", U, 0.0), ("<s>", C, 0.0), ("</s>", C, 0.0), ("<start>", C, 0.0), ("<br>", D, 0.0)]
    entries += [(f"<0x{b:02X}>", B, 0.0) for b in range(256)]
    words = [
        "▁",
        "h",
        "e",
        "l",
        "o",
        "w",
        "r",
        "d",
        "▁h",
        "he",
        "ll",
        "llo",
        "▁he",
        "▁hello",
        "▁w",
        "or",
        "▁wor",
        "▁worl",
        "▁world",
    ]
    entries += [(w, N, -float(i)) for i, w in enumerate(words)]
    return SPMTokenizer(_vocab(entries, model="llama", **flags))


def test_spm_merges_prefixes_space_and_falls_back_to_bytes() -> None:
    tok = _spm()
    ids = tok.encode("hello world")
    assert [tok.vocab.tokens[i] for i in ids] == ["<s>", "▁hello", "▁world"]
    ids = tok.encode("hé")
    assert [tok.vocab.tokens[i] for i in ids] == ["<s>", "▁h", "<0xC3>", "<0xA9>"]
    assert tok.decode(ids) == "hé"


def test_spm_without_space_prefix_or_bos() -> None:
    tok = _spm(add_space_prefix=False, add_bos=False)
    assert [tok.vocab.tokens[i] for i in tok.encode("hello")] == ["he", "llo"]
    assert tok.decode(tok.encode("hello world")) == "hello world"


def test_user_defined_tokens_always_match_control_tokens_only_when_parsed() -> None:
    tok = _spm()
    names = [tok.vocab.tokens[i] for i in tok.encode("hello<br>world<start>")]
    assert names[:4] == ["<s>", "▁hello", "<br>", "▁world"]
    assert "<start>" not in names
    names = [tok.vocab.tokens[i] for i in tok.encode("hello<start>world", parse_special=True)]
    assert names == ["<s>", "▁hello", "<start>", "▁world"]
    # Control tokens are left out of decoded text unless asked for.
    ids = tok.encode("hello<start>", parse_special=True)
    assert tok.decode(ids) == "hello"
    assert tok.decode(ids, special=True) == "<s> hello<start>"  # as llama.cpp: only a leading space goes


def _bpe(merges: list[str], words: list[str], pre: str = "gpt2") -> BPETokenizer:
    b2u = byte_to_unicode()
    entries = [("<|endoftext|>", C, 0.0), ("<s>", C, 0.0), ("</s>", C, 0.0)]
    entries += [(b2u[b], N, 0.0) for b in range(256)]
    entries += [(w, N, 0.0) for w in words]
    return BPETokenizer(
        _vocab(entries, model="gpt2", merges=merges, add_bos=False, add_space_prefix=False, pre=pre)
    )


def test_bpe_applies_merges_by_rank_leftmost_first() -> None:
    tok = _bpe(["a a", "b b", "aa a"], ["aa", "bb", "aaa"])
    # "a a" (rank 0) is merged wherever it can be before "aa a" (rank 2) is considered.
    assert [tok.vocab.tokens[i] for i in tok.encode("aaaa")] == ["aa", "aa"]
    assert [tok.vocab.tokens[i] for i in tok.encode("aaa")] == ["aaa"]
    names = [tok.vocab.tokens[i] for i in tok.encode("bbb aa")]
    assert names == ["bb", "b", "Ġ", "aa"]  # " aa" has no "Ġ a" merge
    assert tok.decode(tok.encode("bbb aa é")) == "bbb aa é"


def test_llama3_looks_up_whole_words_before_merging() -> None:
    # "abc" is a token but no merge path leads to it.
    assert _names(_bpe([], ["abc"], pre="gpt2"), "abc") == ["a", "b", "c"]
    assert _names(_bpe([], ["abc"], pre="llama-bpe"), "abc") == ["abc"]


def _names(tok: BPETokenizer, text: str) -> list[str]:
    return [tok.vocab.tokens[i] for i in tok.encode(text)]


def test_pretokenizer_unicode_classes() -> None:
    letters = translate(r"\p{L}+")
    assert letters.fullmatch("Ångströmλ你")
    assert not letters.search("123 _!")
    digits = translate(r"\p{N}")
    assert [m.group() for m in digits.finditer("a1٣Ⅻ½")] == ["1", "٣", "Ⅻ", "½"]
    # llama.cpp's \s is Unicode White_Space: U+001F is not, U+3000 is.
    ws = translate(r"\s")
    assert ws.match("\u3000") and not ws.match("\x1f")


def test_smollm_pretokenizer_splits_digits() -> None:
    assert split("I'm 2024  ok\n", compiled("smollm")) == [
        "I",
        "'m",
        " ",
        "2",
        "0",
        "2",
        "4",
        " ",
        " ok",
        "\n",
    ]


def test_unknown_pre_tokenizer_is_unsupported() -> None:
    with pytest.raises(TokenizerUnsupported, match="no-such-pre"):
        compiled("no-such-pre")


def _write_vocab_gguf(path: Path, model: str) -> Path:
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_tokenizer_model(model)
    w.add_token_list(["<unk>", "<s>", "</s>", "a"])
    w.add_token_types([2, 3, 3, 1])
    w.add_token_scores([0.0, 0.0, 0.0, -1.0])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_load_tokenizer_from_gguf(tmp_path: Path) -> None:
    path = _write_vocab_gguf(tmp_path / "v.gguf", "llama")
    tok = load_tokenizer(ModelFile.from_buffer(np.memmap(path, mode="r")))
    # No add_space_prefix key: SentencePiece's default adds "▁", which this vocabulary
    # lacks, as it lacks <0x..> byte tokens: unsupported, said clearly rather than crashing.
    assert tok.vocab.add_space_prefix and tok.vocab.bos_id is None
    with pytest.raises(TokenizerUnsupported, match="byte-fallback"):
        tok.encode("a")


def test_unknown_tokenizer_model(tmp_path: Path) -> None:
    path = _write_vocab_gguf(tmp_path / "v.gguf", "bert")
    with pytest.raises(TokenizerUnsupported, match="bert"):
        load_tokenizer(ModelFile.from_buffer(np.memmap(path, mode="r")))


def _write_bad_vocab_gguf(path: Path, bad: Mapping[str, object]) -> Path:
    """A SentencePiece vocabulary whose keys in `bad` hold other values."""
    good: dict[str, object] = {
        "tokenizer.ggml.model": "llama",
        "tokenizer.ggml.tokens": ["<unk>", "<s>", "</s>", "a"],
        "tokenizer.ggml.token_type": [2, 3, 3, 1],
        "tokenizer.ggml.scores": [0.0, 0.0, 0.0, -1.0],
    }
    w = gguf.GGUFWriter(str(path), "llama")
    for k, v in {**good, **bad}.items():
        add_value(w, k, v)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("tokenizer.ggml.model", ["llama"]),
        ("tokenizer.ggml.tokens", "<unk>"),
        ("tokenizer.ggml.tokens", [0, 1, 2, 3]),
        ("tokenizer.ggml.token_type", 1),
        ("tokenizer.ggml.token_type", ["1", "3", "3", "1"]),
        ("tokenizer.ggml.token_type", [[1], [3], [3], [1]]),
        ("tokenizer.ggml.scores", 0.5),
        ("tokenizer.ggml.scores", ["0", "0", "0", "-1"]),
        ("tokenizer.ggml.merges", "a a"),
        ("tokenizer.ggml.pre", ["gpt2"]),
        ("tokenizer.ggml.bos_token_id", "1" * 100_000),
        ("tokenizer.ggml.bos_token_id", True),
        ("tokenizer.ggml.eos_token_id", 2.0),
        ("tokenizer.ggml.add_bos_token", "no"),
        ("tokenizer.ggml.add_bos_token", [0]),
        ("tokenizer.ggml.add_eos_token", 1),
        ("tokenizer.ggml.add_space_prefix", "false"),
    ],
    ids=[
        "model-array",
        "tokens-string",
        "tokens-ints",
        "types-int",
        "types-strings",
        "types-arrays",
        "scores-float",
        "scores-strings",
        "merges-string",
        "pre-array",
        "bos-long-string",
        "bos-bool",
        "eos-float",
        "add-bos-string-no",
        "add-bos-array",
        "add-eos-int",
        "add-space-prefix-string",
    ],
)
def test_vocabulary_keys_of_the_wrong_type_are_bad_metadata(key: str, value: object, tmp_path: Path) -> None:
    path = _write_bad_vocab_gguf(tmp_path / "v.gguf", {key: value})
    with pytest.raises(BadMetadata) as exc:
        load_tokenizer(ModelFile.from_buffer(np.memmap(path, mode="r")))
    assert exc.value.key == key and len(str(exc.value)) < 200  # the message goes into a row


def test_flags_written_as_bools_are_read(tmp_path: Path) -> None:
    # Flags are GGUF BOOLs in every file gguf-py writes; False must override the defaults.
    flags = {
        "tokenizer.ggml.add_bos_token": False,
        "tokenizer.ggml.add_space_prefix": False,
        "tokenizer.ggml.add_eos_token": True,
    }
    path = _write_bad_vocab_gguf(tmp_path / "v.gguf", flags)
    vocab = load_tokenizer(ModelFile.from_buffer(np.memmap(path, mode="r"))).vocab
    assert (vocab.add_bos, vocab.add_space_prefix, vocab.add_eos) == (False, False, True)


@pytest.mark.parametrize("model", ["llama", "gpt2"])
def test_byte_token_whose_text_is_not_a_byte_decodes_as_text(model: str, tmp_path: Path) -> None:
    # A hostile vocabulary may give the BYTE type to any text, and the model may predict it.
    bad = {
        "tokenizer.ggml.model": model,
        "tokenizer.ggml.pre": "gpt2",
        "tokenizer.ggml.tokens": ["<unk>", "<s>", "</s>", "<0xZZ>", "<0x+1>"],
        "tokenizer.ggml.token_type": [2, 3, 3, int(B), int(B)],
        "tokenizer.ggml.scores": [0.0] * 5,
    }
    path = _write_bad_vocab_gguf(tmp_path / "v.gguf", bad)
    tok = load_tokenizer(ModelFile.from_buffer(np.memmap(path, mode="r")))
    assert tok.decode([3, 4]) == "<0xZZ><0x+1>"


@pytest.mark.parametrize("key", ["tokenizer.ggml.tokens", "tokenizer.ggml.merges"])
def test_vocabulary_above_the_bound_is_bad_metadata(key: str, tmp_path: Path) -> None:
    # Within the parser's limits, but the lists and tables built from it would take
    # gigabytes: refused before any is built.
    n = MAX_VOCAB + 1
    w = gguf.GGUFWriter(str(tmp_path / "v.gguf"), "llama")
    w.add_tokenizer_model("gpt2")
    w.add_token_list([f"t{i}" for i in range(n)] if key == "tokenizer.ggml.tokens" else ["a", "b", "ab"])
    if key == "tokenizer.ggml.merges":
        w.add_token_merges(["a b"] * n)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(BadMetadata) as exc:
        load_tokenizer(ModelFile.from_buffer(np.memmap(tmp_path / "v.gguf", mode="r")))
    assert exc.value.key == key and str(n) in str(exc.value)


def _cut_every_special(vocab: Vocab, text: str, kinds: tuple[TokenType, ...]) -> list[str | int]:
    """partition_special written plainly: every special token tried on every fragment."""
    specials = sorted(
        (i for i, k in enumerate(vocab.types) if k in kinds),
        key=lambda i: (-len(vocab.tokens[i].encode()), i),
    )
    frags: list[str | int] = [text] if text else []
    for tid in specials:
        out: list[str | int] = []
        for frag in frags:
            if isinstance(frag, int):
                out.append(frag)
                continue
            for j, part in enumerate(frag.split(vocab.tokens[tid])):
                out += ([tid] if j else []) + ([part] if part else [])
        frags = out
    return frags


@pytest.mark.parametrize("parse_special", [False, True])
def test_partition_special_tries_only_tokens_in_the_text_with_the_same_result(parse_special: bool) -> None:
    # Only tokens occurring in the text are tried on its fragments (the rest cannot match
    # a piece of it): the cut must be the one trying every special token gives.
    entries = [("<unk>", U, 0.0), ("<s>", C, 0.0), ("</s>", C, 0.0), ("<start>", C, 0.0)]
    specials = ["\n", "\n\n", "\n\n\n", "ab", "abc", "bc", "c<", "<br>", "br", "zz", "é", "éa", "  "]
    entries += [(t, D, 0.0) for t in specials]
    entries += [(f"~{i:04d}", D, 0.0) for i in range(500)]  # never in the texts
    vocab = _vocab(entries, model="llama")
    kinds = (D, C, U) if parse_special else (D,)
    for text in [
        "abc<br>abcbc\n\n\n\nab  c<start>é éa zz",
        "<s>ab\n\n</s><unk>bc<br><br>",
        SMOKE_TEXT,
        "",
    ]:
        expected = _cut_every_special(vocab, text, kinds)
        assert partition_special(vocab, text, parse_special=parse_special) == expected
        assert not text or any(isinstance(f, int) for f in expected)  # something was cut
