"""Crawl repos are indexed by repo id and time.

A crawl can now be cancelled (`POST /v1/crawls/{id}/cancel`). The index-repo job of a
cancelled crawl reads its repo anyway when another crawl counts on that job: one that
reserved the repo, or skipped it since the job was queued. That question names a repo, not
a crawl, and the primary key (crawl_id, repo_id) cannot answer it without reading every
crawl's rows; this index answers it in one range. The schema is otherwise unchanged.

Revision ID: b3e9d4f1a7c5
Revises: a1c7e5b3d9f2
Create Date: 2026-11-27 18:30:00
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "b3e9d4f1a7c5"
down_revision: str | None = "a1c7e5b3d9f2"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index("ix_crawl_repos_repo_id_updated_at", "crawl_repos", ["repo_id", "updated_at"])


def downgrade() -> None:
    op.drop_index("ix_crawl_repos_repo_id_updated_at", table_name="crawl_repos")
