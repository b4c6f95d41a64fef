"""Catalog schema: repos, artifacts, shards, facts, quant mix, lineage, verifications, crawls.

Revision ID: 0001
Revises:
Create Date: 2026-11-22 01:22:46.058219
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "crawls",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("kind", sa.String(length=8), nullable=False),
        sa.Column("status", sa.String(length=12), nullable=False),
        sa.Column(
            "parameters",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column(
            "counters",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column(
            "errors",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column("cursor", sa.Text(), nullable=True),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint("kind IN ('hub', 'local')", name=op.f("ck_crawls_kind")),
        sa.CheckConstraint(
            "status IN ('running', 'finished', 'failed', 'cancelled')", name=op.f("ck_crawls_status")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_crawls")),
    )
    op.create_index(op.f("ix_crawls_status"), "crawls", ["status"], unique=False)
    op.create_table(
        "repos",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("repo_id", sa.String(length=300), nullable=False),
        sa.Column("source", sa.String(length=8), nullable=False),
        sa.Column("revision", sa.String(length=64), nullable=True),
        sa.Column("last_modified", sa.DateTime(timezone=True), nullable=True),
        sa.Column("downloads", sa.BigInteger(), nullable=False),
        sa.Column("likes", sa.Integer(), nullable=False),
        sa.Column(
            "tags",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column("gated", sa.Boolean(), nullable=False),
        sa.Column("card_license", sa.String(length=200), nullable=True),
        sa.Column(
            "card_base_model",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column("card_base_model_relation", sa.String(length=32), nullable=True),
        sa.Column("description", sa.Text(), nullable=True),
        sa.Column("local_path", sa.Text(), nullable=True),
        sa.Column("indexed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("source IN ('hub', 'local')", name=op.f("ck_repos_source")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_repos")),
        sa.UniqueConstraint("repo_id", name=op.f("uq_repos_repo_id")),
    )
    op.create_table(
        "artifacts",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("repo_pk", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
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
        sa.Column("downloads", sa.BigInteger(), nullable=False),
        sa.Column("likes", sa.Integer(), nullable=False),
        sa.Column("last_modified", sa.DateTime(timezone=True), nullable=False),
        sa.Column("sort_name", sa.String(length=1301), nullable=False),
        sa.Column("search_text", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
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
    op.create_index(op.f("ix_artifacts_architecture"), "artifacts", ["architecture"], unique=False)
    op.create_index(op.f("ix_artifacts_context_length"), "artifacts", ["context_length"], unique=False)
    op.create_index(op.f("ix_artifacts_downloads_id"), "artifacts", ["downloads", "id"], unique=False)
    op.create_index(op.f("ix_artifacts_expert_count"), "artifacts", ["expert_count"], unique=False)
    op.create_index(op.f("ix_artifacts_file_size_id"), "artifacts", ["file_size", "id"], unique=False)
    op.create_index(op.f("ix_artifacts_file_type"), "artifacts", ["file_type"], unique=False)
    op.create_index(op.f("ix_artifacts_last_modified_id"), "artifacts", ["last_modified", "id"], unique=False)
    op.create_index(op.f("ix_artifacts_license"), "artifacts", ["license"], unique=False)
    op.create_index(op.f("ix_artifacts_likes_id"), "artifacts", ["likes", "id"], unique=False)
    op.create_index(
        op.f("ix_artifacts_parameter_count_id"), "artifacts", ["parameter_count", "id"], unique=False
    )
    op.create_index(op.f("ix_artifacts_size_label"), "artifacts", ["size_label"], unique=False)
    op.create_index(op.f("ix_artifacts_sort_name_id"), "artifacts", ["sort_name", "id"], unique=False)
    op.create_index(
        op.f("ix_artifacts_status_architecture_license_file_type_size_bucket"),
        "artifacts",
        ["status", "architecture", "license", "file_type", "size_bucket"],
        unique=False,
    )
    op.create_index(op.f("ix_artifacts_status_file_type"), "artifacts", ["status", "file_type"], unique=False)
    op.create_index(op.f("ix_artifacts_status_license"), "artifacts", ["status", "license"], unique=False)
    op.create_index(
        op.f("ix_artifacts_status_size_bucket"), "artifacts", ["status", "size_bucket"], unique=False
    )
    op.create_index(
        op.f("ix_artifacts_verification_status"), "artifacts", ["verification_status"], unique=False
    )
    op.create_table(
        "lineage_edges",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("child_pk", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("child_repo_id", sa.String(length=300), nullable=False),
        sa.Column("parent_repo_id", sa.String(length=300), nullable=False),
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
            "parent_repo_id",
            "relation",
            "source",
            name=op.f("uq_lineage_edges_child_pk_parent_repo_id_relation_source"),
        ),
    )
    op.create_index(
        op.f("ix_lineage_edges_child_repo_id_parent_repo_id"),
        "lineage_edges",
        ["child_repo_id", "parent_repo_id"],
        unique=False,
    )
    op.create_index(
        op.f("ix_lineage_edges_parent_repo_id_child_repo_id_child_pk"),
        "lineage_edges",
        ["parent_repo_id", "child_repo_id", "child_pk"],
        unique=False,
    )
    op.create_table(
        "facts",
        sa.Column("artifact_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
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
        sa.Column(
            "extra",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.ForeignKeyConstraint(
            ["artifact_id"], ["artifacts.id"], name=op.f("fk_facts_artifact_id_artifacts"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("artifact_id", name=op.f("pk_facts")),
    )
    op.create_index(op.f("ix_facts_chat_template_sha256"), "facts", ["chat_template_sha256"], unique=False)
    op.create_index(op.f("ix_facts_kind"), "facts", ["kind"], unique=False)
    op.create_index(op.f("ix_facts_tokenizer_model"), "facts", ["tokenizer_model"], unique=False)
    op.create_table(
        "quant_mix",
        sa.Column("artifact_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
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
    op.create_index(
        op.f("ix_quant_mix_tensor_type_artifact_id"),
        "quant_mix",
        ["tensor_type", "artifact_id"],
        unique=False,
    )
    op.create_table(
        "shards",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("artifact_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("repo_pk", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
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
    op.create_index(op.f("ix_shards_artifact_id"), "shards", ["artifact_id"], unique=False)
    op.create_table(
        "verifications",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("artifact_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("status", sa.String(length=8), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("sha256", sa.String(length=64), nullable=True),
        sa.Column("tensors_checked", sa.Integer(), nullable=True),
        sa.Column("nonfinite_values", sa.BigInteger(), nullable=True),
        sa.Column("perplexity", sa.Float(), nullable=True),
        sa.Column("generated", sa.Text(), nullable=True),
        sa.Column(
            "details",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column(
            "timings",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column("queued_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
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
    op.create_index(op.f("ix_verifications_artifact_id"), "verifications", ["artifact_id"], unique=False)
    op.create_index(op.f("ix_verifications_status"), "verifications", ["status"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_verifications_status"), table_name="verifications")
    op.drop_index(op.f("ix_verifications_artifact_id"), table_name="verifications")
    op.drop_table("verifications")
    op.drop_index(op.f("ix_shards_artifact_id"), table_name="shards")
    op.drop_table("shards")
    op.drop_index(op.f("ix_quant_mix_tensor_type_artifact_id"), table_name="quant_mix")
    op.drop_table("quant_mix")
    op.drop_index(op.f("ix_facts_tokenizer_model"), table_name="facts")
    op.drop_index(op.f("ix_facts_kind"), table_name="facts")
    op.drop_index(op.f("ix_facts_chat_template_sha256"), table_name="facts")
    op.drop_table("facts")
    op.drop_index(op.f("ix_lineage_edges_parent_repo_id_child_repo_id_child_pk"), table_name="lineage_edges")
    op.drop_index(op.f("ix_lineage_edges_child_repo_id_parent_repo_id"), table_name="lineage_edges")
    op.drop_table("lineage_edges")
    op.drop_index(op.f("ix_artifacts_verification_status"), table_name="artifacts")
    op.drop_index(op.f("ix_artifacts_status_size_bucket"), table_name="artifacts")
    op.drop_index(op.f("ix_artifacts_status_license"), table_name="artifacts")
    op.drop_index(op.f("ix_artifacts_status_file_type"), table_name="artifacts")
    op.drop_index(
        op.f("ix_artifacts_status_architecture_license_file_type_size_bucket"), table_name="artifacts"
    )
    op.drop_index(op.f("ix_artifacts_sort_name_id"), table_name="artifacts")
    op.drop_index(op.f("ix_artifacts_size_label"), table_name="artifacts")
    op.drop_index(op.f("ix_artifacts_parameter_count_id"), table_name="artifacts")
    op.drop_index(op.f("ix_artifacts_likes_id"), table_name="artifacts")
    op.drop_index(op.f("ix_artifacts_license"), table_name="artifacts")
    op.drop_index(op.f("ix_artifacts_last_modified_id"), table_name="artifacts")
    op.drop_index(op.f("ix_artifacts_file_type"), table_name="artifacts")
    op.drop_index(op.f("ix_artifacts_file_size_id"), table_name="artifacts")
    op.drop_index(op.f("ix_artifacts_expert_count"), table_name="artifacts")
    op.drop_index(op.f("ix_artifacts_downloads_id"), table_name="artifacts")
    op.drop_index(op.f("ix_artifacts_context_length"), table_name="artifacts")
    op.drop_index(op.f("ix_artifacts_architecture"), table_name="artifacts")
    op.drop_table("artifacts")
    op.drop_table("repos")
    op.drop_index(op.f("ix_crawls_status"), table_name="crawls")
    op.drop_table("crawls")
