"""A crawl's listing job in a process of its own, for the parent test to SIGKILL mid-way.

    python -m tests.jobs.listing_child CRAWL_ID HANG_AT MARKER (before|after)

Settings come from the environment (REGISTRY_*). The listing queues its repo jobs through
the embedded queue in batches of 5; at the HANG_AT-th repo it writes MARKER and waits
forever, `before` or `after` queuing that repo's job, so the parent kills it between a
reservation and its job, or between a job and the record of it.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from registry.catalog.db import Database
from registry.config import load_settings
from registry.hub.client import HubClient
from workers.crawl_jobs import enqueue_crawl
from workers.queue_embedded import EmbeddedQueue


async def main(crawl_id: int, hang_at: int, marker: Path, when: str) -> None:
    settings = load_settings()
    async with Database.from_settings(settings) as db:
        queue = EmbeddedQueue(settings, db)
        calls = 0

        async def enqueue(repo_id: str, known: str | None) -> int | None:
            nonlocal calls
            calls += 1
            job = None
            if calls != hang_at or when == "after":
                job = await queue.enqueue_index_repo(repo_id, known, crawl_id)
            if calls == hang_at:
                marker.write_text(repo_id)
                await asyncio.Event().wait()
            return job

        await enqueue_crawl(db, HubClient.from_settings(settings.hub), crawl_id, enqueue, batch=5)


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3]), sys.argv[4]))
