"""The OpenAPI 3.1 document, built from the same parameter declarations the routes parse
(`registry.responses.params`) and the JSON Schemas of the models they answer with
(`registry.responses.schema`).

Each operation is declared once below (path, parameters, body, responses); a test checks
that the set of operations equals the set of routes the app registers, so neither can
gain a route the other lacks.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from registry.api import reads
from registry.api.routes import files
from registry.catalog.lineage import MAX_EDGES
from registry.config import ApiSettings
from registry.responses import params, schema
from registry.responses.params import Param
from registry.responses.requests import LOCAL_SOURCE
from registry.responses.schema import ref
from registry.responses.vocab import BIGINT_MAX

OPENAPI_VERSION = "3.1.0"
API_VERSION = "1"

_ERROR_TEXT = {
    "400": "A query parameter, path parameter or body field is invalid; `details` names it.",
    "401": "A bearer token (the webhook: an X-Webhook-Secret) is required or the one given is not valid.",
    "403": "Writes are disabled on this server (no api.tokens; for the webhook, no api.webhook_secrets).",
    "308": "The hub has moved this repo id (renamed, transferred): `Location` is the same request for "
    "the repo's id now, which `details.moved_to` names.",
    "404": "No such resource (on searches: the artifact `draft_for` names).",
    "409": "The resource is not in a state that allows this: `details` says which it is in.",
    "413": "The request body is larger than the server accepts.",
    "503": "A component this request needs is not available; `details.component` names it.",
    "500": "Unexpected failure; `details.request_id` identifies it in the server log.",
}


_ERROR_HEADERS = {
    "308": {"headers": {"Location": {"description": "The same request for the repo's id now.",
                                     "schema": {"type": "string"}}}},
    "503": {"headers": {"Retry-After": {"description": "Seconds to wait before retrying, when the component is "
                                                       "expected back (the catalog database).",
                                        "schema": {"type": "string"}}}},
}  # fmt: skip
# Operations that answer without the catalog database; every other one may find it unavailable (503).
_NO_DATABASE = frozenset({"healthz", "openapi", "metrics"})


@dataclass(frozen=True)
class Operation:
    method: str
    path: str
    operation_id: str
    summary: str
    tag: str
    ok_status: str = "200"
    ok_schema: str | None = None
    query: tuple[Param, ...] = ()
    path_params: tuple[tuple[str, dict[str, Any], str], ...] = ()
    body: str | None = None
    errors: tuple[str, ...] = ()
    write: bool = False
    public: bool = False  # open even with private reads (health probes)
    ok_content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)
    also_ok: tuple[tuple[str, str, str], ...] = ()  # (status, schema, description) of other successes
    webhook: bool = False  # authenticated by the hub's X-Webhook-Secret, not a bearer token


_ID = {"type": "integer", "minimum": 1, "maximum": BIGINT_MAX}
_NAME = {"type": "string", "minLength": 1, "maxLength": 150, "pattern": r"^[^\x00]*$"}
_REPO_PATH = (("org", _NAME, "Owner of the repo (any case of A-Z, as on the hub)."),
              ("name", _NAME, "Name of the repo (any case of A-Z)."))
_LINK = {"Link": 'Next page as `<url>; rel="next"` when there is one.'}
# Every successful read is tagged (registry/api/conditional.py).
_ETAG = {"ETag": "A digest of the body: send it back in `If-None-Match` to get `304` while the answer is the same.",
         "Cache-Control": "`no-cache`: revalidate (with the ETag) before reusing a stored answer."}
_IF_NONE_MATCH = {"name": "If-None-Match", "in": "header", "required": False,
                  "description": "ETags of answers the client has: `304` with no body when the answer has one of "
                  "them (`*`: any).", "schema": {"type": "string"}}
_NOT_MODIFIED = {"description": "Not Modified: the answer is the one whose ETag the request sent.",
                 "headers": {"ETag": {"description": "The answer's ETag.", "schema": {"type": "string"}}}}


def operations(api: ApiSettings) -> list[Operation]:
    return [
        Operation("get", "/healthz", "healthz", "Liveness: the process answers.", "system",
                  ok_schema="Health", public=True),
        Operation("get", "/readyz", "readyz", "Readiness: the database answers SELECT 1.", "system",
                  ok_schema="Ready", errors=("503",), public=True),
        Operation("get", "/metrics", "metrics", "Prometheus metrics (text exposition format).", "system",
                  ok_content_type="text/plain"),
        Operation("get", "/openapi.json", "openapi", "This document.", "system"),
        Operation("get", "/v1/artifacts", "search_artifacts", "Search artifacts (keyset-paged).", "artifacts",
                  ok_schema="ArtifactPage", query=params.search_params(api.max_limit), headers=_LINK,
                  errors=("404",)),
        Operation("get", "/v1/artifacts/{id}", "get_artifact", "One artifact in full.", "artifacts",
                  ok_schema="Artifact", query=params.DETAIL_PARAMS,
                  path_params=(("id", _ID, "Artifact id."),), errors=("404",)),
        Operation("get", "/v1/artifacts/{id}/tensors", "artifact_tensors",
                  "A page of one artifact's tensor table, in file order.", "artifacts", ok_schema="TensorPage",
                  query=params.TENSOR_PARAMS, path_params=(("id", _ID, "Artifact id."),), errors=("404",)),
        Operation("get", "/v1/facets", "facets", "Counts per facet under the given filters.", "artifacts",
                  ok_schema="Facets", query=(*params.FILTER_PARAMS, params.FACETS_PARAM), errors=("404",)),
        Operation("get", "/v1/repos/{org}/{name}", "get_repo",
                  "A repo with its artifacts and direct lineage edges.", "repos",
                  ok_schema="RepoDetail", path_params=_REPO_PATH, errors=("308", "404")),
        Operation("get", "/v1/repos/{org}/{name}/lineage", "get_lineage",
                  "The model tree around a repo: at most `max_edges` edges a side, shallowest first.",
                  "repos", ok_schema="Lineage", query=params.LINEAGE_PARAMS, path_params=_REPO_PATH,
                  errors=("308", "404")),
        Operation("get", "/v1/files/{sha256}", "get_files",
                  "The catalog's files that hold the bytes of this sha256 (the hub's LFS oid): repos, artifacts, "
                  "shards and download URLs, indexed artifacts first.", "artifacts", ok_schema="FileMatches",
                  path_params=(("sha256", {"type": "string", "pattern": files.SHA256_PATTERN},
                                "sha256 of the file, 64 hex digits (any case)."),), errors=("404",)),
        Operation("post", "/v1/crawls", "start_crawl", "Start a crawl of a configured source.", "crawls",
                  ok_status="202", ok_schema="Crawl", body="CrawlRequest", errors=("503",), write=True,
                  headers={"Location": "URL of the new crawl (`GET /v1/crawls/{id}`)."}),
        Operation("post", "/v1/hooks/hub", "hub_webhook",
                  "A hub webhook delivery (Hugging Face payload version 3): crawl the model repo it names, and "
                  "the id a move gave it. Authenticated by X-Webhook-Secret (api.webhook_secrets).", "crawls",
                  ok_status="202", ok_schema="Crawl", body="HubWebhook", errors=("503",), webhook=True,
                  headers={"Location": "URL of the new crawl (`GET /v1/crawls/{id}`)."},
                  also_ok=(("200", "WebhookIgnored", "The delivery asks for no crawl: `ignored` says why."),)),
        Operation("get", "/v1/crawls", "list_crawls", "Crawls, newest first (keyset-paged).", "crawls",
                  ok_schema="CrawlPage", query=params.crawl_list_params(api.max_limit), headers=_LINK),
        Operation("get", "/v1/crawls/{id}", "get_crawl", "One crawl.", "crawls", ok_schema="Crawl",
                  path_params=(("id", _ID, "Crawl id."),), errors=("404",)),
        Operation("post", "/v1/crawls/{id}/cancel", "cancel_crawl",
                  "Cancel a running crawl: it reads no more repos; what it wrote stays. Cancelling a "
                  "cancelled crawl answers the same again.", "crawls", ok_schema="Crawl",
                  path_params=(("id", _ID, "Crawl id."),), errors=("404", "409"), write=True),
        Operation("get", "/v1/verifications", "list_verifications",
                  "Verifications, newest first (keyset-paged), of one artifact or all.", "verifications",
                  ok_schema="VerificationPage", query=params.verification_list_params(api.max_limit), headers=_LINK),
        Operation("post", "/v1/verifications", "start_verification", "Queue a verification of an artifact.",
                  "verifications", ok_status="202", ok_schema="Verification", body="VerificationRequest",
                  errors=("404", "503"), write=True,
                  headers={"Location": "URL of the new verification (`GET /v1/verifications/{id}`)."}),
        Operation("get", "/v1/verifications/{id}", "get_verification", "One verification.", "verifications",
                  ok_schema="Verification", path_params=(("id", _ID, "Verification id."),),
                  errors=("404", "503")),
        Operation("get", "/v1/jobs", "list_jobs", "Jobs of either runner, newest first (keyset-paged).", "jobs",
                  ok_schema="JobPage", query=params.job_list_params(api.max_limit), headers=_LINK),
        Operation("get", "/v1/jobs/{id}", "get_job", "One job.", "jobs", ok_schema="Job",
                  path_params=(("id", _ID, "Job id."),), errors=("404",)),
    ]  # fmt: skip


def _crawl_request(sources: Collection[str]) -> dict[str, Any]:
    """A crawl body: of a hub source, or of the local one, as the server has them."""
    shapes = ([ref("CrawlRequest")] if set(sources) - {LOCAL_SOURCE} or not sources else []) + (
        [ref("LocalCrawlRequest")] if LOCAL_SOURCE in sources else [])  # fmt: skip
    return shapes[0] if len(shapes) == 1 else {"oneOf": shapes}


def _operation(op: Operation, api: ApiSettings, sources: Collection[str]) -> dict[str, Any]:
    listed = [p.openapi() for p in op.query]
    listed += [{"name": n, "in": "path", "required": True, "description": d, "schema": s}
               for n, s, d in op.path_params]  # fmt: skip
    ok: dict[str, Any] = {"description": "Success."}
    if op.ok_schema is not None:
        ok["content"] = {op.ok_content_type: {"schema": ref(op.ok_schema)}}
    elif op.ok_content_type != "application/json":
        ok["content"] = {op.ok_content_type: {"schema": {"type": "string"}}}
    else:
        ok["content"] = {"application/json": {"schema": {"type": "object"}}}
    read = op.method == "get"
    if read:
        listed.append(_IF_NONE_MATCH)
    if headers := {**op.headers, **(_ETAG if read else {})}:
        ok["headers"] = {name: {"description": text, "schema": {"type": "string"}} for name, text in headers.items()}
    errors = {"400", "500", *op.errors}
    if op.operation_id not in _NO_DATABASE:
        errors.add("503")
    secured = op.write or (api.private_reads and not op.public)
    if secured:
        errors.add("401")
    if op.write:
        errors.add("403")
    if op.body is not None:
        errors.add("413")
    responses: dict[str, Any] = {op.ok_status: ok}
    if read:
        responses["304"] = _NOT_MODIFIED
    for status, name, text in op.also_ok:
        responses[status] = {"description": text, "content": {"application/json": {"schema": ref(name)}}}
    if op.webhook:
        errors |= {"401", "403"}
    responses.update({code: {"$ref": f"#/components/responses/E{code}"} for code in sorted(errors)})
    out: dict[str, Any] = {
        "operationId": op.operation_id,
        "summary": op.summary,
        "tags": [op.tag],
        "parameters": listed,
        "responses": responses,
    }
    if op.body is not None:
        body = _crawl_request(sources) if op.body == "CrawlRequest" else ref(op.body)
        out["requestBody"] = {"required": True, "content": {"application/json": {"schema": body}}}
    out["security"] = [{"webhookSecret": []}] if op.webhook else [{"bearer": []}] if secured else []
    return out


def _limits(sources: Collection[str]) -> dict[tuple[str, str], dict[str, Any]]:
    """Bounds of the models' properties that the server's queries and settings set."""
    edges = {"maxItems": MAX_EDGES}
    out: dict[tuple[str, str], dict[str, Any]] = {
        ("Artifact", "projectors"): {"maxItems": reads.MAX_PROJECTORS},
        ("RepoDetail", "artifacts"): {"maxItems": reads.MAX_REPO_ARTIFACTS},
        ("FileMatches", "files"): {"maxItems": reads.MAX_FILE_MATCHES},
        ("Lineage", "ancestors"): edges,
        ("Lineage", "descendants"): edges,
    }
    if hub_sources := sorted(set(sources) - {LOCAL_SOURCE}):
        out["CrawlRequest", "source"] = {"enum": hub_sources}
    return out


def build_openapi(api: ApiSettings, sources: Collection[str] = ()) -> dict[str, Any]:
    """The document for an app with these settings and crawl sources."""
    paths: dict[str, dict[str, Any]] = {}
    for op in operations(api):
        paths.setdefault(op.path, {})[op.method] = _operation(op, api, sources)
    error_content = {"application/json": {"schema": ref("Error")}}
    return {
        "openapi": OPENAPI_VERSION,
        "jsonSchemaDialect": "https://json-schema.org/draft/2020-12/schema",
        "info": {
            "title": "GGUF registry",
            "version": API_VERSION,
            "description": "Search and browse a catalog of GGUF models indexed from their header bytes. "
            'Every error has the body {"error": {"code", "message", "details"}}; every response '
            "carries an X-Request-Id header.",
        },
        "paths": paths,
        "components": {
            "schemas": schema.components(_limits(sources)),
            "responses": {
                f"E{code}": {"description": text, "content": error_content, **_ERROR_HEADERS.get(code, {})}
                for code, text in _ERROR_TEXT.items()
            },
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer"},
                "webhookSecret": {"type": "apiKey", "in": "header", "name": "X-Webhook-Secret",
                                  "description": "A secret whose sha256 digest is in api.webhook_secrets."},
            },
        },
    }
