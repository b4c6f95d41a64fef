"""The catalog schema: typed SQLAlchemy 2 models.

Layout decisions (see also the package doc, `registry/catalog/__init__.py`):

* A local folder is a pseudo-repo: `repos.source = 'local'` and a repo id `local/<folder>`
  (Hugging Face and LM Studio cache layouts keep their real `org/name`).
* `artifacts` is the search row. Besides the artifact's own state it carries a copy of the
  facts and repo values that search filters and sorts on, written in the same transaction
  as the facts, so each filter and every sort is a single-table query with a `(key, id)`
  index for keyset pagination. `facts` keeps every derived fact.
* Enums are short strings guarded by check constraints, which read the same on both databases.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Computed,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    SmallInteger,
    String,
    Text,
    UniqueConstraint,
    null,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship
from sqlalchemy.types import JSON

from registry.catalog.folding import ascii_lower
from registry.catalog.memory_sql import memory_at_sql
from registry.catalog.types import EPOCH, BigId, Json, UTCDateTime, metadata, utcnow

REPO_SOURCES = ("hub", "local")
ARTIFACT_STATUSES = ("indexed", "error", "gone")
LINEAGE_RELATIONS = ("quantized", "finetune", "adapter", "merge", "unknown")
LINEAGE_SOURCES = ("gguf", "card", "tags")
VERIFICATION_STATUSES = ("queued", "running", "passed", "failed", "skipped")
FINDING_SEVERITIES = ("error", "warning", "info")  # registry.gguf.compat.codes.SEVERITIES
CRAWL_KINDS = ("hub", "local")
CRAWL_STATUSES = ("running", "finished", "failed", "cancelled")
JOB_KINDS = ("crawl", "index_repo", "verify")
JOB_STATUSES = ("queued", "running", "failed", "done")
# reserved: counted in its crawl's pending_jobs, job not yet queued; queued: its job id known;
# reported: its job added its outcome; skipped: another crawl's job had the repo (released
# at once); lost: its job ended without reporting and the sweep released it as failed.
CRAWL_REPO_STATES = ("reserved", "queued", "reported", "skipped", "lost")

REPO_ID_LENGTH = 300
# One part of a hub repo id, the owner or the name, as the hub allows them: ASCII letters,
# digits, `-`, `_`, `.`, led by a letter or digit, at most 96 characters.
REPO_PART = r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}"
PATH_LENGTH = 1000
SORT_NAME_LENGTH = REPO_ID_LENGTH + PATH_LENGTH + 1  # "repo/path"


def repo_key(repo_id: str) -> str:
    """The identity of a repo id: ASCII letters folded to lower case, nothing else changed.

    The hub resolves repo ids regardless of case, and lineage sources spell them as they
    please: `general.base_model.0.organization = "Meta Llama"` gives `Meta-Llama/...` where
    the hub says `meta-llama/...`. Lineage and repo lookups match on this key; the spelling
    stays as written. Only A-Z are folded, the same on both databases (SQLite's lower()
    folds only those; the migration folds the same letters on PostgreSQL)."""
    return ascii_lower(repo_id)


def _key_of(column: str) -> Any:
    """A column default: repo_key() of the row's `column`, so every insert fills the key."""

    def default(context: Any) -> str | None:
        value = context.get_current_parameters().get(column)
        return None if value is None else repo_key(value)  # None: the NOT NULL refuses the row

    return default


# The context a search sizes the KV cache for when it names none (search.MEMORY_CONTEXT):
# what local runners commonly start with.
DEFAULT_MEMORY_CONTEXT = 4096


def _one_of(column: str, values: tuple[str, ...], name: str) -> CheckConstraint:
    quoted = ", ".join(f"'{v}'" for v in values)
    return CheckConstraint(f"{column} IN ({quoted})", name=name)


class Base(DeclarativeBase):
    metadata = metadata


class Repo(Base):
    __tablename__ = "repos"

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    repo_id: Mapped[str] = mapped_column(String(REPO_ID_LENGTH), unique=True)
    # repo_key(repo_id): not unique, a hub that renames a repo to another case may still
    # hold both spellings here; lookups prefer the exact one.
    repo_key: Mapped[str] = mapped_column(String(REPO_ID_LENGTH), index=True, default=_key_of("repo_id"))
    source: Mapped[str] = mapped_column(String(8), default="hub")
    # The revision whose artifacts are in the catalog; None until a snapshot is written.
    revision: Mapped[str | None] = mapped_column(String(64))
    last_modified: Mapped[datetime | None] = mapped_column(UTCDateTime)
    downloads: Mapped[int] = mapped_column(BigInteger, default=0)
    likes: Mapped[int] = mapped_column(Integer, default=0)
    tags: Mapped[list[str]] = mapped_column(Json, default=list)
    gated: Mapped[bool] = mapped_column(Boolean, default=False)
    card_license: Mapped[str | None] = mapped_column(String(200))
    card_base_model: Mapped[list[str]] = mapped_column(Json, default=list)
    card_base_model_relation: Mapped[str | None] = mapped_column(String(32))
    description: Mapped[str | None] = mapped_column(Text)
    local_path: Mapped[str | None] = mapped_column(Text)  # folder a local pseudo-repo was read from
    indexed_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # snapshot.DERIVATION of the release that last wrote the artifacts in full; None: a
    # release before the number existed. Lower than today's: the next crawl reads it again.
    derivation: Mapped[int | None] = mapped_column(Integer, index=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, onupdate=utcnow)

    artifacts: Mapped[list[Artifact]] = relationship(
        back_populates="repo", lazy="raise", passive_deletes=True
    )
    lineage_edges: Mapped[list[LineageEdge]] = relationship(
        back_populates="child", lazy="raise", passive_deletes=True
    )

    __table_args__ = (_one_of("source", REPO_SOURCES, "source"),)


class Artifact(Base):
    __tablename__ = "artifacts"

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    repo_pk: Mapped[int] = mapped_column(ForeignKey("repos.id", ondelete="CASCADE"))
    path: Mapped[str] = mapped_column(String(PATH_LENGTH))  # the single file, or the first shard
    revision: Mapped[str | None] = mapped_column(String(64))
    status: Mapped[str] = mapped_column(String(8))
    error_code: Mapped[str | None] = mapped_column(String(64))
    error_message: Mapped[str | None] = mapped_column(Text)
    shard_count: Mapped[int] = mapped_column(Integer, default=1)
    file_size: Mapped[int] = mapped_column(BigInteger, default=0)
    # Search copies of facts (NULL for error rows) ... The architecture, license, file type
    # and size label in the spelling search matches whatever the case (`folding.FOLDS`).
    architecture: Mapped[str | None] = mapped_column(String(64))
    license: Mapped[str | None] = mapped_column(String(200))  # the file's license, else the card's
    file_type: Mapped[str | None] = mapped_column(String(32))
    size_label: Mapped[str | None] = mapped_column(String(32))
    size_bucket: Mapped[str | None] = mapped_column(String(16))
    parameter_count: Mapped[int] = mapped_column(BigInteger, default=0)
    context_length: Mapped[int | None] = mapped_column(BigInteger)
    expert_count: Mapped[int | None] = mapped_column(Integer)
    verification_status: Mapped[str | None] = mapped_column(String(8))  # latest finished verification
    # The KV cache estimate (`registry.gguf.kvcache`) for the "fits in memory" filter: bytes
    # per token of the layers that grow with the context, of the sliding-window layers, and
    # the window. NULL bytes: no estimate (error rows, encoders, purely recurrent models,
    # rows indexed before the estimate, until a forced re-index).
    kv_bytes_per_token: Mapped[int | None] = mapped_column(BigInteger)
    kv_swa_bytes_per_token: Mapped[int | None] = mapped_column(BigInteger)
    kv_sliding_window: Mapped[int | None] = mapped_column(BigInteger)
    # The memory estimate (`registry.gguf.memory.MemoryLine`: llama.cpp on a CPU, f16 KV
    # cache, micro-batch 512), bytes as a function of the context, for the memory filter and
    # sort (`memory_sql`). NULL: rows an older release wrote, which fall back to the file plus
    # the KV cache above, and artifacts without an estimate.
    memory_fixed: Mapped[int | None] = mapped_column(BigInteger)
    memory_kv: Mapped[int | None] = mapped_column(BigInteger)
    memory_swa_kv: Mapped[int | None] = mapped_column(BigInteger)
    memory_swa_cells: Mapped[int | None] = mapped_column(BigInteger)
    memory_logits: Mapped[int | None] = mapped_column(BigInteger)
    memory_mask: Mapped[int | None] = mapped_column(BigInteger)
    memory_swa_mask: Mapped[int | None] = mapped_column(BigInteger)
    memory_blocks: Mapped[int | None] = mapped_column(BigInteger)
    memory_attention: Mapped[int | None] = mapped_column(BigInteger)
    memory_kq: Mapped[int | None] = mapped_column(BigInteger)
    # What the artifact needs at DEFAULT_MEMORY_CONTEXT tokens (`memory_sql.memory_at_sql`), computed by
    # the database from the columns above (SQLite: a virtual column, only its index stores it;
    # PostgreSQL: stored), so that the sort by memory and the memory filter at the default
    # context walk an index instead of computing it for every match. NULL without an estimate.
    memory_at_default: Mapped[float | None] = mapped_column(Float, Computed(memory_at_sql(DEFAULT_MEMORY_CONTEXT)))
    # The vocabulary key (`registry.gguf.vocab`) and the token count, for the draft-model
    # filter: same key, at most 128 tokens apart. NULL: no token list, error rows, rows
    # indexed before the key, until a forced re-index.
    vocab_sha256: Mapped[str | None] = mapped_column(String(64))
    vocab_size: Mapped[int | None] = mapped_column(Integer)
    # Chat template safety (registry.safety): the findings as JSON, worst first, and the rank
    # of the worst (0 info .. 4 critical) for the "severity >= X" filter. SQL NULL in both
    # means "not scanned" (error rows, sandbox unavailable, rows indexed before the scanner),
    # never "clean"; clean is `[]` with a NULL rank. none_as_null: Python None is SQL NULL,
    # not the JSON text 'null'; the ORM omits None from an INSERT, so its default is an
    # explicit NULL (the server default '[]' serves hand-written inserts).
    chat_template_findings: Mapped[list[dict[str, Any]] | None] = mapped_column(
        JSON(none_as_null=True).with_variant(JSONB(none_as_null=True), "postgresql"),
        default=null(),
        server_default=text("'[]'"),
    )
    chat_template_max_severity: Mapped[int | None] = mapped_column(SmallInteger)
    # What the templates can do, as a bit mask (registry.safety.capabilities: bit i for
    # CAPABILITIES[i]); NULL: not probed (error rows, templates that did not render, rows
    # indexed before the probes), never "none".
    chat_template_capabilities: Mapped[int | None] = mapped_column(SmallInteger)
    # llama.cpp loads it: no error-severity compatibility finding (`artifact_findings`).
    # NULL: not checked (rows written before the checks, until their next read).
    runs_in_llama_cpp: Mapped[bool | None] = mapped_column(Boolean)
    # sha256 of the default chat template's render of a standard conversation: the artifact
    # page compares it with the base model's (finding L022). NULL: no template or not rendered.
    chat_template_render_sha256: Mapped[str | None] = mapped_column(String(64))
    # How the header was read (registry.hub.siblings): "full", or "sibling" with the leader's
    # path and the ranges sampled inside its large arrays; NULL for rows indexed before it was
    # recorded. A verification, which reads the whole file, sets `header_confirmed`: true when
    # the facts of the full header equal the stored ones, false when they do not.
    header_read: Mapped[str | None] = mapped_column(String(8))
    header_leader: Mapped[str | None] = mapped_column(String(PATH_LENGTH))
    header_samples: Mapped[int | None] = mapped_column(Integer)
    header_confirmed: Mapped[bool | None] = mapped_column(Boolean)
    # What the file is (registry.gguf.facts_model.KINDS), copied from facts for the filter;
    # NULL for error rows.
    kind: Mapped[str | None] = mapped_column(String(16))
    # A projector's inputs as a bit mask (facts_model.MODALITIES: bit i for MODALITIES[i]);
    # NULL on every other kind. Read through the (repo_pk, path) index by the modality filter.
    modalities: Mapped[int | None] = mapped_column(SmallInteger)
    # ... and of the repo, kept NOT NULL so keyset cursors never meet a NULL.
    downloads: Mapped[int] = mapped_column(BigInteger, default=0)
    likes: Mapped[int] = mapped_column(Integer, default=0)
    last_modified: Mapped[datetime] = mapped_column(UTCDateTime, default=lambda: EPOCH)
    # Ordered by code point on PostgreSQL too, whatever the database's collation (a language's,
    # e.g. en_US, skips punctuation and folds case): the name sort and its cursors are SQLite's.
    sort_name: Mapped[str] = mapped_column(
        String(SORT_NAME_LENGTH).with_variant(String(SORT_NAME_LENGTH, collation="C"), "postgresql")
    )
    # Lower-cased repo id, the ids the hub moved to the repo, path, name, basename, tags and
    # description: the free-text haystack
    # (pg_trgm GIN index on PostgreSQL, FTS5 trigram table on SQLite; see migrations).
    search_text: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, onupdate=utcnow)

    repo: Mapped[Repo] = relationship(back_populates="artifacts", lazy="raise")
    shards: Mapped[list[Shard]] = relationship(
        back_populates="artifact", lazy="raise", passive_deletes=True, order_by="Shard.split_no"
    )
    facts: Mapped[Facts | None] = relationship(back_populates="artifact", lazy="raise", passive_deletes=True)
    quant_mix: Mapped[list[QuantMix]] = relationship(
        back_populates="artifact", lazy="raise", passive_deletes=True
    )

    __table_args__ = (
        UniqueConstraint("repo_pk", "path"),
        _one_of("status", ARTIFACT_STATUSES, "status"),
        CheckConstraint(
            "verification_status IS NULL OR verification_status IN "
            f"({', '.join(repr(s) for s in VERIFICATION_STATUSES)})",
            name="verification_status",
        ),
        # One (sort key, id) index per sort: keyset pages walk an index, never a sort. Status is
        # not in them: almost every row is `indexed`, and `status = 'all'` must walk them too.
        # The default sort's index also holds the columns filters check while walking it:
        # SQLite tests them in the index entry and reads a table row only for a match, so a
        # walk past rows that a common filter or a lineage family skips reads no table row.
        Index(
            "ix_artifacts_downloads_walk",
            "downloads", "id", "status", "architecture", "license", "file_type", "context_length", "repo_pk",
        ),
        Index(None, "likes", "id"),
        Index(None, "last_modified", "id"),
        Index(None, "parameter_count", "id"),
        Index(None, "file_size", "id"),
        Index(None, "memory_at_default", "id"),
        Index(None, "sort_name", "id"),
        # Facet counts read only these covering indexes (SQLite: one ordered pass per facet).
        Index(None, "status", "architecture", "license", "file_type", "size_bucket"),
        # Led by license and by file type as well, so that filters without an architecture
        # seek a prefix too instead of reading the whole first index.
        Index(None, "status", "license", "architecture", "file_type", "size_bucket"),
        Index(None, "status", "file_type", "architecture", "license", "size_bucket"),
        Index(None, "status", "size_bucket"),
        # And the facets counted on request (search.MORE_FACETS), grouped in this order, so
        # that they are counted from the index alone, reading no table row.
        Index("ix_artifacts_more_facets", "status", "kind", "verification_status", "chat_template_capabilities"),
        Index(None, "architecture"),
        Index(None, "license"),
        Index(None, "file_type"),
        Index(None, "size_label"),
        Index(None, "context_length"),
        Index(None, "expert_count"),
        Index(None, "verification_status"),
        Index(None, "chat_template_max_severity"),
        Index(None, "chat_template_capabilities"),
        Index(None, "kind"),
        Index(None, "vocab_sha256"),
        Index(None, "runs_in_llama_cpp"),
    )


class Shard(Base):
    __tablename__ = "shards"

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    artifact_id: Mapped[int] = mapped_column(ForeignKey("artifacts.id", ondelete="CASCADE"), index=True)
    repo_pk: Mapped[int] = mapped_column(ForeignKey("repos.id", ondelete="CASCADE"))
    revision: Mapped[str] = mapped_column(String(64))
    path: Mapped[str] = mapped_column(String(PATH_LENGTH))
    split_no: Mapped[int] = mapped_column(Integer, default=0)
    size: Mapped[int | None] = mapped_column(BigInteger)
    # LFS oid from the hub, lower-case hex; None for local files. Indexed: which files hold these bytes.
    sha256: Mapped[str | None] = mapped_column(String(64), index=True)
    header_bytes: Mapped[int | None] = mapped_column(BigInteger)

    artifact: Mapped[Artifact] = relationship(back_populates="shards", lazy="raise")

    __table_args__ = (UniqueConstraint("repo_pk", "revision", "path"),)


class Facts(Base):
    """Every fact the format core derives; typed columns for the ones queried, the rest in `extra`."""

    __tablename__ = "facts"

    artifact_id: Mapped[int] = mapped_column(ForeignKey("artifacts.id", ondelete="CASCADE"), primary_key=True)
    architecture: Mapped[str | None] = mapped_column(String(64))
    name: Mapped[str | None] = mapped_column(Text)
    basename: Mapped[str | None] = mapped_column(Text)
    finetune: Mapped[str | None] = mapped_column(Text)
    version: Mapped[str | None] = mapped_column(String(64))
    size_label: Mapped[str | None] = mapped_column(String(32))
    size_label_source: Mapped[str | None] = mapped_column(String(16))
    parameter_count: Mapped[int] = mapped_column(BigInteger, default=0)
    license: Mapped[str | None] = mapped_column(String(200))
    file_type: Mapped[str | None] = mapped_column(String(32))
    file_type_source: Mapped[str | None] = mapped_column(String(16))
    bits_per_weight: Mapped[float | None] = mapped_column(Float)
    context_length: Mapped[int | None] = mapped_column(BigInteger)
    embedding_length: Mapped[int | None] = mapped_column(BigInteger)
    block_count: Mapped[int | None] = mapped_column(Integer)
    feed_forward_length: Mapped[int | None] = mapped_column(BigInteger)
    head_count: Mapped[int | None] = mapped_column(Integer)
    head_count_kv: Mapped[int | None] = mapped_column(Integer)
    expert_count: Mapped[int | None] = mapped_column(Integer)
    expert_used_count: Mapped[int | None] = mapped_column(Integer)
    tokenizer_model: Mapped[str | None] = mapped_column(String(64))
    tokenizer_pre: Mapped[str | None] = mapped_column(String(64))
    vocab_size: Mapped[int | None] = mapped_column(Integer)
    chat_template_sha256: Mapped[str | None] = mapped_column(String(64))
    kind: Mapped[str] = mapped_column(String(16), default="model")
    gguf_version: Mapped[int] = mapped_column(Integer, default=3)
    endianness: Mapped[str] = mapped_column(String(8), default="little")
    alignment: Mapped[int] = mapped_column(Integer, default=32)
    tensor_count: Mapped[int] = mapped_column(Integer, default=0)
    kv_count: Mapped[int] = mapped_column(Integer, default=0)
    header_bytes: Mapped[int] = mapped_column(BigInteger, default=0)
    file_size: Mapped[int | None] = mapped_column(BigInteger)
    shard_count: Mapped[int] = mapped_column(Integer, default=1)
    extra: Mapped[dict[str, Any]] = mapped_column(Json, default=dict)

    artifact: Mapped[Artifact] = relationship(back_populates="facts", lazy="raise")

    __table_args__ = (
        Index(None, "tokenizer_model"),
        Index(None, "chat_template_sha256"),
        Index(None, "kind"),
    )


class ArtifactTensors(Base):
    """An artifact's tensor table (registry.gguf.tensor_index), compressed: the artifact page
    pages through it. Absent for error rows and rows written before it was kept."""

    __tablename__ = "artifact_tensors"

    artifact_id: Mapped[int] = mapped_column(ForeignKey("artifacts.id", ondelete="CASCADE"), primary_key=True)
    tensor_count: Mapped[int] = mapped_column(Integer)  # tensors the artifact declares
    stored: Mapped[int] = mapped_column(Integer)  # of those, the first kept (MAX_TENSORS)
    data: Mapped[bytes] = mapped_column(LargeBinary)


class QuantMix(Base):
    """Per tensor type of an artifact: how many tensors, elements and bytes use it."""

    __tablename__ = "quant_mix"

    artifact_id: Mapped[int] = mapped_column(ForeignKey("artifacts.id", ondelete="CASCADE"), primary_key=True)
    tensor_type: Mapped[str] = mapped_column(String(16), primary_key=True)
    tensors: Mapped[int] = mapped_column(Integer)
    elements: Mapped[int] = mapped_column(BigInteger)
    bytes: Mapped[int] = mapped_column(BigInteger)

    artifact: Mapped[Artifact] = relationship(back_populates="quant_mix", lazy="raise")

    # "Contains IQ2_XS tensors" walks this index; the primary key serves per-artifact reads.
    __table_args__ = (Index(None, "tensor_type", "artifact_id"),)


class ArtifactFinding(Base):
    """One llama.cpp compatibility finding of an artifact (registry.gguf.compat), in the order
    the checks report them, worst first."""

    __tablename__ = "artifact_findings"

    artifact_id: Mapped[int] = mapped_column(ForeignKey("artifacts.id", ondelete="CASCADE"), primary_key=True)
    position: Mapped[int] = mapped_column(Integer, primary_key=True)
    code: Mapped[str] = mapped_column(String(8))
    severity: Mapped[str] = mapped_column(String(8))
    field: Mapped[str] = mapped_column(String(200))
    message: Mapped[str] = mapped_column(Text)

    # "Has finding L005" walks this index; the primary key serves per-artifact reads.
    __table_args__ = (
        Index(None, "code", "artifact_id"),
        _one_of("severity", FINDING_SEVERITIES, "severity"),
    )


class LineageEdge(Base):
    """child repo -> parent repo id. The parent is a string: it may not be in the catalog yet."""

    __tablename__ = "lineage_edges"

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    child_pk: Mapped[int] = mapped_column(ForeignKey("repos.id", ondelete="CASCADE"))
    # A copy of the child's repo id (which never changes for a row): each step of a lineage
    # walk is then one index lookup instead of a join through repos.
    child_repo_id: Mapped[str] = mapped_column(String(REPO_ID_LENGTH))
    parent_repo_id: Mapped[str] = mapped_column(String(REPO_ID_LENGTH))  # as the source wrote it
    # The other ids of the parent the child's sources named, other than in letter case: ids
    # the hub moved to one repo are one parent (`RepoMove`), and this edge stands for all of
    # them. Should the hub answer for one of them as a repo of its own again, the edge is
    # split in two (`services._reclaim`), so that neither parent loses the child.
    also_spelled: Mapped[list[str]] = mapped_column(Json, default=list, server_default=text("'[]'"))
    # repo_key() of both: walks follow these, so that every spelling of a repo is one node.
    child_key: Mapped[str] = mapped_column(String(REPO_ID_LENGTH), default=_key_of("child_repo_id"))
    parent_key: Mapped[str] = mapped_column(String(REPO_ID_LENGTH), default=_key_of("parent_repo_id"))
    relation: Mapped[str] = mapped_column(String(16))
    source: Mapped[str] = mapped_column(String(8))

    child: Mapped[Repo] = relationship(back_populates="lineage_edges", lazy="raise")

    __table_args__ = (
        # One edge per parent, relation and source, however its sources spell the parent.
        UniqueConstraint("child_pk", "parent_key", "relation", "source"),
        # Walking down (by parent): every column a step reads, in the order it reports
        # edges, so that the index answers it without a read of the table per edge.
        Index(
            "ix_lineage_edges_down_walk",
            "parent_key", "child_key", "relation", "source", "child_pk", "child_repo_id", "parent_repo_id",
        ),
        # Walking up (by child): a repo has few parents.
        Index(None, "child_key", "parent_key"),
        _one_of("relation", LINEAGE_RELATIONS, "relation"),
        _one_of("source", LINEAGE_SOURCES, "source"),
    )


class RepoMove(Base):
    """A hub id that the hub now answers under the id of another catalog repo (renamed,
    transferred to another owner): files and cards keep naming the old id as their base
    model long after a move, so lineage edges that name it are filed under the repo's key
    (`parent_key`), and the API's routes for the old id redirect to the repo. Dropped when
    the hub answers for the old id as a repo of its own again."""

    __tablename__ = "repo_moves"

    old_key: Mapped[str] = mapped_column(String(REPO_ID_LENGTH), primary_key=True)  # repo_key() of the old id
    old_repo_id: Mapped[str] = mapped_column(String(REPO_ID_LENGTH))  # as the catalog spelled it
    repo_pk: Mapped[int] = mapped_column(ForeignKey("repos.id", ondelete="CASCADE"), index=True)
    moved_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class Verification(Base):
    """One verification run over an artifact (filled by the verify worker)."""

    __tablename__ = "verifications"

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    artifact_id: Mapped[int] = mapped_column(ForeignKey("artifacts.id", ondelete="CASCADE"), index=True)
    status: Mapped[str] = mapped_column(String(8))
    reason: Mapped[str | None] = mapped_column(Text)
    sha256: Mapped[str | None] = mapped_column(String(64))
    tensors_checked: Mapped[int | None] = mapped_column(Integer)
    nonfinite_values: Mapped[int | None] = mapped_column(BigInteger)
    perplexity: Mapped[float | None] = mapped_column(Float)
    generated: Mapped[str | None] = mapped_column(Text)
    generated_tokens: Mapped[list[int] | None] = mapped_column(Json)
    bytes_downloaded: Mapped[int | None] = mapped_column(BigInteger)  # 0 when every shard was cached
    peak_rss_bytes: Mapped[int | None] = mapped_column(BigInteger)  # of the child that ran the checks
    details: Mapped[dict[str, Any]] = mapped_column(Json, default=dict)
    timings: Mapped[dict[str, Any]] = mapped_column(Json, default=dict)
    queued_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime)

    __table_args__ = (_one_of("status", VERIFICATION_STATUSES, "status"), Index(None, "status"))


class Crawl(Base):
    """One crawl run. `cursor` and `heartbeat_at` let a restarted worker resume a dead run."""

    __tablename__ = "crawls"

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    kind: Mapped[str] = mapped_column(String(8))
    status: Mapped[str] = mapped_column(String(12), default="running")
    parameters: Mapped[dict[str, Any]] = mapped_column(Json, default=dict)
    counters: Mapped[dict[str, Any]] = mapped_column(Json, default=dict)
    errors: Mapped[list[Any]] = mapped_column(Json, default=list)
    cursor: Mapped[str | None] = mapped_column(Text)  # where listing stopped, e.g. the hub's next link
    started_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    heartbeat_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # A crawl run as jobs finishes when this reaches 0: one for its listing plus one per
    # queued index-repo job, each released with that job's counters (workers.crawl_jobs.report_repo).
    pending_jobs: Mapped[int] = mapped_column(Integer, default=0, server_default=text("0"))

    __table_args__ = (
        _one_of("kind", CRAWL_KINDS, "kind"),
        _one_of("status", CRAWL_STATUSES, "status"),
        Index(None, "status", "finished_at"),  # lookups by status; when one last ended so (metrics)
    )


class CrawlRepo(Base):
    """One repo that a crawl run as jobs queued: the write-once record of its outcome.

    It makes the accounting of a crawl idempotent. A rerun of the listing (its worker died)
    queues what it had reserved and skips what it had queued; a repo job that reports twice
    (its worker died after the report, before the job was marked done) counts once.
    """

    __tablename__ = "crawl_repos"

    crawl_id: Mapped[int] = mapped_column(BigId, ForeignKey("crawls.id", ondelete="CASCADE"), primary_key=True)
    repo_id: Mapped[str] = mapped_column(String(REPO_ID_LENGTH), primary_key=True)
    state: Mapped[str] = mapped_column(String(8), default="reserved")
    job_id: Mapped[int | None] = mapped_column(BigInteger)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)

    __table_args__ = (
        _one_of("state", CRAWL_REPO_STATES, "state"),
        # The job of a cancelled crawl asks whether another crawl counts on it (catalog.crawls).
        Index(None, "repo_id", "updated_at"),
    )


class Job(Base):
    """One job of the embedded runner: the row is the queue, so a restarted server resumes it.

    The distributed mode keeps its jobs in procrastinate's own tables instead. `lock` is the
    queueing lock: at most one queued or running job per repo or verification.
    """

    __tablename__ = "jobs"

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    kind: Mapped[str] = mapped_column(String(16))
    queue: Mapped[str] = mapped_column(String(32))
    status: Mapped[str] = mapped_column(String(8), default="queued")
    args: Mapped[dict[str, Any]] = mapped_column(Json, default=dict)
    lock: Mapped[str | None] = mapped_column(String(400))
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    error: Mapped[str | None] = mapped_column(Text)
    run_after: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime)

    __table_args__ = (
        _one_of("kind", JOB_KINDS, "kind"),
        _one_of("status", JOB_STATUSES, "status"),
        Index(None, "status", "run_after"),
        Index(None, "lock"),
    )


class JobError(Base):
    """Why a job of the distributed mode failed (its last failing run): procrastinate keeps
    a job's status but not its error. Keyed by procrastinate's job id; a row whose job
    procrastinate no longer has is removed by the workers' sweep."""

    __tablename__ = "job_errors"

    job_id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    error: Mapped[str] = mapped_column(Text)
    at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
