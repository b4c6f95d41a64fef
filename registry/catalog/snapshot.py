"""What a writer hands to the catalog: one repo at one revision, with its artifacts.

Plain frozen data, no database types, so the hub crawler and `registry index` build the
same thing and `registry.catalog.services.upsert_repo_snapshot` is the only writer.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from registry.gguf.compat import CompatFinding
from registry.gguf.facts_model import Facts
from registry.gguf.tensor_index import TensorIndex
from registry.safety.findings import Finding

# What this release derives from headers, as a number: raise it when a release derives
# more or other columns from the same bytes (a new column, a fixed reading). A repo
# written with a lower number, or before repos carried one (NULL), is read again by the
# next crawl or index that names it, even at the revision indexed, and written in full;
# a repo at this number and its revision is skipped as unchanged. One re-read per repo
# and release, where `crawl --full` re-reads everything every time. Raising it is all a
# release does to have what it derives reach old rows; no migration is needed for that.
# CHANGELOG.md says what each number added.
DERIVATION = 5


@dataclass(frozen=True, slots=True)
class ShardRecord:
    path: str
    size: int | None = None
    sha256: str | None = None  # LFS oid from the hub; taken from a local file by `registry index`
    header_bytes: int | None = None
    split_no: int = 0


@dataclass(frozen=True, slots=True)
class ArtifactError:
    code: str
    message: str


@dataclass(frozen=True, slots=True)
class ArtifactRecord:
    """One logical model: `path` is the single file or the first shard; facts XOR error."""

    path: str
    shards: tuple[ShardRecord, ...]
    facts: Facts | None = None
    error: ArtifactError | None = None
    # Chat template safety findings, worst first. () is "scanned and clean" (a file without
    # a template is clean too); None is "not scanned" (error rows, or the sandbox could not
    # run), which must never read as clean.
    chat_template_findings: tuple[Finding, ...] | None = None
    # What the templates can do (registry.safety.capabilities); None: not probed.
    chat_template_capabilities: frozenset[str] | None = None
    # llama.cpp compatibility findings (registry.gguf.compat and registry.safety.compat), worst
    # first; error rows carry the finding their error stands for. None: not checked.
    llama_cpp_findings: tuple[CompatFinding, ...] | None = None
    # sha256 of the chat template's render of a standard conversation (registry.safety.compat).
    chat_template_render_sha256: str | None = None
    # How the header was read (registry.hub.siblings.HeaderRead); None: not recorded (local
    # files, error rows).
    header_read: str | None = None  # "full" | "sibling"
    header_leader: str | None = None  # the leader's path, for "sibling"
    header_samples: int | None = None  # ranges sampled, for "sibling"
    # The tensor table (registry.gguf.tensor_index); None: not read (error rows).
    tensor_index: TensorIndex | None = None

    def __post_init__(self) -> None:
        if (self.facts is None) == (self.error is None):
            raise ValueError(f"{self.path}: an artifact record carries facts or an error, exactly one")


@dataclass(frozen=True, slots=True)
class LineageRecord:
    parent_repo_id: str
    relation: str  # quantized | finetune | adapter | merge | unknown
    source: str  # gguf | card | tags


@dataclass(frozen=True, slots=True)
class RepoSnapshot:
    repo_id: str
    revision: str
    artifacts: tuple[ArtifactRecord, ...] = ()
    source: str = "hub"
    last_modified: datetime | None = None
    downloads: int = 0
    likes: int = 0
    tags: tuple[str, ...] = ()
    gated: bool = False
    card_license: str | None = None
    card_base_model: tuple[str, ...] = ()
    card_base_model_relation: str | None = None
    description: str | None = None
    local_path: str | None = None
    # None: derive edges from the card, the tags and the GGUF base_model keys.
    lineage: tuple[LineageRecord, ...] | None = None
    # False: a partial view (single files given to `registry index`): artifacts not listed
    # are left alone instead of being marked gone.
    complete: bool = True
    # Rewrite the artifacts even when this revision is already indexed (`--full`: after an
    # upgrade derives more or other facts); without it the same revision twice writes
    # nothing but changed repo counters. An older commit than the one indexed is still refused.
    force: bool = False


@dataclass(frozen=True, slots=True)
class UpsertResult:
    repo_pk: int
    created: bool  # the repo row is new
    unchanged: bool  # same revision as already indexed: only repo counters may have moved
    written: int  # artifacts inserted or rewritten
    gone: int  # artifacts marked gone
    edges: int  # lineage edges of the repo after the write
    deleted: bool = False  # the hub no longer has the repo: every artifact marked gone
    # Written again at the revision indexed because an older release wrote it (DERIVATION)
    rederived: bool = False
