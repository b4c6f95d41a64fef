"""Watch jobs: queued, running, failed and done, in either runner (embedded or distributed).

The app's job reader answers: the runner's queue, or the catalog's `jobs` table by default.
"""

from __future__ import annotations

from aiohttp import web

from registry.api.cursors import decode_id_cursor, encode_id_cursor
from registry.api.errors import NotFound
from registry.api.keys import JOBS_KEY, SETTINGS_KEY
from registry.api.launchers import JOB_STATES
from registry.api.paging import page_response, paging_params
from registry.api.params import Param, choice_param, parse_query, path_int
from registry.api.responses import json_response

routes = web.RouteTableDef()


def list_params(max_limit: int) -> tuple[Param, ...]:
    return (choice_param("status", "Only jobs in this state.", JOB_STATES), *paging_params(max_limit))


@routes.get("/v1/jobs", name="list_jobs")
async def list_jobs(request: web.Request) -> web.Response:
    args = parse_query(request, list_params(request.app[SETTINGS_KEY].api.max_limit))
    limit: int = args["limit"]
    before = decode_id_cursor(args["cursor"]) if args["cursor"] is not None else None
    jobs = await request.app[JOBS_KEY].list_jobs(status=args["status"], limit=limit + 1, before_id=before)
    more = len(jobs) > limit
    jobs = jobs[:limit]
    items = [{**j.to_dict(), "url": f"/v1/jobs/{j.id}"} for j in jobs]
    return page_response(request, items, encode_id_cursor(jobs[-1].id) if more else None, limit)


@routes.get("/v1/jobs/{id}", name="get_job")
async def get_job(request: web.Request) -> web.Response:
    parse_query(request, ())
    job_id = path_int(request, "id")
    job = await request.app[JOBS_KEY].get_job(job_id)
    if job is None:
        raise NotFound(f"no job with id {job_id}", details={"job_id": job_id})
    return json_response({**job.to_dict(), "url": f"/v1/jobs/{job.id}"})
