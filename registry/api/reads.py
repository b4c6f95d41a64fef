"""Detail reads the pages need, with explicit eager loading (relationships are lazy="raise").

Search, facets and lineage walks come from the catalog; these are the plain by-key reads
of one repo or one artifact with everything its page shows.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import selectinload

from registry.catalog.models import Artifact, LineageEdge, Repo, Verification

_ARTIFACT_LOADS = (
    selectinload(Artifact.facts),
    selectinload(Artifact.quant_mix),
    selectinload(Artifact.shards),
)


async def get_repo(session: AsyncSession, repo_id: str) -> Repo | None:
    return (await session.scalars(select(Repo).where(Repo.repo_id == repo_id))).one_or_none()


async def repo_artifacts(session: AsyncSession, repo_pk: int) -> list[Artifact]:
    # "gone" artifacts are files the repo no longer has; the page shows what it holds now.
    query = (
        select(Artifact)
        .where(Artifact.repo_pk == repo_pk, Artifact.status != "gone")
        .options(*_ARTIFACT_LOADS)
        .order_by(Artifact.path)
    )
    return list((await session.scalars(query)).all())


async def get_artifact(session: AsyncSession, artifact_id: int) -> tuple[Artifact, str] | None:
    query = (
        select(Artifact, Repo.repo_id)
        .join(Repo, Repo.id == Artifact.repo_pk)
        .where(Artifact.id == artifact_id)
        .options(*_ARTIFACT_LOADS)
    )
    row = (await session.execute(query)).one_or_none()
    return (row[0], row[1]) if row is not None else None


async def latest_verifications(session: AsyncSession, artifact_ids: Sequence[int]) -> dict[int, Verification]:
    if not artifact_ids:
        return {}
    newest = (
        select(func.max(Verification.id))
        .where(Verification.artifact_id.in_(artifact_ids))
        .group_by(Verification.artifact_id)
    )
    rows = await session.scalars(select(Verification).where(Verification.id.in_(newest)))
    return {v.artifact_id: v for v in rows.all()}


async def is_lineage_node(session: AsyncSession, repo_id: str) -> bool:
    """Whether any edge names this repo as a parent: a repo not in the catalog still has a tree."""
    found = await session.scalar(select(LineageEdge.id).where(LineageEdge.parent_repo_id == repo_id).limit(1))
    return found is not None
