"""`registry download`: an artifact's files, every shard, from the hub into a folder, whole
and checked.

Each file is written as `<folder>/<path>.partial`, continued by a Range request when an
earlier run was cut short (`Downloader`), and renamed to `<folder>/<path>` only once it has
every byte and its sha256 equals the hub's LFS oid; a file whose hash differs is deleted.
A file already in place with the listed size and hash is not fetched again, and one in
place with other bytes is left alone and refused: a download never overwrites a file.
Hub paths are untrusted: one that is not a plain relative path (`..`, an absolute path,
empty parts) is refused before anything is written.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from registry.api.present import search_hits
from registry.catalog.db import Database
from registry.catalog.search import SearchQuery, search
from registry.config import Settings
from registry.hub.errors import HubError
from registry.hub.http import HttpOptions
from registry.responses import ArtifactSummary
from registry.responses.params import filter_param
from workers.cache import Downloader, SizeMismatch, sha256_file
from workers.hashes import FileHashes
from workers.verify import Progress, ShardSource


class DownloadError(Exception):
    """A file that cannot be downloaded whole and checked; nothing of it is left in place."""


@dataclass(frozen=True)
class DownloadedFile:
    path: Path
    size: int
    sha256: str
    fetched: int  # bytes received by this run; 0 when the file was in place already

    def to_dict(self) -> dict[str, object]:
        return {"path": str(self.path), "size": self.size, "sha256": self.sha256, "fetched": self.fetched}


class NothingFits(DownloadError):
    """No model file of the repo fits in the memory asked for; `smallest`: the one that
    needs least (None when the catalog has no model file of the repo)."""

    def __init__(self, repo_id: str, max_memory: int, smallest: ArtifactSummary | None) -> None:
        self.repo_id, self.max_memory, self.smallest = repo_id, max_memory, smallest
        if smallest is None:
            text = f"the catalog has no model file of {repo_id}: crawl it first (registry crawl {repo_id})"
        else:
            m = smallest.memory
            needs = f"needs {m.bytes:,} bytes at {m.tokens:,} tokens" if m else "has no memory estimate"
            text = f"no model file of {smallest.repo} fits in {max_memory:,} bytes; the smallest, {smallest.path} (id {smallest.id}), {needs}"
        super().__init__(text)


async def largest_fitting(db: Database, repo_id: str, max_memory: int, context: int | None) -> ArtifactSummary:
    """The catalog's largest model file of `repo_id` (any ASCII case) that needs at most
    `max_memory` bytes to run at `context` tokens (`SearchQuery.max_memory`): the most bits
    per weight the memory allows. NothingFits when none does, BadValue for what is not a
    repo id."""
    repo_id = filter_param("repo").read(repo_id)
    base = SearchQuery(repo=repo_id, kind="model", memory_context=context, limit=1)
    async with db.sessions() as session:
        hits = search_hits(await search(session, replace(base, max_memory=max_memory, sort="file_size")))
        if hits:
            return hits[0]
        smallest = search_hits(await search(session, replace(base, sort="file_size:asc")))
    raise NothingFits(repo_id, max_memory, smallest[0] if smallest else None)


def destination(folder: Path, name: str) -> Path:
    """Where the hub file `name` goes under `folder`; DownloadError for a path that would
    leave it or is not a plain relative one."""
    parts = name.split("/")
    if not name or "\\" in name or "\x00" in name or any(p in ("", ".", "..") for p in parts):
        raise DownloadError(f"refusing to write {name!r}: not a plain relative path")
    return folder.joinpath(*parts)


async def download_shards(
    shards: Sequence[ShardSource],
    folder: Path,
    settings: Settings,
    *,
    downloader: Downloader | None = None,
    done: Callable[[DownloadedFile], None] | None = None,
    progress: Progress | None = None,
    hashes: FileHashes | None = None,
) -> list[DownloadedFile]:
    """Every shard under `folder`, whole and checked against its LFS oid; `done` is called
    as each file is in place, `progress(shard, held, total)` as its bytes arrive (the
    `.partial` file's size and the whole file's, None when the server does not say).
    `hashes` keeps each file's sha256, and gives back those of files in place already."""
    hashes = hashes or FileHashes(None)
    targets = [(s, destination(folder, s.name)) for s in shards]  # all refused before any is written
    local = [s.name for s in shards if s.local_path is not None or s.url is None]
    if local:
        raise DownloadError(f"{local[0]} is a local folder's file, on disk already: {shards[0].local_path}")
    dl = downloader or Downloader(HttpOptions.from_settings(settings.hub))
    out: list[DownloadedFile] = []
    try:
        for s, dest in targets:
            assert s.url is not None
            got = await _in_place(s, dest, hashes) if dest.exists() else await _fetch(dl, s, dest, progress, hashes)
            out.append(got)
            if done is not None:
                done(got)
    finally:
        if downloader is None:
            await dl.close()
    return out


async def _in_place(s: ShardSource, dest: Path, hashes: FileHashes) -> DownloadedFile:
    size = dest.stat().st_size
    digest = await hashes.sha256(dest) if s.size is None or size == s.size else None
    if digest is None or (s.sha256 and digest != s.sha256.lower()):
        said = f"sha256 {digest}" if digest is not None else f"{size} bytes"
        raise DownloadError(
            f"{dest} is there already with other bytes ({said}; the hub lists {s.size} bytes, sha256 "
            f"{s.sha256}): move it away to download it"
        )
    return DownloadedFile(dest, size, digest, 0)


async def _fetch(
    dl: Downloader, s: ShardSource, dest: Path, progress: Progress | None, hashes: FileHashes
) -> DownloadedFile:
    assert s.url is not None
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".partial")
    on_bytes = None if progress is None else functools.partial(progress, s)
    try:
        received = await dl.download(s.url, part, s.size, on_bytes=on_bytes)
    except SizeMismatch as exc:
        part.unlink(missing_ok=True)  # the wrong file: a retry starts over
        raise DownloadError(f"{s.name}: {exc}") from None
    except HubError as exc:  # the partial file stays: the next run continues it
        raise DownloadError(f"{s.name}: {exc}") from None
    hashed = part.stat()
    digest = await sha256_file(part)
    if s.sha256 and digest != s.sha256.lower():
        part.unlink()
        raise DownloadError(f"{s.name}: sha256 {digest}, the hub's LFS oid is {s.sha256}; deleted")
    part.replace(dest)
    hashes.remember(dest, digest, hashed)
    return DownloadedFile(dest, dest.stat().st_size, digest, received)
