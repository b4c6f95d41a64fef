"""Artifact search, facets and the single-artifact page."""

from __future__ import annotations

from aiohttp import web

from registry.api import pages
from registry.api.errors import ApiError, NotFound
from registry.api.keys import SETTINGS_KEY
from registry.api.paging import page_response
from registry.api.params import parse_query, path_int
from registry.api.replies import json_response
from registry.api.sessions import read_session
from registry.responses.params import DETAIL_PARAMS, FACETS_PARAM, FILTER_PARAMS, search_params

routes = web.RouteTableDef()


class NotStored(ApiError):
    status = 501
    code = "not_stored"


@routes.get("/v1/artifacts", name="search_artifacts")
async def search_artifacts(request: web.Request) -> web.Response:
    args = parse_query(request, search_params(request.app[SETTINGS_KEY].api.max_limit))
    async with read_session(request) as session:
        page = await pages.search_page(session, args)
    return page_response(request, page)


@routes.get("/v1/facets", name="facets")
async def facets(request: web.Request) -> web.Response:
    args = parse_query(request, (*FILTER_PARAMS, FACETS_PARAM))
    async with read_session(request) as session:
        body = await pages.facets_page(session, args)
    return json_response(body)


@routes.get("/v1/artifacts/{id}", name="get_artifact")
async def get_artifact(request: web.Request) -> web.Response:
    args = parse_query(request, DETAIL_PARAMS)
    artifact_id = path_int(request, "id")
    endpoint = request.app[SETTINGS_KEY].hub.endpoint
    async with read_session(request) as session:
        body = await pages.artifact_page(session, artifact_id, endpoint=endpoint, context=args["context"])
    if body is None:
        raise NotFound(f"no artifact with id {artifact_id}", details={"artifact_id": artifact_id})
    if args["tensors"]:
        raise NotStored(
            "the catalog does not store tensor tables yet; request the artifact without tensors",
            details={"parameter": "tensors"},
        )
    return json_response(body)
