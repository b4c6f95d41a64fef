"""Detail reads the pages need: one repo or one artifact with everything its page shows.

Search, facets and lineage walks come from the catalog; these are the plain by-key reads.
They select table columns and return rows, not ORM objects: a repo page holds dozens of
artifacts with their facts, quant mix and shards, and building (then discarding) an
instance per row cost more than the queries. Rows read like the models (`row.path`).
The queries run on the session's connection, inside the session's transaction. Their
statements are built once, with bound parameters: building and fingerprinting a statement
for SQLAlchemy's compiled cache on every request cost as much as running it.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from sqlalchemy import Row, Select, bindparam, exists, func, select

from registry.catalog.amounts import LARGEST
from registry.catalog.models import (
    Artifact,
    ArtifactFinding,
    ArtifactTensors,
    Facts,
    LineageEdge,
    QuantMix,
    Repo,
    RepoMove,
    Shard,
    Verification,
    repo_key,
)
from registry.catalog.readpath import CatalogSession
from registry.gguf.tensor_index import TensorIndex

_ARTIFACTS = Artifact.__table__
_REPOS = Repo.__table__
_FACTS = Facts.__table__
_QUANT_MIX = QuantMix.__table__
_SHARDS = Shard.__table__
_VERIFICATIONS = Verification.__table__


class QuantMixRow(NamedTuple):
    tensor_type: str
    tensors: int
    elements: int
    bytes: int


class ShardRow(NamedTuple):
    path: str
    split_no: int
    size: int | None
    sha256: str | None
    header_bytes: int | None


@dataclass(frozen=True, slots=True)
class ArtifactDetail:
    """An artifact row (its columns, `latest_verification_id`; by id also `repo_name` and
    `repo_source`) and what hangs off it."""

    row: Row[Any]
    facts: dict[str, Any] | None  # the facts row by column name
    quant_mix: list[QuantMixRow]
    shards: list[ShardRow]  # in split order


# Built once, executed with parameters (see the module doc). A page reads its artifacts in
# one statement: facts by an outer join, the id of the latest verification, and quant mix
# and shards as JSON arrays from correlated subqueries. Every statement is a wait for a
# turn of the event loop, which under load cost more than the statement; the JSON is
# small (a few rows per artifact) and cheap to decode.
_FACT_PREFIX = "f_"
_LATEST_VERIFICATION_ID = (
    select(func.max(_VERIFICATIONS.c.id))
    .where(_VERIFICATIONS.c.artifact_id == _ARTIFACTS.c.id)
    .scalar_subquery()
    .label("latest_verification_id")
)
_Q, _S = _QUANT_MIX.c, _SHARDS.c
_MIX_FIELDS = (_Q.tensor_type, _Q.tensors, _Q.elements, _Q.bytes)
_SHARD_FIELDS = (_S.path, _S.split_no, _S.size, _S.sha256, _S.header_bytes)


def _json_rows(dialect: str, table: Any, fields: tuple[Any, ...], label: str) -> Any:
    """One JSON array of arrays (`fields` per row) of the artifact's rows in `table`."""
    if dialect == "postgresql":
        rows = func.json_agg(func.json_build_array(*fields))
    else:
        rows = func.json_group_array(func.json_array(*fields))
    return select(rows).where(table.c.artifact_id == _ARTIFACTS.c.id).scalar_subquery().label(label)


@functools.cache
def _artifact_rows(dialect: str) -> Select[Any]:
    stmt: Select[Any] = select(
        _ARTIFACTS, _LATEST_VERIFICATION_ID, *(c.label(_FACT_PREFIX + c.name) for c in _FACTS.c),
        _json_rows(dialect, _QUANT_MIX, _MIX_FIELDS, "quant_mix_json"),
        _json_rows(dialect, _SHARDS, _SHARD_FIELDS, "shards_json"),
    ).outerjoin(_FACTS, _FACTS.c.artifact_id == _ARTIFACTS.c.id)  # fmt: skip
    return stmt


@functools.cache
def _repo_artifacts(dialect: str) -> Select[Any]:
    return _artifact_rows(dialect).where(
        _ARTIFACTS.c.repo_pk == bindparam("repo_pk"), _ARTIFACTS.c.status != "gone"
    ).order_by(_ARTIFACTS.c.path).limit(bindparam("limit"))


@functools.cache
def _artifact_by_id(dialect: str) -> Select[Any]:
    return (
        _artifact_rows(dialect)
        .add_columns(_REPOS.c.repo_id.label("repo_name"), _REPOS.c.source.label("repo_source"))
        .join(_REPOS, _REPOS.c.id == _ARTIFACTS.c.repo_pk)
        .where(_ARTIFACTS.c.id == bindparam("artifact_id"))
    )


# A repo by any spelling of its id (repo_key), the exact spelling first when a hub's
# rename left two rows.
_REPO_BY_NAME = (
    # has_moves: whether the hub has moved other ids to it (lineage.moved_from lists them),
    # asked here so that the page of a repo without any costs no query of its own
    select(_REPOS, exists().where(RepoMove.__table__.c.repo_pk == _REPOS.c.id).label("has_moves"))
    .where(_REPOS.c.repo_key == bindparam("key"))
    .order_by((_REPOS.c.repo_id == bindparam("repo_id")).desc(), _REPOS.c.id)
    .limit(1)
)
_LATEST_VERIFICATIONS = select(_VERIFICATIONS).where(_VERIFICATIONS.c.id.in_(bindparam("ids", expanding=True)))
_IS_PARENT = select(LineageEdge.__table__.c.id).where(LineageEdge.__table__.c.parent_key == bindparam("key")).limit(1)


async def get_repo(session: CatalogSession, repo_id: str) -> Row[Any] | None:
    """The repo `repo_id` names, in any ASCII case, as the hub resolves it."""
    conn = await session.connection()
    return (await conn.execute(_REPO_BY_NAME, {"key": repo_key(repo_id), "repo_id": repo_id})).first()


# The most artifacts a repo page lists, by path. A hub repo may list a hundred thousand
# files (its file list is capped at 32 MB, not by count); the page stays a few MB, and
# `GET /v1/artifacts?repo=` pages through all of them.
MAX_REPO_ARTIFACTS = 500
_REPO_ARTIFACT_COUNT = select(func.count()).where(
    _ARTIFACTS.c.repo_pk == bindparam("repo_pk"), _ARTIFACTS.c.status != "gone"
)


async def repo_artifacts(
    session: CatalogSession, repo_pk: int, limit: int | None = None
) -> tuple[list[ArtifactDetail], int]:
    """The repo's first `limit` (MAX_REPO_ARTIFACTS) artifacts by path, and how many it has.
    "gone" artifacts are files the repo no longer has; the page shows what it holds now."""
    limit = MAX_REPO_ARTIFACTS if limit is None else limit
    conn = await session.connection()
    stmt = _repo_artifacts(conn.dialect.name)
    rows = (await conn.execute(stmt, {"repo_pk": repo_pk, "limit": limit + 1})).all()
    count = len(rows)
    if count > limit:
        count = (await conn.execute(_REPO_ARTIFACT_COUNT, {"repo_pk": repo_pk})).scalar_one()
    return [_detail(row) for row in rows[:limit]], count


# The artifact one of a repo's files belongs to (any shard), and the paths of all its
# artifacts: what `REPO:PATH` and `REPO:TAG` name, however many artifacts the repo holds.
_ARTIFACT_OF_FILE = (
    select(_SHARDS.c.artifact_id)
    .join(_ARTIFACTS, _ARTIFACTS.c.id == _SHARDS.c.artifact_id)
    .where(_SHARDS.c.repo_pk == bindparam("repo_pk"), _SHARDS.c.path == bindparam("path"),
           _ARTIFACTS.c.status != "gone")
    .order_by(_SHARDS.c.artifact_id.desc())
    .limit(1)
)  # fmt: skip
_ARTIFACT_PATHS = select(_ARTIFACTS.c.path, _ARTIFACTS.c.id).where(
    _ARTIFACTS.c.repo_pk == bindparam("repo_pk"), _ARTIFACTS.c.status != "gone"
)


async def artifact_of_file(session: CatalogSession, repo_pk: int, path: str) -> int | None:
    """The id of the repo's artifact (not gone) that has a file at `path`, any shard of it."""
    conn = await session.connection()
    return (await conn.execute(_ARTIFACT_OF_FILE, {"repo_pk": repo_pk, "path": path})).scalar()


async def artifact_paths(session: CatalogSession, repo_pk: int) -> dict[str, int]:
    """path -> id of every artifact the repo holds (not gone)."""
    conn = await session.connection()
    return {row.path: row.id for row in await conn.execute(_ARTIFACT_PATHS, {"repo_pk": repo_pk})}


# The most projectors an artifact page lists: a repo holds a few (one per precision).
MAX_PROJECTORS = 20
# A repo's indexed projectors, through the (repo_pk, path) index.
_PROJECTORS = (
    select(_ARTIFACTS.c.id, _ARTIFACTS.c.path, _ARTIFACTS.c.file_size, _ARTIFACTS.c.modalities)
    .where(_ARTIFACTS.c.repo_pk == bindparam("repo_pk"), _ARTIFACTS.c.kind == "mmproj",
           _ARTIFACTS.c.status == "indexed", _ARTIFACTS.c.id != bindparam("artifact_id"))
    .order_by(_ARTIFACTS.c.path)
    .limit(MAX_PROJECTORS)
)  # fmt: skip


async def projectors_beside(session: CatalogSession, row: Row[Any]) -> list[Row[Any]]:
    """The indexed multimodal projectors in the artifact's repo, itself left out, by path:
    the files to give llama.cpp's --mmproj with it."""
    conn = await session.connection()
    return list(await conn.execute(_PROJECTORS, {"repo_pk": row.repo_pk, "artifact_id": row.id}))


_FINDINGS = ArtifactFinding.__table__
_FINDINGS_OF = (
    select(_FINDINGS.c.code, _FINDINGS.c.severity, _FINDINGS.c.field, _FINDINGS.c.message)
    .where(_FINDINGS.c.artifact_id == bindparam("artifact_id"))
    .order_by(_FINDINGS.c.position)
)


async def findings_of(session: CatalogSession, artifact_id: int) -> list[Row[Any]]:
    """The artifact's llama.cpp compatibility findings, worst first."""
    conn = await session.connection()
    return list(await conn.execute(_FINDINGS_OF, {"artifact_id": artifact_id}))


_FINDING_COUNTS = (
    select(_FINDINGS.c.artifact_id, _FINDINGS.c.severity, func.count().label("n"))
    .where(_FINDINGS.c.artifact_id.in_(bindparam("ids", expanding=True)))
    .group_by(_FINDINGS.c.artifact_id, _FINDINGS.c.severity)
)


async def finding_counts(session: CatalogSession, details: Sequence[ArtifactDetail]) -> dict[int, dict[str, int]]:
    """Each artifact's llama.cpp compatibility findings counted by severity (absent: none)."""
    ids = [d.row.id for d in details]
    if not ids:
        return {}
    conn = await session.connection()
    counts: dict[int, dict[str, int]] = {}
    for row in await conn.execute(_FINDING_COUNTS, {"ids": ids}):
        counts.setdefault(row.artifact_id, {})[row.severity] = row.n
    return counts


async def tensor_index(session: CatalogSession, artifact_id: int) -> TensorIndex | None:
    """The artifact's stored tensor table; None when it has none (error rows, rows written
    before it was kept) or it cannot be read back."""
    if not 0 < artifact_id <= LARGEST:
        return None
    conn = await session.connection()
    data = (await conn.execute(_TENSORS_OF, {"artifact_id": artifact_id})).scalar_one_or_none()
    return None if data is None else TensorIndex.decode(data)


_TENSORS_OF = select(ArtifactTensors.__table__.c.data).where(
    ArtifactTensors.__table__.c.artifact_id == bindparam("artifact_id")
)


async def get_artifact(session: CatalogSession, artifact_id: int) -> ArtifactDetail | None:
    if not 0 < artifact_id <= LARGEST:  # no row has it, and no database column holds it
        return None
    conn = await session.connection()
    row = (await conn.execute(_artifact_by_id(conn.dialect.name), {"artifact_id": artifact_id})).one_or_none()
    return _detail(row) if row is not None else None


def _detail(row: Row[Any]) -> ArtifactDetail:
    values = row._mapping
    facts = None
    if values[_FACT_PREFIX + "artifact_id"] is not None:
        facts = {c.name: values[_FACT_PREFIX + c.name] for c in _FACTS.c}
    mixes = [QuantMixRow(*m) for m in _decoded(values["quant_mix_json"])]
    shards = sorted((ShardRow(*s) for s in _decoded(values["shards_json"])), key=lambda s: s.split_no)
    return ArtifactDetail(row, facts, mixes, shards)


def _decoded(raw: Any) -> list[list[Any]]:
    # NULL when PostgreSQL aggregates no rows; SQLite gives "[]". A driver may decode for us.
    if raw is None:
        return []
    return list(json.loads(raw) if isinstance(raw, str | bytes) else raw)


async def latest_verifications(session: CatalogSession, details: Sequence[ArtifactDetail]) -> dict[int, Row[Any]]:
    """The latest verification of each artifact that has one (the id came with its row)."""
    ids = [d.row.latest_verification_id for d in details if d.row.latest_verification_id is not None]
    if not ids:
        return {}
    conn = await session.connection()
    return {v.artifact_id: v for v in await conn.execute(_LATEST_VERIFICATIONS, {"ids": ids})}


async def is_lineage_node(session: CatalogSession, repo_id: str) -> bool:
    """Whether any edge names this repo as a parent: a repo not in the catalog still has a tree."""
    return (await (await session.connection()).execute(_IS_PARENT, {"key": repo_key(repo_id)})).first() is not None


# The most catalog files one sha256 lists: the same bytes are often uploaded to many repos
# (mirrors, re-uploads, collections); `count` says how many there are in all.
MAX_FILE_MATCHES = 100
# The files (shards) whose LFS oid is `sha`, through the sha256 index: indexed artifacts
# first, then by their repo's downloads.
_FILES_BY_SHA256: Select[Any] = (
    select(
        _SHARDS.c.path, _SHARDS.c.split_no, _SHARDS.c.size, _SHARDS.c.revision,
        _ARTIFACTS.c.id.label("artifact_id"), _ARTIFACTS.c.path.label("artifact_path"),
        _ARTIFACTS.c.status, _ARTIFACTS.c.downloads, _REPOS.c.repo_id, _REPOS.c.source,
    )
    .join(_ARTIFACTS, _ARTIFACTS.c.id == _SHARDS.c.artifact_id)
    .join(_REPOS, _REPOS.c.id == _SHARDS.c.repo_pk)
    .where(_SHARDS.c.sha256 == bindparam("sha"))
    .order_by((_ARTIFACTS.c.status != "indexed"), _ARTIFACTS.c.downloads.desc(), _SHARDS.c.id)
    .limit(bindparam("limit"))
)  # fmt: skip
_FILE_COUNT_BY_SHA256 = select(func.count()).where(_SHARDS.c.sha256 == bindparam("sha"))


async def files_with_sha256(
    session: CatalogSession, sha256: str, limit: int = MAX_FILE_MATCHES
) -> tuple[list[Row[Any]], int]:
    """The catalog's hub files whose LFS oid is `sha256` (64 hex digits, any case), at most
    `limit` of them, and how many there are: which repos, artifacts and shards hold those
    bytes. Local folders' files have no oid and never match."""
    conn = await session.connection()
    sha = sha256.lower()
    rows = (await conn.execute(_FILES_BY_SHA256, {"sha": sha, "limit": limit + 1})).all()
    count = len(rows)
    if count > limit:
        count = (await conn.execute(_FILE_COUNT_BY_SHA256, {"sha": sha})).scalar_one()
    return list(rows[:limit]), count
