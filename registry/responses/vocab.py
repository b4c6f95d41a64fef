"""The words and bounds the API and the command line speak: statuses, sort keys, facet
names, capability and severity names, and the limits of their parameters.

Light to import (the standard library and the format core's plain modules), so that the
command line can build its parser from them without loading the catalog. The catalog keeps
its own copies of the stored values (its check constraints); `tests/api/test_vocab.py`
keeps every tuple here equal to the one of the part that stores or derives it.
"""

from __future__ import annotations

from registry.gguf.compat.codes import CODES
from registry.gguf.facts_model import KINDS, MODALITIES

# Artifacts, repos, verifications, crawls and jobs: catalog.models.
REPO_SOURCES = ("hub", "local")
ARTIFACT_STATUSES = ("indexed", "error", "gone")
STATUSES = (*ARTIFACT_STATUSES, "all")  # what the status filter takes
VERIFICATION_STATUSES = ("queued", "running", "passed", "failed", "skipped")
LINEAGE_RELATIONS = ("quantized", "finetune", "adapter", "merge", "unknown")
LINEAGE_SOURCES = ("gguf", "card", "tags")
CRAWL_KINDS = ("hub", "local")
CRAWL_STATUSES = ("running", "finished", "failed", "cancelled")
JOB_KINDS = ("crawl", "index_repo", "verify")
JOB_STATES = ("queued", "running", "failed", "done")
# One part of a hub repo id (owner or name), as the hub allows it: catalog.models.REPO_PART.
REPO_PART = r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}"
REPO_ID_LENGTH = 300  # catalog.models.REPO_ID_LENGTH

# Chat templates: registry.safety.
SEVERITIES = ("info", "low", "medium", "high", "critical")
CAPABILITIES = ("system", "tools", "tool_calls", "thinking", "parallel_tool_calls")

# llama.cpp compatibility: registry.gguf.compat.
FINDING_CODES = tuple(c.code for c in CODES)
FINDING_SEVERITIES = ("error", "warning", "info")
RUNTIMES = ("llama.cpp",)  # what `runs_in` takes

# Search: catalog.search. Sort keys with their aliases, each optionally `:asc` or `:desc`.
SORT_KEYS = ("downloads", "likes", "last_modified", "parameter_count", "file_size", "name", "memory")
SORT_ALIASES = {"modified": "last_modified", "params": "parameter_count", "size": "file_size"}
SORT_CHOICES = tuple(f"{key}{suffix}" for key in (*SORT_KEYS, *SORT_ALIASES) for suffix in ("", ":asc", ":desc"))
DEFAULT_SORT = "downloads"
FACETS = ("architecture", "license", "file_type", "size_bucket")  # counted unless others are named
FACET_NAMES = (*FACETS, "kind", "verification", "capability")
MAX_LIMIT = 200  # the largest page a search serves
MEMORY_CONTEXT = 4096  # the context memory is sized at unless a query names one
MAX_MEMORY_CONTEXT = 1 << 40
MAX_SIZE_DIFFERENCE = 128  # registry.gguf.vocab: tokens more or fewer a draft model may have

# Lineage: catalog.lineage.
DIRECTIONS = ("ancestors", "descendants", "both")
MAX_DEPTH = 10
DEFAULT_DEPTH = 3
MAX_EDGES = 1000

# Numbers a database column holds: a value beyond them is refused before it reaches one.
BIGINT_MAX = 2**63 - 1
INT_MAX = 2**31 - 1

__all__ = [
    "ARTIFACT_STATUSES",
    "BIGINT_MAX",
    "CAPABILITIES",
    "CRAWL_KINDS",
    "CRAWL_STATUSES",
    "DEFAULT_DEPTH",
    "DEFAULT_SORT",
    "DIRECTIONS",
    "FACETS",
    "FACET_NAMES",
    "FINDING_CODES",
    "FINDING_SEVERITIES",
    "INT_MAX",
    "JOB_KINDS",
    "JOB_STATES",
    "KINDS",
    "LINEAGE_RELATIONS",
    "LINEAGE_SOURCES",
    "MAX_DEPTH",
    "MAX_EDGES",
    "MAX_LIMIT",
    "MAX_MEMORY_CONTEXT",
    "MAX_SIZE_DIFFERENCE",
    "MEMORY_CONTEXT",
    "MODALITIES",
    "REPO_ID_LENGTH",
    "REPO_PART",
    "REPO_SOURCES",
    "RUNTIMES",
    "SEVERITIES",
    "SORT_ALIASES",
    "SORT_CHOICES",
    "SORT_KEYS",
    "STATUSES",
    "VERIFICATION_STATUSES",
]  # fmt: skip
