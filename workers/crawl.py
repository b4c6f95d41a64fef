"""Crawl a hub: list GGUF repos, index the ones whose revision changed, header bytes only.

One crawl lists the hub (or takes explicit repo ids), compares each repo's revision with
the catalog's and runs `index_repo` for the changed ones, a few at a time. `index_repo`
is the per-repo job: repo info pinned to one commit, every GGUF artifact's headers by
range requests (shard 1 with the full first window, shards 2..N with the small one),
facts derived, one `upsert_repo_snapshot` in one transaction. It is idempotent: the same
revision twice writes nothing the second time.

What becomes a row and what fails the repo: a file that is bad (GGUF errors, a header
over budget, a 416, a missing or gated file) is an error row of its artifact, since
reading it again would give the same answer. A transient failure (rate limits, 5xx,
resets, timeouts after all retries, a file that changed mid-read) writes nothing for the
repo, so the next crawl tries it again instead of recording a revision as indexed.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Literal

from sqlalchemy import select

from registry.catalog import migrate
from registry.catalog.crawls import crawl_status
from registry.catalog.db import Database
from registry.catalog.models import Crawl, Repo, repo_key
from registry.catalog.services import has_hub_repo, mark_repo_deleted, repo_moved, upsert_repo_snapshot
from registry.catalog.snapshot import (
    DERIVATION,
    ArtifactError,
    ArtifactRecord,
    RepoSnapshot,
    ShardRecord,
    UpsertResult,
)
from registry.catalog.types import utcnow
from registry.gguf.errors import GGUFError
from registry.gguf.facts import derive_facts
from registry.gguf.filename import ShardGroup, group_shards
from registry.gguf.limits import Limits
from registry.gguf.tensor_index import tensor_index
from registry.hub.client import HubClient, RepoFile, RepoInfo, RepoSummary
from registry.hub.errors import FileChanged, HubError, RepoNotFound
from registry.hub.http import SHARD_WINDOW, HubHttp, RemoteHeader, first_window_for
from registry.hub.siblings import (
    HeaderRead,
    Leader,
    SiblingReader,
    SiblingStats,
    leaders_first,
    sibling_families,
)
from workers.templates import TemplateScanner, compat_columns, error_columns, scanner_scope, template_columns

if TYPE_CHECKING:
    from registry.config import HubSettings

log = logging.getLogger(__name__)
MAX_ERRORS_KEPT = 100
# Siblings of one repo read at once once their leader is read: each waits on a few round
# trips of its own (the per-host limit still caps requests in flight over all repos).
SIBLINGS_AT_ONCE = 4


@dataclass(frozen=True)
class CrawlParams:
    """What to crawl; the same fields as the API's crawl request."""

    repos: tuple[str, ...] = ()  # explicit "org/name" ids; empty: list the hub
    author: str | None = None
    search: str | None = None
    limit: int | None = None
    full: bool = False  # re-index repos whose revision did not change
    # The crawl speaks for the hub the catalog's repos came from (the configured one, not an
    # `--endpoint` of one run): a repo it says it does not have is marked deleted, and an
    # unfiltered listing also looks at the catalog's repos it did not name.
    prune: bool = True

    @property
    def whole_hub(self) -> bool:
        """The listing names every GGUF repo of the hub: no ids, filters or limit."""
        return not (self.repos or self.author or self.search or self.limit)

    def to_parameters(self) -> dict[str, Any]:
        return {"repos": list(self.repos), "author": self.author, "search": self.search,
                "limit": self.limit, "full": self.full, "prune": self.prune}  # fmt: skip


@dataclass
class CrawlReport:
    listed: int = 0  # repos seen, each once
    unchanged: int = 0  # repos skipped: same revision as indexed
    indexed: int = 0  # repos written
    rederived: int = 0  # of those, repos at the revision indexed that an older release wrote (DERIVATION)
    failed: int = 0  # repos not written because of a transient or hub error
    deleted: int = 0  # repos the hub no longer has: their artifacts marked gone
    moved: int = 0  # repos asked for by an id the hub answers under another (renamed, transferred, respelled)
    not_gguf: int = 0  # repos without a GGUF file that the catalog does not have: not written
    cancelled: int = 0  # repos not read: the crawl was cancelled before their turn
    artifacts: int = 0
    artifact_errors: int = 0  # artifacts recorded with an error (bad or unreadable files)
    files: int = 0  # GGUF files whose header was read (each shard counts)
    sibling_reads: int = 0  # of those, headers read from a sibling's bytes (proven, sampled)
    sibling_fallbacks: int = 0  # sibling reads not trusted and read in full (the log says why)
    bytes_fetched: int = 0
    requests: int = 0
    errors: list[dict[str, str]] = field(default_factory=list)
    crawl_id: int | None = None  # the Crawl row, once created
    status: str = "running"  # then "finished", "failed" or "cancelled", as on the row

    def counters(self) -> dict[str, int]:
        return {k: v for k, v in vars(self).items() if isinstance(v, int) and k != "crawl_id"}

    def error(self, repo: str, exc: BaseException, path: str | None = None) -> None:
        code = getattr(exc, "code", type(exc).__name__)
        self.add_error(repo, path or "", f"{code}: {exc}")

    def count_artifact(self, repo: str, record: ArtifactRecord, remote: Sequence[RemoteHeader]) -> None:
        self.artifacts += 1
        self.artifact_errors += record.error is not None
        self.files += len(remote)
        if record.error is not None:
            self.add_error(repo, record.path, f"{record.error.code}: {record.error.message}")
        self.bytes_fetched += sum(r.bytes_fetched for r in remote)
        self.requests += sum(r.requests for r in remote)

    def add_error(self, repo: str, path: str, text: str) -> None:
        # Capped: a crawl of a broken mirror must not grow one row without bound.
        if len(self.errors) < MAX_ERRORS_KEPT:
            self.errors.append({"repo": repo, "path": path, "error": text})


Progress = Callable[[CrawlReport], None]


@dataclass(frozen=True)
class ReadOptions:
    limits: Limits | None = None
    first_window: int | None = None  # None: the HubHttp's own setting
    shard_window: int = SHARD_WINDOW
    # Chat template scanner shared by a whole crawl; None: one per repo snapshot.
    scanner: TemplateScanner | None = None
    sibling_reuse: bool = True  # hub.sibling_reuse
    sibling_samples: int = 16  # hub.sibling_samples


def _is_transient(exc: HubError) -> bool:
    return exc.retryable or isinstance(exc, FileChanged)


async def _read_artifact(
    http: HubHttp,
    client: HubClient,
    info: RepoInfo,
    group: ShardGroup,
    files: dict[str, RepoFile],
    opts: ReadOptions,
    sibling: _Siblings | None = None,
) -> tuple[ArtifactRecord, list[RemoteHeader]]:
    """Headers and facts of one artifact. Transient hub errors propagate; the rest is a row.

    With `sibling`, a single file or shard 1 of a family whose leader is read is read against
    it, and one of a family without one yet becomes its leader once read."""
    shards = [
        ShardRecord(p, size=files[p].size, sha256=files[p].sha256, split_no=i)
        for i, p in enumerate(group.paths)
    ]
    remote: list[RemoteHeader] = []
    how = HeaderRead()
    first = opts.first_window or http.options.first_window
    path = group.paths[0]
    leader = sibling.leader_of(path) if sibling is not None else None
    try:
        if not group.complete:
            raise GGUFError(group.incomplete_reason())
        if sibling is not None and leader is not None:
            # Shard 1 (or the single file) against the leader; shards 2..N as always.
            one, rest = await asyncio.gather(
                sibling.reader.read(
                    leader,
                    client.resolve_url(info.repo_id, info.sha, path),
                    path=path,
                    expected_size=files[path].size,
                    limits=opts.limits,
                    first_window=first_window_for(path, size=files[path].size, first_window=first),
                ),
                _read_full(http, client, info, group, files, opts, first, skip_first=True),
            )
            remote = [one[0], *rest]
            how = one[1]
            lead = (leader.header, leader.facts) if how.mode == "sibling" and leader.facts is not None else None
            facts = derive_facts([r.header for r in remote], file_sizes=[r.file_size for r in remote], leader=lead)
        else:
            remote = await _read_full(http, client, info, group, files, opts, first)
            facts = derive_facts([r.header for r in remote], file_sizes=[r.file_size for r in remote])
            if sibling is not None and sibling.wants_leader(path):
                sibling.set_leader(path, Leader.of(path, remote[0], facts))
    except HubError as exc:
        if _is_transient(exc):
            raise
        return ArtifactRecord(shards[0].path, tuple(shards), error=ArtifactError(exc.code, str(exc))), remote
    except GGUFError as exc:
        record = ArtifactRecord(
            shards[0].path, tuple(shards), error=ArtifactError(exc.code, str(exc)), **error_columns(exc)
        )
        return record, remote
    shards = [
        ShardRecord(
            s.path, size=r.file_size, sha256=s.sha256, header_bytes=r.header.data_offset, split_no=s.split_no
        )
        for s, r in zip(shards, remote, strict=True)
    ]
    scan = await opts.scanner.scan(remote[0].header) if opts.scanner is not None else None
    headers = [r.header for r in remote]
    compat = await asyncio.to_thread(compat_columns, headers, facts.kind, opts.scanner)
    return (
        ArtifactRecord(
            shards[0].path,
            tuple(shards),
            facts=facts,
            header_read=how.mode,
            header_leader=how.leader,
            header_samples=how.samples if how.mode == "sibling" else None,
            tensor_index=tensor_index(headers),
            **template_columns(scan),
            **compat,
        ),
        remote,
    )


async def _read_full(
    http: HubHttp,
    client: HubClient,
    info: RepoInfo,
    group: ShardGroup,
    files: dict[str, RepoFile],
    opts: ReadOptions,
    first: int,
    *,
    skip_first: bool = False,
) -> list[RemoteHeader]:
    """Every shard's header (with `skip_first`, all but shard 1's), read in full."""
    return list(
        await asyncio.gather(
            *(
                http.fetch_header(
                    client.resolve_url(info.repo_id, info.sha, p),
                    limits=opts.limits,
                    first_window=first_window_for(
                        p,
                        split_no=i,
                        size=files[p].size,
                        first_window=first,
                        small_window=opts.shard_window,
                    ),
                    expected_size=files[p].size,
                )
                for i, p in enumerate(group.paths)
                if i or not skip_first
            )
        )
    )


class _Siblings:
    """The sibling families of one repo snapshot and the leader read for each so far."""

    def __init__(self, reader: SiblingReader, paths: Sequence[str]) -> None:
        self.reader = reader
        self.families = sibling_families(paths)
        self.leaders: dict[tuple[str, ...], Leader] = {}

    def leader_of(self, path: str) -> Leader | None:
        family = self.families.get(path)
        return self.leaders.get(family) if family is not None else None

    def wants_leader(self, path: str) -> bool:
        family = self.families.get(path)
        return family is not None and family not in self.leaders

    def set_leader(self, path: str, leader: Leader) -> None:
        if leader.useful:
            self.leaders[self.families[path]] = leader


async def build_snapshot(
    client: HubClient, http: HubHttp, info: RepoInfo, opts: ReadOptions, report: CrawlReport | None = None
) -> RepoSnapshot:
    """The snapshot of one repo at the commit `info` names. Raises HubError when transient."""
    assert info.sha is not None
    files = {f.path: f for f in info.files}
    groups = group_shards(files)
    stats = SiblingStats()
    sibling = None
    if opts.sibling_reuse:
        # Single files and shard 1 of each complete split set: the files that hold a vocabulary.
        firsts = [g.paths[0] for g in groups if g.complete]
        sibling = _Siblings(SiblingReader(http, samples=opts.sibling_samples, stats=stats), firsts)
    async with scanner_scope(opts.scanner) as scanner:
        opts = dataclasses.replace(opts, scanner=scanner)
        by_first = {g.paths[0]: g for g in groups}
        order = leaders_first(list(by_first), sibling.families) if sibling is not None else list(by_first)
        read: dict[str, ArtifactRecord] = {}

        async def one(first: str) -> None:
            record, remote = await _read_artifact(http, client, info, by_first[first], files, opts, sibling)
            read[first] = record
            if report is not None:
                report.count_artifact(info.repo_id, record, remote)

        # Leaders and files of no family one at a time, as each holds a whole header (a
        # member whose leader could not be read becomes the leader). Then the siblings of a
        # leader read, a few at once: each holds little beyond the leader's arrays, and
        # spends most of its time waiting on its own few round trips.
        siblings = []
        for first in order:
            if sibling is not None and sibling.leader_of(first) is not None:
                siblings.append(first)
            else:
                await one(first)
        slots = asyncio.Semaphore(SIBLINGS_AT_ONCE)

        async def bounded(first: str) -> None:
            async with slots:
                await one(first)

        tasks = [asyncio.ensure_future(bounded(first)) for first in siblings]
        try:
            await asyncio.gather(*tasks)
        finally:  # a transient hub error ends the repo's read: the other reads stop with it
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
    if report is not None:
        report.sibling_reads += stats.reads
        report.sibling_fallbacks += sum(stats.fallbacks.values())
    records = [read[g.paths[0]] for g in groups]  # in the groups' order, whatever the reading order
    return RepoSnapshot(
        repo_id=info.repo_id,
        revision=info.sha,
        artifacts=tuple(records),
        source="hub",
        last_modified=info.last_modified,
        downloads=info.downloads or 0,
        likes=info.likes or 0,
        tags=info.tags,
        gated=info.gated,
        card_license=info.license,
        card_base_model=info.base_model,
        card_base_model_relation=info.base_model_relation,
    )


# index_repo's result besides the write's: a repo with no GGUF file the catalog lacks.
NOT_GGUF: Final = "not_gguf"
IndexResult = UpsertResult | Literal["not_gguf"] | None

_MOVED_LOG = {
    "renamed": "its row takes the new id",
    "retired": "the catalog has that id too, so this one's artifacts are marked gone",
}


async def index_repo(
    db: Database,
    client: HubClient,
    http: HubHttp,
    repo_id: str,
    opts: ReadOptions | None = None,
    report: CrawlReport | None = None,
    *,
    known_revision: str | None = None,
    write_turn: asyncio.Lock | None = None,
    prune: bool = False,
    full: bool = False,
) -> IndexResult:
    """The per-repo job: read everything first, then write it all in one transaction.

    None when the repo is still at `known_revision` (no header is read then); NOT_GGUF,
    with nothing written, when it holds no GGUF file and the catalog does not have it. With
    `write_turn`, the transaction waits for the lock first (see `crawl_hub`). With `prune`,
    a repo of the catalog that the hub says it does not have is marked deleted (the result
    says `deleted`); else, and for a repo the catalog lacks, RepoNotFound is raised. Also
    with `prune`, a repo the hub answers for under another id (renamed, transferred or
    respelled) takes that id in the catalog, or is marked deleted when the catalog already
    has the new id (`repo_moved`); either way the repo is then indexed under its new id.
    With `full` (a crawl's `--full`), a repo at the revision indexed is written again, so
    that what this release derives from the headers reaches repos indexed before it.
    """
    try:
        info = await client.repo_info(repo_id)
    except RepoNotFound:
        if not prune:
            raise
        async with write_turn or contextlib.nullcontext(), db.sessions() as session, session.begin():
            deleted = await mark_repo_deleted(session, repo_id)
        if deleted is None:
            raise
        log.info("%s: the hub no longer has it; its artifacts are marked gone", repo_id)
        return deleted
    if info.sha is None:
        raise HubError("the hub gave no commit sha for the repo", url=client.endpoint)
    if prune and info.repo_id != repo_id:
        async with write_turn or contextlib.nullcontext(), db.sessions() as session, session.begin():
            moved = await repo_moved(session, repo_id, info.repo_id)
        if moved is not None:
            log.info("%s: the hub now calls it %s; %s", repo_id, info.repo_id, _MOVED_LOG[moved])
            known_revision = None  # that was the old id's revision
        # Counted also when the catalog has no row of the old id any more: an earlier
        # attempt of this job moved it and then failed for a transient reason (an attempt
        # that is retried reports nothing), or another crawl did. An id asked for in
        # another letter case only is not a move unless a row took the new spelling.
        if report is not None and (moved is not None or repo_key(info.repo_id) != repo_key(repo_id)):
            report.moved += 1
    if known_revision is not None and info.sha == known_revision:
        return None
    if not info.gguf_files:
        async with db.sessions() as session:
            known = await has_hub_repo(session, info.repo_id)
        if not known:
            # Named by id (a webhook, `registry crawl ORG/NAME`) or tagged GGUF without a GGUF
            # file: nothing to catalog, so nothing is written. A catalog repo whose GGUF files
            # are gone is written as it is: its artifacts become gone.
            return NOT_GGUF
    snap = await build_snapshot(client, http, info, opts or ReadOptions(), report)
    if full:
        snap = dataclasses.replace(snap, force=True)
    async with write_turn or contextlib.nullcontext(), db.sessions() as session, session.begin():
        return await upsert_repo_snapshot(session, snap, hub_answered=prune)


def count_outcome(report: CrawlReport, result: IndexResult) -> None:
    """Count what index_repo did with a repo."""
    if result == NOT_GGUF:
        report.not_gguf += 1
    elif result is not None and result.deleted:
        report.deleted += 1
    elif result is None or result.unchanged:
        report.unchanged += 1
    else:
        report.indexed += 1
        report.rederived += result.rederived


async def known_revisions(db: Database, repo_ids: Sequence[str]) -> dict[str, str | None]:
    """The indexed revision of each of these repos that the catalog has, and that this
    release would derive nothing new from: a repo written by an older one (see
    `snapshot.DERIVATION`) is left out, so it is read again at the same revision."""
    async with db.sessions() as session:
        rows = await session.execute(
            select(Repo.repo_id, Repo.revision).where(
                Repo.repo_id.in_(repo_ids), Repo.indexed_at.is_not(None), Repo.derivation >= DERIVATION
            )
        )
        return {r: rev for r, rev in rows.all()}


async def candidates(
    client: HubClient, params: CrawlParams, db: Database | None = None
) -> AsyncIterator[RepoSummary]:
    """The repos a crawl looks at, each once, in order of first mention: its explicit ids,
    or the hub's GGUF listing. `limit` counts repos: an id named twice is one of them.

    With `db`, a pruning crawl of the whole hub then names the catalog's hub repos that the
    complete listing did not (deleted, renamed, private, or no longer tagged GGUF): each is
    looked at by its id, and those the hub says it does not have are marked deleted. A
    listing that fails names none of them."""
    if params.repos:
        for repo_id in list(dict.fromkeys(params.repos))[: params.limit]:
            yield RepoSummary(repo_id=repo_id)  # no sha: always looked at
        return
    seen: set[str] | None = set() if db is not None and params.prune and params.whole_hub else None
    # The client gives each repo once and counts `limit` in distinct repos: a listing sorted
    # by lastModified names a repo again when it changes while the listing is paged.
    async for summary in client.list_gguf_repos(
        search=params.search, author=params.author, limit=params.limit, sort="last_modified"
    ):
        if seen is not None:
            seen.add(summary.repo_id)
        yield summary
    if seen is not None and db is not None:
        for repo_id in await _unlisted_hub_repos(db, seen):
            yield RepoSummary(repo_id=repo_id)  # no sha: its repo info says whether it is still there


async def _unlisted_hub_repos(db: Database, listed: set[str]) -> list[str]:
    """The catalog's indexed hub repos (not already marked deleted) that are not in `listed`."""
    async with db.sessions() as session:
        rows = await session.scalars(
            select(Repo.repo_id)
            .where(Repo.source == "hub", Repo.revision.is_not(None))
            .order_by(Repo.repo_id)
        )
        return [r for r in rows if r not in listed]


async def crawl_hub(
    db: Database,
    client: HubClient,
    http: HubHttp,
    params: CrawlParams,
    *,
    crawl_id: int | None = None,
    opts: ReadOptions | None = None,
    concurrency: int = 4,
    batch: int = 100,
    progress: Progress | None = None,
) -> CrawlReport:
    """Run one crawl and keep its row up to date; creates the row when `crawl_id` is None.

    `concurrency` repos are read at once; each reads its artifacts one after another
    (shards in parallel), so at most about `concurrency` headers are in memory, and each
    repo's headers are dropped once its snapshot is written. `progress` is called after
    every repo with the running report.
    """
    opts = opts or ReadOptions()
    # One sandbox pool and scan cache for the crawl: a hub repeats the same few templates.
    own_scanner = TemplateScanner() if opts.scanner is None else None
    opts = dataclasses.replace(opts, scanner=opts.scanner or own_scanner)
    await migrate.ensure_schema(db.engine)
    crawl_id = await _start(db, crawl_id, params)
    report = CrawlReport(crawl_id=crawl_id)
    watch = CancelWatch(db, crawl_id)
    watch.start()
    slots = asyncio.Semaphore(concurrency)
    # SQLite takes one writer at a time. Repos finishing together queue here, in order,
    # instead of on SQLite's lock: a writer waiting there holds a connection's thread in
    # SQLite's busy handler, which sleeps in growing steps, and the event loop gives that
    # thread turns it does not need (registry.catalog.db). In bench.crawl part 2, 14 of
    # the 24 repos in flight were waiting to write at any moment.
    write_turn = asyncio.Lock() if db.dialect == "sqlite" else None

    async def one(repo_id: str, known: str | None) -> None:
        async with slots:
            if watch.cancelled:
                report.cancelled += 1
                if progress is not None:
                    progress(report)
                return
            try:
                result = await index_repo(
                    db, client, http, repo_id, opts, report, known_revision=known, write_turn=write_turn,
                    prune=params.prune, full=params.full,
                )  # fmt: skip
            except HubError as exc:
                report.failed += 1
                report.error(repo_id, exc)
                log.warning("crawl %s: %s: %s", crawl_id, repo_id, exc)
            except Exception as exc:  # a bug or a database error on one repo must not end the crawl
                report.failed += 1
                report.error(repo_id, exc)
                log.exception("crawl %s: %s failed", crawl_id, repo_id)
            else:
                count_outcome(report, result)
            if progress is not None:
                progress(report)

    status = "finished"
    running: set[asyncio.Task[None]] = set()
    try:
        pending: list[RepoSummary] = []
        try:
            if not await watch.check():
                async for summary in candidates(client, params, db):  # each repo once: read and counted once
                    report.listed += 1
                    pending.append(summary)
                    if len(pending) >= batch:
                        running |= await _start_batch(db, pending, params, report, one)
                        pending = []
                        # Keep the listing at most one batch ahead of the workers: bounded tasks.
                        while len(running) > batch:
                            _, running = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
                        await _heartbeat(db, crawl_id, report)
                        if await watch.check():
                            break  # list no more; the repos already started are counted cancelled
        except HubError as exc:  # the listing itself failed: say why, and index what it gave
            status = "failed"
            report.error("", exc)
        running |= await _start_batch(db, pending, params, report, one)
        if running:
            await asyncio.gather(*running)
    except BaseException:
        status = "failed"
        raise
    finally:
        for task in running:  # only left when the crawl's own task failed or was cancelled
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)
        await watch.stop()
        report.status = status
        if own_scanner is not None:
            await own_scanner.aclose()
        report.status = await _finish(db, crawl_id, report, status)
    return report


class CancelWatch:
    """Whether a crawl's row has been cancelled (`registry.catalog.crawls`). Between `start()`
    and `stop()` a task reads the row every `every` seconds, so that the paths that ask before
    each repo read a flag: a read of the database there cost the crawl a tenth of its speed
    (bench.crawl part 2). Once cancelled, always so."""

    def __init__(self, db: Database, crawl_id: int, *, every: float = 1.0) -> None:
        self._db = db
        self._crawl_id = crawl_id
        self._every = every
        self._task: asyncio.Task[None] | None = None
        self.cancelled = False

    async def check(self) -> bool:
        """Read the row now."""
        if not self.cancelled:
            async with self._db.sessions() as session:
                self.cancelled = await crawl_status(session, self._crawl_id) == "cancelled"
        return self.cancelled

    def start(self) -> None:
        self._task = asyncio.create_task(self._poll(), name=f"crawl-{self._crawl_id}-cancel-watch")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def _poll(self) -> None:
        while not self.cancelled:
            await asyncio.sleep(self._every)
            try:
                await self.check()
            except Exception:  # the database: the crawl's own writes will say so; look again later
                log.warning("crawl %s: could not read whether it was cancelled", self._crawl_id, exc_info=True)


async def _start_batch(
    db: Database, pending: list[RepoSummary], params: CrawlParams, report: CrawlReport, one: Any
) -> set[asyncio.Task[None]]:
    if not pending:
        return set()
    known = {} if params.full else await known_revisions(db, [s.repo_id for s in pending])
    tasks = set()
    for s in pending:
        if s.sha is not None and s.repo_id in known and known[s.repo_id] == s.sha:
            report.unchanged += 1  # the listing's sha saves a repo_info call per unchanged repo
        else:
            tasks.add(asyncio.ensure_future(one(s.repo_id, known.get(s.repo_id))))
    return tasks


async def _start(db: Database, crawl_id: int | None, params: CrawlParams) -> int:
    async with db.sessions() as session, session.begin():
        if crawl_id is None:
            crawl = Crawl(kind="hub", parameters=params.to_parameters())
            session.add(crawl)
            await session.flush()
            return crawl.id
        row = await session.get_one(Crawl, crawl_id)
        if row.status != "cancelled":  # cancelled before it started: its watch stops it at once
            row.status = "running"
        row.heartbeat_at = utcnow()
        return crawl_id


async def _heartbeat(db: Database, crawl_id: int, report: CrawlReport) -> None:
    async with db.sessions() as session, session.begin():
        row = await session.get_one(Crawl, crawl_id)
        row.heartbeat_at = utcnow()
        row.counters = report.counters()


async def _finish(db: Database, crawl_id: int, report: CrawlReport, status: str) -> str:
    """Record the crawl's end and return its status: a cancelled crawl stays cancelled, with
    the end time of its cancelling, and gets the counters of what it did until then."""
    async with db.sessions() as session, session.begin():
        row = await session.get_one(Crawl, crawl_id)
        if row.status != "cancelled":
            row.status = status
            row.finished_at = utcnow()
        row.counters = report.counters()
        row.errors = list(report.errors)
        return row.status


async def crawl_from_settings(
    db: Database,
    hub: HubSettings,
    params: CrawlParams,
    *,
    crawl_id: int | None = None,
    limits: Limits | None = None,
    progress: Progress | None = None,
) -> CrawlReport:
    """One crawl with clients built from the settings: what `registry crawl`, the API's
    in-process launcher and the scheduler run."""
    client = HubClient.from_settings(hub)
    async with HubHttp.from_settings(hub) as http:
        return await crawl_hub(
            db,
            client,
            http,
            params,
            crawl_id=crawl_id,
            opts=ReadOptions(
                limits=limits,
                shard_window=hub.shard_window,
                sibling_reuse=hub.sibling_reuse,
                sibling_samples=hub.sibling_samples,
            ),
            concurrency=hub.crawl_concurrency,
            progress=progress,
        )
