"""A small catalog with every feature the API shows: lineage chains, shards, an error
artifact, a mixture of experts, a chat template and oversized metadata."""

from __future__ import annotations

from datetime import UTC, datetime

from registry.catalog.snapshot import RepoSnapshot
from registry.gguf.facts_model import BaseModel, QuantMixEntry
from registry.gguf.kvcache import KVCache
from tests.catalog.factories import artifact, error_artifact, make_facts, make_snapshot

TEMPLATE = "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{% endfor %}"


def sample_catalog() -> list[RepoSnapshot]:
    iq2 = {"IQ2_XS": QuantMixEntry(100, 10**9, 3 * 10**8), "F32": QuantMixEntry(10, 10, 40)}
    return [
        make_snapshot(
            "meta-llama/Llama-3-8B", downloads=1000, likes=50, card_license="llama3",
            last_modified=datetime(2024, 5, 1, tzinfo=UTC),
            artifacts=(artifact("llama-3-8b-f16.gguf", make_facts(
                name="Llama 3 8B", parameter_count=8_000_000_000, size_label="8B", file_type="F16",
                license="llama3", context_length=8192, quant_mix={"F16": QuantMixEntry(200, 8 * 10**9, 16 * 10**9)},
                chat_template=TEMPLATE, chat_template_sha256="cd" * 32,
                kv_cache=KVCache(32, 131072, at_context_length=8192 * 131072),  # 32 x 8 heads x 256 x 2 bytes
                metadata={"general.architecture": "llama", "general.name": "Llama 3 8B",
                          "tokenizer.ggml.tokens": [f"t{i}" for i in range(1000)],
                          "general.description": "x" * 10_000},
            ), size=16_000),),
        ),
        make_snapshot(
            "bartowski/Llama-3-8B-GGUF", downloads=500, likes=20, card_base_model=("meta-llama/Llama-3-8B",),
            card_base_model_relation="quantized", card_license="llama3",
            artifacts=(
                *(
                    artifact(f"Llama-3-8B-{ft}.gguf", make_facts(
                        name="Llama 3 8B", parameter_count=8_000_000_000, size_label="8B", file_type=ft,
                        license="llama3", context_length=8192, quant_mix=iq2 if ft == "IQ2_XS" else {},
                        base_models=(BaseModel(name="Llama 3 8B", repo_id="meta-llama/Llama-3-8B"),),
                    ), size=size)
                    for ft, size in (("Q4_K_M", 4800), ("IQ2_XS", 2500), ("Q8_0", 8500))
                ),
                error_artifact("broken.gguf"),
            ),
        ),
        make_snapshot(
            "someone/llama-3-8b-finetune-GGUF", downloads=5, card_base_model=("bartowski/Llama-3-8B-GGUF",),
            card_base_model_relation="finetune", card_license="mit",
            artifacts=(artifact("ft.gguf", make_facts(name="Funny Tune", parameter_count=8_000_000_000,
                                                         file_type="Q4_K_M", license=None)),),
        ),
        make_snapshot(
            "mistralai/Mixtral-8x7B-GGUF", downloads=800, likes=80, card_license="apache-2.0",
            description="A sparse mixture of experts",
            artifacts=(artifact("mixtral.gguf", make_facts(
                architecture="llama", name="Mixtral", parameter_count=46_700_000_000, size_label="8x7B",
                expert_count=8, context_length=32768, file_type="Q4_K_M",
            ), shards=2, size=13_000),),
        ),
        make_snapshot(
            "qwen/Qwen2-0.5B-GGUF", downloads=300, likes=30, tags=("gguf", "base_model:quantized:qwen/Qwen2-0.5B"),
            artifacts=(
                artifact("qwen2-0_5b-q8_0.gguf", make_facts(architecture="qwen2", name="Qwen2 0.5B",
                                                           parameter_count=500_000_000, size_label="0.5B",
                                                           file_type="Q8_0", context_length=32768)),
            ),
        ),
    ]  # fmt: skip


INDEXED_ARTIFACTS = 7  # artifacts with status "indexed" above
