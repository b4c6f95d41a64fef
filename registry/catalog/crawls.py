"""Cancelling a crawl: the row says so, and whoever works for the crawl looks at it.

`cancel_crawl` marks a running crawl `cancelled` at once, with its end time. The crawl's
workers read the row and stop: a listing before it queues its next batch of repos, an
index-repo job before it reads the hub (`repos_wanted_elsewhere` says when it must read
anyway), an in-process crawl before each repo. What is already written stays: each repo
is one transaction, so a cancelled crawl leaves every repo whole or untouched. Jobs that
were reading when the crawl was cancelled end normally and still add their counters, so
`counters.pending` of a cancelled crawl falls to 0 as they end; the others end at once,
counted `cancelled`.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import timedelta

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession

from registry.catalog.models import Crawl, CrawlRepo
from registry.catalog.types import utcnow

# Clocks of the workers that write crawl_repos rows may differ this much (distributed mode).
CLOCK_SKEW = timedelta(minutes=1)


async def cancel_crawl(session: AsyncSession, crawl_id: int) -> Crawl | None:
    """Cancel the crawl if it is running; return its row as it now is (None: no such crawl).

    A crawl that has already ended keeps its status: the caller tells the two apart by the
    row's `status`. Idempotent: a cancelled crawl stays as it was cancelled."""
    now = utcnow()
    await session.execute(
        update(Crawl)
        .where(Crawl.id == crawl_id, Crawl.status == "running")
        .values(status="cancelled", finished_at=now, heartbeat_at=now)
    )
    return await session.get(Crawl, crawl_id, populate_existing=True)


async def crawl_status(session: AsyncSession, crawl_id: int) -> str | None:
    """The crawl's status now (None: no such crawl)."""
    return await session.scalar(select(Crawl.status).where(Crawl.id == crawl_id))


async def repos_wanted_elsewhere(session: AsyncSession, repo_ids: Collection[str], crawl: Crawl) -> set[str]:
    """Those of `repo_ids` whose index job, queued by `crawl`, another crawl may count on:
    the job must read the repo although `crawl` was cancelled.

    One job per repo waits at a time (the job lock), and a crawl whose listing finds one
    waiting leaves the repo to it (its row `skipped`), even if that crawl has ended since.
    So the job reads when another crawl skipped the repo after `crawl` started, or has
    reserved it and is about to queue it. That may also catch a skip that an earlier job
    answered: the repo is then read once more, which costs a request, never a lost read."""
    if not repo_ids:
        return set()
    since = crawl.started_at - CLOCK_SKEW
    rows = await session.scalars(
        select(CrawlRepo.repo_id)
        .join(Crawl, Crawl.id == CrawlRepo.crawl_id)
        .where(
            CrawlRepo.repo_id.in_(list(repo_ids)),
            CrawlRepo.crawl_id != crawl.id,
            ((CrawlRepo.state == "skipped") & (CrawlRepo.updated_at >= since))
            | ((CrawlRepo.state == "reserved") & (Crawl.status == "running")),
        )
        .distinct()
    )
    return set(rows)
