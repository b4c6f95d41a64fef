"""Queue, list and read verifications.

`POST /v1/verifications` asks the `Verifier` passed to `create_app` (under `registry serve`,
the job queue of either mode) to record a `queued` row and run it; the row then follows
the run to its verdict. An app built without a verifier answers both routes with 503
(`details.component`: `verifier`).
"""

from __future__ import annotations

from aiohttp import web
from sqlalchemy import select

from registry.api.bodies import read_json_object, verification_artifact_id
from registry.api.cursors import newest_first
from registry.api.errors import NotFound, ServiceUnavailable, required
from registry.api.keys import SESSIONMAKER_KEY, SETTINGS_KEY, VERIFIER_KEY
from registry.api.launchers import Verifier
from registry.api.paging import page_response
from registry.api.params import parse_query, path_int
from registry.api.replies import json_response
from registry.api.sessions import read_session
from registry.catalog.models import Artifact, Verification
from registry.catalog.readpath import ReadSession
from registry.responses import Verification as VerificationBody
from registry.responses.operations import VerificationPage
from registry.responses.params import verification_list_params

routes = web.RouteTableDef()


def _verifier(request: web.Request) -> Verifier:
    return required(request, VERIFIER_KEY,
                    "verifications are not available: this server runs without a verification worker",
                    "verifier")  # fmt: skip


@routes.post("/v1/verifications", name="start_verification")
async def start_verification(request: web.Request) -> web.Response:
    parse_query(request, ())
    _verifier(request)
    body = await queue_verification(request, verification_artifact_id(await read_json_object(request)))
    return json_response(body, status=202, headers={"Location": body.url})


async def queue_verification(request: web.Request, artifact_id: int) -> VerificationBody:
    """Queue a verification of the artifact (the API's route and the web catalog's form):
    NotFound for an unknown artifact, ServiceUnavailable when no worker records it."""
    verifier = _verifier(request)
    async with request.app[SESSIONMAKER_KEY]() as session:
        exists = await session.scalar(select(Artifact.id).where(Artifact.id == artifact_id))
    if exists is None:
        raise NotFound(f"no artifact with id {artifact_id}", details={"artifact_id": artifact_id})
    verification_id = await verifier.enqueue(artifact_id)
    async with request.app[SESSIONMAKER_KEY]() as session:
        row = await session.get(Verification, verification_id)
    if row is None:  # the verifier promised a row; a missing one is a worker bug
        raise ServiceUnavailable(
            "the verification worker did not record the verification",
            details={"component": "verifier", "verification_id": verification_id},
        )
    return VerificationBody.from_row(row)


@routes.get("/v1/verifications", name="list_verifications")
async def list_verifications(request: web.Request) -> web.Response:
    args = parse_query(request, verification_list_params(request.app[SETTINGS_KEY].api.max_limit))
    async with read_session(request) as session:
        page = await verifications_page(session, status=args["status"], artifact_id=args["artifact"],
                                        limit=args["limit"], cursor=args["cursor"])  # fmt: skip
    return page_response(request, page)


async def verifications_page(
    session: ReadSession, *, status: str | None, artifact_id: int | None, limit: int, cursor: str | None
) -> VerificationPage:  # fmt: skip
    """A page of verifications, newest first, after `cursor`; the web catalog's page shows the same."""
    where = [] if status is None else [Verification.status == status]
    if artifact_id is not None:
        where.append(Verification.artifact_id == artifact_id)
    rows, next_cursor = await newest_first(session, Verification, where, limit=limit, cursor=cursor)
    return VerificationPage(items=[VerificationBody.from_row(r) for r in rows], next=next_cursor, limit=limit)


@routes.get("/v1/verifications/{id}", name="get_verification")
async def get_verification(request: web.Request) -> web.Response:
    parse_query(request, ())
    _verifier(request)
    return json_response(await read_verification(request, path_int(request, "id")))


async def read_verification(request: web.Request, verification_id: int) -> VerificationBody:
    """One verification (this route and the web catalog's page); NotFound when there is none."""
    async with read_session(request) as session:
        row = await session.get(Verification, verification_id)
    if row is None:
        raise NotFound(f"no verification with id {verification_id}", details={"verification_id": verification_id})
    return VerificationBody.from_row(row)
