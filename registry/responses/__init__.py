"""The API's shapes, declared once: a typed model (a msgspec `Struct`) per response body,
built by field name from catalog rows, encoded by `encode`; the words and bounds the API
and the command line share (`vocab`); the query parameters both read (`params`).

The API answers with these models, `/openapi.json` holds their JSON Schemas (`schema`),
`registry ... --json` prints the same models, and the web pages render them. Light to
import: neither aiohttp nor SQLAlchemy, so the command line builds its parser from here.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from registry.responses.artifacts import (
        Artifact,
        ArtifactError,
        ArtifactInRepo,
        ArtifactPage,
        ArtifactSummary,
        CompatFinding,
        Facets,
        Facts,
        FileMatch,
        FileMatches,
        KVCacheAt,
        KVCacheFacts,
        Memory,
        Projector,
        QuantMixEntry,
        Shard,
        TemplateFinding,
    )
    from registry.responses.base import Response, Summary, encode, encode_text
    from registry.responses.operations import (
        Crawl,
        CrawlPage,
        Error,
        ErrorBody,
        Health,
        Job,
        JobPage,
        Ready,
        Verification,
        WebhookIgnored,
    )
    from registry.responses.repos import Lineage, LineageEdge, Neighbours, Repo, RepoDetail

# Where each name lives: loaded on first use, so that the command line's parser, which reads
# `params` and `vocab` only, does not build every model class at start-up.
_HOMES = {
    "artifacts": ("Artifact", "ArtifactError", "ArtifactInRepo", "ArtifactPage", "ArtifactSummary", "CompatFinding",
                  "Facets", "Facts", "FileMatch", "FileMatches", "KVCacheAt", "KVCacheFacts", "Memory", "Projector",
                  "QuantMixEntry", "Shard", "TemplateFinding"),
    "base": ("Response", "Summary", "encode", "encode_text"),
    "operations": ("Crawl", "CrawlPage", "Error", "ErrorBody", "Health", "Job", "JobPage", "Ready", "Verification",
                   "WebhookIgnored"),
    "repos": ("Lineage", "LineageEdge", "Neighbours", "Repo", "RepoDetail"),
}  # fmt: skip
_MODULE_OF = {name: module for module, names in _HOMES.items() for name in names}


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


__all__ = [
    "Artifact", "ArtifactError", "ArtifactInRepo", "ArtifactPage", "ArtifactSummary", "CompatFinding", "Crawl", "CrawlPage", "Error",
    "ErrorBody", "Facets", "Facts", "FileMatch", "FileMatches", "Health", "Job", "JobPage", "KVCacheAt",
    "KVCacheFacts", "Lineage", "LineageEdge", "Memory", "Neighbours", "Projector", "QuantMixEntry", "Ready", "Repo",
    "RepoDetail", "Response", "Shard", "Summary", "TemplateFinding", "Verification", "WebhookIgnored", "encode",
    "encode_text",
]  # fmt: skip
