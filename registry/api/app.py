"""`create_app`: the aiohttp application with every dependency passed in.

Nothing here opens a connection or reads the environment; the caller (the `serve`
command, a test) builds the engine and the settings and owns their lifetime unless it
asks the app to dispose of the engine on cleanup.
"""

from __future__ import annotations

from aiohttp import web
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from registry import web as web_catalog
from registry.api.auth import TokenAuth, auth_middleware
from registry.api.conditional import conditional_middleware
from registry.api.errors import error_middleware
from registry.api.keys import (
    AUTH_KEY,
    JOBS_KEY,
    LAUNCHER_KEY,
    METRICS_KEY,
    OPENAPI_KEY,
    SESSIONMAKER_KEY,
    SETTINGS_KEY,
    VERIFIER_KEY,
)
from registry.api.launchers import CatalogJobs, CrawlLauncher, JobReader, Verifier
from registry.api.metrics import ApiMetrics
from registry.api.middleware import observe_middleware
from registry.api.openapi import build_openapi
from registry.api.routes import ROUTE_TABLES
from registry.config import Settings

# Request bodies here are small JSON documents; anything bigger is a mistake or abuse.
MAX_BODY_BYTES = 64 * 1024


def _sessionmaker(db: AsyncEngine | async_sessionmaker[AsyncSession]) -> async_sessionmaker[AsyncSession]:
    if isinstance(db, AsyncEngine):
        # expire_on_commit=False: rows stay readable after commit without lazy IO.
        return async_sessionmaker(db, expire_on_commit=False)
    return db


def create_app(
    settings: Settings,
    db: AsyncEngine | async_sessionmaker[AsyncSession],
    *,
    launcher: CrawlLauncher | None = None,
    verifier: Verifier | None = None,
    jobs: JobReader | None = None,
    metrics: ApiMetrics | None = None,
    dispose_engine: bool = False,
) -> web.Application:
    """The REST API over a catalog database.

    `db` is an engine or a session factory. `launcher` starts crawls and `verifier` queues
    verifications; without them those routes answer 503. `jobs` lists jobs (default: the
    catalog's `jobs` table, the embedded runner's record). Pass `metrics` to share one
    metrics object with in-process workers. With `dispose_engine` the app disposes the
    engine on cleanup (the `serve` command's case).
    """
    app = web.Application(
        middlewares=[observe_middleware, conditional_middleware, error_middleware, auth_middleware],
        client_max_size=MAX_BODY_BYTES,
    )
    app[SETTINGS_KEY] = settings
    sessions = _sessionmaker(db)
    app[SESSIONMAKER_KEY] = sessions
    app[METRICS_KEY] = metrics or ApiMetrics()
    app[AUTH_KEY] = TokenAuth.from_settings(settings.api)
    app[LAUNCHER_KEY] = launcher
    app[VERIFIER_KEY] = verifier
    app[JOBS_KEY] = jobs if jobs is not None else CatalogJobs(sessions)
    for table in ROUTE_TABLES:
        app.router.add_routes(table)
    web_catalog.mount(app)
    app[OPENAPI_KEY] = build_openapi(settings.api, launcher.sources() if launcher is not None else ())
    if dispose_engine:
        engine = db if isinstance(db, AsyncEngine) else sessions.kw.get("bind")

        async def _dispose(_app: web.Application) -> None:
            if isinstance(engine, AsyncEngine):
                await engine.dispose()

        app.on_cleanup.append(_dispose)
    return app
