"""The catalog's schema as of release 0.1.0: every table, index and constraint in one step.

It replaces the revisions made while 0.1.0 was developed. A database those revisions brought
to their last one (`LEGACY_HEAD`) holds exactly this schema and is stamped with this
revision instead of migrated (registry/catalog/migrate.py); one left at an earlier
development revision is refused with a message.

Besides what the models declare, it makes what SQLAlchemy cannot declare, as DDL frozen
here (later revisions must not change what this one made):
- the free-text index: on SQLite an external-content FTS5 table with the trigram tokenizer,
  kept in sync by triggers; on PostgreSQL a pg_trgm GIN index
  (registry/catalog/search_index.py describes both);
- on SQLite only, a narrow index holding what the sort by memory reads of an artifact.
Alembic's autogenerate is told to leave these alone (migrations/env.py).

Revision ID: 0001_baseline
Revises:
Create Date: 2026-12-04
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

from registry.catalog.types import UTCDateTime

revision: str = "0001_baseline"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
JSON_OR_NULL = sa.JSON(none_as_null=True).with_variant(postgresql.JSONB(none_as_null=True), "postgresql")
TIME = UTCDateTime(timezone=True)

FTS_TABLE = "artifacts_fts"
SQLITE_SEARCH_INDEX = [
    f"CREATE VIRTUAL TABLE {FTS_TABLE} USING fts5("
    "search_text, content='artifacts', content_rowid='id', tokenize='trigram')",
    f"CREATE TRIGGER {FTS_TABLE}_ai AFTER INSERT ON artifacts BEGIN "
    f"INSERT INTO {FTS_TABLE}(rowid, search_text) VALUES (new.id, new.search_text); END",
    f"CREATE TRIGGER {FTS_TABLE}_ad AFTER DELETE ON artifacts BEGIN "
    f"INSERT INTO {FTS_TABLE}({FTS_TABLE}, rowid, search_text) VALUES ('delete', old.id, old.search_text); END",
    f"CREATE TRIGGER {FTS_TABLE}_au AFTER UPDATE OF search_text ON artifacts BEGIN "
    f"INSERT INTO {FTS_TABLE}({FTS_TABLE}, rowid, search_text) VALUES ('delete', old.id, old.search_text); "
    f"INSERT INTO {FTS_TABLE}(rowid, search_text) VALUES (new.id, new.search_text); END",
    # The sort by memory at any context reads these six numbers of each match.
    "CREATE INDEX ix_artifacts_memory_sort ON artifacts "
    "(status, kv_bytes_per_token, file_size, context_length, kv_swa_bytes_per_token, kv_sliding_window)",
]
POSTGRES_SEARCH_INDEX = [
    "CREATE EXTENSION IF NOT EXISTS pg_trgm",
    "CREATE INDEX ix_artifacts_search_text_trgm ON artifacts USING gin (search_text gin_trgm_ops)",
]
TABLES = (
    "crawls", "job_errors", "jobs", "repos", "artifacts", "crawl_repos", "lineage_edges", "repo_moves", "facts",
    "quant_mix", "shards", "verifications",
)  # fmt: skip


def upgrade() -> None:
    op.create_table(
        "crawls",
        sa.Column("id", ID, nullable=False),
        sa.Column("kind", sa.String(length=8), nullable=False),
        sa.Column("status", sa.String(length=12), nullable=False),
        sa.Column("parameters", JSON, nullable=False),
        sa.Column("counters", JSON, nullable=False),
        sa.Column("errors", JSON, nullable=False),
        sa.Column("cursor", sa.Text(), nullable=True),
        sa.Column("started_at", TIME, nullable=False),
        sa.Column("heartbeat_at", TIME, nullable=True),
        sa.Column("finished_at", TIME, nullable=True),
        sa.Column("pending_jobs", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.CheckConstraint("kind IN ('hub', 'local')", name=op.f("ck_crawls_kind")),
        sa.CheckConstraint(
            "status IN ('running', 'finished', 'failed', 'cancelled')", name=op.f("ck_crawls_status")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_crawls")),
    )
    op.create_index(op.f("ix_crawls_status_finished_at"), "crawls", ["status", "finished_at"])

    op.create_table(
        "job_errors",
        sa.Column("job_id", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("error", sa.Text(), nullable=False),
        sa.Column("at", TIME, nullable=False),
        sa.PrimaryKeyConstraint("job_id", name=op.f("pk_job_errors")),
    )
    op.create_table(
        "jobs",
        sa.Column("id", ID, nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("queue", sa.String(length=32), nullable=False),
        sa.Column("status", sa.String(length=8), nullable=False),
        sa.Column("args", JSON, nullable=False),
        sa.Column("lock", sa.String(length=400), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("run_after", TIME, nullable=False),
        sa.Column("created_at", TIME, nullable=False),
        sa.Column("started_at", TIME, nullable=True),
        sa.Column("finished_at", TIME, nullable=True),
        sa.CheckConstraint("kind IN ('crawl', 'index_repo', 'verify')", name=op.f("ck_jobs_kind")),
        sa.CheckConstraint("status IN ('queued', 'running', 'failed', 'done')", name=op.f("ck_jobs_status")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_jobs")),
    )
    op.create_index(op.f("ix_jobs_lock"), "jobs", ["lock"])
    op.create_index(op.f("ix_jobs_status_run_after"), "jobs", ["status", "run_after"])

    op.create_table(
        "repos",
        sa.Column("id", ID, nullable=False),
        sa.Column("repo_id", sa.String(length=300), nullable=False),
        sa.Column("repo_key", sa.String(length=300), nullable=False),
        sa.Column("source", sa.String(length=8), nullable=False),
        sa.Column("revision", sa.String(length=64), nullable=True),
        sa.Column("last_modified", TIME, nullable=True),
        sa.Column("downloads", sa.BigInteger(), nullable=False),
        sa.Column("likes", sa.Integer(), nullable=False),
        sa.Column("tags", JSON, nullable=False),
        sa.Column("gated", sa.Boolean(), nullable=False),
        sa.Column("card_license", sa.String(length=200), nullable=True),
        sa.Column("card_base_model", JSON, nullable=False),
        sa.Column("card_base_model_relation", sa.String(length=32), nullable=True),
        sa.Column("description", sa.Text(), nullable=True),
        sa.Column("local_path", sa.Text(), nullable=True),
        sa.Column("indexed_at", TIME, nullable=True),
        sa.Column("derivation", sa.Integer(), nullable=True),
        sa.Column("created_at", TIME, nullable=False),
        sa.Column("updated_at", TIME, nullable=False),
        sa.CheckConstraint("source IN ('hub', 'local')", name=op.f("ck_repos_source")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_repos")),
        sa.UniqueConstraint("repo_id", name=op.f("uq_repos_repo_id")),
    )
    op.create_index(op.f("ix_repos_derivation"), "repos", ["derivation"])
    op.create_index(op.f("ix_repos_repo_key"), "repos", ["repo_key"])

    op.create_table(
        "artifacts",
        sa.Column("id", ID, nullable=False),
        sa.Column("repo_pk", ID, nullable=False),
        sa.Column("path", sa.String(length=1000), nullable=False),
        sa.Column("revision", sa.String(length=64), nullable=True),
        sa.Column("status", sa.String(length=8), nullable=False),
        sa.Column("error_code", sa.String(length=64), nullable=True),
        sa.Column("error_message", sa.Text(), nullable=True),
        sa.Column("shard_count", sa.Integer(), nullable=False),
        sa.Column("file_size", sa.BigInteger(), nullable=False),
        sa.Column("architecture", sa.String(length=64), nullable=True),
        sa.Column("license", sa.String(length=200), nullable=True),
        sa.Column("file_type", sa.String(length=32), nullable=True),
        sa.Column("size_label", sa.String(length=32), nullable=True),
        sa.Column("size_bucket", sa.String(length=16), nullable=True),
        sa.Column("parameter_count", sa.BigInteger(), nullable=False),
        sa.Column("context_length", sa.BigInteger(), nullable=True),
        sa.Column("expert_count", sa.Integer(), nullable=True),
        sa.Column("verification_status", sa.String(length=8), nullable=True),
        sa.Column("kv_bytes_per_token", sa.BigInteger(), nullable=True),
        sa.Column("kv_swa_bytes_per_token", sa.BigInteger(), nullable=True),
        sa.Column("kv_sliding_window", sa.BigInteger(), nullable=True),
        sa.Column(
            "memory_at_default",
            sa.Float(),
            sa.Computed(
                "CAST(file_size AS FLOAT) + CAST(kv_bytes_per_token AS FLOAT) * CAST(CASE WHEN context_length > 0 AND context_length < 4096 THEN context_length ELSE 4096 END AS FLOAT) + CAST(COALESCE(kv_swa_bytes_per_token, 0) AS FLOAT) * CAST(CASE WHEN kv_sliding_window IS NOT NULL AND kv_sliding_window < (CASE WHEN context_length > 0 AND context_length < 4096 THEN context_length ELSE 4096 END) THEN kv_sliding_window ELSE (CASE WHEN context_length > 0 AND context_length < 4096 THEN context_length ELSE 4096 END) END AS FLOAT)",
            ),
            nullable=True,
        ),
        sa.Column("vocab_sha256", sa.String(length=64), nullable=True),
        sa.Column("vocab_size", sa.Integer(), nullable=True),
        sa.Column("chat_template_findings", JSON_OR_NULL, server_default=sa.text("'[]'"), nullable=True),
        sa.Column("chat_template_max_severity", sa.SmallInteger(), nullable=True),
        sa.Column("chat_template_capabilities", sa.SmallInteger(), nullable=True),
        sa.Column("kind", sa.String(length=16), nullable=True),
        sa.Column("modalities", sa.SmallInteger(), nullable=True),
        sa.Column("downloads", sa.BigInteger(), nullable=False),
        sa.Column("likes", sa.Integer(), nullable=False),
        sa.Column("last_modified", TIME, nullable=False),
        sa.Column(
            "sort_name",
            sa.String(length=1301).with_variant(sa.String(length=1301, collation="C"), "postgresql"),
            nullable=False,
        ),
        sa.Column("search_text", sa.Text(), nullable=False),
        sa.Column("created_at", TIME, nullable=False),
        sa.Column("updated_at", TIME, nullable=False),
        sa.CheckConstraint("status IN ('indexed', 'error', 'gone')", name=op.f("ck_artifacts_status")),
        sa.CheckConstraint(
            "verification_status IS NULL OR verification_status IN ('queued', 'running', 'passed', 'failed', 'skipped')",
            name=op.f("ck_artifacts_verification_status"),
        ),
        sa.ForeignKeyConstraint(
            ["repo_pk"], ["repos.id"], name=op.f("fk_artifacts_repo_pk_repos"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_artifacts")),
        sa.UniqueConstraint("repo_pk", "path", name=op.f("uq_artifacts_repo_pk_path")),
    )
    op.create_index(op.f("ix_artifacts_architecture"), "artifacts", ["architecture"])
    op.create_index(
        op.f("ix_artifacts_chat_template_capabilities"), "artifacts", ["chat_template_capabilities"]
    )
    op.create_index(
        op.f("ix_artifacts_chat_template_max_severity"), "artifacts", ["chat_template_max_severity"]
    )
    op.create_index(op.f("ix_artifacts_context_length"), "artifacts", ["context_length"])
    op.create_index(
        "ix_artifacts_downloads_walk",
        "artifacts",
        ["downloads", "id", "status", "architecture", "license", "file_type", "context_length", "repo_pk"],
    )
    op.create_index(op.f("ix_artifacts_expert_count"), "artifacts", ["expert_count"])
    op.create_index(op.f("ix_artifacts_file_size_id"), "artifacts", ["file_size", "id"])
    op.create_index(op.f("ix_artifacts_file_type"), "artifacts", ["file_type"])
    op.create_index(op.f("ix_artifacts_kind"), "artifacts", ["kind"])
    op.create_index(op.f("ix_artifacts_last_modified_id"), "artifacts", ["last_modified", "id"])
    op.create_index(op.f("ix_artifacts_license"), "artifacts", ["license"])
    op.create_index(op.f("ix_artifacts_likes_id"), "artifacts", ["likes", "id"])
    op.create_index(op.f("ix_artifacts_memory_at_default_id"), "artifacts", ["memory_at_default", "id"])
    op.create_index(
        "ix_artifacts_more_facets",
        "artifacts",
        ["status", "kind", "verification_status", "chat_template_capabilities"],
    )
    op.create_index(op.f("ix_artifacts_parameter_count_id"), "artifacts", ["parameter_count", "id"])
    op.create_index(op.f("ix_artifacts_size_label"), "artifacts", ["size_label"])
    op.create_index(op.f("ix_artifacts_sort_name_id"), "artifacts", ["sort_name", "id"])
    op.create_index(
        op.f("ix_artifacts_status_architecture_license_file_type_size_bucket"),
        "artifacts",
        ["status", "architecture", "license", "file_type", "size_bucket"],
    )
    op.create_index(
        op.f("ix_artifacts_status_file_type_architecture_license_size_bucket"),
        "artifacts",
        ["status", "file_type", "architecture", "license", "size_bucket"],
    )
    op.create_index(
        op.f("ix_artifacts_status_license_architecture_file_type_size_bucket"),
        "artifacts",
        ["status", "license", "architecture", "file_type", "size_bucket"],
    )
    op.create_index(op.f("ix_artifacts_status_size_bucket"), "artifacts", ["status", "size_bucket"])
    op.create_index(op.f("ix_artifacts_verification_status"), "artifacts", ["verification_status"])
    op.create_index(op.f("ix_artifacts_vocab_sha256"), "artifacts", ["vocab_sha256"])

    op.create_table(
        "crawl_repos",
        sa.Column("crawl_id", ID, nullable=False),
        sa.Column("repo_id", sa.String(length=300), nullable=False),
        sa.Column("state", sa.String(length=8), nullable=False),
        sa.Column("job_id", sa.BigInteger(), nullable=True),
        sa.Column("updated_at", TIME, nullable=False),
        sa.CheckConstraint(
            "state IN ('reserved', 'queued', 'reported', 'skipped', 'lost')",
            name=op.f("ck_crawl_repos_state"),
        ),
        sa.ForeignKeyConstraint(
            ["crawl_id"], ["crawls.id"], name=op.f("fk_crawl_repos_crawl_id_crawls"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("crawl_id", "repo_id", name=op.f("pk_crawl_repos")),
    )
    op.create_index(op.f("ix_crawl_repos_repo_id_updated_at"), "crawl_repos", ["repo_id", "updated_at"])

    op.create_table(
        "lineage_edges",
        sa.Column("id", ID, nullable=False),
        sa.Column("child_pk", ID, nullable=False),
        sa.Column("child_repo_id", sa.String(length=300), nullable=False),
        sa.Column("parent_repo_id", sa.String(length=300), nullable=False),
        sa.Column("also_spelled", JSON, server_default=sa.text("'[]'"), nullable=False),
        sa.Column("child_key", sa.String(length=300), nullable=False),
        sa.Column("parent_key", sa.String(length=300), nullable=False),
        sa.Column("relation", sa.String(length=16), nullable=False),
        sa.Column("source", sa.String(length=8), nullable=False),
        sa.CheckConstraint(
            "relation IN ('quantized', 'finetune', 'adapter', 'merge', 'unknown')",
            name=op.f("ck_lineage_edges_relation"),
        ),
        sa.CheckConstraint("source IN ('gguf', 'card', 'tags')", name=op.f("ck_lineage_edges_source")),
        sa.ForeignKeyConstraint(
            ["child_pk"], ["repos.id"], name=op.f("fk_lineage_edges_child_pk_repos"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_lineage_edges")),
        sa.UniqueConstraint(
            "child_pk",
            "parent_key",
            "relation",
            "source",
            name=op.f("uq_lineage_edges_child_pk_parent_key_relation_source"),
        ),
    )
    op.create_index(
        op.f("ix_lineage_edges_child_key_parent_key"), "lineage_edges", ["child_key", "parent_key"]
    )
    op.create_index(
        "ix_lineage_edges_down_walk",
        "lineage_edges",
        ["parent_key", "child_key", "relation", "source", "child_pk", "child_repo_id", "parent_repo_id"],
    )

    op.create_table(
        "repo_moves",
        sa.Column("old_key", sa.String(length=300), nullable=False),
        sa.Column("old_repo_id", sa.String(length=300), nullable=False),
        sa.Column("repo_pk", ID, nullable=False),
        sa.Column("moved_at", TIME, nullable=False),
        sa.ForeignKeyConstraint(
            ["repo_pk"], ["repos.id"], name=op.f("fk_repo_moves_repo_pk_repos"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("old_key", name=op.f("pk_repo_moves")),
    )
    op.create_index(op.f("ix_repo_moves_repo_pk"), "repo_moves", ["repo_pk"])

    op.create_table(
        "facts",
        sa.Column("artifact_id", ID, nullable=False),
        sa.Column("architecture", sa.String(length=64), nullable=True),
        sa.Column("name", sa.Text(), nullable=True),
        sa.Column("basename", sa.Text(), nullable=True),
        sa.Column("finetune", sa.Text(), nullable=True),
        sa.Column("version", sa.String(length=64), nullable=True),
        sa.Column("size_label", sa.String(length=32), nullable=True),
        sa.Column("size_label_source", sa.String(length=16), nullable=True),
        sa.Column("parameter_count", sa.BigInteger(), nullable=False),
        sa.Column("license", sa.String(length=200), nullable=True),
        sa.Column("file_type", sa.String(length=32), nullable=True),
        sa.Column("file_type_source", sa.String(length=16), nullable=True),
        sa.Column("bits_per_weight", sa.Float(), nullable=True),
        sa.Column("context_length", sa.BigInteger(), nullable=True),
        sa.Column("embedding_length", sa.BigInteger(), nullable=True),
        sa.Column("block_count", sa.Integer(), nullable=True),
        sa.Column("feed_forward_length", sa.BigInteger(), nullable=True),
        sa.Column("head_count", sa.Integer(), nullable=True),
        sa.Column("head_count_kv", sa.Integer(), nullable=True),
        sa.Column("expert_count", sa.Integer(), nullable=True),
        sa.Column("expert_used_count", sa.Integer(), nullable=True),
        sa.Column("tokenizer_model", sa.String(length=64), nullable=True),
        sa.Column("tokenizer_pre", sa.String(length=64), nullable=True),
        sa.Column("vocab_size", sa.Integer(), nullable=True),
        sa.Column("chat_template_sha256", sa.String(length=64), nullable=True),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("gguf_version", sa.Integer(), nullable=False),
        sa.Column("endianness", sa.String(length=8), nullable=False),
        sa.Column("alignment", sa.Integer(), nullable=False),
        sa.Column("tensor_count", sa.Integer(), nullable=False),
        sa.Column("kv_count", sa.Integer(), nullable=False),
        sa.Column("header_bytes", sa.BigInteger(), nullable=False),
        sa.Column("file_size", sa.BigInteger(), nullable=True),
        sa.Column("shard_count", sa.Integer(), nullable=False),
        sa.Column("extra", JSON, nullable=False),
        sa.ForeignKeyConstraint(
            ["artifact_id"], ["artifacts.id"], name=op.f("fk_facts_artifact_id_artifacts"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("artifact_id", name=op.f("pk_facts")),
    )
    op.create_index(op.f("ix_facts_chat_template_sha256"), "facts", ["chat_template_sha256"])
    op.create_index(op.f("ix_facts_kind"), "facts", ["kind"])
    op.create_index(op.f("ix_facts_tokenizer_model"), "facts", ["tokenizer_model"])

    op.create_table(
        "quant_mix",
        sa.Column("artifact_id", ID, nullable=False),
        sa.Column("tensor_type", sa.String(length=16), nullable=False),
        sa.Column("tensors", sa.Integer(), nullable=False),
        sa.Column("elements", sa.BigInteger(), nullable=False),
        sa.Column("bytes", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(
            ["artifact_id"],
            ["artifacts.id"],
            name=op.f("fk_quant_mix_artifact_id_artifacts"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("artifact_id", "tensor_type", name=op.f("pk_quant_mix")),
    )
    op.create_index(op.f("ix_quant_mix_tensor_type_artifact_id"), "quant_mix", ["tensor_type", "artifact_id"])

    op.create_table(
        "shards",
        sa.Column("id", ID, nullable=False),
        sa.Column("artifact_id", ID, nullable=False),
        sa.Column("repo_pk", ID, nullable=False),
        sa.Column("revision", sa.String(length=64), nullable=False),
        sa.Column("path", sa.String(length=1000), nullable=False),
        sa.Column("split_no", sa.Integer(), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=True),
        sa.Column("sha256", sa.String(length=64), nullable=True),
        sa.Column("header_bytes", sa.BigInteger(), nullable=True),
        sa.ForeignKeyConstraint(
            ["artifact_id"],
            ["artifacts.id"],
            name=op.f("fk_shards_artifact_id_artifacts"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["repo_pk"], ["repos.id"], name=op.f("fk_shards_repo_pk_repos"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_shards")),
        sa.UniqueConstraint("repo_pk", "revision", "path", name=op.f("uq_shards_repo_pk_revision_path")),
    )
    op.create_index(op.f("ix_shards_artifact_id"), "shards", ["artifact_id"])
    op.create_index(op.f("ix_shards_sha256"), "shards", ["sha256"])

    op.create_table(
        "verifications",
        sa.Column("id", ID, nullable=False),
        sa.Column("artifact_id", ID, nullable=False),
        sa.Column("status", sa.String(length=8), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("sha256", sa.String(length=64), nullable=True),
        sa.Column("tensors_checked", sa.Integer(), nullable=True),
        sa.Column("nonfinite_values", sa.BigInteger(), nullable=True),
        sa.Column("perplexity", sa.Float(), nullable=True),
        sa.Column("generated", sa.Text(), nullable=True),
        sa.Column("generated_tokens", JSON, nullable=True),
        sa.Column("bytes_downloaded", sa.BigInteger(), nullable=True),
        sa.Column("peak_rss_bytes", sa.BigInteger(), nullable=True),
        sa.Column("details", JSON, nullable=False),
        sa.Column("timings", JSON, nullable=False),
        sa.Column("queued_at", TIME, nullable=False),
        sa.Column("started_at", TIME, nullable=True),
        sa.Column("finished_at", TIME, nullable=True),
        sa.CheckConstraint(
            "status IN ('queued', 'running', 'passed', 'failed', 'skipped')",
            name=op.f("ck_verifications_status"),
        ),
        sa.ForeignKeyConstraint(
            ["artifact_id"],
            ["artifacts.id"],
            name=op.f("fk_verifications_artifact_id_artifacts"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_verifications")),
    )
    op.create_index(op.f("ix_verifications_artifact_id"), "verifications", ["artifact_id"])
    op.create_index(op.f("ix_verifications_status"), "verifications", ["status"])

    dialect = op.get_bind().dialect.name
    for statement in SQLITE_SEARCH_INDEX if dialect == "sqlite" else POSTGRES_SEARCH_INDEX:
        op.execute(statement)


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        for trigger in ("ai", "ad", "au"):
            op.execute(f"DROP TRIGGER IF EXISTS {FTS_TABLE}_{trigger}")
        op.execute(f"DROP TABLE IF EXISTS {FTS_TABLE}")
    for table in reversed(TABLES):
        op.drop_table(table)
