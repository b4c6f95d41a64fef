"""Facts derived from headers, checked against values read independently with gguf-py."""

from __future__ import annotations

import hashlib
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import gguf
import gguf.utility
import numpy as np
import pytest

from registry.gguf.errors import GGUFError, InconsistentShards, TruncatedFile
from registry.gguf.facts import (
    computed_size_label,
    derive_facts,
    infer_file_type,
    repo_id_from_url,
    rounded_notation,
)
from registry.gguf.facts_model import BaseModel, QuantMixEntry, SplitInfo
from registry.gguf.model import GGUFHeader, TensorInfo
from registry.gguf.reader import parse_header
from registry.gguf.types import TENSOR_TYPES, GGMLType, ValueType
from tests.gguf.builders import HeaderBuilder
from tests.gguf.gguf_py import Q, gguf_reader, parse_file, quant, write_gguf

# -- the two real models, against gguf.GGUFReader ------------------------------------------


class Reference:
    """What gguf-py's own reader says about a file."""

    def __init__(self, path: Path) -> None:
        r = gguf_reader(path)
        self.fields = {k: f for k, f in r.fields.items() if not k.startswith("GGUF.")}
        self.tensors = [(t.name, t.tensor_type.name, int(t.n_elements), int(t.n_bytes)) for t in r.tensors]
        self.data_offset = r.data_offset
        self.size = path.stat().st_size

    def value(self, key: str) -> Any:
        return self.fields[key].contents()


_REFS: dict[Path, Reference] = {}


def reference(path: Path) -> Reference:
    if path not in _REFS:
        _REFS[path] = Reference(path)
    return _REFS[path]


@pytest.fixture(scope="module")
def smollm2(smollm2_path: Path) -> tuple[Reference, Any]:
    return reference(smollm2_path), derive_facts([parse_file(smollm2_path)])


@pytest.fixture(scope="module")
def gemma3(gemma3_path: Path) -> tuple[Reference, Any]:
    return reference(gemma3_path), derive_facts([parse_file(gemma3_path)])


@pytest.fixture(params=["smollm2", "gemma3"])
def real(request: pytest.FixtureRequest) -> tuple[Reference, Any]:
    return request.getfixturevalue(request.param)


def test_real_counts_and_mix(real: tuple[Reference, Any]) -> None:
    ref, facts = real
    assert facts.parameter_count == sum(n for _, _, n, _ in ref.tensors)
    assert facts.tensor_count == len(ref.tensors)
    assert facts.kv_count == len(ref.fields)
    mix: dict[str, list[int]] = {}
    for _, type_name, n, b in ref.tensors:
        e = mix.setdefault(type_name, [0, 0, 0])
        e[0], e[1], e[2] = e[0] + 1, e[1] + n, e[2] + b
    assert {k: QuantMixEntry(*v) for k, v in mix.items()} == facts.quant_mix
    total_bytes = sum(b for _, _, _, b in ref.tensors)
    assert facts.bits_per_weight == pytest.approx(total_bytes * 8 / facts.parameter_count)
    assert facts.header_bytes == ref.data_offset
    assert facts.file_size == ref.size
    assert facts.gguf_version == 3 and facts.endianness == "little" and facts.alignment == 32
    assert facts.split is None and facts.shard_count == 1 and facts.kind == "model"


def test_real_hyperparameters(real: tuple[Reference, Any]) -> None:
    ref, facts = real
    arch = ref.value("general.architecture")
    assert facts.architecture == arch
    assert facts.name == ref.value("general.name")
    assert facts.size_label == ref.value("general.size_label")
    assert facts.size_label_source == "file"
    assert facts.license == ref.value("general.license")
    file_type = gguf.LlamaFileType(ref.value("general.file_type")).name.removeprefix("MOSTLY_")
    assert (facts.file_type, facts.file_type_source) == (file_type, "file")
    assert facts.context_length == ref.value(f"{arch}.context_length")
    assert facts.embedding_length == ref.value(f"{arch}.embedding_length")
    assert facts.block_count == ref.value(f"{arch}.block_count")
    assert facts.feed_forward_length == ref.value(f"{arch}.feed_forward_length")
    assert facts.head_count == ref.value(f"{arch}.attention.head_count")
    assert facts.head_count_kv == ref.value(f"{arch}.attention.head_count_kv")
    assert facts.rope["freq_base"] == pytest.approx(ref.value(f"{arch}.rope.freq_base"))
    assert facts.tokenizer_model == ref.value("tokenizer.ggml.model")
    assert facts.tokenizer_pre == ref.value("tokenizer.ggml.pre")
    assert facts.vocab_size == len(ref.fields["tokenizer.ggml.tokens"].data)
    assert facts.bos_token_id == ref.value("tokenizer.ggml.bos_token_id")
    assert facts.eos_token_id == ref.value("tokenizer.ggml.eos_token_id")


def test_real_metadata_matches_every_key(real: tuple[Reference, Any]) -> None:
    ref, facts = real
    assert set(facts.metadata) == set(ref.fields)
    for key, f in ref.fields.items():
        got = facts.metadata[key]
        if f.types[0] == gguf.GGUFValueType.ARRAY:
            # Per-layer numeric arrays are kept up to 256 entries, string arrays up to 64.
            if len(f.data) > (64 if f.types[1] == gguf.GGUFValueType.STRING else 256):
                assert got == {"type": "array", "element_type": f.types[1].name, "count": len(f.data)}
            else:
                assert got == f.contents()
        elif isinstance(got, float):
            assert got == pytest.approx(f.contents())
        else:
            assert got == f.contents(), key


def test_smollm2_specifics(smollm2: tuple[Reference, Any]) -> None:
    ref, facts = smollm2
    assert facts.architecture == "llama"
    assert facts.vocab_size == 49152
    assert facts.file_type == "Q4_1"
    assert set(facts.quant_mix) == {"Q4_1", "Q8_0", "F32"}
    template = ref.value("tokenizer.chat_template")
    assert facts.chat_template == template
    assert facts.chat_template_sha256 == hashlib.sha256(template.encode()).hexdigest()
    assert facts.languages == ("en",)
    assert facts.finetune == ref.value("general.finetune")
    assert facts.basename == "smollm2"


def test_gemma3_specifics(gemma3: tuple[Reference, Any]) -> None:
    ref, facts = gemma3
    assert facts.architecture == "gemma3"
    assert facts.vocab_size == 262144
    assert facts.file_type == "Q4_K_M"
    assert next(iter(facts.quant_mix)) == "Q8_0"  # largest share first
    assert set(facts.quant_mix) == {"Q8_0", "Q5_0", "Q4_K", "Q6_K", "F32"}
    assert "tokenizer.chat_template" not in ref.fields
    assert facts.chat_template is None and facts.chat_template_sha256 is None
    assert facts.tags == tuple(ref.value("general.tags"))
    assert facts.metadata["tokenizer.ggml.tokens"] == {
        "type": "array",
        "element_type": "STRING",
        "count": 262144,
    }


def test_real_file_size_check(gemma3_path: Path) -> None:
    header = parse_file(gemma3_path)
    size = gemma3_path.stat().st_size
    assert derive_facts([header], file_sizes=[size]).file_size == size
    with pytest.raises(TruncatedFile) as exc:
        derive_facts([header], file_sizes=[size - 1])
    assert exc.value.code == "truncated"
    assert isinstance(exc.value, GGUFError)


# -- size labels ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "count",
    [1, 999, 1000, 1500, 99_999, 999_999, 1_000_000, 1_000_001, 134_515_008, 268_098_176, 999_999_999,
     1_543_714_304, 7_241_732_096, 70_553_706_496, 99_999_999_999, 1_200_000_000_000, 405_000_000_000_000],
)  # fmt: skip
def test_rounded_notation_matches_gguf_py(count: int) -> None:
    assert rounded_notation(count) == gguf.utility.model_weight_count_rounded_notation(count)


def test_rounded_notation_examples() -> None:
    assert [rounded_notation(n) for n in (134_515_008, 1_543_714_304, 7_241_732_096, 70_553_706_496)] == [
        "135M",
        "1.5B",
        "7.2B",
        "71B",
    ]
    assert rounded_notation(1_234_000_000_000) == "1.2T"


def _ti(name: str, shape: tuple[int, ...], type: GGMLType = GGMLType.F32) -> TensorInfo:
    n = math.prod(shape)
    info = TENSOR_TYPES[type]
    return TensorInfo(name, shape, type, 0, 0, n, n // info.block_size * info.type_size, 0)


def test_computed_size_label_experts_like_gguf_py() -> None:
    # Mixtral 8x7B proportions, scaled: shared tensors plus 8 stacked experts per layer.
    tensors = [_ti("token_embd.weight", (4096, 32000)), _ti("output.weight", (4096, 32000))]
    for i in range(32):
        tensors += [
            _ti(f"blk.{i}.attn_q.weight", (4096, 4096)),
            _ti(f"blk.{i}.attn_k.weight", (4096, 1024)),
            _ti(f"blk.{i}.attn_v.weight", (4096, 1024)),
            _ti(f"blk.{i}.attn_output.weight", (4096, 4096)),
            _ti(f"blk.{i}.ffn_gate_exps.weight", (4096, 14336, 8)),
            _ti(f"blk.{i}.ffn_up_exps.weight", (4096, 14336, 8)),
            _ti(f"blk.{i}.ffn_down_exps.weight", (14336, 4096, 8)),
        ]
    label = computed_size_label(tensors)
    assert label == "8x7.2B"
    shared = sum(t.n_elements for t in tensors if "_exps" not in t.name)
    expert = sum(t.n_elements // 8 for t in tensors if "_exps" in t.name)
    total = sum(t.n_elements for t in tensors)
    assert label == gguf.utility.size_label(total, shared, expert, 8)


# -- gguf-py written files -----------------------------------------------------------------


def _f32(*numpy_shape: int) -> np.ndarray:
    return np.ones(numpy_shape, dtype=np.float32)


def test_written_experts_file_gets_nx_label(tmp_path: Path) -> None:
    tensors = [
        ("token_embd.weight", _f32(100, 64)),
        ("blk.0.ffn_gate_exps.weight", _f32(8, 128, 64)),  # numpy order: experts first
        ("blk.0.ffn_down_exps.weight", _f32(8, 64, 128)),
        ("blk.0.ffn_gate_inp.weight", _f32(8, 64)),
    ]
    kv = {"llama.expert_count": 8, "llama.expert_used_count": 2, "llama.context_length": 4096}
    (path,) = write_gguf(tmp_path / "moe.gguf", kv=kv, tensors=tensors)
    facts = derive_facts([parse_file(path)])
    shared = 100 * 64 + 8 * 64
    per_expert = 128 * 64 + 64 * 128
    assert facts.parameter_count == shared + 8 * per_expert
    assert facts.size_label == f"8x{rounded_notation(shared + per_expert)}" == "8x23K"
    assert facts.size_label_source == "computed"
    assert (facts.expert_count, facts.expert_used_count, facts.context_length) == (8, 2, 4096)
    assert facts.file_type == "F32" and facts.file_type_source == "inferred"


def test_written_base_models_and_provenance(tmp_path: Path) -> None:
    kv = {
        "general.name": "Tiny Chat",
        "general.size_label": "1.1B",
        "general.license": "other",
        "general.license.name": "tiny-license",
        "general.license.link": "https://example.org/LICENSE",
        "general.base_model.count": 3,
        "general.base_model.0.name": "Llama 3.1 8B",
        "general.base_model.0.organization": "Meta Llama",
        "general.base_model.0.repo_url": "https://huggingface.co/meta-llama/Llama-3.1-8B",
        "general.base_model.0.version": "3.1",
        "general.base_model.1.name": "Mistral 7B v0.1",
        "general.base_model.1.organization": "Mistral AI",
        "general.base_model.2.name": "local-only",
        "general.base_model.2.url": "https://example.org/model",
        "general.source.url": "https://example.org/src",
        "general.source.repo_url": "https://hf.co/org/tiny-chat",
        "general.tags": ["chat", "tiny"],
        "general.languages": ["en", "fr"],
        "general.datasets": ["org/old-style"],
        "general.dataset.count": 1,
        "general.dataset.0.name": "Ultra Chat",
        "general.dataset.0.repo_url": "https://huggingface.co/datasets/HuggingFaceH4/ultrachat_200k",
        "general.description": "a tiny model",
    }
    (path,) = write_gguf(tmp_path / "tiny.gguf", kv=kv, tensors=[("output.weight", _f32(4, 32))])
    facts = derive_facts([parse_file(path)])
    assert facts.base_models == (
        BaseModel(
            name="Llama 3.1 8B",
            organization="Meta Llama",
            version="3.1",
            repo_url="https://huggingface.co/meta-llama/Llama-3.1-8B",
            repo_id="meta-llama/Llama-3.1-8B",
        ),
        BaseModel(name="Mistral 7B v0.1", organization="Mistral AI", repo_id="Mistral-AI/Mistral-7B-v0.1"),
        BaseModel(name="local-only", url="https://example.org/model", repo_id=None),
    )
    assert facts.source == {"url": "https://example.org/src", "repo_url": "https://hf.co/org/tiny-chat"}
    assert facts.tags == ("chat", "tiny") and facts.languages == ("en", "fr")
    # A dataset repo URL is not a model repo id, so the group's name is kept.
    assert facts.datasets == ("org/old-style", "Ultra Chat")
    assert (facts.license, facts.license_name, facts.license_link) == (
        "other",
        "tiny-license",
        "https://example.org/LICENSE",
    )
    assert facts.size_label == "1.1B" and facts.size_label_source == "file"
    assert facts.description == "a tiny model"


def test_group_index_too_long_for_int_is_not_a_group() -> None:
    # int() refuses more than 4,300 digits; a key with such an index is ignored, and the
    # groups beside it (numbered with a gap) are still read.
    long_index = "9" * 5000
    b = HeaderBuilder()
    b.kv("general.architecture", ValueType.STRING, "llama")
    b.kv("general.base_model.0.name", ValueType.STRING, "First")
    b.kv(f"general.base_model.{long_index}.name", ValueType.STRING, "hostile")
    b.kv("general.base_model.7.repo_url", ValueType.STRING, "https://huggingface.co/org/seventh")
    b.kv(f"general.dataset.{long_index}.name", ValueType.STRING, "hostile")
    b.kv("general.dataset.2.name", ValueType.STRING, "Second Set")
    data = b.build()
    facts = derive_facts([parse_header(data, file_size=len(data))])
    assert facts.base_models == (
        BaseModel(name="First"),
        BaseModel(repo_url="https://huggingface.co/org/seventh", repo_id="org/seventh"),
    )
    assert facts.datasets == ("Second Set",)


@pytest.mark.parametrize(
    ("url", "repo_id"),
    [
        ("https://huggingface.co/org/name", "org/name"),
        ("https://huggingface.co/org/name/tree/main", "org/name"),
        ("https://hf.co/org/name.git", "org/name"),
        ("http://www.huggingface.co/gpt2", "gpt2"),
        ("https://huggingface.co/datasets/org/name", None),
        ("https://github.com/org/name", None),
        ("https://nothuggingface.co/org/name", None),
        ("not a url", None),
        ("huggingface.co/org/name", "org/name"),
        ("org/name", None),
        ("https://huggingface.co/", None),
    ],
)
def test_repo_id_from_url(url: str, repo_id: str | None) -> None:
    assert repo_id_from_url(url) == repo_id


def test_written_per_layer_head_counts_and_nan(tmp_path: Path) -> None:
    heads = [32, 32, 0, 40] * 3
    kv = {
        "llama.attention.head_count": (heads, gguf.GGUFValueType.ARRAY),
        "llama.attention.head_count_kv": 8,
        "llama.rope.freq_base": 10000.0,
        "llama.rope.scaling.type": "yarn",
        "llama.rope.scaling.factor": float("nan"),
        "tokenizer.chat_template": "{{ messages }}",
        "tokenizer.chat_template.tool_use": "{{ tools }}",
    }
    (path,) = write_gguf(tmp_path / "m.gguf", kv=kv, tensors=[("output.weight", _f32(2, 32))])
    facts = derive_facts([parse_file(path)])
    assert facts.head_count == 40
    assert facts.head_count_kv == 8
    assert facts.metadata["llama.attention.head_count"] == heads
    assert facts.rope == {"freq_base": 10000.0, "scaling.type": "yarn", "scaling.factor": "nan"}
    assert facts.chat_templates == {"tool_use": "{{ tools }}"}
    assert facts.chat_template_sha256 == hashlib.sha256(b"{{ messages }}").hexdigest()


@pytest.mark.parametrize(
    ("kv", "arch", "kind"),
    [
        ({"general.type": "mmproj"}, "clip", "mmproj"),
        ({}, "clip", "mmproj"),
        ({"general.type": "adapter", "adapter.type": "lora"}, "llama", "lora"),
        ({"general.type": "adapter", "adapter.type": "control_vector"}, "llama", "model"),
        ({"general.type": "imatrix"}, "llama", "imatrix"),
        ({"imatrix.chunk_count": 100}, "llama", "imatrix"),
        ({"general.type": "model"}, "llama", "model"),
    ],
)
def test_written_kinds(tmp_path: Path, kv: dict[str, Any], arch: str, kind: str) -> None:
    (path,) = write_gguf(tmp_path / "k.gguf", arch=arch, kv=kv, tensors=[("a.lora_a", _f32(4, 32))])
    facts = derive_facts([parse_file(path)])
    assert facts.kind == kind
    if kind == "lora":
        assert facts.size_label is None  # low-rank factors say nothing of the model's size
    else:
        assert facts.size_label == "0.13K"  # 4x32 elements, computed like gguf-py would


def test_written_vocab_only(tmp_path: Path) -> None:
    kv = {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.tokens": ["a", "b", "c"]}
    (path,) = write_gguf(tmp_path / "vocab.gguf", kv=kv)
    facts = derive_facts([parse_file(path)])
    assert facts.kind == "vocab"
    assert facts.vocab_size == 3 and facts.parameter_count == 0
    assert facts.size_label is None and facts.bits_per_weight is None and facts.file_type is None


def test_inferred_file_type_prefers_dominant_quant(tmp_path: Path) -> None:
    tensors = [
        ("token_embd.weight", quant(64, 512, Q.Q6_K)),
        ("blk.0.attn_q.weight", quant(256, 512, Q.Q4_K)),
        ("blk.0.attn_norm.weight", _f32(512)),
        ("output.weight", _f32(64, 512)),
    ]
    (path,) = write_gguf(tmp_path / "q.gguf", tensors=tensors)
    header = parse_file(path)
    assert infer_file_type(header.tensors) == "Q4_K"
    facts = derive_facts([header])
    assert (facts.file_type, facts.file_type_source) == ("Q4_K", "inferred")
    assert facts.quant_mix["Q4_K"] == QuantMixEntry(1, 256 * 512, 256 * 2 * 144)
    assert facts.quant_mix["F32"] == QuantMixEntry(2, 512 + 64 * 512, 4 * (512 + 64 * 512))


# -- split models ----------------------------------------------------------------------------


def _split_model(tmp_path: Path, order: range = range(5)) -> list[Path]:
    kv = {"general.name": "Split", "llama.context_length": 2048, "tokenizer.ggml.tokens": ["x", "y"]}
    tensors = [(f"blk.{i}.w", _f32(4, 32 * (i + 1))) for i in order]
    paths = write_gguf(tmp_path / "split.gguf", kv=kv, tensors=tensors, split_max_tensors=2)
    assert [p.name for p in paths] == [f"split-0000{i}-of-00003.gguf" for i in (1, 2, 3)]
    return paths


def test_split_model_facts_are_summed(tmp_path: Path) -> None:
    paths = _split_model(tmp_path)
    headers = [parse_file(p) for p in paths]
    facts = derive_facts(list(reversed(headers)))  # any order
    assert facts.parameter_count == sum(4 * 32 * (i + 1) for i in range(5))
    assert facts.tensor_count == 5 and facts.shard_count == 3
    assert facts.split == SplitInfo(no=0, count=3, tensors_count=5)
    assert facts.name == "Split" and facts.context_length == 2048 and facts.vocab_size == 2
    assert facts.header_bytes == sum(h.data_offset for h in headers)
    assert facts.file_size == sum(p.stat().st_size for p in paths)
    assert facts.quant_mix == {"F32": QuantMixEntry(5, facts.parameter_count, 4 * facts.parameter_count)}


def test_split_model_inconsistent(tmp_path: Path) -> None:
    headers = [parse_file(p) for p in _split_model(tmp_path)]
    with pytest.raises(InconsistentShards, match=r"expected 0\.\.2"):
        derive_facts(headers[:2])  # a shard missing
    with pytest.raises(InconsistentShards, match="shard 2 of a 3-shard split model alone"):
        derive_facts([headers[1]])
    with pytest.raises(InconsistentShards, match="expected 0"):
        derive_facts([headers[0], headers[1], headers[1]])  # one shard twice
    with pytest.raises(InconsistentShards, match=r"split\.count"):
        derive_facts([headers[0], parse_file(_single(tmp_path))])
    (tmp_path / "other").mkdir()
    other_headers = [parse_file(p) for p in _split_model(tmp_path / "other", range(4, -1, -1))]
    mixed = [headers[0], headers[1], other_headers[2]]  # its last shard holds blk.0.w again
    with pytest.raises(InconsistentShards, match="two shards"):
        derive_facts(mixed)  # same counts, but tensor names repeat
    with pytest.raises(InconsistentShards) as exc:
        derive_facts([_with_split_value(headers[0], "split.tensors.count", 6), headers[1], headers[2]])
    assert exc.value.code == "inconsistent_shards" and exc.value.field == "split.tensors.count"
    with pytest.raises(InconsistentShards, match=r"disagree on split\.count"):
        derive_facts([_with_split_value(headers[0], "split.count", 4), headers[1], headers[2]])


def _shard_header(no: int, count: int) -> GGUFHeader:
    b = HeaderBuilder()
    b.kv("general.architecture", ValueType.STRING, "llama")
    b.kv("split.no", ValueType.UINT16, no)
    b.kv("split.count", ValueType.UINT64, count)
    b.kv("split.tensors.count", ValueType.INT32, 0)
    data = b.build()
    return parse_header(data, file_size=len(data))


def test_split_count_beyond_the_shards_given_is_inconsistent_not_a_huge_list() -> None:
    # Two shards agreeing on a hostile split.count: the check of their split.no values
    # must not build a list of split.count numbers.
    headers = [_shard_header(0, 2**64 - 1), _shard_header(1, 2**64 - 1)]
    with pytest.raises(InconsistentShards, match=r"split\.no of the shards are") as exc:
        derive_facts(headers)
    assert exc.value.field == "split.no"


def _single(tmp_path: Path) -> Path:
    (path,) = write_gguf(tmp_path / "single.gguf", tensors=[("w", _f32(2, 32))])
    return path


def _with_split_value(header: GGUFHeader, key: str, value: int) -> GGUFHeader:
    fields = dict(header.fields)
    fields[key] = replace(fields[key], value=value)
    return replace(header, fields=fields)


def test_no_headers_is_an_error() -> None:
    with pytest.raises(GGUFError):
        derive_facts([])


def test_metadata_array_summaries(tmp_path: Path) -> None:
    kv = {
        "x.per_layer": (list(range(200)), gguf.GGUFValueType.ARRAY),  # kept: one value per block
        "x.many_numbers": (list(range(300)), gguf.GGUFValueType.ARRAY),
        "x.few_strings": ["s"] * 64,
        "x.many_strings": ["s"] * 65,
        "general.tags": [f"t{i}" for i in range(1000)],
    }
    (path,) = write_gguf(tmp_path / "a.gguf", kv=kv, tensors=[("w", _f32(2, 32))])
    facts = derive_facts([parse_file(path)])
    md = facts.metadata
    assert md["x.per_layer"] == list(range(200))
    assert md["x.many_numbers"] == {"type": "array", "element_type": "INT32", "count": 300}
    assert md["x.few_strings"] == ["s"] * 64
    assert md["x.many_strings"] == {"type": "array", "element_type": "STRING", "count": 65}
    assert facts.tags == tuple(f"t{i}" for i in range(256))  # bounded for the catalog row
