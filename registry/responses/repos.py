"""Repos, their pages and their model trees."""

from __future__ import annotations

from typing import Annotated, Any

from msgspec import UNSET, UnsetType

from registry.responses.artifacts import ArtifactInRepo
from registry.responses.base import (
    Direction,
    LineageRelation,
    LineageSource,
    RepoSource,
    Response,
    Time,
    doc,
)


class Repo(Response, kw_only=True):
    """A hub repo, or a local folder (`local/...`)."""

    repo_id: str
    source: RepoSource
    revision: str | None
    last_modified: Time | None
    downloads: int
    likes: int
    tags: list[str]
    gated: bool
    card_license: str | None
    card_base_model: list[str]
    card_base_model_relation: str | None
    description: str | None
    indexed_at: Time | None
    url: str

    @classmethod
    def from_row(cls, row: Any) -> Repo:
        return cls(
            repo_id=row.repo_id, source=row.source, revision=row.revision, last_modified=row.last_modified,
            downloads=row.downloads, likes=row.likes, tags=list(row.tags or []), gated=bool(row.gated),
            card_license=row.card_license, card_base_model=list(row.card_base_model or []),
            card_base_model_relation=row.card_base_model_relation, description=row.description,
            indexed_at=row.indexed_at, url=f"/v1/repos/{row.repo_id}",
        )  # fmt: skip


class LineageEdge(Response, kw_only=True):
    """One edge of the model tree: `child` was made from `parent`."""

    child: str
    parent: Annotated[str, doc("As the catalog spells the repo; a parent outside the catalog as the edge's source "
                               "wrote it. Repo ids match in any case of A-Z, as on the hub.")]  # fmt: skip
    relation: LineageRelation
    source: LineageSource
    depth: Annotated[int, doc("Edges from the repo asked about, from 1.")]
    child_in_catalog: bool
    parent_in_catalog: bool

    @classmethod
    def from_view(cls, view: Any) -> LineageEdge:
        """From a lineage walk's edge (`catalog.lineage.EdgeView`) by field name."""
        return cls(child=view.child, parent=view.parent, relation=view.relation, source=view.source,
                   depth=view.depth, child_in_catalog=view.child_in_catalog,
                   parent_in_catalog=view.parent_in_catalog)  # fmt: skip


class Neighbours(Response, kw_only=True):
    parents: list[LineageEdge]
    children: list[LineageEdge]


class RepoDetail(Response, kw_only=True):
    """A repo's page: its facts, its artifacts, its direct lineage."""

    repo: Repo
    artifacts: Annotated[
        list[ArtifactInRepo],
        doc("Its files, the first (`maxItems`) by path (`artifact_count` says how many there are; `artifacts_url` "
            "pages through them all); error rows too, gone files not."),
    ]
    artifact_count: Annotated[int, doc("How many artifacts the repo has, gone files not counted.")]
    artifacts_url: Annotated[str, doc("The search for the repo's indexed artifacts, by name "
                                      "(`/v1/artifacts?repo=...`): add `status=error` for its error rows, or any "
                                      "other filter.")]  # fmt: skip
    lineage: Neighbours
    moved_from: Annotated[list[str], doc("Ids the hub has answered for as this repo (renamed, transferred), as the "
                                         "catalog spelled them, oldest move first; their routes redirect here.")]  # fmt: skip


class Lineage(Response, kw_only=True):
    """The model tree around a repo, up to `depth` edges each way."""

    repo: Annotated[str, doc("As the catalog spells it; a repo outside the catalog as its children's edges do.")]
    direction: Direction
    depth: int
    in_catalog: bool
    moved_from: Annotated[list[str], doc("Ids the hub has moved to this repo, oldest move first.")]
    ancestors: Annotated[list[LineageEdge] | UnsetType, doc("What it was made from, shallowest first; "
                                                            "absent when `direction` is descendants.")] = UNSET  # fmt: skip
    descendants: Annotated[list[LineageEdge] | UnsetType, doc("What was made from it, shallowest first; "
                                                              "absent when `direction` is ancestors.")] = UNSET  # fmt: skip
    truncated: Annotated[bool, doc("True when a side of the tree had more than `max_edges` edges within `depth`: "
                                   "that side lists its first `max_edges`, shallowest first. Ask again from a "
                                   "deeper repo or with a smaller depth to see the rest; "
                                   "`/v1/artifacts?descendant_of=` pages through every descendant's files.")]  # fmt: skip
    max_edges: Annotated[int, doc("Most edges listed on each side.")]


__all__ = ["Lineage", "LineageEdge", "Neighbours", "Repo", "RepoDetail"]
