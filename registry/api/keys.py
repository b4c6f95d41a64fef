"""Typed keys for what `create_app` hands to handlers and middlewares.

Dependencies live on the application under these keys instead of in module globals, so
two apps (say, a SQLite one and a PostgreSQL one in the same test run) never share state.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aiohttp import web

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

    from registry.api.auth import TokenAuth
    from registry.api.balance import ConnectionShares
    from registry.api.launchers import CrawlLauncher, JobReader, Verifier
    from registry.api.metrics import ApiMetrics
    from registry.config import Settings

# Annotated rather than AppKey("name", Type): the types live in modules that import this
# one, so they are only imported for the type checker.
SETTINGS_KEY: web.AppKey[Settings] = web.AppKey("settings")
SESSIONMAKER_KEY: web.AppKey[async_sessionmaker[AsyncSession]] = web.AppKey("sessionmaker")
METRICS_KEY: web.AppKey[ApiMetrics] = web.AppKey("metrics")
AUTH_KEY: web.AppKey[TokenAuth] = web.AppKey("auth")
LAUNCHER_KEY: web.AppKey[CrawlLauncher | None] = web.AppKey("crawl_launcher")
VERIFIER_KEY: web.AppKey[Verifier | None] = web.AppKey("verifier")
JOBS_KEY: web.AppKey[JobReader] = web.AppKey("jobs")
OPENAPI_KEY: web.AppKey[dict[str, Any]] = web.AppKey("openapi")
# Set by `registry serve --workers N` (N > 1) only: see registry.api.balance.
SHARES_KEY: web.AppKey[ConnectionShares] = web.AppKey("connection_shares")

REQUEST_ID_KEY = web.RequestKey("request_id", str)
