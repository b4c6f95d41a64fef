"""What the catalog holds, in a few counts: for monitoring (`GET /metrics`).

Every count reads an index (artifacts by status and by latest verification, crawls by
status and end time; on SQLite the repos' count too), but the repos an older release
wrote, which reads the repos. The counts are kept until the next commit, as facet counts
are (`memo`): a scrape of an idle catalog reads nothing but the generation.
Counts come for every status the catalog knows, 0 included, so a status that empties
reads 0 instead of keeping its last value.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Select, func, select

from registry.catalog.models import (
    ARTIFACT_STATUSES,
    CRAWL_STATUSES,
    VERIFICATION_STATUSES,
    Artifact,
    Crawl,
    Repo,
)
from registry.catalog.readpath import CatalogSession, caches_of
from registry.catalog.services import DERIVED_BEFORE

# Crawl statuses that end a crawl: each has the time the latest such crawl ended.
ENDED = tuple(s for s in CRAWL_STATUSES if s != "running")


@dataclass(frozen=True)
class CatalogStats:
    artifacts: dict[str, int]  # per artifact status
    verified: dict[str, int]  # artifacts per status of their latest verification (never verified: none)
    repos: int
    repos_derived_before: int  # written in full by an older release (services.derived_before)
    crawls_running: int
    last_crawl_end: dict[str, datetime]  # per end status, when a crawl last ended so; absent: never


async def catalog_stats(session: CatalogSession) -> CatalogStats:
    found = caches_of(session)
    memo = found.memo if found is not None else None
    generation = await memo.generation(session) if memo is not None else None  # before counting
    if memo is not None and isinstance(hit := memo.stats(generation), CatalogStats):
        return hit
    stats = await _count(session)
    if memo is not None:
        memo.put_stats(generation, stats)
    return stats


def _counts_by(column: Any, *where: Any) -> Select[Any]:
    return select(column, func.count()).where(*where).group_by(column)


_BY_STATUS = _counts_by(Artifact.status)
_BY_VERIFICATION = _counts_by(Artifact.verification_status, Artifact.verification_status.is_not(None))
_REPOS = select(func.count()).select_from(Repo)
_DERIVED_BEFORE = select(func.count()).where(DERIVED_BEFORE)
_CRAWLS_RUNNING = select(func.count()).where(Crawl.status == "running")
_CRAWLS_ENDED = select(Crawl.status, func.max(Crawl.finished_at)).where(Crawl.status.in_(ENDED)).group_by(Crawl.status)


async def _count(session: CatalogSession) -> CatalogStats:
    # Through the session's connection: on the API's read path (registry.catalog.readpath)
    # that is its snapshot, the one the generation above was pinned for.
    conn = await session.connection()

    async def counts(stmt: Any, known: tuple[str, ...]) -> dict[str, int]:
        out = dict.fromkeys(known, 0)
        out.update({str(value): int(n) for value, n in (await conn.execute(stmt)).all() if value is not None})
        return out

    async def number(stmt: Any) -> int:
        return int((await conn.execute(stmt)).scalar() or 0)

    ended = (await conn.execute(_CRAWLS_ENDED)).all()
    return CatalogStats(
        artifacts=await counts(_BY_STATUS, ARTIFACT_STATUSES),
        verified=await counts(_BY_VERIFICATION, VERIFICATION_STATUSES),
        repos=await number(_REPOS),
        repos_derived_before=await number(_DERIVED_BEFORE),
        crawls_running=await number(_CRAWLS_RUNNING),
        last_crawl_end={status: at for status, at in ended if at is not None},
    )
