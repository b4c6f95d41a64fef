"""Catalog rows to JSON-ready dicts, in the shapes the OpenAPI document declares.

Crawls and verifications come as ORM objects; repos and artifacts as plain rows from
`reads` (attribute access by column name reads the same).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Row

from registry.api.reads import ArtifactDetail, QuantMixRow, ShardRow
from registry.catalog.lineage import EdgeView
from registry.catalog.models import Crawl, Verification
from registry.catalog.models import Facts as FactsRow
from registry.catalog.search import MEMORY_CONTEXT, capability_names, memory_at, severity_name
from registry.gguf.facts_model import modality_names
from registry.gguf.kvcache import KVCache
from registry.hub.http import resolve_url


def iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def finite(value: float | None) -> float | None:
    """JSON has no NaN or infinity; a diverged perplexity is reported as null."""
    return value if value is not None and math.isfinite(value) else None


def crawl(row: Crawl) -> dict[str, Any]:
    return {
        "id": row.id,
        "kind": row.kind,
        "status": row.status,
        "parameters": row.parameters or {},
        "counters": row.counters or {},
        "errors": row.errors or [],
        "started_at": iso(row.started_at),
        "heartbeat_at": iso(row.heartbeat_at),
        "finished_at": iso(row.finished_at),
        "url": f"/v1/crawls/{row.id}",
    }


def verification(row: Verification | Row[Any]) -> dict[str, Any]:
    return {
        "id": row.id,
        "artifact_id": row.artifact_id,
        "status": row.status,
        "reason": row.reason,
        "sha256": row.sha256,
        "tensors_checked": row.tensors_checked,
        "nonfinite_values": row.nonfinite_values,
        "perplexity": finite(row.perplexity),
        "generated": row.generated,
        "details": row.details or {},
        "timings": row.timings or {},
        "queued_at": iso(row.queued_at),
        "started_at": iso(row.started_at),
        "finished_at": iso(row.finished_at),
        "url": f"/v1/verifications/{row.id}",
    }


# Metadata values longer than this (huge strings, arrays that slipped through) are
# summarised: a detail page must stay small whatever a file's header holds.
MAX_INLINE_ITEMS = 64
MAX_INLINE_CHARS = 4096

# Facts kept in `facts.extra` that are shown elsewhere in the artifact body or summarised.
_EXTRA_ELSEWHERE = {"metadata", "chat_template", "chat_templates"}


def summarise(value: Any) -> Any:
    """A JSON value small enough to inline: long arrays and strings become a summary object."""
    if isinstance(value, list):
        if len(value) <= MAX_INLINE_ITEMS:
            return [summarise(v) for v in value]
        return {"summary": "array", "length": len(value), "head": [summarise(v) for v in value[:8]]}
    if isinstance(value, str) and len(value) > MAX_INLINE_CHARS:
        return {"summary": "string", "length": len(value), "head": value[:256]}
    if isinstance(value, dict):
        return {str(k): summarise(v) for k, v in value.items()}
    return value


def repo(row: Row[Any]) -> dict[str, Any]:
    return {
        "repo_id": row.repo_id,
        "source": row.source,
        "revision": row.revision,
        "last_modified": iso(row.last_modified),
        "downloads": row.downloads,
        "likes": row.likes,
        "tags": list(row.tags or []),
        "gated": row.gated,
        "card_license": row.card_license,
        "card_base_model": list(row.card_base_model or []),
        "card_base_model_relation": row.card_base_model_relation,
        "description": row.description,
        "indexed_at": iso(row.indexed_at),
        "url": f"/v1/repos/{row.repo_id}",
    }


def _summary(
    id_: int, repo_id: str, path: str, revision: str | None, status: str, error_code: str | None,
    error_message: str | None, architecture: str | None, parameter_count: int | None, file_type: str | None,
    size_label: str | None, license: str | None, context_length: int | None, expert_count: int | None,
    shard_count: int | None, file_size: int | None, downloads: int, likes: int, last_modified: Any,
    verification_status: str | None, chat_template_severity: str | None, memory: dict[str, int] | None,
    chat_template_capabilities: list[str] | None, kind: str | None, modalities: list[str] | None,
) -> dict[str, Any]:
    """The search-hit shape. Positional and written out as one literal: a page of 100 hits
    built through keyword arguments merged into a dict cost as much as encoding the page."""
    return {
        "id": id_, "repo": repo_id, "path": path, "revision": revision, "status": status,
        "error": {"code": error_code, "message": error_message} if status == "error" else None,
        "architecture": architecture, "parameter_count": parameter_count, "file_type": file_type,
        "size_label": size_label, "license": license, "context_length": context_length,
        "expert_count": expert_count, "shard_count": shard_count, "file_size": file_size,
        "downloads": downloads, "likes": likes, "last_modified": iso(last_modified),
        "verification_status": verification_status, "chat_template_severity": chat_template_severity,
        "chat_template_capabilities": chat_template_capabilities, "kind": kind, "modalities": modalities,
        "memory": memory, "url": f"/v1/artifacts/{id_}",
    }  # fmt: skip


def artifact_summary(row: Row[Any], repo_id: str) -> dict[str, Any]:
    """The search-hit shape, from an artifact row; `search_hit` builds the same from a search row."""
    return _summary(
        row.id, repo_id, row.path, row.revision, row.status, row.error_code, row.error_message,
        row.architecture, row.parameter_count, row.file_type, row.size_label, row.license, row.context_length,
        row.expert_count, row.shard_count, row.file_size, row.downloads, row.likes, row.last_modified,
        row.verification_status, severity_name(row.chat_template_max_severity), memory(row, MEMORY_CONTEXT),
        capability_names(row.chat_template_capabilities), row.kind, modality_names(row.modalities),
    )  # fmt: skip


def projector(row: Row[Any]) -> dict[str, Any]:
    """A projector beside an artifact, as its page lists it."""
    return {"id": row.id, "path": row.path, "file_size": row.file_size,
            "modalities": modality_names(row.modalities), "url": f"/v1/artifacts/{row.id}"}  # fmt: skip


def memory(row: Row[Any], tokens: int) -> dict[str, int] | None:
    """An artifact row's `memory`: the file plus its KV cache at `tokens` tokens (`memory_at`)."""
    return memory_at(row.file_size, row.context_length, row.kv_bytes_per_token, row.kv_swa_bytes_per_token,
                     row.kv_sliding_window, tokens)  # fmt: skip


def search_hit(row: Sequence[Any], memory_context: int) -> dict[str, Any]:
    """The search-hit shape from a `SearchPage` row (SearchItem's fields, then the severity
    rank, the KV cache columns, the capabilities' mask, the kind and the modalities' mask), its memory sized at
    `memory_context` tokens."""
    r = row
    return _summary(
        r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], r[9], r[10], r[11], r[12], r[13], r[14], r[15],
        r[16], r[17], r[18], r[19], severity_name(r[20]), memory_at(r[15], r[12], r[21], r[22], r[23], memory_context),
        capability_names(r[24]), r[25], modality_names(r[26]),
    )  # fmt: skip


_FACT_COLUMNS = tuple(c.name for c in FactsRow.__table__.columns if c.name not in ("artifact_id", "extra"))


def facts(values: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if values is None:
        return None
    out = {name: values[name] for name in _FACT_COLUMNS}
    out["bits_per_weight"] = finite(values["bits_per_weight"])
    extra = values["extra"] or {}
    out.update({k: summarise(v) for k, v in extra.items() if k not in _EXTRA_ELSEWHERE})
    return out


def quant_mix(rows: list[QuantMixRow]) -> list[dict[str, Any]]:
    ordered = sorted(rows, key=lambda q: (-q.bytes, q.tensor_type))
    return [{"tensor_type": q.tensor_type, "tensors": q.tensors, "elements": q.elements, "bytes": q.bytes}
            for q in ordered]  # fmt: skip


def shard(row: ShardRow, files: Files | None) -> dict[str, Any]:
    return {"path": row.path, "split_no": row.split_no, "size": row.size, "sha256": row.sha256,
            "header_bytes": row.header_bytes, "url": files.url(row.path) if files is not None else None}  # fmt: skip


@dataclass(frozen=True, slots=True)
class Files:
    """Where a hub repo's files are downloaded from: the hub the catalog crawls (`hub.endpoint`)
    at the commit the artifact was indexed at, so the bytes are those the catalog read."""

    endpoint: str
    repo_id: str
    revision: str

    @classmethod
    def of(cls, endpoint: str, source: str, repo_id: str, revision: str | None) -> Files | None:
        """None for a local folder's files (the server's own disk) and before any revision."""
        if source != "hub" or revision is None:
            return None
        return cls(endpoint, repo_id, revision)

    def url(self, path: str) -> str:
        return resolve_url(self.endpoint, self.repo_id, self.revision, path)


def file_match(row: Row[Any], endpoint: str) -> dict[str, Any]:
    """One file of the catalog that holds the bytes a sha256 names (`reads.files_with_sha256`)."""
    files = Files.of(endpoint, row.source, row.repo_id, row.revision)
    return {
        "repo": row.repo_id,
        "path": row.path,
        "split_no": row.split_no,
        "size": row.size,
        "revision": row.revision,
        "artifact": {"id": row.artifact_id, "path": row.artifact_path, "status": row.status},
        "url": files.url(row.path) if files is not None else None,
    }


def kv_cache_at(kv: Mapping[str, Any], tokens: int) -> dict[str, Any] | None:
    """`{"tokens", "bytes"}`: the stored KV cache estimate at `tokens` tokens
    (`KVCache.bytes_at`); None when the stored estimate is malformed."""
    per_token, swa_per_token, window = kv.get("bytes_per_token"), kv.get("swa_bytes_per_token", 0), kv.get("sliding_window")
    if not isinstance(per_token, int) or not isinstance(swa_per_token, int) or not isinstance(window, int | None):
        return None
    cache = KVCache(0, per_token, swa_bytes_per_token=swa_per_token, sliding_window=window)
    return {"tokens": tokens, "bytes": cache.bytes_at(tokens)}


def artifact_full(
    detail: ArtifactDetail, repo_id: str, latest: Verification | Row[Any] | None, *, with_metadata: bool,
    endpoint: str, source: str,
) -> dict[str, Any]:  # fmt: skip
    """An artifact with facts, quant mix, shards (with their download URLs from `endpoint`
    for a hub repo: `source`) and latest verification.

    `with_metadata` adds the scalar metadata and the chat template text (the single
    artifact page); the repo page leaves them out to stay small."""
    row = detail.row
    body = artifact_summary(row, repo_id)
    body["facts"] = facts(detail.facts)
    body["quant_mix"] = quant_mix(detail.quant_mix)
    files = Files.of(endpoint, source, repo_id, row.revision)
    body["shards"] = [shard(s, files) for s in detail.shards]
    body["latest_verification"] = verification(latest) if latest is not None else None
    # A column of the artifact row, so the repo page gets it at no extra query.
    body["chat_template_findings"] = row.chat_template_findings
    if with_metadata:
        extra = (detail.facts["extra"] or {}) if detail.facts is not None else {}
        body["chat_template"] = extra.get("chat_template")
        body["chat_templates"] = dict(extra.get("chat_templates") or {})
        body["metadata"] = summarise(dict(extra.get("metadata") or {}))
    return body


def edge(view: EdgeView) -> dict[str, Any]:
    return {
        "child": view.child,
        "parent": view.parent,
        "relation": view.relation,
        "source": view.source,
        "depth": view.depth,
        "child_in_catalog": view.child_in_catalog,
        "parent_in_catalog": view.parent_in_catalog,
    }
