"""Watch jobs: queued, running, failed and done, in either runner (embedded or distributed).

The app's job reader answers: the runner's queue, or the catalog's `jobs` table by default.
"""

from __future__ import annotations

from aiohttp import web

from registry.api.cursors import decode_id_cursor, encode_id_cursor
from registry.api.errors import NotFound
from registry.api.keys import JOBS_KEY, SETTINGS_KEY
from registry.api.launchers import JobReader
from registry.api.paging import page_response
from registry.api.params import parse_query, path_int
from registry.api.replies import json_response
from registry.responses import Job, JobPage
from registry.responses.params import job_list_params

routes = web.RouteTableDef()


async def jobs_page(reader: JobReader, *, status: str | None, limit: int, cursor: str | None) -> JobPage:
    """A page of jobs, newest first, after `cursor`; `registry jobs` prints the same."""
    before = decode_id_cursor(cursor) if cursor is not None else None
    jobs = await reader.list_jobs(status=status, limit=limit + 1, before_id=before)
    more = len(jobs) > limit
    jobs = jobs[:limit]
    next_cursor = encode_id_cursor(jobs[-1].id) if more else None
    return JobPage(items=[Job.from_info(j) for j in jobs], next=next_cursor, limit=limit)


@routes.get("/v1/jobs", name="list_jobs")
async def list_jobs(request: web.Request) -> web.Response:
    args = parse_query(request, job_list_params(request.app[SETTINGS_KEY].api.max_limit))
    page = await jobs_page(request.app[JOBS_KEY], status=args["status"], limit=args["limit"], cursor=args["cursor"])
    return page_response(request, page)


@routes.get("/v1/jobs/{id}", name="get_job")
async def get_job(request: web.Request) -> web.Response:
    parse_query(request, ())
    job_id = path_int(request, "id")
    job = await request.app[JOBS_KEY].get_job(job_id)
    if job is None:
        raise NotFound(f"no job with id {job_id}", details={"job_id": job_id})
    return json_response(Job.from_info(job))
