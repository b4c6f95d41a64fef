"""The search, repo, artifact and compare pages: the API's response models, rendered."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from aiohttp import web
from markupsafe import Markup

from registry.api import pages as api_pages
from registry.api import reads
from registry.api.errors import InvalidParameter, NotFound, UnknownParameter
from registry.api.keys import SETTINGS_KEY
from registry.api.params import parse_query, path_int
from registry.api.routes.repos import repo_id_from_path
from registry.api.sessions import read_session
from registry.catalog.search.memory import MEMORY_CONTEXT, memory_at
from registry.gguf.memory import CACHE_TYPES
from registry.responses.memory import PART_LABELS, MemoryEstimates
from registry.responses.params import (
    DEFAULT_SORT,
    DETAIL_PARAMS,
    FILTER_PARAMS,
    SORT_KEYS,
    TENSOR_PARAMS,
    memory_options,
    search_params,
)
from registry.responses.repos import ArtifactInRepo
from registry.responses.vocab import FACETS, RUNTIMES
from registry.web import svg
from registry.web.render import render, twin
from registry.web.treeview import repo_href, tree_href

routes = web.RouteTableDef()
COMPARE_MIN, COMPARE_MAX = 2, 6
FILTER_NAMES = {p.name for p in FILTER_PARAMS}
FACET_VALUES_SHOWN = 8
# The search page's own controls (sort, "runs in N at T tokens"); every other parameter of a
# shared URL rides along in the controls' form as a hidden field.
CONTROLS = ("q", "sort", "max_memory", "memory_context", "cursor")
# A repo's quant table sizes each file at these contexts, and at one the visitor picks.
QUANT_TABLE_CONTEXTS = (4096, 32768)
QUANT_TABLE_PARAMS = tuple(p for p in FILTER_PARAMS if p.name in ("max_memory", "memory_context"))


@routes.get("/", name="web_search")
async def search(request: web.Request) -> web.Response:
    args = parse_query(request, search_params(request.app[SETTINGS_KEY].api.max_limit), blank_is_absent=True)
    async with read_session(request) as session:
        page = await api_pages.search_page(session, args)
        facets = await api_pages.facets_page(session, {**args, "facets": FACETS})
    kept = {k: v for k, v in request.query.items() if k != "cursor"}
    next_url = "/?" + urlencode({**kept, "cursor": page.next}) if page.next else None
    active = [(k, v, "/?" + urlencode({n: w for n, w in kept.items() if n != k})) for k, v in kept.items()]
    links: list[tuple[str, list[tuple[str, int | None, str | None]]]] = [(facet, [(value, n, "/?" + urlencode({**kept, facet: value}) if facet in FILTER_NAMES else None)
                      for value, n in list(counts.items())[:FACET_VALUES_SHOWN]])
             for facet, counts in facets.facets.items()]  # fmt: skip
    # The runtimes a file loads in have no counts among the facets; each is still a filter link.
    links.append(("runs_in", [(r, None, "/?" + urlencode({**kept, "runs_in": r})) for r in RUNTIMES]))
    hidden = [(k, v) for k, v in request.query.items() if k not in CONTROLS]
    return render(request, "search.html", title="Search", page=page, facets=links, active=active,
                  next_url=next_url, q=request.query.get("q", ""), repo_href=repo_href, hidden=hidden,
                  sorts=SORT_KEYS, sort=request.query.get("sort", DEFAULT_SORT),
                  max_memory=request.query.get("max_memory", ""), memory_context=request.query.get("memory_context", ""),
                  json_url=twin("/v1/artifacts", request))  # fmt: skip


@routes.get("/repos/{org}/{name}", name="web_repo")
async def repo(request: web.Request) -> web.Response:
    args = parse_query(request, QUANT_TABLE_PARAMS, blank_is_absent=True)
    repo_id = repo_id_from_path(request)
    async with read_session(request) as session:
        row = await reads.get_repo(session, repo_id)
        if row is None:
            raise NotFound(f"no repo {repo_id} in the catalog", details={"repo": repo_id})
        detail = await api_pages.repo_page(session, row, endpoint=request.app[SETTINGS_KEY].hub.endpoint)
    return render(request, "repo.html", title=detail.repo.repo_id, detail=detail, repo_href=repo_href, tree_href=tree_href,
                  run_commands=run_commands, contexts=_contexts(args["memory_context"]), max_memory=args["max_memory"],
                  fit_context=args["memory_context"] or MEMORY_CONTEXT,
                  memory=quant_table_memory, context_value=request.query.get("memory_context", ""),
                  max_memory_value=request.query.get("max_memory", ""),
                  tree_url=tree_href(detail.repo.repo_id), json_url=detail.repo.url)  # fmt: skip


@routes.get("/artifacts/{id}", name="web_artifact")
async def artifact(request: web.Request) -> web.Response:
    args = parse_query(request, (*DETAIL_PARAMS, *TENSOR_PARAMS), blank_is_absent=True)
    artifact_id = path_int(request, "id")
    async with read_session(request) as session:
        found = await api_pages.artifact_page(session, artifact_id, endpoint=request.app[SETTINGS_KEY].hub.endpoint,
                                              context=args["context"], memory_options=memory_options(args))  # fmt: skip
        tensors = await api_pages.tensor_page(session, artifact_id, args) if found is not None else None
    if found is None:
        raise NotFound(f"no artifact with id {artifact_id}", details={"artifact_id": artifact_id})
    tensor_names = {p.name for p in TENSOR_PARAMS}
    kept = {k: v for k, v in request.query.items() if k not in tensor_names and v.strip()}
    return render(request, "artifact.html", title=f"{found.repo}/{found.path}", a=found, repo_href=repo_href,
                  mix=svg.quant_mix(found.quant_mix), context=request.query.get("context", ""),
                  memory_chart=memory_chart(found.memory_estimate), part_labels=PART_LABELS,
                  options=memory_options(args), cache_types=CACHE_TYPES, tensors=tensors, tensor_name=args["name"] or "", kept=kept,
                  tensor_url=lambda offset: _with(request, offset=offset),
                  tensors_json=twin(f"/v1/artifacts/{artifact_id}/tensors", request, tensor_names),
                  json_url=twin(f"/v1/artifacts/{artifact_id}", request, {p.name for p in DETAIL_PARAMS}))  # fmt: skip


def _with(request: web.Request, **values: object) -> str:
    """This page's URL with these query values changed, the others kept."""
    query = {**request.query, **{k: str(v) for k, v in values.items()}}
    return f"{request.path}?{urlencode(query)}#tensors-h"


@routes.get("/compare", name="web_compare")
async def compare(request: web.Request) -> web.Response:
    # ids come comma-separated in a shared URL, or once per ticked checkbox from a form
    for name in request.query:
        if name != "ids":
            raise UnknownParameter(name, f"unknown query parameter {name!r}", allowed=["ids"])
    raw = [part.strip() for value in request.query.getall("ids", []) for part in value.split(",") if part.strip()]
    if not COMPARE_MIN <= len(raw) <= COMPARE_MAX or not all(p.isdigit() and len(p) < 19 for p in raw):
        raise InvalidParameter("ids", f"ids must be {COMPARE_MIN} to {COMPARE_MAX} artifact ids, comma-separated")
    endpoint = request.app[SETTINGS_KEY].hub.endpoint
    found = []
    async with read_session(request) as session:
        for artifact_id in dict.fromkeys(int(p) for p in raw):
            one = await api_pages.artifact_page(session, artifact_id, endpoint=endpoint)
            if one is None:
                raise NotFound(f"no artifact with id {artifact_id}", details={"artifact_id": artifact_id})
            found.append(one)
    mixes = [svg.quant_mix(a.quant_mix, id_prefix=f"mix-{a.id}") for a in found]
    return render(request, "compare.html", title="Compare", items=list(zip(found, mixes, strict=True)),
                  repo_href=repo_href, json_url=f"/v1/artifacts/{found[0].id}")  # fmt: skip


def run_commands(repo_id: str, source: str, path: str, file_type: str | None) -> list[tuple[str, str]]:
    """The ways to run one file of a hub repo, as people paste them: llama.cpp and Ollama by
    the quantization's tag (the file type), and a download of the file itself."""
    if source != "hub":
        return [("llama.cpp", f"llama-server -m {path}")]
    commands = [("download", f"huggingface-cli download {repo_id} {path} --local-dir .")]
    if file_type:
        commands[:0] = [("llama.cpp", f"llama-server -hf {repo_id}:{file_type}"),
                        ("Ollama", f"ollama run hf.co/{repo_id}:{file_type}")]  # fmt: skip
    return commands


def _contexts(picked: int | None) -> tuple[int, ...]:
    return QUANT_TABLE_CONTEXTS + ((picked,) if picked and picked not in QUANT_TABLE_CONTEXTS else ())


def quant_table_memory(a: ArtifactInRepo, context: int) -> dict[str, Any] | None:
    """What a file of the quant table needs at `context` tokens, as the search sizes it."""
    f = a.facts
    if f is None:
        return None
    line = None if f.memory_line is None else f.memory_line.line()
    return memory_at(a.file_size, f.context_length, line, f.kv_cache, context)


def memory_chart(e: MemoryEstimates | None) -> Markup:
    """The estimate's parts on a CPU and with every layer on a GPU, as bars on one scale."""
    if e is None:
        return Markup("")
    bars = [(label, [(PART_LABELS[name], getattr(at.parts, name)) for name in PART_LABELS])
            for label, at in (("on a CPU", e.cpu), ("every layer on a GPU", e.gpu))]  # fmt: skip
    return svg.memory_parts(bars)
