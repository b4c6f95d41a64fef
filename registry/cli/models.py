"""`registry verify`, `download`, `identify` and `run`: commands on whole model files."""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from registry.cli.common import (
    EXIT_ERROR,
    EXIT_OK,
    EXIT_USAGE,
    INT64_MAX,
    Handler,
    Subcommands,
    add_param,
    byte_size,
    catalog_call,
    catalog_id,
    catalog_set_up,
    file_size,
    int_in,
    memory_text,
    parser_limits,
    terminal_text,
)
from registry.config import Settings
from registry.responses.params import filter_param

if TYPE_CHECKING:
    from pathlib import Path

    from registry.responses.commands import Namesake
    from workers.hashes import FileHashes


def add_verify(sub: Subcommands) -> tuple[str, Handler]:
    p = sub.add_parser(
        "verify",
        help="prove a GGUF model works: download, sha256, dequantize every tensor, smoke inference",
        description="Verify one model from the hub (REPO, REPO:PATH or REPO:TAG, a quantization tag such as "
        "Q4_K_M as file names carry it; shards are found by name) "
        "or a local file (hashed, not compared). Exit status: 0 passed, 1 failed or error, "
        "3 skipped (an architecture, tokenizer or type this registry cannot run).",
    )
    p.add_argument("target", metavar="REPO[:PATH|:TAG] | LOCAL_PATH", help="org/name[:file.gguf or :Q4_K_M] or a .gguf path")
    p.add_argument("--revision", help="hub revision (default: main, pinned to its commit)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    p.add_argument("--tensors", action="store_true", help="with --json, include per-tensor statistics")
    _add_progress(p)
    return "verify", _cmd_verify


def _cmd_verify(args: argparse.Namespace, settings: Settings) -> int:
    import asyncio
    from pathlib import Path

    from registry.gguf.errors import GGUFError
    from registry.hub.errors import HubError
    from registry.responses import Verification, encode_text
    from registry.responses.commands import VerifyReport
    from workers.verify import TargetError, verify_hub

    target: str = args.target
    repo, _, path = target.partition(":")
    # org/name[:path] unless a file by that name exists or it looks like a file name
    hub = re.fullmatch(r"[\w][\w.-]*/[\w.-]+", repo) and not repo.lower().endswith(".gguf")
    progress = ProgressLine.for_args(args)
    recorded: Verification | None = None
    local = bool(Path(target).exists() or not hub)
    try:
        if local:
            result, recorded = asyncio.run(_verify_local(Path(target), settings))
        else:
            try:
                result = asyncio.run(verify_hub(repo, path or None, settings, revision=args.revision,
                                                progress=progress))  # fmt: skip
            finally:
                if progress is not None:
                    progress.clear()
    except (TargetError, HubError, GGUFError, OSError) as exc:
        print(f"registry: verify: {target}: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except Exception as exc:  # e.g. a repo id the hub client rejects: still one line, no traceback
        print(f"registry: verify: {target}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_ERROR
    report = VerifyReport.from_result(result, tensors=args.tensors)
    if local:
        report.verification = recorded
    if args.json:
        print(encode_text(report))
    else:
        print(_verify_text(target, report))
    return {"passed": EXIT_OK, "skipped": 3}.get(result.status, EXIT_ERROR)


async def _verify_local(path: Path, settings: Settings) -> tuple[Any, Any]:
    """Verify a local file, and when it is a catalog artifact's (`registry index` read its
    folder) record the run as that artifact's latest verification: (result, the recorded
    row's model or None)."""
    from registry.catalog import migrate
    from registry.catalog.db import Database
    from registry.catalog.types import utcnow
    from registry.responses import Verification
    from workers.verify import local_artifact, record_local, verify_local

    started = utcnow()
    result = await verify_local(path, settings)
    db_file = settings.data_dir / "registry.db"
    if not settings.database.url and not db_file.exists():  # no catalog here: nothing to record against
        return result, None
    async with Database.from_settings(settings) as db:
        if await migrate.current_revision(db.engine) != migrate.head_revision():
            return result, None
        found = await local_artifact(db, path)
        row = await record_local(db, found, result, started) if found is not None else None
    if found is not None and row is None:
        print(terminal_text(f"registry: verify: {path}: not recorded: the file is not the one the catalog indexed as "
                            f"artifact {found.artifact_id} (run `registry index` on it again)"), file=sys.stderr)  # fmt: skip
    return result, Verification.from_row(row) if row is not None else None


def _verify_text(target: str, r: Any) -> str:
    """A `VerifyReport` for people."""
    lines = [f"{r.status}: {target}" + (f" ({r.reason}: {r.message})" if r.reason else "")]
    lines += [f"  sha256      {h}" for h in r.sha256]
    if r.tensors_checked:
        lines.append(f"  tensors     {r.tensors_checked} dequantized, {r.nonfinite_values} NaN/Inf values")
    if r.perplexity is not None:
        lines.append(f"  perplexity  {r.perplexity:.3f} over {r.text_tokens} tokens")
    if r.generated_text is not None:
        lines.append(f"  generated   {r.prompt!r} -> {r.generated_text!r}")
    lines.append(f"  downloaded  {r.bytes_downloaded} bytes; peak RSS {r.peak_rss_bytes or 0} bytes")
    if r.kept_matrices:
        lines.append(f"  weights     {r.kept_matrices} matrices kept quantized, dequantized at each use "
                     "(their float32 is above what verify.memory_cap_bytes leaves)")  # fmt: skip
    lines.append("  timings     " + ", ".join(f"{k} {v:.2f}s" for k, v in r.timings.items()))
    if v := r.verification:
        lines.append(f"  recorded    verification {v.id} of artifact {v.artifact_id} (registry show {v.artifact_id})")
    return "\n".join(lines)


def add_download(sub: Subcommands) -> tuple[str, Handler]:
    p = sub.add_parser(
        "download",
        help="download a model's files from the hub, every shard, sha256-checked",
        description="Download one artifact: an id from `registry search` (the files at the commit the catalog "
        "read) or REPO[:PATH|:TAG] from the hub (TAG: a quantization tag such as Q4_K_M as file names carry it; "
        "shards are found by name). Each file is checked against the hub's "
        "sha256 before it takes its name; an interrupted run continues where it stopped. Exit status: 0 in "
        "place, 1 error.",
    )
    p.add_argument("target", metavar="ID | REPO[:PATH|:TAG]", help="a catalog artifact id, or org/name[:file.gguf or :Q4_K_M]")
    p.add_argument("--to", default=".", metavar="DIR", help="folder to write into (default: the current one)")
    p.add_argument("--revision", help="hub revision for REPO[:...] (default: main, pinned to its commit)")
    p.add_argument("--json", action="store_true", help="print the files as one JSON array")
    _add_progress(p)
    memory, context = filter_param("max_memory"), filter_param("memory_context")
    add_param(p, memory, {"max_memory", "memory_context"},
              help="with REPO alone: the catalog's largest model file of the repo that needs at most S bytes to "
              "run (the file plus its f16 KV cache at --memory-context tokens), e.g. 8GiB")  # fmt: skip
    add_param(p, context, {"max_memory", "memory_context"},
              help="the context --max-memory sizes the KV cache for, e.g. 8192 or 8K (default: 4K, or the model's "
              "own context length when shorter)")  # fmt: skip
    return "download", _cmd_download


def _add_progress(p: argparse.ArgumentParser) -> None:
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="show each download's bytes, share and rate on stderr as they arrive (default: when "
                   "stderr is a terminal)")  # fmt: skip


class ProgressLine:
    """A download's progress on stderr: the file, the bytes held of the whole, the share and
    the rate since this run started on it. On a terminal one line, rewritten at most every
    `every_s`; elsewhere (a log) a line of its own at most every `every_s * 10`. A file's last
    update is always shown."""

    def __init__(self, stream: Any, *, tty: bool, every_s: float = 0.2, clock: Callable[[], float] | None = None):
        import time

        self._stream, self._tty = stream, tty
        self._every = every_s if tty else every_s * 10
        self._clock = clock or time.monotonic
        self._name: str | None = None
        self._start = (0.0, 0)  # (when, held) as this run began the file
        self._last = float("-inf")
        self._shown = False

    @classmethod
    def for_args(cls, args: argparse.Namespace) -> ProgressLine | None:
        """The line `--progress` / `--no-progress` ask for; by default, on a terminal only."""
        tty = sys.stderr.isatty()
        return cls(sys.stderr, tty=tty) if (tty if args.progress is None else args.progress) else None

    def __call__(self, shard: Any, held: int, total: int | None) -> None:
        now = self._clock()
        if shard.name != self._name:
            self._name, self._start, self._last = shard.name, (now, held), float("-inf")
        if now - self._last < self._every and held != total:
            return
        self._last = now
        text = f"{shard.name}  {file_size(held)}"
        if total:
            text += f" of {file_size(total)} ({held * 100 // total}%)"
        began, first = self._start
        if now > began and held > first:
            text += f"  {file_size(int((held - first) / (now - began)))}/s"
        self._stream.write(f"\r\x1b[K{text}" if self._tty else f"{text}\n")
        self._stream.flush()
        self._shown = self._tty

    def clear(self) -> None:
        """Wipe the terminal line before other output takes its place."""
        if self._shown:
            self._stream.write("\r\x1b[K")
            self._stream.flush()
            self._shown = False


def _cmd_download(args: argparse.Namespace, settings: Settings) -> int:
    import asyncio
    import json
    from pathlib import Path

    from registry.catalog.db import Database
    from registry.catalog.errors import InvalidQuery
    from registry.hub.errors import HubError
    from registry.responses.params import BadValue
    from workers.download import DownloadedFile, DownloadError, NothingFits, download_shards, largest_fitting
    from workers.verify import ShardSource, TargetError, artifact_shards, hub_artifact

    target: str = args.target
    if args.max_memory is None and args.memory_context is not None:
        print("registry: download: --memory-context goes with --max-memory", file=sys.stderr)
        return EXIT_USAGE
    if args.max_memory is not None and (catalog_id(target) is not None or ":" in target):
        print("registry: download: --max-memory picks a file of a repo: give REPO alone", file=sys.stderr)
        return EXIT_USAGE
    if args.revision is not None and (catalog_id(target) is not None or args.max_memory is not None):
        print("registry: download: --revision goes with a file named on the hub; a catalog id or --max-memory "
              "downloads the commit the catalog read", file=sys.stderr)  # fmt: skip
        return EXIT_USAGE
    progress = ProgressLine.for_args(args)
    hashes = _file_hashes(settings)

    def done(f: DownloadedFile) -> None:
        if progress is not None:
            progress.clear()
        if not args.json:
            how = f"{f.fetched} bytes fetched" if f.fetched else "in place already"
            print(f"{f.path}  {file_size(f.size)}  sha256 {f.sha256}  ({how})")

    async def work() -> int:
        shards: list[ShardSource]
        if catalog_id(target) is not None or args.max_memory is not None:
            async with Database.from_settings(settings) as db:
                if not await catalog_set_up(db, "download"):
                    return EXIT_ERROR
                artifact_id = catalog_id(target)
                if artifact_id is None:
                    hit = await largest_fitting(db, target, args.max_memory, args.memory_context)
                    print(f"registry: download: {hit.repo}: picked {hit.path} (id {hit.id}, "
                          f"{file_size(hit.file_size)}, needs {memory_text(hit.memory)})", file=sys.stderr)  # fmt: skip
                    artifact_id = hit.id
                shards = await artifact_shards(db, artifact_id, settings)
        else:
            repo, _, path = target.partition(":")
            shards = await hub_artifact(repo, path or None, settings, args.revision)
        try:
            files = await download_shards(shards, Path(args.to), settings, done=done, progress=progress,
                                          hashes=hashes)  # fmt: skip
        finally:
            hashes.close()
            if progress is not None:
                progress.clear()
        if args.json:
            print(json.dumps([f.to_dict() for f in files], indent=2))
        return EXIT_OK

    try:
        return asyncio.run(work())
    except NothingFits as exc:
        if (s := exc.smallest) is not None:
            needs = f"needs {memory_text(s.memory)}" if s.memory else "has no memory estimate"
            print(f"registry: download: no model file of {s.repo} fits in {file_size(exc.max_memory)}; the "
                  f"smallest, {s.path} (id {s.id}, {file_size(s.file_size)}), {needs}", file=sys.stderr)  # fmt: skip
        else:
            print(f"registry: download: {target}: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except (TargetError, DownloadError, HubError, InvalidQuery, BadValue, OSError) as exc:
        print(f"registry: download: {target}: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except Exception as exc:  # e.g. a repo id the hub client rejects: still one line, no traceback
        print(f"registry: download: {target}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_ERROR


def add_identify(sub: Subcommands) -> tuple[str, Handler]:
    p = sub.add_parser(
        "identify",
        help="which hub repos hold a local file: its sha256 looked up in the catalog",
        description="Hash each file (sha256; a file unchanged since a run hashed it is not read again) and name the "
        "catalog's hub files with the same bytes: repo, path, artifact id and status. A split model's shards are looked up one by one. Exit status: 0 every file "
        "found, 1 a file not in the catalog or not readable.",
    )
    p.add_argument("paths", nargs="+", metavar="PATH", help="a local file, or a folder: its .gguf files, in all "
                   "its subfolders")  # fmt: skip
    p.add_argument("--json", action="store_true", help="print one JSON array, an object per file")
    p.add_argument("--rehash", action="store_true",
                   help="hash every file again, even one unchanged since its hash was taken (kept in "
                   "DATA_DIR/hashes.sqlite by the file's inode, size and change times)")  # fmt: skip
    return "identify", _cmd_identify


def _file_hashes(settings: Settings) -> FileHashes:
    """The sha256 of local files `identify` and `download` keep between runs."""
    from workers.hashes import FileHashes

    return FileHashes(settings.data_dir / "hashes.sqlite")


def _cmd_identify(args: argparse.Namespace, settings: Settings) -> int:
    from pathlib import Path

    from registry.api import present, reads
    from registry.catalog.db import Database
    from registry.responses import encode_text
    from registry.responses.commands import Identified

    hashes = _file_hashes(settings)

    async def work() -> int:
        found_all = True
        out: list[Identified] = []
        async with Database.from_settings(settings) as db:
            if not await catalog_set_up(db, "identify"):
                return EXIT_ERROR
            for name in _gguf_files(args.paths):
                try:
                    sha = await hashes.sha256(Path(name), fresh=args.rehash)
                except OSError as exc:
                    print(terminal_text(f"registry: identify: {name}: {exc.strerror or exc}"), file=sys.stderr)
                    found_all = False
                    continue
                async with db.sessions() as session:
                    rows, count = await reads.files_with_sha256(session, sha)
                    namesakes = [] if count else await _namesakes(session, Path(name).name)
                found_all = found_all and count > 0
                files = [present.file_match(r, settings.hub.endpoint) for r in rows]
                out.append(Identified(path=name, sha256=sha, count=count, files=files, same_name=namesakes))
                if not args.json:
                    print(terminal_text(f"{name}  sha256 {sha}" + ("" if count else ": not in the catalog")))
                    for f in files:
                        print(terminal_text(f"  {f.repo}  {f.path}  (artifact {f.artifact.id}, {f.artifact.status})"))
                    if count > len(files):
                        print(f"  and {count - len(files)} more")
                    for n in namesakes:
                        print(terminal_text(f"  same name: {n.repo}  {n.path}  (artifact {n.id})"))
        if args.json:
            print(encode_text(out))
        return EXIT_OK if found_all else EXIT_ERROR

    try:
        return catalog_call("identify", work)
    finally:
        hashes.close()


def _gguf_files(paths: Sequence[str]) -> list[str]:
    """Each path as given, a folder replaced by the .gguf files under it (any case of the
    suffix, sorted; links to folders not followed). A folder without any stays, for its
    error to be told."""
    out: list[str] = []
    for name in paths:
        if not os.path.isdir(name):
            out.append(name)
            continue
        found = sorted(os.path.join(root, f) for root, _, files in os.walk(name) for f in files
                       if f.lower().endswith(".gguf"))  # fmt: skip
        out.extend(found or [name])
    return out


# How many indexed files of the same name `registry identify` lists for a file it cannot find.
MAX_NAMESAKES = 5


async def _namesakes(session: Any, file_name: str) -> list[Namesake]:
    """Indexed artifacts whose file name is `file_name` (any case; a shard's name stands for
    its model's first shard): for bytes the catalog does not know, the files they may be
    another version of (an older download, a re-upload), most downloaded first."""
    from registry.catalog.errors import InvalidQuery
    from registry.catalog.search import MAX_LIMIT, SearchQuery, search
    from registry.gguf.filename import parse_shard
    from registry.responses.commands import Namesake

    shard = parse_shard(file_name)
    wanted = (f"{shard[0]}-00001-of-{shard[2]:05d}.gguf" if shard else file_name).lower()
    try:
        # The words match longer names too (`my-model.gguf` for `model.gguf`): a full page,
        # of which only the exact names are kept.
        page = await search(session, SearchQuery(text=wanted, limit=MAX_LIMIT))
    except InvalidQuery:  # a name the text search cannot take (too short, too long)
        return []
    rows: list[Any] = list(page.rows)
    hits = [row for row in rows if row.path.rsplit("/", 1)[-1].lower() == wanted]
    return [Namesake(repo=row.repo_id, path=row.path, id=row.id) for row in hits[:MAX_NAMESAKES]]


def add_run(sub: Subcommands) -> tuple[str, Handler]:
    p = sub.add_parser("run", help="run a local GGUF model on the CPU: tokenize, perplexity, generate")
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    for name, text in (
        ("tokenize", "token ids of a text (with BOS when the model adds one)"),
        ("perplexity", "perplexity of a text file, BOS added as llama.cpp does"),
        ("generate", "greedy continuation of a prompt"),
    ):
        a = actions.add_parser(name, help=text, description=text)
        a.add_argument("path", metavar="PATH", help="a .gguf file; for a split model any of its shards")
        a.add_argument("--json", action="store_true", help="print one JSON object instead of text")
        if name == "tokenize":
            a.add_argument("--text", required=True)
        elif name == "perplexity":
            a.add_argument("--text-file", required=True, metavar="FILE")
        else:
            a.add_argument("--prompt", required=True)
            a.add_argument("-n", type=int_in(0, INT64_MAX), default=16, metavar="N",
                           help="tokens to generate (default 16)")  # fmt: skip
        if name != "tokenize":
            a.add_argument("--float32-weights", type=byte_size, metavar="SIZE",
                           help="most weight bytes to hold as float32, e.g. 2GB or 0; the other weight matrices stay "
                           "quantized and are dequantized at each use: less memory, slower (default: what physical "
                           "memory leaves after the file and a quarter of it)")  # fmt: skip
    return "run", _cmd_run


def _cmd_run(args: argparse.Namespace, settings: Settings) -> int:
    import json
    import time

    from registry.gguf.errors import GGUFError
    from registry.hub.local import shard_paths
    from registry.runner import RunnerError, greedy_generate, load_model, load_tokenizer, perplexity
    from workers.verify_checks import CheckFailed, mapped_bytes, open_model_file, weight_budget

    try:
        text = _read_text(args.text_file) if args.action == "perplexity" else None
        mf = open_model_file(args.path, parser_limits(settings))
        tokenizer = load_tokenizer(mf)
        ids = tokenizer.encode(args.text if args.action == "tokenize" else text or args.prompt)
        if args.action == "tokenize":
            doc: dict[str, Any] = {"tokens": ids}
        else:
            # float32 weights up to what physical memory allows; the rest dequantized at each use
            budget = args.float32_weights
            if budget is None:
                budget = weight_budget(0, mapped_bytes(shard_paths(args.path)))
            model = load_model(mf, max_weight_bytes=budget)
            if model.kept_matrices and not args.json:
                print(f"registry: run: {model.kept_matrices} weight matrices kept quantized (their float32 is "
                      f"above {budget:,} bytes), dequantized at each use: slower", file=sys.stderr)  # fmt: skip
        if args.action == "perplexity":
            doc = {"perplexity": perplexity(model, ids), "tokens": len(ids), "kept_matrices": model.kept_matrices}
        elif args.action == "generate":
            eos = tokenizer.vocab.eos_id
            t0 = time.perf_counter()
            out = greedy_generate(model, ids, args.n, stop=() if eos is None else (eos,))
            elapsed = time.perf_counter() - t0
            doc = {"tokens": out, "text": tokenizer.decode(out), "tokens_per_second": len(out) / elapsed,
                   "kept_matrices": model.kept_matrices}  # fmt: skip
    except (GGUFError, RunnerError, CheckFailed, OSError, ValueError, MemoryError) as exc:
        # MemoryError: e.g. -n so large that the key/value cache cannot be allocated
        print(f"registry: run {args.action}: {args.path}: {exc}", file=sys.stderr)
        return EXIT_ERROR
    if args.json:
        print(json.dumps(doc))
    elif args.action == "generate":
        print(doc["text"])
    else:
        print(" ".join(f"{k} {v}" for k, v in doc.items()))
    return EXIT_OK


def _read_text(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()
