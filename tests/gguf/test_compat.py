"""One real GGUF file per llama.cpp compatibility code, each asserting exactly that code.

Files are whole (header, padding, zeroed data) and written to disk, then read back the way
`registry index` reads them; what gguf-py refuses to write (duplicates, bad alignment,
unknown types) is raw bytes from `tests.gguf.builders`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from registry.gguf.compat import CODES, error_findings, header_findings, runs_in_llama_cpp
from registry.gguf.errors import GGUFError
from registry.gguf.facts import derive_facts
from registry.gguf.reader import parse_header
from registry.gguf.types import GGMLType, ValueType
from tests.gguf.builders import Arr, HeaderBuilder

TOKENS = ["<unk>", "<s>", "</s>", "a", "b", "c"]
TYPES = [2, 3, 3, 1, 1, 1]  # unknown, control, control, normal...
LAYER = (
    "attn_norm",
    "attn_q",
    "attn_k",
    "attn_v",
    "attn_output",
    "ffn_norm",
    "ffn_gate",
    "ffn_down",
    "ffn_up",
)


def model(
    *,
    arch: str = "llama",
    skip: tuple[str, ...] = (),
    kvs: Callable[[HeaderBuilder], None] | None = None,
    tokens: list[str] = TOKENS,
    types: list[int] = TYPES,
    embd_rows: int | None = None,
    extra: Callable[[HeaderBuilder], None] | None = None,
    alignment: tuple[ValueType, int] | None = None,
    special: dict[str, int] | None = None,
) -> HeaderBuilder:
    """A tiny llama-like model that llama.cpp would load, with the changes asked for."""
    b = HeaderBuilder()
    b.kv("general.architecture", ValueType.STRING, arch)
    b.kv(f"{arch}.block_count", ValueType.UINT32, 1)
    if alignment is not None:
        b.kv("general.alignment", alignment[0], alignment[1])
    b.kv("tokenizer.ggml.model", ValueType.STRING, "llama")
    b.kv("tokenizer.ggml.tokens", ValueType.ARRAY, Arr(ValueType.STRING, tokens))
    b.kv("tokenizer.ggml.token_type", ValueType.ARRAY, Arr(ValueType.INT32, types))
    for name, value in (special if special is not None else {"bos": 1, "eos": 2, "unk": 0}).items():
        b.kv(f"tokenizer.ggml.{name}_token_id", ValueType.UINT32, value)
    if kvs is not None:
        kvs(b)
    names = ["token_embd", "output_norm"] + [f"blk.0.{n}" for n in LAYER]
    for name in names:
        if name in skip:
            continue
        short = name.rsplit(".", 1)[-1]
        shape = [8] if short.endswith("norm") else [8, 8]
        if name == "token_embd":
            shape = [8, len(tokens) if embd_rows is None else embd_rows]
        b.tensor(f"{name}.weight", shape, GGMLType.F32)
    if extra is not None:
        extra(b)
    return b


def codes_of(tmp_path: Path, data: bytes, name: str = "m.gguf") -> list[str]:
    """Write the file, read it back as the indexer does, and list the finding codes."""
    path = tmp_path / name
    path.write_bytes(data)
    raw = path.read_bytes()
    try:
        header = parse_header(raw, file_size=len(raw))
        facts = derive_facts([header], file_sizes=[len(raw)])
    except GGUFError as exc:
        return [f.code for f in error_findings(exc)]
    return [f.code for f in header_findings([header], facts.kind)]


def test_the_base_file_has_no_finding(tmp_path: Path) -> None:
    raw = model().build(with_data=True)
    header = parse_header(raw, file_size=len(raw))
    assert header_findings([header]) == ()
    assert runs_in_llama_cpp(header_findings([header]))


def test_l001_alignment_not_uint32(tmp_path: Path) -> None:
    assert codes_of(tmp_path, model(alignment=(ValueType.UINT64, 32)).build(with_data=True)) == ["L001"]


def test_l002_alignment_not_a_power_of_two(tmp_path: Path) -> None:
    assert codes_of(tmp_path, model(alignment=(ValueType.UINT32, 48)).build(with_data=True)) == ["L002"]


def test_l003_duplicate_key(tmp_path: Path) -> None:
    data = model(kvs=lambda b: b.kv("llama.block_count", ValueType.UINT32, 2)).build(with_data=True)
    assert codes_of(tmp_path, data) == ["L003"]


def test_l004_duplicate_tensor(tmp_path: Path) -> None:
    data = model(extra=lambda b: b.tensor("output_norm.weight", [8], GGMLType.F32)).build(with_data=True)
    assert codes_of(tmp_path, data) == ["L004"]


def test_l005_unknown_tensor_type(tmp_path: Path) -> None:
    data = model(extra=lambda b: b.tensor("extra.weight", [32], 4)).build(with_data=True)  # Q4_2, removed
    assert codes_of(tmp_path, data) == ["L005"]


def test_l006_tensor_data_past_the_end(tmp_path: Path) -> None:
    data = model().build(with_data=True)
    assert codes_of(tmp_path, data[:-16]) == ["L006"]


def test_l007_row_not_a_multiple_of_the_block(tmp_path: Path) -> None:
    data = model(extra=lambda b: b.tensor("extra.weight", [40, 2], GGMLType.Q4_0)).build(with_data=True)
    assert codes_of(tmp_path, data) == ["L007"]


def test_l008_split_shards_disagree(tmp_path: Path) -> None:
    def split(no: int, count: int) -> bytes:
        def keys(b: HeaderBuilder) -> None:
            b.kv("split.no", ValueType.UINT16, no)
            b.kv("split.count", ValueType.UINT16, count)
            b.kv("split.tensors.count", ValueType.INT32, 11)

        return model(kvs=keys).build(with_data=True)

    raws = [split(0, 2), split(1, 3)]
    headers = [parse_header(r, file_size=len(r)) for r in raws]
    with pytest.raises(GGUFError) as info:
        derive_facts(headers, file_sizes=[len(r) for r in raws])
    assert [f.code for f in error_findings(info.value)] == ["L008"]


def test_l009_unknown_architecture(tmp_path: Path) -> None:
    assert codes_of(tmp_path, model(arch="no-such-arch").build(with_data=True)) == ["L009"]


def test_l010_required_tensor_missing(tmp_path: Path) -> None:
    data = model(skip=("blk.0.attn_k",)).build(with_data=True)
    header = parse_header(data, file_size=len(data))
    found = header_findings([header])
    assert [(f.code, f.field) for f in found] == [("L010", "blk.0.attn_k.weight")]
    assert not runs_in_llama_cpp(found)


@pytest.mark.parametrize("arch", ["qwen3", "gemma3", "olmo2", "deepseek2", "mamba", "bert"])
def test_l010_per_architecture(tmp_path: Path, arch: str) -> None:
    """The llama-like file lacks each of these architectures' own tensors."""
    codes = codes_of(tmp_path, model(arch=arch).build(with_data=True))
    assert codes and set(codes) == {"L010"}


@pytest.mark.parametrize("general_type", ["adapter", "mmproj", "imatrix"])
def test_files_loaded_beside_a_model_get_only_the_loaders_checks(tmp_path: Path, general_type: str) -> None:
    """A LoRA adapter, a projector or an importance matrix lacks a model's tensors by design."""

    def keys(b: HeaderBuilder) -> None:
        b.kv("general.type", ValueType.STRING, general_type)
        b.kv("adapter.type", ValueType.STRING, "lora")

    assert codes_of(tmp_path, model(arch="clip", skip=("blk.0.attn_k",), kvs=keys).build(with_data=True)) == []
    dup = model(arch="clip", kvs=lambda b: (keys(b), b.kv("general.type", ValueType.STRING, "x")))
    assert codes_of(tmp_path, dup.build(with_data=True), "dup.gguf") == ["L003"]


def test_l011_embedding_rows_differ_from_vocab(tmp_path: Path) -> None:
    assert codes_of(tmp_path, model(embd_rows=7).build(with_data=True)) == ["L011"]


def test_l012_unknown_pre_tokenizer(tmp_path: Path) -> None:
    b = HeaderBuilder()
    b.kv("general.architecture", ValueType.STRING, "gpt2")  # no tensor table: tokenizer only
    b.kv("tokenizer.ggml.model", ValueType.STRING, "gpt2")
    b.kv("tokenizer.ggml.pre", ValueType.STRING, "no-such-pre")
    b.kv("tokenizer.ggml.tokens", ValueType.ARRAY, Arr(ValueType.STRING, TOKENS))
    b.kv("tokenizer.ggml.eos_token_id", ValueType.UINT32, 2)
    assert codes_of(tmp_path, b.build(with_data=True)) == ["L012"]


def test_l013_bpe_without_pre_tokenizer(tmp_path: Path) -> None:
    b2 = HeaderBuilder()
    b2.kv("general.architecture", ValueType.STRING, "gpt2")  # no tensor table: tokenizer only
    b2.kv("tokenizer.ggml.model", ValueType.STRING, "gpt2")
    b2.kv("tokenizer.ggml.tokens", ValueType.ARRAY, Arr(ValueType.STRING, TOKENS))
    b2.kv("tokenizer.ggml.eos_token_id", ValueType.UINT32, 2)
    assert codes_of(tmp_path, b2.build(with_data=True), "n.gguf") == ["L013"]


def test_l014_unknown_tokenizer_model(tmp_path: Path) -> None:
    b = HeaderBuilder()
    b.kv("general.architecture", ValueType.STRING, "gpt2")  # no tensor table: tokenizer only
    b.kv("tokenizer.ggml.model", ValueType.STRING, "sentencepiece-v9")
    assert codes_of(tmp_path, b.build(with_data=True)) == ["L014"]


def test_l015_special_token_out_of_range(tmp_path: Path) -> None:
    data = model(special={"bos": 1, "eos": 2, "pad": 60}).build(with_data=True)
    assert codes_of(tmp_path, data) == ["L015"]


def test_l016_special_token_of_wrong_type(tmp_path: Path) -> None:
    data = model(special={"bos": 1, "eos": 4}).build(with_data=True)
    assert codes_of(tmp_path, data) == ["L016"]


def test_l017_no_eos_and_no_eot(tmp_path: Path) -> None:
    assert codes_of(tmp_path, model(special={"bos": 1}).build(with_data=True)) == ["L017"]


def test_l018_invalid_utf8(tmp_path: Path) -> None:
    data = model(kvs=lambda b: b.kv("general.name", ValueType.STRING, b"caf\xe9 \xff")).build(with_data=True)
    path = tmp_path / "m.gguf"
    path.write_bytes(data)
    header = parse_header(path.read_bytes())
    assert header.get("general.name") == "caf\ufffd \ufffd"
    assert [(f.code, f.field) for f in header_findings([header])] == [("L018", "general.name")]


@pytest.mark.parametrize(
    "junk",
    [b"\xff" * 64, b"\xc0\x80", b"\xed\xa0\x80", "\u202e\u0000".encode(), b"\xf4\x90\x80\x80" * 100],
)
def test_hostile_strings_never_crash(tmp_path: Path, junk: bytes) -> None:
    data = model(
        kvs=lambda b: (
            b.kv("general.name", ValueType.STRING, junk),
            b.kv("tokenizer.ggml.pre", ValueType.STRING, junk),
            b.kv("tokenizer.chat_template", ValueType.STRING, junk),
        ),
        extra=lambda b: b.tensor(junk[:40], [8], GGMLType.F32),
    ).build(with_data=True)
    codes = codes_of(tmp_path, data)
    assert set(codes) <= {c.code for c in CODES}
    try:
        junk.decode("utf-8")
        valid = True
    except UnicodeDecodeError:
        valid = False
    assert ("L018" in codes) is not valid


def test_every_code_has_a_test() -> None:
    text = Path(__file__).read_text()
    assert [c.code for c in CODES if c.code.startswith("L0") and int(c.code[1:]) <= 18] == [
        f"L{i:03d}" for i in range(1, 19)
    ]
    for c in CODES[:18]:
        assert f"test_{c.code.lower()}_" in text


def test_the_docs_list_every_code() -> None:
    """docs/compatibility.md has one table row per code, with its severity and title."""
    doc = (Path(__file__).resolve().parents[2] / "docs" / "compatibility.md").read_text(encoding="utf-8")
    rows = [line for line in doc.splitlines() if line.startswith("| L")]
    assert rows == [f"| {c.code} | {c.severity} | {c.title} | {c.doc} |" for c in CODES]


def test_a_complete_mamba_file_has_no_finding(tmp_path: Path) -> None:
    """Mamba's A and D tensors carry no `.weight` suffix in llama.cpp's files."""
    b = HeaderBuilder()
    b.kv("general.architecture", ValueType.STRING, "mamba")
    b.kv("mamba.block_count", ValueType.UINT32, 1)
    for name in ("token_embd.weight", "output_norm.weight", "blk.0.attn_norm.weight", "blk.0.ssm_in.weight",
                 "blk.0.ssm_conv1d.weight", "blk.0.ssm_x.weight", "blk.0.ssm_dt.weight", "blk.0.ssm_a",
                 "blk.0.ssm_d", "blk.0.ssm_out.weight"):  # fmt: skip
        b.tensor(name, [8], GGMLType.F32)
    assert codes_of(tmp_path, b.build(with_data=True)) == []
