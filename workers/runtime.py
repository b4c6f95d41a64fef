"""Pick the job runner the settings ask for: what `registry serve`, `registry jobs` use.

`jobs.mode = "embedded"`: an `EmbeddedQueue` over the catalog whose pool (and the crawl
schedules of the hub and of the local folders) runs inside the serving process. `"distributed"`: a `ProcrastinateQueue` that
only defers and reads; `registry worker` processes run the jobs and the periodic crawl.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from registry.api.launchers import JobQueue, QueueLauncher, QueueVerifier
from registry.catalog.db import Database
from registry.config import Settings
from workers.jobs import create_scheduled_crawl, schedule_cron
from workers.schedule import Schedule, ScheduleError, parse_schedule, run_schedule


class JobsConfigError(ValueError):
    """The [jobs] settings cannot work together with the others (distributed on SQLite).

    A mode that is neither `embedded` nor `distributed` is refused when the settings load."""


def check_mode(settings: Settings) -> str:
    mode = settings.jobs.mode
    if mode == "distributed" and not settings.database_url.startswith("postgresql"):
        raise JobsConfigError("jobs.mode = distributed needs a PostgreSQL database.url")
    schedule = parse_schedule(settings.schedule.crawl)
    if mode == "distributed" and schedule is not None:
        try:
            schedule_cron(schedule)  # the workers' periodic task takes a cron
        except ValueError as exc:
            raise JobsConfigError(f"schedule.crawl: {exc}") from None
    local = settings.local
    if mode == "distributed" and (local.paths or local.schedule.strip()):
        raise JobsConfigError(
            "local.folders and local.schedule work in the embedded mode only: with jobs.mode = distributed, "
            "run `registry index FOLDER ...` on the machine that has the folders"
        )
    try:
        local_schedule = parse_schedule(local.schedule)
    except ScheduleError as exc:
        raise JobsConfigError(f"local.schedule: {exc}") from None
    if local_schedule is not None and not local.paths:
        raise JobsConfigError("local.schedule is set but local.folders names no folder")
    return mode


@contextlib.asynccontextmanager
async def open_queue(settings: Settings, db: Database) -> AsyncIterator[JobQueue]:
    if check_mode(settings) == "distributed":
        from workers.queue_procrastinate import ProcrastinateQueue, build_app, require_queue_tables

        app = build_app(settings)
        async with app.open_async():
            await require_queue_tables(app)  # the API would answer every crawl and verify with a 500
            yield ProcrastinateQueue(app)
    else:
        from workers.queue_embedded import EmbeddedQueue

        yield EmbeddedQueue(settings, db)


@dataclass
class ServeJobs:
    """What `serve` gets: the API's launcher, verifier and queue, and background tasks."""

    queue: JobQueue
    launcher: QueueLauncher
    verifier: QueueVerifier
    background: list[Callable[[], Coroutine[Any, Any, object]]] = field(default_factory=list)


@contextlib.asynccontextmanager
async def serve_jobs(settings: Settings) -> AsyncIterator[ServeJobs]:
    """The job wiring of `registry serve` for the configured mode.

    Embedded: the pool and the crawl schedule run as background tasks of the server; a
    scheduled crawl commits its row, then enqueues it. Distributed: nothing runs here,
    the workers run jobs and the periodic crawl."""
    schedules = {"hub": parse_schedule(settings.schedule.crawl), "local": parse_schedule(settings.local.schedule)}
    async with Database.from_settings(settings) as db, open_queue(settings, db) as queue:
        launcher = QueueLauncher(queue, local=bool(settings.local.paths))
        out = ServeJobs(queue, launcher, QueueVerifier(db.sessions, queue))
        run = getattr(queue, "run", None)
        if run is not None:  # the embedded pool
            out.background.append(run)
            for source, schedule in schedules.items():
                if schedule is not None:
                    out.background.append(_scheduled(db, settings, queue, source, schedule))
        yield out


def _scheduled(
    db: Database, settings: Settings, queue: JobQueue, source: str, schedule: Schedule
) -> Callable[[], Coroutine[Any, Any, object]]:
    """The background task of one schedule: at each time, commit a crawl of `source`, then queue it."""

    async def crawl() -> None:
        await queue.enqueue_crawl(await create_scheduled_crawl(db, settings, source=source))

    return lambda: run_schedule(schedule, crawl)
