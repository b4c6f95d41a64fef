"""The verify worker: prove a GGUF artifact works, from the hub's bytes to generated text.

One verification of one artifact (every shard of a split model):

1. download each shard in full into the download cache (`workers.cache`), resuming by
   Range, and check its size against what the hub lists (`truncated` when short);
2. sha256 each file and compare it with the hub's LFS oid (`hash_mismatch`); local files
   are hashed too, with nothing to compare against;
3. in a child process with an address-space cap and a wall-clock limit
   (`workers.verify_child`): every tensor inside its file, every tensor dequantized with
   its statistics, then perplexity of a fixed paragraph and a greedy continuation
   (`workers.verify_checks`).

The result is a `VerifyResult`; `run_verification` is the job function that writes it to
the catalog's `verifications` row (the same plain async function runs as the `verify` job
of either runner: the embedded pool of `registry serve`, or `registry worker`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import os
import sys
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, NamedTuple

import msgspec
from sqlalchemy import and_, or_, select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import selectinload

from registry.api.launchers import TaskVerifier
from registry.catalog.amounts import LARGEST
from registry.catalog.db import Database
from registry.catalog.models import Artifact, Repo, Shard, Verification, utcnow
from registry.config import Settings
from registry.gguf.facts_model import Facts
from registry.gguf.filename import group_shards, normalise_quant_label, quant_label_from_filename
from registry.hub.client import HubClient, RepoInfo
from registry.hub.errors import HubError
from registry.hub.http import HttpOptions
from registry.hub.local import shard_paths
from registry.responses.commands import VerifyReport
from workers.cache import DownloadCache, Downloader, SizeMismatch, cache_key, sha256_file
from workers.verify_checks import CheckReport, Reason, status_for
from workers.verify_header import confirm_header, header_facts

log = logging.getLogger(__name__)

# What a report keeps of stderr when the child dies: the end says why.
_STDERR_TAIL = 2000
# How long a cancelled verification may wait for its row to be written (a locked database).
_CANCEL_RECORD_S = 10.0


@dataclass(frozen=True)
class ShardSource:
    """One file of an artifact: a URL to download (with what the hub says of it) or a path."""

    name: str
    url: str | None = None
    local_path: Path | None = None
    size: int | None = None
    sha256: str | None = None  # the hub's LFS oid, when known
    key: str | None = None  # cache key


# (the shard, bytes its file being written holds, the whole file's size or None): called as
# a download's bytes arrive.
Progress = Callable[[ShardSource, int, int | None], None]


@dataclass
class VerifyResult:
    status: str
    reason: str | None = None
    message: str | None = None
    sha256: list[str] = field(default_factory=list)  # computed, one per shard
    bytes_downloaded: int = 0
    timings: dict[str, float] = field(default_factory=dict)
    report: CheckReport | None = None
    header_facts: Facts | None = None  # of the whole file's header, to confirm the catalog's

    @classmethod
    def failed(cls, reason: Reason, message: str, **kw: Any) -> VerifyResult:
        return cls(status_for(reason), str(reason), message, **kw)

    def to_dict(self, *, tensors: bool = True) -> dict[str, Any]:
        """The report as `registry verify --json` prints it (`responses.VerifyReport`)."""
        out: dict[str, Any] = msgspec.to_builtins(VerifyReport.from_result(self, tensors=tensors))
        return out


# -- the child process ------------------------------------------------------------------


def child_request(paths: Sequence[Path], settings: Settings) -> dict[str, Any]:
    v, p = settings.verify, settings.parser
    return {
        "paths": [str(x) for x in paths],
        "memory_cap_bytes": v.memory_cap_bytes,
        "options": {
            "perplexity_threshold": v.perplexity_threshold,
            "n_generate": v.n_generate,
            "chunk_bytes": v.chunk_bytes,
            "threads": v.threads,
            "memory_cap_bytes": v.memory_cap_bytes,
            "limits": {
                "max_kv_count": p.max_kv_count,
                "max_tensor_count": p.max_tensor_count,
                "max_string_length": p.max_string_length,
                "max_array_length": p.max_array_length,
            },
        },
    }


# How a child that died of the cap says so on stderr: Python's MemoryError, the C library
# (mmap, thread stacks), and OpenBLAS, which exits the process when it cannot get its
# buffers (seen with caps of 300-320 MB on SmolLM2) instead of raising.
_OUT_OF_MEMORY = (
    "MemoryError",
    "Cannot allocate memory",
    "pthread_create failed",
    "OpenBLAS error: Memory allocation",
)


async def run_checks(paths: Sequence[Path], settings: Settings) -> CheckReport:
    """`workers.verify_checks.check_files` in a child process, killed when time is up."""
    timeout = settings.verify.timeout_seconds
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "workers.verify_child",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        request = json.dumps(child_request(paths, settings)).encode()
        out, err = await asyncio.wait_for(proc.communicate(request), timeout)
    except TimeoutError:
        report = CheckReport()
        report.fail(Reason.TIMEOUT, f"the checks took more than {timeout:g} s")
        return report
    finally:
        if proc.returncode is None:  # timed out or cancelled: the child must not outlive us
            proc.kill()
            await proc.wait()
    if proc.returncode == 0 and out:
        return CheckReport.from_dict(json.loads(out))
    tail = err.decode("utf-8", "replace")[-_STDERR_TAIL:].strip()
    report = CheckReport()
    if any(sign in tail for sign in _OUT_OF_MEMORY):
        report.fail(Reason.MEMORY_EXCEEDED, f"the memory cap was reached: {tail.splitlines()[-1]}")
    else:
        last = tail.splitlines()[-1] if tail else "no output"
        report.fail(Reason.CRASHED, f"the check process exited with {proc.returncode}: {last}")
    return report


# -- one verification -------------------------------------------------------------------


def cache_for(settings: Settings) -> DownloadCache:
    return DownloadCache(settings.cache_dir, settings.verify.cache_max_bytes)


class _Verdict(Exception):
    """Ends a verification early (download or hash stage) with a reason."""

    def __init__(self, reason: Reason, message: str) -> None:
        self.reason = reason
        self.message = message
        super().__init__(message)


@contextlib.contextmanager
def _timed(timings: dict[str, float], stage: str) -> Iterator[None]:
    t0 = time.perf_counter()
    try:
        yield
    finally:
        timings[stage] = round(time.perf_counter() - t0, 4)


async def _download(
    shards: Sequence[ShardSource],
    settings: Settings,
    cache: DownloadCache,
    downloader: Downloader | None,
    result: VerifyResult,
    progress: Progress | None = None,
) -> list[Path]:
    """The local path of every shard, downloading the remote ones into the cache."""
    keys = frozenset(s.key for s in shards if s.key)
    dl = downloader or Downloader(HttpOptions.from_settings(settings.hub))
    paths: list[Path] = []
    try:
        for s in shards:
            if s.local_path is not None:
                paths.append(s.local_path)
                continue
            assert s.url is not None and s.key is not None
            on_bytes = None if progress is None else functools.partial(progress, s)
            try:
                got = await cache.fetch(dl, s.url, s.key, s.size, keep=keys, on_bytes=on_bytes)
            except SizeMismatch as exc:
                cache.discard(s.key)  # a partial copy of the wrong file is no use to a retry
                short = exc.actual < exc.expected
                raise _Verdict(
                    Reason.TRUNCATED if short else Reason.DOWNLOAD_FAILED, f"{s.name}: {exc}"
                ) from None
            except (HubError, OSError) as exc:
                raise _Verdict(Reason.DOWNLOAD_FAILED, f"{s.name}: {exc}") from None
            result.bytes_downloaded += got.bytes_downloaded
            paths.append(got.path)
    finally:
        if downloader is None:
            await dl.close()
    return paths


async def _hash(
    shards: Sequence[ShardSource], paths: Sequence[Path], cache: DownloadCache, result: VerifyResult
) -> None:
    for s, path in zip(shards, paths, strict=True):
        try:
            digest = await sha256_file(path)
        except OSError as exc:
            raise _Verdict(Reason.DOWNLOAD_FAILED, f"{s.name}: {exc}") from None
        result.sha256.append(digest)
        if s.sha256 and digest != s.sha256.lower():
            if s.key:
                cache.discard(s.key)  # never serve these bytes again
            raise _Verdict(
                Reason.HASH_MISMATCH, f"{s.name}: sha256 {digest}, the hub's LFS oid is {s.sha256}"
            )


async def verify_shards(
    shards: Sequence[ShardSource],
    settings: Settings,
    *,
    downloader: Downloader | None = None,
    progress: Progress | None = None,
) -> VerifyResult:
    """Download (when remote), hash and check one artifact's files; `progress(shard, held,
    total)` is called as a download's bytes arrive (see `download_shards`)."""
    result = VerifyResult("passed")
    cache = cache_for(settings)
    # The cached files stay in use until the checks are over: no other job evicts them.
    async with cache.using(s.key for s in shards if s.key):
        try:
            with _timed(result.timings, "download"):
                paths = await _download(shards, settings, cache, downloader, result, progress)
            with _timed(result.timings, "hash"):
                await _hash(shards, paths, cache, result)
        except _Verdict as v:
            result.status, result.reason, result.message = status_for(v.reason), str(v.reason), v.message
            return result
        with _timed(result.timings, "checks"):
            report = await run_checks(paths, settings)
            result.header_facts = await asyncio.to_thread(header_facts, paths)
    result.timings.update(report.timings)
    result.report = report
    result.status, result.reason, result.message = report.status, report.reason, report.message
    return result


async def verify_local(path: Path, settings: Settings) -> VerifyResult:
    """Verify a local file (all shards of its split model): no download, no oid to match."""
    paths = shard_paths(path)
    missing = [p for p in paths if not p.is_file()]
    if missing:
        raise FileNotFoundError(f"no such file: {missing[0]}")
    return await verify_shards([ShardSource(p.name, local_path=p) for p in paths], settings)


# -- artifacts on the hub ---------------------------------------------------------------


class TargetError(Exception):
    """A `REPO[:PATH]` that does not name one GGUF artifact."""


def pick_artifact(info: RepoInfo, name: str | None) -> list[str]:
    """Paths of every shard of the artifact `name` picks: a GGUF path (any shard of it), a
    quantization tag as file names carry it (`Q4_K_M`, any case: the one model file with
    that label, as `REPO:TAG` works in llama.cpp's `-hf`), or, for None, the repo's only
    artifact."""
    files = {f.path: f for f in info.gguf_files}
    groups = {p: g for g in group_shards(files) for p in g.paths}
    # One path per artifact: its first shard present (a set missing shards says so below).
    firsts = sorted({g.paths[0] for g in groups.values()})
    if name is None:
        if len(firsts) != 1:
            shown = ", ".join(firsts[:5]) or "none"
            tags = _tags(firsts)
            raise TargetError(
                f"{info.repo_id} has {len(firsts)} GGUF artifacts ({shown}); name one as REPO:PATH"
                + (f" or REPO:TAG ({', '.join(tags[:MAX_TAGS_SHOWN])})" if tags else "")
            )
        path = firsts[0]
    elif name in files:
        path = name
    elif name.lower().endswith(".gguf"):
        raise TargetError(f"{info.repo_id} has no GGUF file {name!r}")
    else:
        path = tagged_path(info.repo_id, firsts, name)
    group = groups[path]
    if not group.complete:
        first = f"{group.stem}-{group.missing[0]:05d}-of-{group.count:05d}{path[-5:]}"
        raise TargetError(f"{info.repo_id}: {len(group.missing)} of {group.count} shards missing, first {first!r}")
    return list(group.paths)


# How many of a repo's quantization tags an error lists.
MAX_TAGS_SHOWN = 20


def _is_projector_name(path: str) -> bool:
    """A multimodal projector by its file name (`mmproj-F16.gguf`, `model-mmproj-f16.gguf`):
    a tag picks the model, not the projector beside it that carries the same label."""
    return "mmproj" in path.rsplit("/", 1)[-1].lower()


def _tags(firsts: Sequence[str]) -> list[str]:
    """The quantization labels of a repo's model files (first shards), sorted, each once."""
    found = {quant_label_from_filename(p) for p in firsts if not _is_projector_name(p)}
    return sorted(t for t in found if t is not None)


def tagged_path(repo_id: str, firsts: Sequence[str], tag: str) -> str:
    """The first shard of the one model file whose name carries the label `tag`."""
    want = normalise_quant_label(tag)
    labelled = [(p, quant_label_from_filename(p)) for p in firsts if not _is_projector_name(p)]
    # The label exactly; else a dynamic quant's without its prefix (`Q4_K_XL` for `UD-Q4_K_XL`).
    hits = [p for p, label in labelled if label == want] or [
        p for p, label in labelled if label is not None and label.removeprefix("UD-") == want
    ]
    if len(hits) == 1:
        return hits[0]
    if hits:
        raise TargetError(
            f"{repo_id} has {len(hits)} GGUF models tagged {want} ({', '.join(hits[:5])}); name one as REPO:PATH"
        )
    tags = _tags(firsts)
    listed = ", ".join(tags[:MAX_TAGS_SHOWN]) + (
        f" and {len(tags) - MAX_TAGS_SHOWN} more" if len(tags) > MAX_TAGS_SHOWN else ""
    )
    raise TargetError(
        f"{repo_id} has no GGUF file {tag!r} and no model tagged {want}"
        + (f"; its tags: {listed}" if tags else "; its file names carry no quantization tags")
    )


def hub_shards(
    client: HubClient, repo_id: str, revision: str | None, files: Sequence[Any]
) -> list[ShardSource]:
    """Shard sources from (path, size, sha256) records: a RepoFile or a catalog Shard."""
    return [
        ShardSource(
            name=f.path,
            url=client.resolve_url(repo_id, revision, f.path),
            size=f.size,
            sha256=f.sha256,
            key=cache_key(f.sha256, repo_id=repo_id, revision=revision, path=f.path),
        )
        for f in files
    ]


async def hub_artifact(
    repo_id: str, path: str | None, settings: Settings, revision: str | None
) -> list[ShardSource]:
    """The shards of `repo_id[:path]` (the repo's only artifact without a path) on the
    configured hub, pinned to the commit the revision names now."""
    client = HubClient.from_settings(settings.hub)
    info = await client.repo_info(repo_id, revision)
    by_path = {f.path: f for f in info.files}
    chosen = [by_path[p] for p in pick_artifact(info, path)]
    return hub_shards(client, repo_id, info.sha or revision, chosen)


async def verify_hub(
    repo_id: str,
    path: str | None,
    settings: Settings,
    *,
    revision: str | None = None,
    downloader: Downloader | None = None,
    progress: Progress | None = None,
) -> VerifyResult:
    """Verify `repo_id[:path]` on the configured hub, pinned to the revision it lists now."""
    shards = await hub_artifact(repo_id, path, settings, revision)
    return await verify_shards(shards, settings, downloader=downloader, progress=progress)


# -- the job: one catalog row -----------------------------------------------------------


async def artifact_shards(db: Database, artifact_id: int, settings: Settings) -> list[ShardSource]:
    """The files of the catalog's artifact `artifact_id`: on disk, or on the hub at the
    commit it was indexed at."""
    if not 0 < artifact_id <= LARGEST:  # no row has it, and no database column holds it
        raise TargetError(f"no artifact with id {artifact_id}")
    async with db.sessions() as session:
        art = await session.scalar(
            select(Artifact)
            .where(Artifact.id == artifact_id)
            .options(selectinload(Artifact.repo), selectinload(Artifact.shards))
        )
    if art is None:
        raise TargetError(f"no artifact with id {artifact_id}")
    shards = sorted(art.shards, key=lambda s: s.split_no)
    if art.repo.local_path:
        root = Path(art.repo.local_path)
        return [ShardSource(s.path, local_path=root / s.path) for s in shards]
    client = HubClient.from_settings(settings.hub)
    return hub_shards(client, art.repo.repo_id, art.revision, shards)


def _fill_row(row: Verification, result: VerifyResult) -> None:
    r = result.report or CheckReport()
    row.status, row.reason = result.status, result.reason
    row.sha256 = result.sha256[0] if result.sha256 else None
    row.tensors_checked = r.tensors_checked
    row.nonfinite_values = r.nonfinite_values
    row.perplexity = r.perplexity
    row.generated = r.generated_text
    row.generated_tokens = r.generated_tokens
    row.bytes_downloaded = result.bytes_downloaded
    row.peak_rss_bytes = r.peak_rss_bytes
    row.timings = result.timings
    # The rest of the result (message, every shard's sha256, per-tensor statistics, speeds)
    # goes to details; what the row has columns for is not repeated there, except the new
    # columns the API does not present yet (generated_tokens, bytes, peak RSS).
    details = result.to_dict()
    for key in ("status", "reason", "timings", "generated_text", "perplexity"):
        details.pop(key)
    row.details = details
    row.finished_at = utcnow()


async def run_verification(
    db: Database, settings: Settings, verification_id: int, *, downloader: Downloader | None = None
) -> None:
    """Run the queued verification `verification_id` and record its result.

    Whatever happens, the row ends finished: an unexpected error is recorded as `crashed`
    with its message rather than left `running` forever, and a cancelled run (worker
    shutdown, job cancelled) as `failed`, reason `cancelled`, before the cancellation goes
    on. A runner that runs the job again (the embedded queue after a restart) overwrites it.
    """
    async with db.sessions() as session:
        row = await session.get(Verification, verification_id)
        if row is None:
            return
        row.status, row.started_at = "running", utcnow()
        artifact_id = row.artifact_id
        await session.commit()
    try:
        shards = await artifact_shards(db, artifact_id, settings)
        result = await verify_shards(shards, settings, downloader=downloader)
    except (TargetError, HubError, OSError) as exc:
        result = VerifyResult.failed(Reason.DOWNLOAD_FAILED, str(exc))
    except Exception as exc:  # a bug must not leave the row "running"; its message is kept
        result = VerifyResult.failed(Reason.CRASHED, f"{type(exc).__name__}: {exc}")
    except asyncio.CancelledError:
        # No runner retries a cancelled job by itself (procrastinate ends it `aborted`).
        # The artifact keeps the status of its last verification with a verdict.
        cancelled = VerifyResult.failed(Reason.CANCELLED, "the verification was stopped before its end")
        await _record_despite_cancel(_record(db, verification_id, None, cancelled), verification_id)
        raise
    await _record(db, verification_id, artifact_id, result)


async def _record_despite_cancel(write: Coroutine[Any, Any, None], verification_id: int) -> None:
    """Run `write` to its end, for at most `_CANCEL_RECORD_S`, although the task that awaits
    it is cancelled again meanwhile (a second stop signal, a shutdown cancelling every task):
    interrupted, it would leave the row `running`."""
    task = asyncio.ensure_future(write)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + _CANCEL_RECORD_S
    while not task.done() and (left := deadline - loop.time()) > 0:
        # Unlike awaiting it, asyncio.wait cancelled leaves `task` running: it shields it.
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait([task], timeout=left)
    if not task.done():
        task.cancel()
        log.error("verification %s: its cancellation was not recorded within %g s", verification_id,
                  _CANCEL_RECORD_S)  # fmt: skip
    elif not task.cancelled() and (exc := task.exception()) is not None:
        log.error("verification %s: its cancellation could not be recorded", verification_id, exc_info=exc)


async def fail_lost_run(session: AsyncSession, verification_id: int, message: str) -> bool:
    """End `crashed`, in the caller's transaction, a verification whose runs killed their
    worker as often as its job may run (the job is failed for good): without a verdict it
    would stay `running`. A row with a verdict already (the worker died after writing it)
    is left as it is. Returns whether the row was ended."""
    row = await session.get(Verification, verification_id)
    if row is None or row.status not in ("queued", "running"):
        return False
    result = VerifyResult.failed(Reason.CRASHED, message)
    _fill_row(row, result)
    art = await session.get(Artifact, row.artifact_id)
    if art is not None:  # as when the check process dies: the file may be what kills it
        art.verification_status = result.status
    return True


async def _record(db: Database, verification_id: int, artifact_id: int | None, result: VerifyResult) -> None:
    """Write the result to the row, and its status to the artifact when `artifact_id` is given."""
    async with db.sessions() as session:
        row = await session.get(Verification, verification_id)
        if row is None:
            return
        art = await session.get(Artifact, artifact_id) if artifact_id is not None else None
        if art is not None and result.header_facts is not None:
            mismatch = await confirm_header(session, art, result.header_facts)
            if mismatch is not None and result.status != "failed":  # the catalog is wrong: say so first
                result.status, result.reason, result.message = "failed", str(Reason.HEADER_MISMATCH), mismatch
        _fill_row(row, result)
        if art is not None:
            art.verification_status = result.status
        await session.commit()


class LocalArtifact(NamedTuple):
    """The catalog's artifact a local file is (any shard of it), and what it knew of its files."""

    artifact_id: int
    sha256: list[str | None]  # of each shard, in split order (None: indexed without one)


async def local_artifact(db: Database, path: Path) -> LocalArtifact | None:
    """The artifact (not gone) whose files the local file at `path` is one of: a file of a
    folder `registry index` read, by its path under the folder."""
    # As `registry index` recorded the folder (absolute, links kept), and as its real path.
    spellings = {Path(path).absolute(), Path(os.path.abspath(path)), Path(os.path.realpath(path))}
    places = {(str(folder), here.relative_to(folder).as_posix()) for here in spellings for folder in here.parents}
    found = or_(*(and_(Repo.local_path == folder, Shard.path == rel) for folder, rel in sorted(places)))
    async with db.sessions() as session:
        artifact_id = await session.scalar(
            select(Shard.artifact_id).join(Repo, Repo.id == Shard.repo_pk).join(Artifact, Artifact.id == Shard.artifact_id)
            .where(found, Artifact.status != "gone").order_by(Shard.artifact_id.desc()).limit(1)
        )  # fmt: skip
        if artifact_id is None:
            return None
        shas = (await session.scalars(select(Shard.sha256).where(Shard.artifact_id == artifact_id)
                                      .order_by(Shard.split_no))).all()  # fmt: skip
    return LocalArtifact(artifact_id, list(shas))


async def record_local(
    db: Database, found: LocalArtifact, result: VerifyResult, started_at: datetime
) -> Verification | None:
    """Record a verification of a local file as one of its catalog artifact `found`, as a
    verify job would: its row, and the artifact's latest status. Not when the files hashed
    are not the ones the catalog indexed (changed since; a hash it did not take is not
    compared): the verdict would be another file's. Returns the row, or None."""
    if len(found.sha256) != len(result.sha256) or any(
        kept is not None and kept != taken for kept, taken in zip(found.sha256, result.sha256, strict=True)
    ):
        return None
    async with db.sessions() as session:
        row = Verification(artifact_id=found.artifact_id, status=result.status, queued_at=started_at,
                           started_at=started_at)  # fmt: skip
        _fill_row(row, result)
        session.add(row)
        art = await session.get(Artifact, found.artifact_id)
        if art is not None:
            art.verification_status = result.status
        await session.commit()
    return row


@contextlib.asynccontextmanager
async def in_process_verifier(settings: Settings) -> AsyncIterator[TaskVerifier]:
    """A Verifier without a job queue, for embedding the API in another program
    (`registry serve` passes a `QueueVerifier` over its job queue): verifications as tasks
    of this process, `verify.concurrency` at a time, over a database of its own.

    Pass `verifier.resume` as a background job of serve so that rows a stopped server
    left queued or running are picked up once the schema is in place."""
    db = Database.from_settings(settings)
    verifier = TaskVerifier(
        db.sessions,
        functools.partial(run_verification, db, settings),
        concurrency=settings.verify.concurrency,
    )
    try:
        yield verifier
    finally:
        await verifier.close()
        await db.dispose()
