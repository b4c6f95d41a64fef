"""Catalog rows to the response models (`registry.responses`), with what the rows do not
hold: memory sized at a context (`catalog.search.memory.hit_memory`) and download URLs on the hub
the catalog crawls.

Rows are read by column name: search rows (`SearchPage.rows`), artifact rows and their
details (`reads`), ORM objects alike.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from registry.api.reads import ArtifactDetail, QuantMixRow, ShardRow
from registry.catalog.search import MEMORY_CONTEXT, SearchPage
from registry.catalog.search.memory import hit_memory, row_line
from registry.responses import (
    Artifact,
    ArtifactInRepo,
    ArtifactSummary,
    Facts,
    FileMatch,
    KVCacheAt,
    Memory,
    Projector,
    QuantMixEntry,
    Shard,
    TemplateFinding,
    Verification,
)
from registry.responses.artifacts import CompatFinding, FileArtifact, FindingCounts, HeaderRead
from registry.responses.base import summarised
from registry.responses.memory import memory_estimates, stored_profile


def memory(row: Any, tokens: int) -> Memory | None:
    """What an artifact row needs to run at `tokens` tokens, or at its own context_length
    when that is shorter (`hit_memory`); None without an estimate."""
    found = hit_memory(row, tokens)
    return None if found is None else Memory(**found)


def search_hits(page: SearchPage) -> list[ArtifactSummary]:
    """A search page's hits, their memory sized at the page's context."""
    tokens, rows = page.memory_context, cast(Sequence[Any], page.rows)
    return [ArtifactSummary.from_row(row, repo=row.repo_id, memory=memory(row, tokens)) for row in rows]


def quant_mix(rows: Iterable[QuantMixRow]) -> list[QuantMixEntry]:
    ordered = sorted(rows, key=lambda q: (-q.bytes, q.tensor_type))
    return [QuantMixEntry(tensor_type=q.tensor_type, tensors=q.tensors, elements=q.elements, bytes=q.bytes)
            for q in ordered]  # fmt: skip


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
        # Imported here: the hub client's module loads aiohttp, which `registry search` and
        # `registry show` of a local folder's files never need.
        from registry.hub.http import resolve_url

        return resolve_url(self.endpoint, self.repo_id, self.revision, path)


def shard(row: ShardRow, files: Files | None) -> Shard:
    return Shard(path=row.path, split_no=row.split_no, size=row.size, sha256=row.sha256,
                 header_bytes=row.header_bytes, url=files.url(row.path) if files is not None else None)  # fmt: skip


def file_match(row: Any, endpoint: str) -> FileMatch:
    """One file of the catalog that holds the bytes a sha256 names (`reads.files_with_sha256`)."""
    files = Files.of(endpoint, row.source, row.repo_id, row.revision)
    return FileMatch(
        repo=row.repo_id, path=row.path, split_no=row.split_no, size=row.size, revision=row.revision,
        artifact=FileArtifact(id=row.artifact_id, path=row.artifact_path, status=row.status),
        url=files.url(row.path) if files is not None else None,
    )  # fmt: skip


def _parts(
    detail: ArtifactDetail, repo_id: str, latest: Any, *, endpoint: str, source: str, tokens: int
) -> dict[str, Any]:
    """The fields an artifact on a repo page and on its own page share."""
    row = detail.row
    summary = ArtifactSummary.from_row(row, repo=repo_id, memory=memory(row, tokens))
    files = Files.of(endpoint, source, repo_id, row.revision)
    return {
        **{name: getattr(summary, name) for name in summary.__struct_fields__},
        # The memory line as the search reads it: the row's own columns, not derived again.
        "facts": Facts.from_row(detail.facts, row_line(row)) if detail.facts is not None else None,
        "quant_mix": quant_mix(detail.quant_mix),
        "shards": [shard(s, files) for s in detail.shards],
        "latest_verification": Verification.from_row(latest) if latest is not None else None,
        "header_read": HeaderRead.from_row(row),
        "runs_in_llama_cpp": row.runs_in_llama_cpp,
        # A column of the artifact row, so the repo page gets it at no extra query.
        "chat_template_findings": TemplateFinding.list_from(row.chat_template_findings),
    }


def artifact_in_repo(
    detail: ArtifactDetail, repo_id: str, latest: Any, finding_counts: Mapping[str, int], *, endpoint: str,
    source: str,
) -> ArtifactInRepo:  # fmt: skip
    """An artifact as its repo's page lists it: facts, quant mix, shards (with their download
    URLs from `endpoint` for a hub repo: `source`), latest verification and its llama.cpp
    findings counted by severity (`reads.finding_counts`)."""
    parts = _parts(detail, repo_id, latest, endpoint=endpoint, source=source, tokens=MEMORY_CONTEXT)
    return ArtifactInRepo(**parts, llama_cpp_finding_counts=_counts(finding_counts))


def _counts(by_severity: Mapping[str, int]) -> FindingCounts:
    return FindingCounts(**{s: int(by_severity.get(s, 0)) for s in FindingCounts.__struct_fields__})


def artifact(
    detail: ArtifactDetail, latest: Any, projectors: Sequence[Any], findings: Sequence[Any], *, endpoint: str,
    context: int | None, memory_options: Mapping[str, Any] | None = None,
) -> Artifact:  # fmt: skip
    """One artifact in full (a `reads.get_artifact` detail): with its metadata, chat templates
    and the projectors beside it. `memory`, `memory_estimate` and `facts.kv_cache.at_context`
    are sized at one number of tokens: `context` (default MEMORY_CONTEXT), or the model's own
    context_length when that is shorter; `at_context` only when a context is asked for.
    `memory_options`: the estimate's `batch`, `cache_type` and `flash_attention`."""
    row = detail.row
    parts = _parts(detail, row.repo_name, latest, endpoint=endpoint, source=row.repo_source,
                   tokens=MEMORY_CONTEXT if context is None else context)  # fmt: skip
    facts: Facts | None = parts["facts"]
    sized: Memory | None = parts["memory"]
    if context is not None and facts is not None and facts.kv_cache is not None and sized is not None:
        kv = facts.kv_cache
        kv.at_context = KVCacheAt(tokens=sized.tokens, bytes=kv.bytes_at(sized.tokens))
    extra = (detail.facts["extra"] or {}) if detail.facts is not None else {}
    profile = stored_profile(extra)
    estimates = None
    if profile is not None and sized is not None:
        estimates = memory_estimates(profile, sized.tokens, **(memory_options or {}))
    templates = extra.get("chat_templates")
    return Artifact(
        **parts,
        chat_template=extra.get("chat_template"),
        chat_templates={str(k): str(v) for k, v in templates.items()} if isinstance(templates, dict) else {},
        metadata=summarised(dict(extra.get("metadata") or {})),
        projectors=[Projector.from_row(p) for p in projectors],
        llama_cpp_findings=[CompatFinding(code=f.code, severity=f.severity, field=f.field, message=f.message)
                            for f in findings],
        llama_cpp_finding_counts=_counts(Counter(f.severity for f in findings)),
        memory_estimate=estimates,
    )  # fmt: skip
