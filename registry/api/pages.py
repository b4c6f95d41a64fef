"""The artifact and repo pages as JSON bodies: the reads of `reads` shaped by `present`.

The API answers them at `/v1/artifacts/{id}` and `/v1/repos/{org}/{name}`, and `registry
show` prints the same bodies (or text made from them) from the catalog directly, so the two
never differ.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from sqlalchemy import Row

from registry.api import present, reads
from registry.catalog import lineage
from registry.catalog.readpath import CatalogSession


async def artifact_page(
    session: CatalogSession, artifact_id: int, *, endpoint: str, context: int | None = None
) -> dict[str, Any] | None:
    """The single-artifact page (None: no such id): facts, quant mix, shards with their
    download URLs from `endpoint`, metadata, chat templates, latest verification and the
    projectors beside it. With `context`, `memory` and `facts.kv_cache.at_context` are
    sized for that many tokens."""
    found = await reads.get_artifact(session, artifact_id)
    if found is None:
        return None
    latest = (await reads.latest_verifications(session, [found])).get(artifact_id)
    projectors = await reads.projectors_beside(session, found.row)
    body = present.artifact_full(
        found, found.row.repo_name, latest, with_metadata=True, endpoint=endpoint, source=found.row.repo_source
    )
    body["projectors"] = [present.projector(p) for p in projectors]
    kv = (body["facts"] or {}).get("kv_cache")
    if context is not None:
        body["memory"] = present.memory(found.row, context)
        if isinstance(kv, dict):
            kv["at_context"] = present.kv_cache_at(kv, context)
    return body


async def repo_page(session: CatalogSession, repo: Row[Any], *, endpoint: str) -> dict[str, Any]:
    """The page of `repo` (a `reads.get_repo` row): its facts, its first artifacts by path
    (`reads.MAX_REPO_ARTIFACTS`; `artifact_count` says how many it holds), direct lineage
    edges and the ids the hub moved to it."""
    repo_id = repo.repo_id  # the catalog's spelling, whatever case found it
    artifacts, artifact_count = await reads.repo_artifacts(session, repo.id)
    latest = await reads.latest_verifications(session, artifacts)
    parents, children = await lineage.neighbours(session, repo_id)
    moved_from = await lineage.moved_from(session, repo.id) if repo.has_moves else []
    return {
        "repo": present.repo(repo),
        "artifacts": [
            present.artifact_full(
                a, repo_id, latest.get(a.row.id), with_metadata=False, endpoint=endpoint, source=repo.source
            )
            for a in artifacts
        ],
        "artifact_count": artifact_count,
        "artifacts_url": f"/v1/artifacts?{urlencode({'repo': repo_id, 'sort': 'name'})}",
        "lineage": {"parents": [present.edge(e) for e in parents], "children": [present.edge(e) for e in children]},
        "moved_from": moved_from,
    }
