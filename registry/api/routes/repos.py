"""A repo page and its model tree."""

from __future__ import annotations

from typing import Any

from aiohttp import web
from sqlalchemy import Row

from registry.api import pages, reads
from registry.api.errors import InvalidParameter, Moved, NotFound
from registry.api.keys import SETTINGS_KEY
from registry.api.params import parse_query
from registry.api.replies import json_response
from registry.api.sessions import read_session
from registry.catalog import lineage
from registry.catalog.models import REPO_ID_LENGTH
from registry.catalog.readpath import CatalogSession
from registry.responses.params import LINEAGE_PARAMS

routes = web.RouteTableDef()


def repo_id_from_path(request: web.Request) -> str:
    org, name = request.match_info["org"], request.match_info["name"]
    for part, value in (("org", org), ("name", name)):
        if not value or len(value) > REPO_ID_LENGTH // 2:
            raise InvalidParameter(part, f"{part} must be 1 to {REPO_ID_LENGTH // 2} characters")
        if "\x00" in value:  # no repo id holds one, and PostgreSQL refuses it in a query
            raise InvalidParameter(part, f"{part} must not contain NUL")
    return f"{org}/{name}"


async def _moved(request: web.Request, session: CatalogSession, repo_id: str, repo: Row[Any] | None) -> None:
    """A repo id the hub has moved to another repo (renamed, transferred) redirects there, as
    the hub does: 308 to the same route of the repo's id, with the same query. Only an id
    with no indexed row of its own is looked up (a retired row keeps no revision)."""
    if repo is not None and repo.revision is not None:
        return
    target = await lineage.moved_to(session, repo_id)
    org, _, name = (target or "").partition("/")
    if target is None or not org or not name:  # an id with no owner part has no route of this shape
        return
    url = request.app.router[request.match_info.route.name or "get_repo"].url_for(org=org, name=name)
    raise Moved(f"the hub has moved {repo_id} to {target}", repo_id, target, str(url.with_query(request.query)))


@routes.get("/v1/repos/{org}/{name}", name="get_repo")
async def get_repo(request: web.Request) -> web.Response:
    parse_query(request, ())
    repo_id = repo_id_from_path(request)
    async with read_session(request) as session:
        repo = await reads.get_repo(session, repo_id)
        await _moved(request, session, repo_id, repo)
        if repo is None:
            raise NotFound(f"no repo {repo_id} in the catalog", details={"repo": repo_id})
        body = await pages.repo_page(session, repo, endpoint=request.app[SETTINGS_KEY].hub.endpoint)
    return json_response(body)


@routes.get("/v1/repos/{org}/{name}/lineage", name="get_lineage")
async def get_lineage(request: web.Request) -> web.Response:
    args = parse_query(request, LINEAGE_PARAMS)
    repo_id = repo_id_from_path(request)
    direction, depth = args["direction"], args["depth"]
    async with read_session(request) as session:
        repo = await reads.get_repo(session, repo_id)
        await _moved(request, session, repo_id, repo)
        if repo is not None:
            repo_id = repo.repo_id  # any case finds it (as on the hub); the catalog's spelling
        elif not await reads.is_lineage_node(session, repo_id):
            raise NotFound(f"no repo {repo_id} in the catalog or its lineage", details={"repo": repo_id})
        body = await pages.tree_page(session, repo_id, repo, direction, depth)
    return json_response(body)

