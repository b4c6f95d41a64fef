"""Artifact search, facets and the single-artifact page."""

from __future__ import annotations

import functools
import re
from typing import Any

from aiohttp import web

from registry.api import pages, present, reads
from registry.api.errors import ApiError, InvalidParameter, NotFound
from registry.api.keys import SETTINGS_KEY
from registry.api.paging import page_response, paging_params
from registry.api.params import (
    BOOLEAN_WORDS,
    INT_MAX,
    Param,
    bool_param,
    boolean,
    choice_param,
    count_param,
    int_param,
    parse_query,
    path_int,
    size_param,
    text,
    text_param,
)
from registry.api.responses import json_response
from registry.api.sessions import read_session
from registry.catalog import facets as catalog_facets
from registry.catalog import search as catalog_search
from registry.catalog.folding import ascii_lower, folded
from registry.catalog.models import REPO_ID_LENGTH, VERIFICATION_STATUSES
from registry.gguf.facts_model import KINDS, MODALITIES
from registry.gguf.vocab import MAX_SIZE_DIFFERENCE
from registry.safety.capabilities import CAPABILITIES
from registry.safety.findings import SEVERITIES

routes = web.RouteTableDef()

SORT_CHOICES = tuple(
    f"{key}{suffix}"
    for key in (*catalog_search.SORTS, *catalog_search.SORT_ALIASES)
    for suffix in ("", ":asc", ":desc")
)

_ONE_CAPABILITY = f"({'|'.join(CAPABILITIES)})"
MAX_CAPABILITY_LIST = 64
_ONE_MODALITY = f"({'|'.join(MODALITIES)})"
MAX_MODALITY_LIST = 32


def _author(name: str, raw: str) -> str:
    if re.fullmatch(catalog_search.AUTHOR_PATTERN, raw) is None:
        raise InvalidParameter(
            name, f"{name} must be a user or organisation name ({catalog_search.AUTHOR_PATTERN})",
            pattern=catalog_search.AUTHOR_PATTERN,
        )  # fmt: skip
    return raw


_REPO_ID = r"^[^/\x00]+/[^/\x00]+$"


def _repo(name: str, raw: str) -> str:
    if len(raw) > REPO_ID_LENGTH or re.fullmatch(_REPO_ID, raw) is None:
        raise InvalidParameter(name, f"{name} must be one repo id, org/name", pattern=_REPO_ID)
    return raw


FILTER_PARAMS: tuple[Param, ...] = (
    text_param("q", "Free text: every word must occur in the repo id, path, name, tags or description."),
    Param("author", _author, {"type": "string", "pattern": f"^{catalog_search.AUTHOR_PATTERN}$"},
          "Only repos this user or organisation owns (the repo id's part before the `/`, e.g. `bartowski`), in "
          "any ASCII case; `local` for the server's local folders."),
    Param("repo", _repo, {"type": "string", "maxLength": REPO_ID_LENGTH, "pattern": _REPO_ID},
          "Only this repo's artifacts: its id, org/name, in any ASCII case (as the repo page finds it). A repo page "
          f"lists at most {reads.MAX_REPO_ARTIFACTS}; this pages through all of them, with any other filter."),
    text_param("architecture", "general.architecture, e.g. llama; matches in any ASCII case."),
    text_param("license", "The file's license, else the repo card's, e.g. apache-2.0; matches in any ASCII case."),
    text_param("file_type", "File type label, e.g. Q4_K_M; matches in any ASCII case."),
    text_param("tensor_type", "Only artifacts with at least one tensor of this ggml type, e.g. IQ2_XS."),
    count_param("min_params", "At least this many parameters: K, M, B, T are thousand to trillion."),
    count_param("max_params", "At most this many parameters: K, M, B, T are thousand to trillion."),
    size_param("min_size", "At least this many bytes, all shards together: B bytes, K/KB to T/TB powers of "
               "1000, KiB to TiB powers of 1024."),
    size_param("max_size", "At most this many bytes, all shards together (the files that fit a disk or memory): "
               "B bytes, K/KB to T/TB powers of 1000, KiB to TiB powers of 1024."),
    text_param("size_label", "Size label, e.g. 7B or 8x7B; matches in any ASCII case."),
    int_param("min_context", "Context length at least this."),
    int_param("expert_count", "Exactly this many experts.", maximum=INT_MAX),
    size_param("max_memory", "Needs at most this many bytes to run: the file (all shards) plus its f16 KV cache "
               "at `memory_context` tokens, as `facts.kv_cache` sizes it. Artifacts without a KV cache estimate "
               "never match. Units as in max_size."),
    int_param("memory_context", f"The context `max_memory`, `sort=memory` and each hit's `memory` size the KV cache for "
              f"(default: {catalog_search.MEMORY_CONTEXT}, or the model's own context_length when that is shorter).",
              minimum=1, maximum=catalog_search.MAX_MEMORY_CONTEXT),
    int_param("draft_for", "Only artifacts that can draft for this artifact (id) in speculative decoding: the "
              f"same vocabulary key (`facts.vocab_sha256`), at most {MAX_SIZE_DIFFERENCE} tokens more or fewer, and fewer parameters. "
              "An artifact without a key has none; an unknown id is a 404 (`artifact_not_found`). Try `sort=parameter_count:asc`.",
              minimum=1),
    choice_param("kind", "What the file is: `model` leaves out projectors, adapters, importance matrices and "
                 "vocabularies.", KINDS),
    Param("with_projector", boolean, {"type": "string", "enum": BOOLEAN_WORDS},
          "1: only artifacts whose repo also holds a multimodal projector (an `mmproj` file, llama.cpp's --mmproj: "
          "images or audio in); 0: only those whose repo holds none. Try with `kind=model`."),
    Param("modality", text(MAX_MODALITY_LIST),
          {"type": "string", "maxLength": MAX_MODALITY_LIST, "pattern": f"^{_ONE_MODALITY}(,{_ONE_MODALITY})*$"},
          f"Only artifacts whose repo holds a multimodal projector that takes all of these, comma-separated: "
          f"{', '.join(MODALITIES)} (the projector's `modalities`). `kind=model&modality=vision`: the models "
          "llama.cpp can give images with --mmproj."),
    choice_param("status", "Artifact status; `all` for every one.", catalog_search.STATUSES, default="indexed"),
    choice_param("verification", "Status of the latest verification.", VERIFICATION_STATUSES),
    text_param("descendant_of", "Only repos below this repo id (org/name, any case of A-Z) in the lineage graph."),
    choice_param("template_severity", "Only artifacts whose chat template has a safety finding at least this "
                 "severe; clean and not-scanned artifacts never match.", SEVERITIES),
    Param("capability", text(MAX_CAPABILITY_LIST),
          {"type": "string", "maxLength": MAX_CAPABILITY_LIST, "pattern": f"^{_ONE_CAPABILITY}(,{_ONE_CAPABILITY})*$"},
          f"Only artifacts whose chat templates can do all of these, comma-separated: {', '.join(CAPABILITIES)} "
          "(see `chat_template_capabilities`); not-probed artifacts never match."),
)


@functools.cache  # per request otherwise: the declarations are immutable
def search_params(max_limit: int) -> tuple[Param, ...]:
    limit = min(max_limit, catalog_search.MAX_LIMIT)
    sort = choice_param("sort", "Sort key, optionally with :asc or :desc. `memory` (least first) orders by each "
                        "hit's `memory` at `memory_context`, the artifacts without an estimate last in either direction; "
                        "no index holds that order, so each page sorts every match.", SORT_CHOICES, default="downloads")
    return (*FILTER_PARAMS, sort, *paging_params(limit))


DETAIL_PARAMS: tuple[Param, ...] = (
    bool_param("tensors", "Include the tensor table (not stored by the catalog yet: answers 501)."),
    int_param("context", "Also size the KV cache for this many tokens of context: `facts.kv_cache.at_context` "
              "(when the artifact has an estimate), and `memory` at this context instead of 4096.",
              minimum=1, maximum=1 << 40),
)


class NotStored(ApiError):
    status = 501
    code = "not_stored"


def _query(args: dict[str, Any], **paging: Any) -> catalog_search.SearchQuery:
    # Filter parameters are named after SearchQuery fields, except the short `q`.
    # min_params above max_params is not an error: it truthfully matches nothing.
    filters = {("text" if p.name == "q" else p.name): args[p.name] for p in FILTER_PARAMS}
    return catalog_search.SearchQuery(**filters, **paging)


@routes.get("/v1/artifacts", name="search_artifacts")
async def search_artifacts(request: web.Request) -> web.Response:
    args = parse_query(request, search_params(request.app[SETTINGS_KEY].api.max_limit))
    query = _query(args, sort=args["sort"], limit=args["limit"], cursor=args["cursor"])
    async with read_session(request) as session:
        page = await catalog_search.search(session, query)
    items = [present.search_hit(row, page.memory_context) for row in page.rows]
    return page_response(request, items, page.next_cursor, args["limit"])


_ONE_FACET = f"({'|'.join(catalog_search.FACET_NAMES)})"
MAX_FACET_LIST = 128


def _facet_list(name: str, raw: str) -> tuple[str, ...]:
    # An unknown name: the catalog's InvalidQuery, naming the parameter and what it allows.
    return catalog_facets.facet_names([n.strip() for n in text(MAX_FACET_LIST)(name, raw).split(",")])


FACETS_PARAM = Param(
    "facets", _facet_list,
    {"type": "string", "maxLength": MAX_FACET_LIST, "pattern": f"^{_ONE_FACET}(,{_ONE_FACET})*$"},
    "The facets to count, comma-separated, in the order the answer lists them. Besides the four counted by "
    "default: `kind` (what the file is), `capability` (what its chat templates can do: an artifact counts under "
    "each one it has, and nowhere when it has none or was not probed) and `verification` (its latest "
    "verification's status; `unknown`: never verified).",
    default=catalog_search.FACETS, default_doc=",".join(catalog_search.FACETS),
)  # fmt: skip


@routes.get("/v1/facets", name="facets")
async def facets(request: web.Request) -> web.Response:
    args = parse_query(request, (*FILTER_PARAMS, FACETS_PARAM))
    names = args.pop("facets")
    async with read_session(request) as session:
        counts = await catalog_facets.facets(session, _query(args), names)
    # As applied: the folded filters are the facet keys they select (`Mit` -> `mit`).
    filters = folded({name: value for name, value in args.items() if value is not None})
    if "author" in filters:
        filters["author"] = ascii_lower(filters["author"])
    return json_response({"facets": counts, "filters": filters})


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
