"""Artifact search, facets and the single-artifact page."""

from __future__ import annotations

from aiohttp import web

from registry.api import pages
from registry.api.errors import NotFound
from registry.api.keys import SETTINGS_KEY
from registry.api.paging import page_response
from registry.api.params import parse_query, path_int
from registry.api.replies import json_response
from registry.api.sessions import read_session
from registry.responses.params import (
    DETAIL_PARAMS,
    FACETS_PARAM,
    FILTER_PARAMS,
    TENSOR_PARAMS,
    memory_options,
    search_params,
)

routes = web.RouteTableDef()


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
        body = await pages.artifact_page(session, artifact_id, endpoint=endpoint, context=args["context"],
                                         memory_options=memory_options(args))  # fmt: skip
    if body is None:
        raise NotFound(f"no artifact with id {artifact_id}", details={"artifact_id": artifact_id})
    return json_response(body)


@routes.get("/v1/artifacts/{id}/tensors", name="artifact_tensors")
async def artifact_tensors(request: web.Request) -> web.Response:
    args = parse_query(request, TENSOR_PARAMS)
    artifact_id = path_int(request, "id")
    async with read_session(request) as session:
        page = await pages.tensor_page(session, artifact_id, args)
    if page is None:
        raise NotFound(f"artifact {artifact_id} has no tensor table in the catalog (no such artifact, an error "
                       "row, or indexed before tensor tables were kept)", details={"artifact_id": artifact_id})
    return json_response(page)
