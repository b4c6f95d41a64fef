"""Route tables, one module per area of the API."""

from __future__ import annotations

from aiohttp import web

from registry.api.routes import artifacts, crawls, files, jobs, repos, system, verifications

ROUTE_TABLES: tuple[web.RouteTableDef, ...] = (
    system.routes,
    artifacts.routes,
    repos.routes,
    files.routes,
    crawls.routes,
    verifications.routes,
    jobs.routes,
)
