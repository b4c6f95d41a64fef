"""The GGUF naming convention, hub-style quant labels, shard names and artifact grouping."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from registry.gguf.filename import (
    GGUFFilename,
    ShardGroup,
    group_shards,
    parse_filename,
    parse_shard,
    quant_label_from_filename,
)

# The spec's own examples with its expected parses (ggml docs/gguf.md, "GGUF Naming Convention").
SPEC_EXAMPLES = {
    "Mixtral-8x7B-v0.1-KQ2.gguf": GGUFFilename(
        basename="Mixtral", size_label="8x7B", finetune=None, version="v0.1", encoding="KQ2", expert_count=8
    ),
    "Grok-100B-v1.0-Q4_0-00003-of-00009.gguf": GGUFFilename(
        basename="Grok",
        size_label="100B",
        finetune=None,
        version="v1.0",
        encoding="Q4_0",
        shard_index=3,
        shard_count=9,
    ),
    "Hermes-2-Pro-Llama-3-8B-v1.0-F16.gguf": GGUFFilename(
        basename="Hermes-2-Pro-Llama-3", size_label="8B", finetune=None, version="v1.0", encoding="F16"
    ),
    "Phi-3-mini-3.8B-ContextLength4k-instruct-v1.0.gguf": GGUFFilename(
        basename="Phi-3-mini", size_label="3.8B-ContextLength4k", finetune="instruct", version="v1.0"
    ),
    "mtp-Qwen3-27B-v1.0-Q4_K_M.gguf": GGUFFilename(
        basename="Qwen3", size_label="27B", finetune=None, version="v1.0", encoding="Q4_K_M", sidecar="mtp"
    ),
    "mmproj-Qwen2-VL-7B-v1.0-F16.gguf": GGUFFilename(
        basename="Qwen2-VL", size_label="7B", finetune=None, version="v1.0", encoding="F16", sidecar="mmproj"
    ),
}


@pytest.mark.parametrize("name", list(SPEC_EXAMPLES))
def test_spec_examples(name: str) -> None:
    assert parse_filename(name) == SPEC_EXAMPLES[name]


@pytest.mark.parametrize(
    "name",
    [
        "not-a-known-arrangement.gguf",
        "Hermes-2-Pro-Llama-3-8B-F16.gguf",  # no version: the spec's validation rejects it
        "qwen2.5-1.5b-instruct-q5_k_m.gguf",
        "Model-7B-v1.0-Q4_0.bin",
        "Grok-100B-v1.0-Q4_0-00000-of-00009.gguf",  # shards count from 00001
        "Grok-100B-v1.0-Q4_0-00010-of-00009.gguf",
        "Model-7B-v1.0-UD-Q4_K_XL.gguf",  # an encoding is one token
        "-7B-v1.0.gguf",
    ],
)
def test_not_the_convention(name: str) -> None:
    assert parse_filename(name) is None


def test_convention_details() -> None:
    lora = parse_filename("Llama-3-8B-Instruct-v1.0-Q8_0-LoRA.gguf")
    assert lora is not None
    assert (lora.basename, lora.size_label, lora.finetune, lora.encoding, lora.type) == (
        "Llama-3",
        "8B",
        "Instruct",
        "Q8_0",
        "LoRA",
    )
    vocab = parse_filename("dir/Phi-3-4B-v2-vocab.gguf")
    assert vocab == GGUFFilename(basename="Phi-3", size_label="4B", finetune=None, version="v2", type="vocab")
    assert parse_filename("Phi-3-v2.gguf") is None  # a size label is required
    # A version-looking fine-tune before the real version: the last version wins.
    late = parse_filename("Foo-7B-v2-chat-v1.0.gguf")
    assert late is not None and (late.finetune, late.version) == ("v2-chat", "v1.0")


# The spec's reference regex, in Python syntax, to check the parser agrees with it on names
# the spec's examples do not cover.
SPEC_REGEX = re.compile(
    r"^(?:(?P<Sidecar>mmproj|mtp)-)?(?P<BaseName>[A-Za-z0-9\s]*(?:(?:-(?:(?:[A-Za-z\s][A-Za-z0-9\s]*)|(?:[0-9\s]*)))*))"
    r"-(?:(?P<SizeLabel>(?:\d+x)?(?:\d+\.)?\d+[A-Za-z](?:-[A-Za-z]+(\d+\.)?\d+[A-Za-z]+)?)(?:-(?P<FineTune>[A-Za-z0-9\s-]+))?)?"
    r"-(?:(?P<Version>v\d+(?:\.\d+)*))(?:-(?P<Encoding>(?!LoRA|vocab)[\w_]+))?(?:-(?P<Type>LoRA|vocab))?"
    r"(?:-(?P<Shard>\d{5}-of-\d{5}))?\.gguf$",
    re.ASCII,
)

MORE_NAMES = [
    "Llama-3.1-8B-v1.0.gguf",
    "Llama-3-8B-Instruct-v1.0-Q4_K_M.gguf",
    "Mistral-Nemo-Instruct-v1.0.gguf",
    "Qwen2-0.5B-Chat-v2.5-IQ2_XXS-00001-of-00002.gguf",
    "DeepSeek-V3-671B-v3-BF16-00012-of-00030.gguf",
    "mmproj-Gemma-3-4B-v1.0-F16.gguf",
    "Yi-1-5-34B-Chat-16K-v1.0-Q5_K_S.gguf",
    "A-B-C-1x2M-Long4k-x-y-v0.1.2-Q2_K-vocab.gguf",
    "Model-7B-v1-v2.gguf",
    "Model-v1.0-LoRA.gguf",
    "Foo-Bar-v3.gguf",
    "foo-7b-chat-v1.0-f16.gguf",
    "Model-7B-v1.0-Q4_0-00001-of-00001.gguf",
    "a-7B-v1.0-Q4_0-LoRA-00001-of-00002.gguf",
    "Hermes-2-Pro-Llama-3-8B-F16.gguf",
    "Model-8x7B-Instruct-v0.1-LoRA.gguf",
    "Model-7B-v1.0-vocabulary.gguf",
    "mtp-7b-v1.0.gguf",  # no sidecar after all: a model named "mtp"
    "mmproj-7b-mtp-Pro-3-mini-v2-F16.gguf",
    "mmproj-8x7B-KQ2-Llama-3-v2-v1.0-mmproj.gguf",
]


@pytest.mark.parametrize("name", list(SPEC_EXAMPLES) + MORE_NAMES + ["not-a-known-arrangement.gguf"])
def test_agrees_with_spec_regex(name: str) -> None:
    m = SPEC_REGEX.match(name)
    got = parse_filename(name)
    if m is None:
        assert got is None
        return
    assert got is not None
    shard = f"{got.shard_index:05d}-of-{got.shard_count:05d}" if got.shard_index else None
    assert (
        got.sidecar,
        got.basename,
        got.size_label,
        got.finetune,
        got.version,
        got.encoding,
        got.type,
        shard,
    ) == (
        m["Sidecar"],
        m["BaseName"],
        m["SizeLabel"],
        m["FineTune"],
        m["Version"],
        m["Encoding"],
        m["Type"],
        m["Shard"],
    )


@pytest.mark.parametrize(
    ("name", "label"),
    [
        ("qwen2.5-1.5b-instruct-q5_k_m.gguf", "Q5_K_M"),
        ("Qwen3-30B-A3B-UD-Q4_K_XL.gguf", "UD-Q4_K_XL"),
        ("Qwen3-30B-A3B-UD-Q4_K_XL-00001-of-00002.gguf", "UD-Q4_K_XL"),
        ("gpt-oss-20b-MXFP4.gguf", "MXFP4"),
        ("gpt-oss-120b-MXFP4_MOE.gguf", "MXFP4_MOE"),
        ("Llama-3.2-1B-Instruct-IQ2_XXS.gguf", "IQ2_XXS"),
        ("phi-2-f16.gguf", "F16"),
        ("phi-2-fp16.gguf", "F16"),
        ("gemma-2-2b-it-bf16.gguf", "BF16"),
        ("Mistral-7B-Instruct-v0.3.Q8_0.gguf", "Q8_0"),
        ("llama-2-7b.Q4_0_4_4.gguf", "Q4_0_4_4"),
        ("SmolLM2-135M-Instruct.Q4_1.gguf", "Q4_1"),
        ("gemma-3-270m-q4_k_m.gguf", "Q4_K_M"),
        ("Q4_K_M/model-Q4_K_M-00001-of-00003.gguf", "Q4_K_M"),
        ("bitnet-TQ1_0.gguf", "TQ1_0"),
        ("model.i1-IQ3_M.gguf", "IQ3_M"),
        ("ggml-model-f32.gguf", "F32"),
        ("README.gguf", None),
        ("mmproj-model.gguf", None),
        ("Qwen2-VL-7B.gguf", None),
    ],
)
def test_quant_label_from_filename(name: str, label: str | None) -> None:
    assert quant_label_from_filename(name) == label


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("model-00001-of-00003.gguf", ("model", 1, 3)),
        ("dir/Q8_0/big-model-Q8_0-00003-of-00003.gguf", ("dir/Q8_0/big-model-Q8_0", 3, 3)),
        ("model-00001-of-00001.gguf", ("model", 1, 1)),
        ("model-00000-of-00003.gguf", None),
        ("model-00004-of-00003.gguf", None),
        ("model-1-of-3.gguf", None),
        ("model-00001-of-00003.bin", None),
        ("model.gguf", None),
    ],
)
def test_parse_shard(name: str, expected: tuple[str, int, int] | None) -> None:
    assert parse_shard(name) == expected


def test_group_shards() -> None:
    paths = [
        "big/model-Q8_0-00002-of-00003.gguf",
        "single-Q4_K_M.gguf",
        "big/model-Q8_0-00001-of-00003.gguf",
        "big/model-Q8_0-00003-of-00003.gguf",
        "big/model-Q8_0-00001-of-00003.gguf",  # listed twice: counts once
        "half-00002-of-00002.gguf",
        "README.md",
        "odd-00001-of-00002.gguf",
        "odd-00001-of-00003.gguf",
    ]
    groups = group_shards(paths)
    assert groups == [
        ShardGroup(
            stem="big/model-Q8_0",
            paths=(
                "big/model-Q8_0-00001-of-00003.gguf",
                "big/model-Q8_0-00002-of-00003.gguf",
                "big/model-Q8_0-00003-of-00003.gguf",
            ),
            count=3,
            indices=(1, 2, 3),
        ),
        ShardGroup(stem="half", paths=("half-00002-of-00002.gguf",), count=2, indices=(2,)),
        ShardGroup(stem="odd", paths=("odd-00001-of-00002.gguf",), count=2, indices=(1,)),
        ShardGroup(stem="odd", paths=("odd-00001-of-00003.gguf",), count=3, indices=(1,)),
        ShardGroup(stem="single-Q4_K_M", paths=("single-Q4_K_M.gguf",), count=1),
    ]
    assert [g.complete for g in groups] == [True, False, False, False, True]
    assert [g.is_split for g in groups] == [True, True, True, True, False]
    assert groups[1].missing == (1,) and groups[3].missing == (2, 3) and groups[0].missing == ()


_PIECES = [
    "Llama", "3", "mini", "Hermes", "2", "Pro", "v2", "v1.0", "v0.1.2", "7B", "8x7B", "3.8B", "100M",
    "ContextLength4k", "Instruct", "chat", "Q4_K_M", "F16", "KQ2", "UD", "LoRA", "vocab", "vocabulary",
    "00001-of-00002", "mmproj", "mtp", "7b", "A3B", "1.5", "x",
]  # fmt: skip


@given(st.lists(st.sampled_from(_PIECES), min_size=1, max_size=8))
@settings(max_examples=1000, deadline=None)
def test_agrees_with_spec_regex_on_generated_names(pieces: list[str]) -> None:
    test_agrees_with_spec_regex("-".join(pieces) + ".gguf")
