"""The artifact and repo pages as response models: the reads of `reads` shaped by `present`.

The API answers them at `/v1/artifacts/{id}` and `/v1/repos/{org}/{name}`, and `registry
show` prints the same models (as JSON, or text made from them) from the catalog directly,
so the two never differ.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlencode

from sqlalchemy import Row

from registry.api import present, reads
from registry.catalog import compat, facets, lineage
from registry.catalog.folding import ascii_lower, folded
from registry.catalog.readpath import CatalogSession
from registry.catalog.search import SearchQuery, search
from registry.responses import (
    Artifact,
    ArtifactPage,
    Facets,
    Lineage,
    LineageEdge,
    Neighbours,
    Repo,
    RepoDetail,
)
from registry.responses.artifacts import Tensor, TensorPage
from registry.responses.params import FILTER_PARAMS


def search_query(values: Mapping[str, Any], **paging: Any) -> SearchQuery:
    """The catalog's query from parsed filter values (`FILTER_PARAMS`, by name). They are
    named after SearchQuery fields, except the short `q`; lists of names are comma-separated
    there. min_params above max_params is not an error: it truthfully matches nothing."""
    filters: dict[str, Any] = {("text" if p.name == "q" else p.name): values.get(p.name) for p in FILTER_PARAMS}
    for name in ("capability", "modality", "finding"):
        if filters[name] is not None:
            filters[name] = ",".join(filters[name])
    return SearchQuery(**filters, **paging)


async def search_page(session: CatalogSession, values: Mapping[str, Any]) -> ArtifactPage:
    """A page of search hits for parsed `search_params` values: the filters, sort, limit and cursor."""
    query = search_query(values, sort=values["sort"], limit=values["limit"], cursor=values["cursor"])
    page = await search(session, query)
    return ArtifactPage(items=present.search_hits(page), next=page.next_cursor, limit=values["limit"])


async def facets_page(session: CatalogSession, values: Mapping[str, Any]) -> Facets:
    """Facet counts (`values["facets"]`, by default `FACETS`) under the parsed filters, with
    the filters as applied: the folded ones in the spelling of the facet keys they select
    (`Mit` -> `mit`), lists of names comma-separated."""
    counts = await facets.facets(session, search_query(values), list(values["facets"]))
    filters = {p.name: values[p.name] for p in FILTER_PARAMS if values.get(p.name) is not None}
    applied = folded({k: ",".join(v) if isinstance(v, tuple) else v for k, v in filters.items()})
    if "author" in applied:
        applied["author"] = ascii_lower(applied["author"])
    return Facets(facets=counts, filters=applied)


async def artifact_page(
    session: CatalogSession, artifact_id: int, *, endpoint: str, context: int | None = None,
    memory_options: Mapping[str, Any] | None = None,
) -> Artifact | None:
    """The single-artifact page (None: no such id): facts, quant mix, shards with their
    download URLs from `endpoint`, metadata, chat templates, latest verification and the
    projectors beside it. With `context`, `memory` and `facts.kv_cache.at_context` are
    sized for that many tokens (the model's own context_length when that is shorter), and
    `memory_estimate` with `memory_options` (`params.memory_options`)."""
    found = await reads.get_artifact(session, artifact_id)
    if found is None:
        return None
    latest = (await reads.latest_verifications(session, [found])).get(artifact_id)
    projectors = await reads.projectors_beside(session, found.row)
    # L022 is info, the least severe: appended, the worst-first order holds.
    findings = [*await reads.findings_of(session, artifact_id), *await compat.base_model_findings(session, found.row)]
    return present.artifact(found, latest, projectors, findings, endpoint=endpoint, context=context,
                            memory_options=memory_options)  # fmt: skip


async def tensor_page(session: CatalogSession, artifact_id: int, args: Mapping[str, Any]) -> TensorPage | None:
    """A page of the artifact's tensor table (`params.TENSOR_PARAMS`); None without one."""
    index = await reads.tensor_index(session, artifact_id)
    if index is None:
        return None
    needle = (args.get("name") or "").lower()
    rows = [r for r in index.rows if needle in r.name.lower()] if needle else index.rows
    start, limit = args["offset"], args["limit"]
    shown = rows[start : start + limit]
    return TensorPage(
        items=[Tensor(name=r.name, type=r.type, shape=list(r.shape), bytes=r.bytes, shard=r.shard, offset=r.offset)
               for r in shown],
        total=index.total, stored=len(index.rows), matched=len(rows), offset=start, limit=limit,
        next_offset=start + limit if start + limit < len(rows) else None,
    )  # fmt: skip


async def repo_page(session: CatalogSession, repo: Row[Any], *, endpoint: str) -> RepoDetail:
    """The page of `repo` (a `reads.get_repo` row): its facts, its first artifacts by path
    (`reads.MAX_REPO_ARTIFACTS`; `artifact_count` says how many it holds), direct lineage
    edges and the ids the hub moved to it."""
    repo_id = repo.repo_id  # the catalog's spelling, whatever case found it
    artifacts, artifact_count = await reads.repo_artifacts(session, repo.id)
    latest = await reads.latest_verifications(session, artifacts)
    counts = await reads.finding_counts(session, artifacts)
    parents, children = await lineage.neighbours(session, repo_id)
    moved_from = await lineage.moved_from(session, repo.id) if repo.has_moves else []
    return RepoDetail(
        repo=Repo.from_row(repo),
        artifacts=[
            present.artifact_in_repo(a, repo_id, latest.get(a.row.id), counts.get(a.row.id, {}), endpoint=endpoint,
                                     source=repo.source)
            for a in artifacts
        ],
        artifact_count=artifact_count,
        artifacts_url=f"/v1/artifacts?{urlencode({'repo': repo_id, 'sort': 'name'})}",
        lineage=Neighbours(parents=[LineageEdge.from_view(e) for e in parents],
                           children=[LineageEdge.from_view(e) for e in children]),
        moved_from=moved_from,
    )


async def tree_page(session: CatalogSession, repo_id: str, repo: Row[Any] | None, direction: str, depth: int) -> Lineage:
    """The model tree around `repo_id` (`repo`: its `reads.get_repo` row; None for a parent
    the catalog has not indexed, spelled then as its children's edges spell it), `depth`
    edges up and down as `direction` says."""
    walks: dict[str, list[LineageEdge]] = {}
    truncated = False
    for side, walk in (("ancestors", lineage.ancestors), ("descendants", lineage.descendants)):
        if direction in (side, "both"):
            found = await walk(session, repo.repo_id if repo is not None else repo_id, depth)
            walks[side] = [LineageEdge.from_view(e) for e in found.edges]
            truncated = truncated or found.truncated
    if repo is not None:
        repo_id = repo.repo_id
    elif children := walks.get("descendants"):
        repo_id = children[0].parent
    moved_from = await lineage.moved_from(session, repo.id) if repo is not None and repo.has_moves else []
    return Lineage(repo=repo_id, direction=direction, depth=depth, in_catalog=repo is not None,
                   moved_from=moved_from, truncated=truncated, max_edges=lineage.MAX_EDGES, **walks)  # fmt: skip
