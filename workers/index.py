"""Index local GGUF files and folders into the catalog, without any network.

Each argument is a file or a folder (walked recursively). Files are assigned to repos:

* Hugging Face cache `.../models--org--name/snapshots/<rev>/...` -> `org/name` at `<rev>`
  (when a cache holds several snapshots of a repo, the one `refs/main` names, else the newest);
* LM Studio `.../.lmstudio/models/org/name/...` (also `lm-studio`, `lmstudio`) -> `org/name`;
* anything else -> the pseudo-repo `local/<folder name>` of the folder given (a single file
  given: its parent folder, and a shard given brings the other shards next to it),
  `source = 'local'`, its revision a fingerprint of names, sizes and mtimes, so re-indexing
  an unchanged folder writes nothing.

A folder given whole, and read whole, is a complete snapshot of its `local/...` repo (files
no longer there are marked gone); a subfolder that cannot be listed makes it a partial one
(nothing gone) and is an error of the run. Files given one by one, and cache layouts (a cache holds only what was
downloaded, not the whole hub repo), only add or refresh their own artifacts and do not
record the repo's revision as indexed, so a hub crawl still indexes the repo in full.
Unreadable and hostile files become error rows; the rest of the folder is still indexed.
A repo whose rows the database refuses is an error of the run and the other repos are still
written; a database that fails as a whole (unreachable, full, its schema broken) ends the run.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import itertools
import logging
import os
import stat
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import exc as sa_exc
from sqlalchemy import select

from registry.catalog import migrate
from registry.catalog.db import Database
from registry.catalog.models import Crawl, Repo
from registry.catalog.services import storable, storable_text, upsert_repo_snapshot
from registry.catalog.snapshot import ArtifactError, ArtifactRecord, RepoSnapshot, ShardRecord, UpsertResult
from registry.catalog.types import utcnow
from registry.gguf.errors import GGUFError
from registry.gguf.facts import derive_facts
from registry.gguf.filename import ShardGroup, group_shards, parse_shard
from registry.gguf.limits import Limits
from registry.gguf.tensor_index import tensor_index
from registry.hub.local import DEFAULT_FIRST_WINDOW, LocalHeader, read_header
from workers.cache import sha256_file
from workers.crawl import CancelWatch
from workers.hashes import FileHashes
from workers.templates import TemplateScanner, compat_columns, error_columns, scanner_scope, template_columns

log = logging.getLogger(__name__)
LMSTUDIO_DIRS = {".lmstudio", "lmstudio", "lm-studio"}


@dataclass
class LocalRepo:
    repo_id: str
    root: Path  # the folder paths are relative to
    files: list[str] = field(default_factory=list)  # posix paths relative to root
    revision: str | None = None  # known from the layout (HF cache) or computed
    source: str = "local"
    complete: bool = True
    pseudo: bool = False  # a `local/<folder>` repo: its id may need disambiguating


@dataclass(frozen=True)
class IndexedArtifact:
    repo: str
    path: str
    status: str  # indexed | unchanged (as the catalog has it already: nothing written) | error
    error: str | None = None


@dataclass
class IndexReport:
    artifacts: list[IndexedArtifact] = field(default_factory=list)
    results: list[UpsertResult] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # arguments that are neither .gguf file nor folder
    unreadable: list[dict[str, str]] = field(default_factory=list)  # folders not listed: {path, error}
    failed: list[dict[str, str]] = field(default_factory=list)  # repos not written: {repo, path, error}
    cancelled: int = 0  # repos not read: the crawl was cancelled before their turn

    @property
    def errors(self) -> int:
        return sum(a.status == "error" for a in self.artifacts)


def _hub_layout(parts: tuple[str, ...]) -> tuple[str, str, int] | None:
    """(repo id, revision, index of the first part below the snapshot folder)."""
    for i in range(len(parts) - 3):
        if parts[i].startswith("models--") and parts[i + 1] == "snapshots":
            return parts[i][len("models--") :].replace("--", "/", 1), parts[i + 2], i + 3
    return None


def _no_exist_marker(parts: tuple[str, ...]) -> bool:
    """`models--org--name/.no_exist/<rev>/<file>`: an empty file by which the HF cache
    remembers that the hub has no such file. Not a model, not even a broken one."""
    return any(p.startswith("models--") and q == ".no_exist" for p, q in itertools.pairwise(parts))


def _lmstudio_layout(parts: tuple[str, ...]) -> tuple[str, int] | None:
    for i in range(len(parts) - 4):
        if parts[i].lower() in LMSTUDIO_DIRS and parts[i + 1] == "models":
            return f"{parts[i + 2]}/{parts[i + 3]}", i + 4
    return None


def _walk(folder: Path) -> tuple[list[Path], list[tuple[Path, OSError]]]:
    """The `.gguf` names under `folder` in name order, without following linked folders, and
    the folders that could not be listed (with why): a walk that has any is not the whole tree.

    A loop over a stack, not os.walk: Python 3.11's os.walk recurses once per level, and a
    tree deeper than the recursion limit raised RecursionError out of the whole run.
    """
    found: list[Path] = []
    unread: list[tuple[Path, OSError]] = []
    stack = [folder]
    while stack:
        top = stack.pop()
        try:
            with os.scandir(top) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError as exc:
            log.warning("folder not read: %s", exc)
            unread.append((top, exc))
            continue
        subfolders = []
        for entry in entries:
            try:
                is_dir = entry.is_dir()
            except OSError:
                is_dir = False
            if not is_dir:
                if entry.name.lower().endswith(".gguf"):
                    found.append(top / entry.name)
            elif not entry.is_symlink():  # a linked folder may loop back: never followed
                subfolders.append(top / entry.name)
        stack += reversed(subfolders)
    return found, unread


def _with_sibling_shards(file: Path) -> list[Path]:
    """A file given by name, and the other shards of its split set found next to it: one
    shard alone is an artifact with the others "missing" when they are right there."""
    parsed = parse_shard(file.name)
    if parsed is None:
        return [file]
    stem, index, count = parsed
    tail = file.name[len(stem) + 6 :]  # "-of-NNNNN.gguf" as written
    siblings = (file.with_name(f"{stem}-{i:05d}{tail}") for i in range(1, count + 1) if i != index)
    return [file, *(p for p in siblings if os.path.lexists(p))]


def discover(
    arguments: Sequence[str | os.PathLike[str]],
) -> tuple[list[LocalRepo], list[str], list[dict[str, str]]]:
    """Assign every GGUF file under the arguments to a repo (no file is opened here).

    Also returns the arguments skipped and the folders that could not be listed
    (`{path, error}`); a folder with an unlisted part is not a complete snapshot.
    """
    repos: dict[tuple[str, str | None, Path], LocalRepo] = {}
    skipped = []
    unreadable = []
    for arg in arguments:
        # absolute() and not resolve(): HF cache files are symlinks whose path is the layout.
        base = Path(arg).expanduser().absolute()
        unread: list[tuple[Path, OSError]] = []
        if base.is_dir():
            (files, unread), whole = _walk(base), True
            unreadable += [{"path": str(p), "error": f"folder not read: {_why(exc)}"} for p, exc in unread]
        elif base.name.lower().endswith(".gguf"):  # even a FIFO or a dangling link: an error row
            files, whole = _with_sibling_shards(base), False
        else:
            skipped.append(str(arg))
            continue
        for file in files:
            parts = file.parts
            if whole and _no_exist_marker(parts):
                continue
            if hub := _hub_layout(parts):
                repo_id, revision, cut = hub
                key: tuple[str, str | None, Path] = (repo_id, revision, Path(*parts[:cut]))
                repo = repos.setdefault(key, LocalRepo(repo_id, key[2], revision=revision, source="hub"))
            elif lms := _lmstudio_layout(parts):
                repo_id, cut = lms
                key = (repo_id, None, Path(*parts[:cut]))
                repo = repos.setdefault(key, LocalRepo(repo_id, key[2], source="hub"))
            else:
                root = base if whole else base.parent
                key = (f"local/{root.name or 'root'}", None, root)
                repo = repos.setdefault(key, LocalRepo(key[0], root, pseudo=True))
            # A cache holds the files someone downloaded, not the whole hub repo: only a local
            # folder given whole, and read whole, is a complete snapshot whose missing files
            # are gone (a subfolder unreadable for a moment must not lose its models).
            repo.complete = repo.pseudo and repo.complete and whole and not unread and repo.root == base
            repo.files.append(file.relative_to(repo.root).as_posix())
    return _one_revision_per_repo(repos.values()), skipped, unreadable


def _why(exc: OSError) -> str:
    return exc.strerror or type(exc).__name__


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def _one_revision_per_repo(repos: Iterable[LocalRepo]) -> list[LocalRepo]:
    """Of the snapshots in one HF cache repo folder, the one `refs/main` names, else the newest.

    Chosen per cache folder, not per repo id: an LM Studio folder or a second cache of the
    same org/name holds other files, and dropping them lost those files from the index.
    """
    chosen: list[LocalRepo] = []
    snapshots: dict[Path, list[LocalRepo]] = {}
    for repo in repos:
        if repo.source == "hub" and repo.revision is not None:  # .../models--org--name/snapshots/REV
            snapshots.setdefault(repo.root.parent.parent, []).append(repo)
        else:
            chosen.append(repo)
    for folder, candidates in snapshots.items():
        main = _read_text(folder / "refs" / "main")
        chosen.append(max(candidates, key=lambda r: (r.revision == main, _mtime(r.root))))
    return chosen


def _fingerprint(repo: LocalRepo) -> str:
    h = hashlib.sha1(usedforsecurity=False)
    for rel in sorted(repo.files):
        try:
            st = (repo.root / rel).stat()
            h.update(f"{rel}\0{st.st_size}\0{st.st_mtime_ns}\n".encode(errors="surrogateescape"))
        except OSError:
            h.update(f"{rel}\0missing\n".encode(errors="surrogateescape"))
    return h.hexdigest()[:16]


def _newest_mtime(repo: LocalRepo) -> datetime | None:
    """A local folder's "last modified": its newest file, so sorting by recency means something."""
    times = []
    for rel in repo.files:
        with contextlib.suppress(OSError):
            times.append((repo.root / rel).stat().st_mtime)
    return datetime.fromtimestamp(max(times), UTC) if times else None


def _read_group(
    root: Path, group: ShardGroup, limits: Limits, first_window: int, scanner: TemplateScanner | None = None
) -> ArtifactRecord:
    """Headers, facts and template findings of one artifact; every failure becomes its error.

    Blocking (runs in a thread). Without a scanner the findings are None: not scanned.
    """
    sizes: list[int | None] = []
    for rel in group.paths:
        try:
            st = (root / rel).stat()
            sizes.append(st.st_size if stat.S_ISREG(st.st_mode) else None)
        except OSError:
            sizes.append(None)
    shards = [
        ShardRecord(rel, size=size, split_no=i)
        for i, (rel, size) in enumerate(zip(group.paths, sizes, strict=True))
    ]
    try:
        if not group.complete:
            raise GGUFError(group.incomplete_reason())
        for rel, size in zip(group.paths, sizes, strict=True):
            if size is None:  # a FIFO or device would block or never end: never open one
                raise GGUFError(f"{rel}: not a regular file", field="path")
        headers: list[LocalHeader] = [
            read_header(root / rel, limits=limits, first_window=first_window) for rel in group.paths
        ]
        facts = derive_facts([h.header for h in headers], file_sizes=[h.file_size for h in headers])
    except GGUFError as exc:
        return ArtifactRecord(
            shards[0].path, tuple(shards), error=ArtifactError(exc.code, str(exc)), **error_columns(exc)
        )
    except Exception as exc:  # a parser bug must cost one row, not the whole folder
        log.exception("unexpected error reading %s", root / group.paths[0])
        return ArtifactRecord(
            shards[0].path,
            tuple(shards),
            error=ArtifactError("internal_error", f"{type(exc).__name__}: {exc}"),
        )
    shards = [ShardRecord(s.path, size=h.file_size, header_bytes=h.header.data_offset, split_no=s.split_no)
              for s, h in zip(shards, headers, strict=True)]  # fmt: skip
    # Templates live in the first shard's metadata, like every other key.
    scan = scanner.scan_sync(headers[0].header) if scanner is not None else None
    compat = compat_columns([h.header for h in headers], facts.kind, scanner)
    return ArtifactRecord(shards[0].path, tuple(shards), facts=facts, **template_columns(scan), **compat,
                          tensor_index=tensor_index([h.header for h in headers]))  # fmt: skip


async def _unique_pseudo_id(db: Database, repo: LocalRepo) -> str:
    """`local/<folder>` of another folder with the same name gets a short hash of its path."""
    async with db.sessions() as session:
        owner = (
            await session.execute(select(Repo.local_path).where(Repo.repo_id == storable_text(repo.repo_id)))
        ).first()
    if owner is None or owner[0] == storable_text(str(repo.root)):
        return repo.repo_id
    return f"{repo.repo_id}-{hashlib.sha1(os.fsencode(repo.root), usedforsecurity=False).hexdigest()[:6]}"


async def _with_sha256(root: Path, record: ArtifactRecord, hashes: FileHashes) -> ArtifactRecord:
    """The record with the sha256 of each of its regular files (taken once: `hashes` keeps
    it for a file that has not changed), so that the catalog knows local files by their
    bytes as it knows the hub's by their LFS oid. A file that cannot be read keeps none."""
    shards = []
    for shard in record.shards:
        sha = None
        if shard.size is not None:  # a FIFO or a device would block or never end: never read one
            with contextlib.suppress(OSError):
                try:
                    sha = await hashes.sha256(root / shard.path)
                except UnicodeEncodeError:  # a name that is not UTF-8 has no key in the hash cache
                    sha = await sha256_file(root / shard.path)
        shards.append(dataclasses.replace(shard, sha256=sha))
    return dataclasses.replace(record, shards=tuple(shards))


async def build_snapshot(
    db: Database,
    repo: LocalRepo,
    limits: Limits,
    first_window: int,
    scanner: TemplateScanner | None = None,
    *,
    force: bool = False,
    hashes: FileHashes | None = None,
) -> RepoSnapshot:
    records = []
    async with scanner_scope(scanner) as scanner:  # without one from the caller: one for this repo
        for group in group_shards(repo.files):
            record = await asyncio.to_thread(_read_group, repo.root, group, limits, first_window, scanner)
            records.append(record if hashes is None else await _with_sha256(repo.root, record, hashes))
    repo_id = await _unique_pseudo_id(db, repo) if repo.pseudo else repo.repo_id
    # A stat of every file: off the loop too (a network share may answer slowly).
    last_modified, revision = await asyncio.to_thread(
        lambda: (_newest_mtime(repo), repo.revision or _fingerprint(repo))
    )
    return RepoSnapshot(
        last_modified=last_modified,
        repo_id=repo_id,
        revision=revision,
        artifacts=tuple(records),
        source="local" if repo.pseudo else repo.source,
        local_path=str(repo.root),
        complete=repo.complete,
        force=force,
    )


async def index_paths(
    db: Database,
    arguments: Sequence[str | os.PathLike[str]],
    *,
    limits: Limits | None = None,
    first_window: int = DEFAULT_FIRST_WINDOW,
    crawl_id: int | None = None,
    full: bool = False,
    hashes: FileHashes | None = None,
) -> IndexReport:
    """Index files and folders; creates or migrates the database first when needed.

    Every header is read each time; a folder whose files did not change writes nothing,
    unless `full` (after an upgrade that derives more or other facts from headers). With
    `hashes`, each file's sha256 is stored too (taken from a file once, while it does not
    change).

    The run is recorded as a `local` crawl: the row `crawl_id` (a crawl of the `local`
    source, queued by the API or local.schedule) or a new one. A cancelled crawl stops
    before its next repo."""
    await migrate.ensure_schema(db.engine)
    limits = limits or Limits()
    paths = [storable_text(os.fspath(a)) for a in arguments]
    async with db.sessions() as session, session.begin():
        if crawl_id is None:
            crawl = Crawl(kind="local", parameters={"paths": paths})
            session.add(crawl)
        else:
            crawl = await session.get_one(Crawl, crawl_id)
            crawl.parameters = {**(crawl.parameters or {}), "paths": paths}
            crawl.heartbeat_at = utcnow()
    repos: list[LocalRepo] = []
    report = IndexReport()
    watch = CancelWatch(db, crawl.id)
    scanner = TemplateScanner()  # one sandbox pool and scan cache for the whole run
    try:
        watch.start()
        await watch.check()
        # In a thread: a walk of a big tree (or a slow network share) would stall the loop,
        # which in `registry serve` also answers the API. A walk that fails ends the row.
        repos, report.skipped, report.unreadable = await asyncio.to_thread(discover, arguments)
        for repo in repos:
            if watch.cancelled:
                report.cancelled += 1
                continue
            repo_id = repo.repo_id
            try:
                snap = await build_snapshot(db, repo, limits, first_window, scanner, force=full, hashes=hashes)
                repo_id = snap.repo_id
                async with db.sessions() as session, session.begin():
                    result = await upsert_repo_snapshot(session, snap)
                report.results.append(result)
            except Exception as exc:
                if _database_down(exc):
                    raise
                # This repo's rows were refused (a constraint, a value, a bug in its upsert):
                # the transaction rolled back, and the other folders still get indexed.
                log.exception("local crawl %s: %s was not written", crawl.id, repo_id)
                error = f"{type(exc).__name__}: {exc}".splitlines()[0]
                report.failed.append({"repo": repo_id, "path": "", "error": error})
                continue
            # Nothing written: the catalog has every file as it is (same folder fingerprint or cache revision).
            same = "unchanged" if result.unchanged or result.written == 0 else "indexed"
            report.artifacts += [
                IndexedArtifact(snap.repo_id, a.path, same if a.facts else "error",
                                f"{a.error.code}: {a.error.message}" if a.error else None)
                for a in snap.artifacts
            ]  # fmt: skip
    except BaseException as exc:  # a database error, Ctrl-C: the row says so, never "running" for ever
        try:
            await _finish(db, crawl.id, report, len(repos), failure=exc)
        except Exception:
            log.exception("could not record the failure of local crawl %s", crawl.id)
        raise
    finally:
        await watch.stop()
        await scanner.aclose()
    await _finish(db, crawl.id, report, len(repos))
    return report


def _database_down(exc: Exception) -> bool:
    """A failure of the database as a whole rather than of one repo's rows: it cannot be
    reached, the connection broke, it is full or locked, its schema is broken (what the
    DB-API calls operational and interface errors)."""
    if isinstance(exc, sa_exc.DBAPIError) and exc.connection_invalidated:
        return True
    return isinstance(
        exc, sa_exc.OperationalError | sa_exc.InterfaceError | sa_exc.DisconnectionError | OSError
    )


async def _finish(
    db: Database, crawl_id: int, report: IndexReport, repos: int, *, failure: BaseException | None = None
) -> None:
    errors = (
        report.failed
        + [{"repo": "", **u} for u in report.unreadable]
        + [{"repo": a.repo, "path": a.path, "error": a.error} for a in report.artifacts if a.error]
    )
    if failure is not None:
        errors.insert(0, {"repo": "", "path": "", "error": f"{type(failure).__name__}: {failure}"})
    async with db.sessions() as session, session.begin():
        crawl = await session.get_one(Crawl, crawl_id)
        if crawl.status != "cancelled":  # cancelled: its end is the cancelling
            crawl.status = "finished" if failure is None else "failed"
            crawl.finished_at = utcnow()
        crawl.counters = {"repos": repos, "artifacts": len(report.artifacts), "errors": report.errors,
                          "failed": len(report.failed), "unreadable": len(report.unreadable),
                          "cancelled": report.cancelled,
                          "rederived": sum(r.rederived for r in report.results)}  # fmt: skip
        crawl.errors = storable(errors[:100])
