"""The model tree page and the pages of a layer's rest."""

from __future__ import annotations

from aiohttp import web

from registry.api import reads
from registry.api.errors import NotFound
from registry.api.params import parse_query
from registry.api.routes.repos import repo_id_from_path
from registry.api.sessions import read_session
from registry.catalog.readpath import CatalogSession
from registry.responses.params import TREE_MORE_PARAMS
from registry.web import svg
from registry.web.render import render
from registry.web.treeview import repo_href, rest_page, tree_href, tree_view

routes = web.RouteTableDef()


async def _focus(session: CatalogSession, repo_id: str) -> tuple[str, bool]:
    """The repo as the catalog spells it and whether it is in the catalog; a parent outside
    it has a tree when some edge names it."""
    row = await reads.get_repo(session, repo_id)
    if row is not None:
        return row.repo_id, True
    if await reads.is_lineage_node(session, repo_id):
        return repo_id, False
    raise NotFound(f"no repo {repo_id} in the catalog or its lineage", details={"repo": repo_id})


@routes.get("/tree/{org}/{name}", name="web_tree")
async def tree(request: web.Request) -> web.Response:
    parse_query(request, (), blank_is_absent=True)
    async with read_session(request) as session:
        repo_id, in_catalog = await _focus(session, repo_id_from_path(request))
        view = await tree_view(session, repo_id, in_catalog)
    return render(request, "tree.html", title=f"Model tree of {repo_id}", repo_id=repo_id, in_catalog=in_catalog,
                  view=view, graph=svg.lineage_graph(view.tree), repo_url=repo_href(repo_id),
                  json_url=f"/v1/repos/{repo_id}/lineage")  # fmt: skip


@routes.get("/tree/{org}/{name}/more", name="web_tree_more")
async def more(request: web.Request) -> web.Response:
    args = parse_query(request, TREE_MORE_PARAMS, blank_is_absent=True)
    async with read_session(request) as session:
        repo_id, _ = await _focus(session, repo_id_from_path(request))
        page = await rest_page(session, repo_id, args["side"], args["level"], args["after"] or "")
    return render(request, "tree_more.html", title=f"More {args['side']} of {repo_id}", repo_id=repo_id, page=page,
                  tree_url=tree_href(repo_id), json_url=f"/v1/repos/{repo_id}/lineage")  # fmt: skip
