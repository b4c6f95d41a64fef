"""Writes: one repo snapshot at a time, idempotent, one transaction.

`upsert_repo_snapshot` must be the first thing a fresh transaction does:

    async with db.sessions() as session, session.begin():
        await upsert_repo_snapshot(session, snapshot)

Its first statement is a write (insert-or-ignore of the repo row) and its second locks
that row (`SELECT ... FOR UPDATE` on PostgreSQL); on SQLite the first write takes the
database write lock. Either way two writers of the same repo run one after the other and
the second sees the first's result, so concurrent writers never create duplicates.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Mapping
from dataclasses import asdict, fields
from typing import Any, cast

from sqlalchemy import (
    BigInteger,
    Integer,
    String,
    Table,
    case,
    delete,
    exists,
    func,
    insert,
    literal,
    select,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncSession

from registry.catalog.folding import fold, folded
from registry.catalog.lineage import derive_edges
from registry.catalog.memory_sql import LINE_COLUMNS
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
    repo_key,
)
from registry.catalog.snapshot import DERIVATION, ArtifactRecord, LineageRecord, RepoSnapshot, UpsertResult
from registry.catalog.types import EPOCH, utcnow
from registry.gguf.compat import runs_in_llama_cpp
from registry.gguf.facts_model import Facts as FactsData
from registry.gguf.facts_model import modality_mask
from registry.gguf.kvcache import KVCache
from registry.gguf.memory import memory_line
from registry.gguf.memory_profile import MemoryProfile
from registry.safety.capabilities import mask as capability_mask
from registry.safety.findings import findings_to_json, max_severity_rank

SEARCH_TEXT_LIMIT = 4000
_INT32 = 2**31 - 1
_INT64 = 2**63 - 1
# Facts fields with a typed column; everything else but the quant mix goes to `extra`.
_TYPED = {c.name for c in Facts.__table__.columns} - {"artifact_id", "extra"}
_SEARCHED_REPO_FIELDS = {"tags", "description"}
_REPO_FIELDS = (
    "source", "last_modified", "downloads", "likes", "tags", "gated", "card_license",
    "card_base_model", "card_base_model_relation", "description", "local_path",
)  # fmt: skip

SIZE_BUCKETS: tuple[tuple[int, str], ...] = (
    (1_500_000_000, "<1.5B"),
    (4_000_000_000, "1.5-4B"),
    (9_000_000_000, "4-9B"),
    (15_000_000_000, "9-15B"),
    (35_000_000_000, "15-35B"),
    (80_000_000_000, "35-80B"),
)


def size_bucket(parameter_count: int) -> str | None:
    if parameter_count <= 0:
        return None
    return next((label for limit, label in SIZE_BUCKETS if parameter_count < limit), ">80B")


def storable_text(value: str) -> str:
    """Text both databases take: no NUL (PostgreSQL refuses it), and lone surrogates (a
    file name that is not UTF-8, as Python decodes it) spelled out as `\\udcxx`, since
    neither driver can encode them."""
    value = value.replace("\x00", "")
    if value.isascii():
        return value
    try:
        value.encode()
    except UnicodeEncodeError:
        return value.encode(errors="backslashreplace").decode()
    return value


def storable(value: Any) -> Any:
    """Make hostile values storable: text as `storable_text`, no NaN in JSON, bytes as hex."""
    if isinstance(value, str):
        return storable_text(value)
    if value is None or isinstance(value, int):  # most values; asked before the slower Mapping check
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, Mapping):
        return {str(storable(k)): storable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [storable(v) for v in value]
    if isinstance(value, bytes | bytearray):
        return value.hex()
    return value


def _fit(table: Any, row: dict[str, Any]) -> dict[str, Any]:
    """Clamp integers and truncate strings to their column so a hostile header still stores."""
    limits = _column_limits(table)
    out = {}
    for key, value in row.items():
        if isinstance(value, float) and not math.isfinite(value):
            value = None  # a float column cannot hold NaN on every database; JSON gets the text
        value = storable(value)
        largest, length = limits[key]
        if isinstance(value, bool):
            pass
        elif isinstance(value, int) and largest:
            value = max(-largest, min(largest, value))
        elif isinstance(value, str) and length:
            value = value[:length]
        out[key] = value
    return out


@functools.cache
def _column_limits(table: Any) -> dict[str, tuple[int, int]]:
    """Per column of `table`: the largest integer it holds and the characters it keeps (0: no limit)."""
    limits = {}
    for column in table.c:
        kind = column.type
        largest = (_INT64 if isinstance(kind, BigInteger) else _INT32) if isinstance(kind, Integer) else 0
        limits[column.key] = (largest, kind.length or 0 if isinstance(kind, String) else 0)
    return limits


def _path_key(path: str) -> str:
    """The artifact's path as stored (cleaned, cut to the column): its key within the repo."""
    return str(_fit(Artifact.__table__, {"path": path})["path"])


def _search_text(repo: Repo, record: ArtifactRecord, moved_from: Iterable[str]) -> str:
    """The artifact's free-text haystack; `moved_from`: the ids the hub moved to its repo,
    right after the repo's own id, so that a long description never cuts them off."""
    parts = [repo.repo_id, *moved_from, record.path, *repo.tags]
    f = record.facts
    if f is not None:
        parts += [f.name or "", f.basename or "", f.finetune or "", *f.tags, f.description or ""]
    parts.append(repo.description or "")
    return str(storable(" ".join(p for p in parts if p).lower()))[:SEARCH_TEXT_LIMIT]


def _insert(dialect: str, table: Any) -> Any:
    return (postgresql.insert if dialect == "postgresql" else sqlite.insert)(table)


async def _lock_repo(session: AsyncSession, snap: RepoSnapshot) -> tuple[Repo, bool]:
    """The snapshot's repo row, created if need be, locked; and whether it was created.

    The hub resolves repo ids in any letter case, so a hub repo that the catalog has in
    another spelling only is that row: it is not created again. A complete snapshot from
    the hub gives the row its spelling (the owner respelled the repo); a partial one (a
    cache folder named in another case) writes into the row as it is spelled."""
    dialect = session.get_bind().dialect.name
    repo_id = _fit(Repo.__table__, {"repo_id": snap.repo_id})["repo_id"]  # the key as stored
    key = repo_key(repo_id)
    values = _fit(Repo.__table__, {"repo_id": repo_id, "repo_key": key, "source": snap.source, "tags": [],
                                   "card_base_model": [], "created_at": utcnow(), "updated_at": utcnow()})  # fmt: skip
    insert_row = _insert(dialect, Repo.__table__)
    if snap.source == "hub":  # still one statement, and a write: see the module docstring
        columns = Repo.__table__.c
        row = select(*(literal(v, columns[k].type) for k, v in values.items()))
        same_key = exists().where(columns.repo_key == key, columns.source == "hub")
        insert_row = insert_row.from_select(list(values), row.where(~same_key))
    else:
        insert_row = insert_row.values(values)
    stmt = insert_row.on_conflict_do_nothing(index_elements=["repo_id"]).returning(Repo.__table__.c.id)
    created = (await session.execute(stmt)).scalar_one_or_none() is not None
    repo = await _locked_repo(session, Repo.repo_id == repo_id)
    if repo is None:  # the hub repo in another spelling
        repo = await _locked_repo(session, Repo.repo_key == key, Repo.source == "hub")
        assert repo is not None, "the insert found a row of this key"
        if snap.complete:
            await _rename_repo(session, repo, repo_id)
    return repo, created


async def _rename_repo(session: AsyncSession, repo: Repo, repo_id: str) -> None:
    """The repo row and the edges it has as a child take the id `repo_id`, and its artifacts'
    sort names begin with it at once: the name sort and the author filter read them. (The
    search text, which also holds the ids moved to the repo, is `repo_moved`'s.)"""
    old, new = f"{repo.repo_id}/".lower(), f"{repo_id}/".lower()
    repo.repo_id, repo.repo_key = repo_id, repo_key(repo_id)
    if new != old:
        column = Artifact.sort_name
        await session.execute(
            update(Artifact)
            .where(Artifact.repo_pk == repo.id, func.substr(column, 1, len(old)) == old)
            .values(sort_name=literal(new, String) + func.substr(column, len(old) + 1))
            .execution_options(synchronize_session=False)
        )
    await session.execute(
        update(LineageEdge)
        .where(LineageEdge.child_pk == repo.id)
        .values(child_repo_id=repo_id, child_key=repo.repo_key)
        .execution_options(synchronize_session=False)
    )


async def _locked_repo(session: AsyncSession, *where: Any) -> Repo | None:
    """The first repo row (by id) that matches, locked for this transaction."""
    query = select(Repo).where(*where).order_by(Repo.id).limit(1).with_for_update()
    return (await session.scalars(query.execution_options(populate_existing=True))).one_or_none()


def _apply_repo_fields(repo: Repo, snap: RepoSnapshot) -> set[str]:
    """Copy the snapshot's repo fields, touching only the ones that differ; their names."""
    changed = set()
    for name in _REPO_FIELDS:
        value = getattr(snap, name)
        if isinstance(value, tuple):
            value = list(value)
        value = _fit(Repo.__table__, {name: value})[name]
        if getattr(repo, name) != value:
            setattr(repo, name, value)
            changed.add(name)
    return changed


def _file_license(facts: FactsData | None) -> str | None:
    """The file's license as its facts row stores it."""
    if facts is None or facts.license is None:
        return None
    return str(_fit(Facts.__table__, {"license": facts.license})["license"])


def _artifact_values(
    repo: Repo, snap: RepoSnapshot, record: ArtifactRecord, moved_from: Iterable[str]
) -> dict[str, Any]:
    f = record.facts
    values: dict[str, Any] = {
        "revision": snap.revision,
        "status": "indexed" if f is not None else "error",
        "error_code": record.error.code if record.error else None,
        "error_message": record.error.message if record.error else None,
        "shard_count": len(record.shards) or 1,
        "file_size": sum(s.size or 0 for s in record.shards),
        "architecture": f.architecture if f else None,
        # The card's when the file names none; `_refresh_repo_copies` decides alike.
        "license": _file_license(f) or repo.card_license,
        "file_type": f.file_type if f else None,
        "size_label": f.size_label if f else None,
        "size_bucket": size_bucket(f.parameter_count) if f else None,
        "parameter_count": f.parameter_count if f else 0,
        "context_length": f.context_length if f else None,
        "expert_count": f.expert_count if f else None,
        **_kv_columns(f.kv_cache if f else None),
        **_memory_columns(f.memory_profile if f else None),
        "vocab_sha256": f.vocab_sha256 if f else None,
        "vocab_size": f.vocab_size if f and f.vocab_sha256 else None,
        "kind": f.kind if f else None,
        "modalities": modality_mask(f.modalities) if f and f.kind == "mmproj" else None,
        "downloads": repo.downloads,
        "likes": repo.likes,
        "last_modified": repo.last_modified or EPOCH,
        "sort_name": f"{repo.repo_id}/{record.path}".lower(),
        "search_text": _search_text(repo, record, moved_from),
        **_template_safety(record),
        "runs_in_llama_cpp": None if record.llama_cpp_findings is None else runs_in_llama_cpp(record.llama_cpp_findings),
        "chat_template_render_sha256": record.chat_template_render_sha256,
        "header_read": record.header_read,
        "header_leader": record.header_leader,
        "header_samples": record.header_samples,
        "header_confirmed": None,  # a new read is not yet confirmed by a verification
    }
    # Folded as stored (cleaned and cut to their columns): a query's value, folded alike,
    # is compared with exactly that text.
    return folded(_fit(Artifact.__table__, values))


def _kv_columns(kv: KVCache | None) -> dict[str, int | None]:
    """The KV cache estimate as the memory filter reads it; all NULL without one."""
    if kv is None:
        return {"kv_bytes_per_token": None, "kv_swa_bytes_per_token": None, "kv_sliding_window": None}
    return {
        "kv_bytes_per_token": kv.bytes_per_token,
        "kv_swa_bytes_per_token": kv.swa_bytes_per_token,
        "kv_sliding_window": kv.sliding_window,
    }


def _memory_columns(profile: MemoryProfile | None) -> dict[str, int | None]:
    """The memory estimate as the memory filter and sort read it (`memory_sql`): the
    coefficients of its line at the catalog's settings; all NULL without one."""
    if profile is None:
        return dict.fromkeys(LINE_COLUMNS)
    line = memory_line(profile)
    return {name: getattr(line, name.removeprefix("memory_")) for name in LINE_COLUMNS}


def _template_safety(record: ArtifactRecord) -> dict[str, Any]:
    """The findings column and its worst-severity rank, both NULL when not scanned; and the
    capabilities' bit mask, NULL when not probed."""
    findings, capabilities = record.chat_template_findings, record.chat_template_capabilities
    return {
        "chat_template_findings": None if findings is None else findings_to_json(findings),
        "chat_template_max_severity": None if findings is None else max_severity_rank(findings),
        "chat_template_capabilities": None if capabilities is None else capability_mask(capabilities),
    }


def facts_row(artifact_id: int, facts: FactsData) -> dict[str, Any]:
    """The facts table's row of these facts, as the writer stores it."""
    return _facts_row(artifact_id, facts)


def _facts_row(artifact_id: int, facts: FactsData) -> dict[str, Any]:
    data = {f.name: getattr(facts, f.name) for f in fields(facts)}
    typed = {k: v for k, v in data.items() if k in _TYPED}
    extra = {k: (asdict(v) if k in ("split", "kv_cache", "memory_profile") and v is not None else v)
             for k, v in data.items()
             if k not in _TYPED and k != "quant_mix"}  # fmt: skip
    extra["base_models"] = [asdict(b) for b in facts.base_models]
    return _fit(Facts.__table__, {"artifact_id": artifact_id, **typed, "extra": extra})  # made storable there


async def _write_artifacts(
    session: AsyncSession, repo: Repo, snap: RepoSnapshot, todo: list[tuple[ArtifactRecord, Artifact | None]]
) -> None:
    """Write these records of the snapshot, each over its current row or as a new one.

    All of them in a few statements whatever their number (one flush, one DELETE and one
    INSERT a table), not five to eight each: a repo's write holds SQLite's one write lock."""
    if not todo:
        return
    moved_from = await _moved_ids(session, repo)
    new: list[dict[str, Any]] = []
    for record, artifact in todo:
        values = _artifact_values(repo, snap, record, moved_from)
        if artifact is None:
            new.append({"repo_pk": repo.id, "path": _path_key(record.path), **values})
        else:
            for key, value in values.items():
                setattr(artifact, key, value)
    await session.flush()
    # New rows in one INSERT ... RETURNING, in order, without an ORM object each: a first
    # crawl writes nothing but new rows.
    returning = insert(Artifact).returning(Artifact.id, sort_by_parameter_order=True)
    new_ids = iter((await session.scalars(returning, new)).all() if new else ())
    ids = [artifact.id if artifact is not None else next(new_ids) for _, artifact in todo]
    rewritten = [current.id for _, current in todo if current is not None]
    if rewritten:
        for model in (Facts, QuantMix, Shard, ArtifactFinding, ArtifactTensors):
            await session.execute(delete(model).where(model.artifact_id.in_(rewritten)))
    # A revision that moved a shard between artifacts must not trip the (repo, revision, path) key.
    paths = [_path_key(s.path) for record, _ in todo for s in record.shards]
    if paths:
        await session.execute(
            delete(Shard).where(Shard.repo_pk == repo.id, Shard.revision == snap.revision, Shard.path.in_(paths))
        )
        await session.execute(insert(Shard), [
            _fit(Shard.__table__, {"artifact_id": artifact_id, "repo_pk": repo.id, "revision": snap.revision,
                                   "path": s.path, "split_no": s.split_no, "size": s.size, "sha256": s.sha256 and s.sha256.lower(),
                                   "header_bytes": s.header_bytes})
            for (record, _), artifact_id in zip(todo, ids, strict=True) for s in record.shards
        ])  # fmt: skip
    findings = [
        _fit(ArtifactFinding.__table__, {"artifact_id": artifact_id, "position": i, **f.to_dict()})
        for (record, _), artifact_id in zip(todo, ids, strict=True)
        for i, f in enumerate(record.llama_cpp_findings or ())
    ]
    if findings:
        await session.execute(insert(ArtifactFinding), findings)
    tensors = [
        {"artifact_id": artifact_id, "tensor_count": record.tensor_index.total,
         "stored": record.tensor_index.stored, "data": record.tensor_index.data}
        for (record, _), artifact_id in zip(todo, ids, strict=True) if record.tensor_index is not None
    ]  # fmt: skip
    if tensors:
        await session.execute(insert(ArtifactTensors), tensors)
    facts = [(artifact_id, record.facts) for (record, _), artifact_id in zip(todo, ids, strict=True) if record.facts]
    if facts:
        await session.execute(insert(Facts), [_facts_row(artifact_id, f) for artifact_id, f in facts])
        mix = [
            _fit(QuantMix.__table__, {"artifact_id": artifact_id, "tensor_type": name, "tensors": e.tensors,
                                      "elements": e.elements, "bytes": e.bytes})
            for artifact_id, f in facts
            for name, e in f.quant_mix.items()
        ]  # fmt: skip
        if mix:
            await session.execute(insert(QuantMix), mix)


async def _sync_edges(
    session: AsyncSession, repo: Repo, wanted: Iterable[LineageRecord], replace: bool
) -> int:
    rows = (await session.scalars(select(LineageEdge).where(LineageEdge.child_pk == repo.id))).all()
    existing = {(e.parent_key, e.relation, e.source): e for e in rows}
    parents = [(storable_text(e.parent_repo_id), e.relation, e.source) for e in wanted]
    moved = await _moved_keys(session, {repo_key(parent) for parent, _, _ in parents})
    # One edge per parent, relation and source: the first spelling of a parent is kept. A
    # parent the hub has moved is filed under its repo's key, spelled as the source wrote it;
    # the other ids of it that the sources named are kept on the edge (`also_spelled`).
    named: dict[tuple[str, str, str], list[str]] = {}
    for parent, relation, source in parents:
        key = repo_key(parent)
        named.setdefault((moved.get(key, key), relation, source), []).append(parent)
    want = {filed: _spelled_once(spellings) for filed, spellings in named.items()}
    if replace and (stale := [edge.id for k, edge in existing.items() if k not in want]):
        await session.execute(delete(LineageEdge).where(LineageEdge.id.in_(stale)))
    for k, edge in existing.items():
        if k in want:
            first, *also = want[k]
            if edge.parent_repo_id != first:
                edge.parent_repo_id = first  # the source now spells it so
            if edge.also_spelled != also:
                edge.also_spelled = also
    new = [
        {"child_pk": repo.id, "child_repo_id": repo.repo_id, "parent_repo_id": want[k][0],
         "also_spelled": want[k][1:], "relation": k[1], "source": k[2], "child_key": repo.repo_key,
         "parent_key": k[0]}
        for k in sorted(want.keys() - existing.keys())
    ]  # fmt: skip
    if new:
        await session.execute(insert(LineageEdge), new)
    return len(want.keys() | (set() if replace else existing.keys()))


async def _refresh_repo_copies(session: AsyncSession, repo: Repo) -> None:
    """Repo counters changed: bring the search copies on its artifacts up to date.

    An artifact whose file names a license keeps its copy (folded when it was written);
    the others take the card's, folded here: the databases' own case functions differ."""
    names_license = exists().where(Facts.artifact_id == Artifact.id, Facts.license != "")
    await session.execute(
        update(Artifact)
        .where(Artifact.repo_pk == repo.id)
        .values(
            downloads=repo.downloads,
            likes=repo.likes,
            last_modified=repo.last_modified or EPOCH,
            license=case((names_license, Artifact.license), else_=fold("license", repo.card_license)),
        )
        .execution_options(synchronize_session=False)
    )


def derived_before(repo: Repo) -> bool:
    """The repo was last written in full by a release that derived less from the headers
    than this one (`snapshot.DERIVATION`; None: before repos carried the number). A repo
    only partial views wrote has no revision and no number: nothing to tell."""
    return repo.revision is not None and (repo.derivation is None or repo.derivation < DERIVATION)


# derived_before as a condition on repos (the count of `GET /metrics`).
DERIVED_BEFORE = Repo.revision.is_not(None) & (Repo.derivation.is_(None) | (Repo.derivation < DERIVATION))


def _older_commit(repo: Repo, snap: RepoSnapshot) -> bool:
    """A hub snapshot of a commit older than the one indexed: its job read the repo before a
    push and finished after the job that read the push. Writing it would put the catalog
    back, and the next crawl, which compares revisions only, would not see why."""
    return (
        snap.source == "hub"
        and snap.complete
        and repo.revision is not None
        and repo.revision != snap.revision
        and snap.last_modified is not None
        and repo.last_modified is not None
        and snap.last_modified < repo.last_modified
    )


async def _edge_count(session: AsyncSession, repo: Repo) -> int:
    return len((await session.scalars(select(LineageEdge.id).where(LineageEdge.child_pk == repo.id))).all())


async def upsert_repo_snapshot(session: AsyncSession, snap: RepoSnapshot, *, hub_answered: bool = False) -> UpsertResult:
    """Write a repo snapshot. `hub_answered`: the catalog's hub answered for the repo by this
    id (a crawl of it, not of another endpoint), so a move recorded from the id is over."""
    repo, created = await _lock_repo(session, snap)
    if hub_answered and snap.source == "hub":
        await _reclaim(session, repo.repo_key)
    if _older_commit(repo, snap):
        return UpsertResult(repo.id, created, True, 0, 0, await _edge_count(session, repo))
    # A partial view (a cache folder, single files) knows files, not the repo's card or
    # counters: once a complete snapshot wrote them, it must not blank them with its defaults.
    changed = _apply_repo_fields(repo, snap) if snap.complete or repo.revision is None else set()
    meta_changed = bool(changed)
    same = snap.complete and repo.revision == snap.revision and repo.indexed_at is not None
    # Written by an older release (DERIVATION): its artifacts lack what this one derives.
    older = derived_before(repo)
    rewrite = snap.force or older
    # Tags and description feed every artifact's search text: those changes rewrite them.
    if same and not rewrite and not changed & _SEARCHED_REPO_FIELDS:
        if meta_changed:
            await session.flush()
            await _refresh_repo_copies(session, repo)
        return UpsertResult(repo.id, created, True, 0, 0, await _edge_count(session, repo))

    if meta_changed:
        await session.flush()
        await _refresh_repo_copies(session, repo)
    existing = {
        a.path: a for a in (await session.scalars(select(Artifact).where(Artifact.repo_pk == repo.id))).all()
    }
    todo: list[tuple[ArtifactRecord, Artifact | None]] = []
    listed = set()
    for record in snap.artifacts:
        key = _path_key(record.path)
        listed.add(key)
        current = existing.get(key)
        if (
            not snap.complete
            and not rewrite
            and current is not None
            and current.revision == snap.revision
            and current.status != "gone"
        ):
            continue  # a partial re-index of an unchanged file
        todo.append((record, current))
    await _write_artifacts(session, repo, snap, todo)
    written = len(todo)
    gone = 0
    if snap.complete:
        for path, artifact in existing.items():
            if path not in listed and artifact.status != "gone":
                artifact.status = "gone"
                gone += 1
    wanted = snap.lineage if snap.lineage is not None else derive_edges(snap)
    edges = await _sync_edges(session, repo, wanted, replace=snap.complete)
    if snap.complete:  # a partial view must not claim the revision is indexed, nor all its files
        repo.revision = snap.revision
        repo.derivation = DERIVATION
    repo.indexed_at = utcnow()
    await session.flush()
    return UpsertResult(repo.id, created, False, written, gone, edges, rederived=same and older)


async def _moved_keys(session: AsyncSession, keys: set[str]) -> dict[str, str]:
    """old key -> the key of the repo the hub moved it to, for those of `keys` it moved."""
    if not keys:
        return {}
    rows = await session.execute(
        select(RepoMove.old_key, Repo.repo_key)
        .join(Repo, Repo.id == RepoMove.repo_pk)
        .where(RepoMove.old_key.in_(sorted(keys)))
    )
    return {old: new for old, new in rows}


async def _moved_ids(session: AsyncSession, repo: Repo) -> list[str]:
    """The ids the hub moved to `repo`, in the order of the moves: its artifacts' search text
    holds them, so that a search for an id people knew finds the repo it became."""
    if repo.source != "hub":
        return []
    query = (
        select(RepoMove.old_repo_id)
        .where(RepoMove.repo_pk == repo.id)
        .order_by(RepoMove.moved_at, RepoMove.old_key)
    )
    return list((await session.scalars(query)).all())


def _spelled_once(spellings: Iterable[str]) -> list[str]:
    """The spellings, the first of each repo key only, in order."""
    seen: set[str] = set()
    once = []
    for spelling in spellings:
        if repo_key(spelling) not in seen:
            seen.add(repo_key(spelling))
            once.append(spelling)
    return once


async def _file_edges_under(session: AsyncSession, from_key: str, to_key: str) -> None:
    """Edges whose parent is `from_key` are filed under `to_key`. A child that has an edge
    under `to_key` of the same relation and source already keeps that one (one edge per
    parent, relation and source), which takes the other's spellings into `also_spelled`."""
    edges = cast(Table, LineageEdge.__table__)
    other = edges.alias("other")
    twins = await session.execute(
        select(edges.c.id, edges.c.parent_repo_id, edges.c.also_spelled, other.c.id, other.c.parent_repo_id,
               other.c.also_spelled)
        .join(other, (other.c.child_pk == edges.c.child_pk) & (other.c.relation == edges.c.relation)
              & (other.c.source == edges.c.source))
        .where(edges.c.parent_key == from_key, other.c.parent_key == to_key)
    )  # fmt: skip
    merged = [
        (gone, kept, _spelled_once([kept_spelling, *kept_also, spelling, *also])[1:])
        for gone, spelling, also, kept, kept_spelling, kept_also in twins
    ]
    for _, kept, also in merged:
        await session.execute(update(edges).where(edges.c.id == kept).values(also_spelled=also))
    if merged:
        await session.execute(delete(edges).where(edges.c.id.in_([gone for gone, _, _ in merged])))
    await session.execute(update(edges).where(edges.c.parent_key == from_key).values(parent_key=to_key))


async def _record_move(session: AsyncSession, old_id: str, repo: Repo) -> None:
    """The hub answers for `old_id` as `repo` (whose id differs beyond letter case): the
    edges that name the old id are filed under the repo, now and when written later, and
    the repo forgets its revision, so that it is written again with the old id in its
    artifacts' search text."""
    old_key = repo_key(old_id)
    standing = await session.execute(
        select(RepoMove.repo_pk, RepoMove.old_repo_id).where(RepoMove.old_key == old_key)
    )
    if tuple(standing.one_or_none() or ()) == (repo.id, old_id):
        return  # recorded already, as spelled: ending it and recording it again would lose its text
    # A move recorded from the id before, to another repo, ends first: the edges that spell
    # the id come back from that repo, to go where the id goes now.
    await _reclaim(session, old_key)
    await session.execute(insert(RepoMove), [{"old_key": old_key, "old_repo_id": old_id, "repo_pk": repo.id}])
    await _file_edges_under(session, old_key, repo.repo_key)
    repo.revision = None


# Edges re-filed per statement when a move is undone: well under any database's limit of
# bound parameters.
_REFILE_BATCH = 1000


async def _reclaim(session: AsyncSession, key: str) -> None:
    """The hub answers for the id `key` as a repo of that id: a move recorded from it is over,
    and the edges whose source spelled that id are filed under it again. An edge that also
    stands for other ids of the repo (`also_spelled`: the child's sources named both) is
    split: it stays with the repo under the other ids, and a new edge takes this one."""
    moved = await session.scalar(
        select(Repo).join(RepoMove, RepoMove.repo_pk == Repo.id).where(RepoMove.old_key == key)
    )
    if moved is None:
        return
    target = moved.repo_key
    was = await _moved_ids(session, moved)
    await session.execute(delete(RepoMove).where(RepoMove.old_key == key))
    # Its artifacts' search text holds the old id: it goes at once, and should the text not
    # be as written, forgetting the revision has the next crawl of it write them again.
    await _retext(session, moved, [moved.repo_id, *was], [moved.repo_id, *await _moved_ids(session, moved)])
    moved.revision = None
    edges = cast(Table, LineageEdge.__table__)
    rows = await session.execute(select(edges).where(edges.c.parent_key == target))
    ids: list[int] = []
    split: list[dict[str, Any]] = []
    for edge in rows.mappings():
        spellings = [edge["parent_repo_id"], *edge["also_spelled"]]
        back = [s for s in spellings if repo_key(s) == key]
        if not back:
            continue
        stay = [s for s in spellings if repo_key(s) != key]
        if not stay:
            ids.append(edge["id"])
            continue
        # The sources named both: the edge keeps the other ids, and a new one takes this one.
        kept = {"parent_repo_id": stay[0], "also_spelled": stay[1:]}
        await session.execute(update(edges).where(edges.c.id == edge["id"]).values(kept))
        child = {c: edge[c] for c in ("child_pk", "child_repo_id", "child_key", "relation", "source")}
        split.append({**child, "parent_repo_id": back[0], "parent_key": key, "also_spelled": []})
    for at in range(0, len(ids), _REFILE_BATCH):
        batch = ids[at : at + _REFILE_BATCH]
        await session.execute(update(edges).where(edges.c.id.in_(batch)).values(parent_key=key))
    if split:
        await session.execute(insert(edges), split)


async def repo_moved(session: AsyncSession, old: str, new: str) -> str | None:
    """The hub answers for `old` as `new` (the repo was renamed, transferred to another
    owner, or respelled): the catalog's hub repo `old` is that repo. When the catalog has no
    repo `new` yet, the row takes the new id, keeping its artifacts, their ids and
    verifications, and its edges; a new id beyond letter case also forgets its revision,
    since every artifact's search text and sort name hold the id ("renamed"). When the
    catalog has both (`new` in any letter case), `old` is marked deleted as a repo the hub no
    longer has ("retired"). Either way, an old id other than in letter case is recorded as
    moved to the repo (`RepoMove`): edges naming it are filed under the repo.
    None when the catalog has no hub repo `old`."""
    repo = await _locked_repo(session, Repo.repo_id == old, Repo.source == "hub")
    if repo is None:
        return None
    new = _fit(Repo.__table__, {"repo_id": new})["repo_id"]
    key = repo_key(new)
    old_key = repo.repo_key
    other = await session.scalar(
        select(Repo)
        .where(Repo.repo_key == key, Repo.source == "hub", Repo.id != repo.id)
        .order_by((Repo.repo_id == new).desc(), Repo.id)
        .limit(1)
    )
    if other is not None:  # in any letter case: the hub's ids are one repo
        await mark_repo_deleted(session, old)
        if key != old_key:
            await _reclaim(session, key)
            before = {r.id: await _moved_ids(session, r) for r in (repo, other)}
            # moves onto the retired row follow it (their edges are filed under old_key)
            await session.execute(update(RepoMove).where(RepoMove.repo_pk == repo.id).values(repo_pk=other.id))
            await _record_move(session, old, other)
            for r in (repo, other):  # the retired row's gone artifacts no longer answer to those ids
                await _retext(session, r, [r.repo_id, *before[r.id]], [r.repo_id, *await _moved_ids(session, r)])
        await session.flush()
        return "retired"
    if key != old_key:
        await _reclaim(session, key)  # while edges of a move from `new` are filed under their repo
    moved_before = await _moved_ids(session, repo)
    await _rename_repo(session, repo, new)
    if key != old_key:
        await _record_move(session, old, repo)  # which forgets the revision too
    await _retext(session, repo, [old, *moved_before], [repo.repo_id, *await _moved_ids(session, repo)])
    await session.flush()
    return "renamed"


async def _retext(session: AsyncSession, repo: Repo, was: list[str], now: list[str]) -> None:
    """Rewrite the head of the repo's artifacts' search text, the repo's id and the ids moved
    to it as `_search_text` writes them, from `was` to `now`: a search finds the repo under
    its new id at once, and under the ones it had. A text that does not begin as written
    (cut short, or written before the last move) waits for the repo's next write."""
    old, new = (storable_text(" ".join(ids).lower()) + " " for ids in (was, now))
    if old == new:
        return
    column = Artifact.search_text
    await session.execute(
        update(Artifact)
        .where(Artifact.repo_pk == repo.id, func.substr(column, 1, len(old)) == old)
        .values(search_text=func.substr(literal(new, String) + func.substr(column, len(old) + 1), 1, SEARCH_TEXT_LIMIT))
        .execution_options(synchronize_session=False)
    )


async def has_hub_repo(session: AsyncSession, repo_id: str) -> bool:
    """Whether the catalog has a hub repo of this id, in any case of A-Z."""
    found = await session.scalar(
        select(Repo.id).where(Repo.repo_key == repo_key(repo_id), Repo.source == "hub").limit(1)
    )
    return found is not None


async def mark_repo_deleted(session: AsyncSession, repo_id: str) -> UpsertResult | None:
    """The hub says it has no repo `repo_id` (deleted, renamed or made private): its
    artifacts become `gone` (kept, as `?status=gone` shows them), its edges are dropped (it
    claims no parents any more) and its revision is forgotten, so that the repo is read
    again in full if the hub names it again. None when the catalog has no such hub repo."""
    repo = await session.scalar(
        select(Repo).where(Repo.repo_id == repo_id, Repo.source == "hub").with_for_update()
    )
    if repo is None:
        return None
    gone = await session.scalar(
        select(func.count()).where(Artifact.repo_pk == repo.id, Artifact.status != "gone")
    )
    await session.execute(
        update(Artifact)
        .where(Artifact.repo_pk == repo.id, Artifact.status != "gone")
        .values(status="gone")
        .execution_options(synchronize_session=False)
    )
    await session.execute(delete(LineageEdge).where(LineageEdge.child_pk == repo.id))
    repo.revision = None
    repo.indexed_at = utcnow()
    await session.flush()
    return UpsertResult(repo.id, False, False, 0, int(gone or 0), 0, deleted=True)
