"""What the catalog holds, in a few counts: for monitoring (`GET /metrics`).

Every count reads an index (artifacts by status, by latest verification; repos by source)
and the crawl times read the crawls table, which holds one row per crawl: a scrape costs a
few milliseconds on 100,000 artifacts. Counts come for every status the catalog knows, 0
included, so a status that empties reads 0 instead of keeping its last value.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from registry.catalog.models import (
    ARTIFACT_STATUSES,
    CRAWL_STATUSES,
    REPO_SOURCES,
    VERIFICATION_STATUSES,
    Artifact,
    Crawl,
    Repo,
)

# Crawl statuses that end a crawl: each has the time the latest such crawl ended.
ENDED = tuple(s for s in CRAWL_STATUSES if s != "running")


@dataclass(frozen=True)
class CatalogStats:
    artifacts: dict[str, int]  # per artifact status
    verified: dict[str, int]  # artifacts per status of their latest verification (never verified: none)
    repos: dict[str, int]  # per source (hub, local)
    crawls_running: int
    last_crawl_end: dict[str, datetime]  # per end status, when a crawl last ended so; absent: never


async def catalog_stats(session: AsyncSession) -> CatalogStats:
    async def counts(column: object, known: tuple[str, ...], *where: object) -> dict[str, int]:
        out = dict.fromkeys(known, 0)
        rows = await session.execute(select(column, func.count()).where(*where).group_by(column))  # type: ignore[call-overload]
        out.update({str(value): int(n) for value, n in rows.all() if value is not None})
        return out

    ended = await session.execute(
        select(Crawl.status, func.max(Crawl.finished_at)).where(Crawl.status.in_(ENDED)).group_by(Crawl.status)
    )
    return CatalogStats(
        artifacts=await counts(Artifact.status, ARTIFACT_STATUSES),
        verified=await counts(
            Artifact.verification_status, VERIFICATION_STATUSES, Artifact.verification_status.is_not(None)
        ),
        repos=await counts(Repo.source, REPO_SOURCES),
        crawls_running=int(await session.scalar(select(func.count()).where(Crawl.status == "running")) or 0),
        last_crawl_end={status: at for status, at in ended.all() if at is not None},
    )
