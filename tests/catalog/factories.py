"""Builders of snapshots and facts for tests, with plausible defaults."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from registry.catalog.snapshot import ArtifactError, ArtifactRecord, RepoSnapshot, ShardRecord
from registry.gguf.facts_model import BaseModel, Facts, QuantMixEntry


def make_facts(**overrides: Any) -> Facts:
    values: dict[str, Any] = {
        "architecture": "llama",
        "name": "Tiny Llama",
        "basename": "tiny-llama",
        "size_label": "1B",
        "size_label_source": "file",
        "parameter_count": 1_100_000_000,
        "license": "apache-2.0",
        "file_type": "Q4_K_M",
        "file_type_source": "file",
        "quant_mix": {
            "Q4_K": QuantMixEntry(tensors=150, elements=1_000_000_000, bytes=560_000_000),
            "F32": QuantMixEntry(tensors=45, elements=100_000, bytes=400_000),
        },
        "context_length": 4096,
        "embedding_length": 2048,
        "block_count": 22,
        "tokenizer_model": "llama",
        "vocab_size": 32000,
        "tensor_count": 195,
        "kv_count": 24,
        "header_bytes": 700_000,
        "metadata": {"general.architecture": "llama"},
    }
    values.update(overrides)
    return Facts(**values)


def artifact(path: str, facts: Facts | None = None, *, size: int = 1000, shards: int = 1) -> ArtifactRecord:
    if shards > 1:
        stem = path.removesuffix(".gguf")
        paths = [f"{stem}-{i:05d}-of-{shards:05d}.gguf" for i in range(1, shards + 1)]
    else:
        paths = [path]
    records = tuple(
        ShardRecord(p, size=size, sha256="ab" * 32, header_bytes=1234, split_no=i)
        for i, p in enumerate(paths)
    )
    return ArtifactRecord(paths[0], records, facts=facts or make_facts())


def error_artifact(path: str, code: str = "bad_magic", message: str = "not a GGUF file") -> ArtifactRecord:
    return ArtifactRecord(path, (ShardRecord(path, size=10),), error=ArtifactError(code, message))


def make_snapshot(repo_id: str = "org/model-GGUF", revision: str = "rev1", **overrides: Any) -> RepoSnapshot:
    values: dict[str, Any] = {
        "artifacts": (artifact("model-Q4_K_M.gguf"),),
        "last_modified": datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC),
        "downloads": 100,
        "likes": 5,
        "tags": ("gguf", "text-generation"),
        "card_license": "apache-2.0",
    }
    values.update(overrides)
    return RepoSnapshot(repo_id=repo_id, revision=revision, **values)


__all__ = ["BaseModel", "artifact", "error_artifact", "make_facts", "make_snapshot"]
