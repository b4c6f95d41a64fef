"""The `registry` command.

Each subcommand has an `_add_<name>` function that declares its arguments and a
`_cmd_<name>` handler that returns the exit code. Handlers stay thin: they load the
settings, call into the package that owns the work and print the result. Errors that a
user can cause (bad files, bad settings, bad arguments) print one line and exit non-zero;
no traceback reaches the terminal.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any

from registry.config import ConfigError, Settings, load_settings

if TYPE_CHECKING:
    from registry.catalog.db import Database
    from registry.catalog.search import SearchItem
    from registry.gguf.limits import Limits
    from registry.hub.http import RemoteHeader
    from workers.hashes import FileHashes

Handler = Callable[[argparse.Namespace, Settings], int]

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
INT64_MAX = 2**63 - 1  # the largest number a catalog column or query parameter holds
INT32_MAX = 2**31 - 1  # the largest an integer (not bigint) column holds, e.g. expert_count
# catalog.lineage.MAX_DEPTH, the deepest tree walk (tests keep the two equal): importing the
# catalog to read it would load SQLAlchemy into every command, `inspect` and `--help` too
MAX_DEPTH = 10


def _build_parser() -> tuple[argparse.ArgumentParser, dict[str, Handler]]:
    parser = argparse.ArgumentParser(
        prog="registry",
        description="A catalog of GGUF models built from their header bytes.",
    )
    parser.add_argument("--config", metavar="FILE", help="settings file (default: config/registry.toml)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    handlers: dict[str, Handler] = {}
    for add in _COMMANDS:
        name, handler = add(sub)
        handlers[name] = handler
    return parser, handlers


def main(argv: Sequence[str] | None = None) -> int:
    parser, handlers = _build_parser()
    args = parser.parse_args(argv)
    try:
        settings = load_settings(args.config)
    except ConfigError as exc:
        print(f"registry: configuration error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        return handlers[args.command](args, settings)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return EXIT_OK


def _add_inspect(sub: argparse._SubParsersAction) -> tuple[str, Handler]:
    p = sub.add_parser(
        "inspect",
        help="show the facts of a GGUF file, local or remote (all shards of a split model)",
        description="Parse the header of a GGUF file (no tensor data is read) and show its facts. A remote "
        "file is read by HTTP range requests, header bytes only.",
    )
    p.add_argument("path", metavar="PATH",
                   help="a .gguf file, an http(s) URL or a hub path org/name/file.gguf; for a split model "
                   "any of its shards")  # fmt: skip
    p.add_argument("--revision", default="main", help="branch, tag or commit of a hub path (default: main)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    p.add_argument("--tensors", action="store_true", help="also list every tensor")
    p.add_argument("--context", type=_context_tokens, metavar="TOKENS",
                   help="also size the KV cache for this many tokens of context (e.g. 8192 or 8K)")  # fmt: skip
    return "inspect", _cmd_inspect


def _context_tokens(text: str) -> int:
    """`8192`, `8k` or `8K` (times 1,024, as contexts are counted), `1M`."""
    t = text.strip().lower()
    scale = {"k": 1 << 10, "m": 1 << 20}.get(t[-1:], 1)
    digits = t[:-1] if scale > 1 else t
    if not digits.isdigit() or not 0 < int(digits) * scale <= 1 << 40:
        raise argparse.ArgumentTypeError(f"not a token count: {text!r} (e.g. 8192, 8K, 1M)")
    return int(digits) * scale


def _cmd_inspect(args: argparse.Namespace, settings: Settings) -> int:
    # Imported here so that `registry --help` and other commands do not load numpy.
    import io
    import json

    from registry.gguf.errors import GGUFError
    from registry.gguf.facts import derive_facts
    from registry.gguf.summary import facts_json, facts_text
    from registry.hub.errors import HubError
    from registry.hub.local import read_artifact_headers

    path: str = args.path
    url = _remote_url(path, args.revision, settings)
    fetched: dict[str, int] | None = None
    try:
        if url is not None:
            remote = _read_remote(url, settings)
            headers, sizes, paths = (
                [r.header for r in remote],
                [r.file_size for r in remote],
                [r.url for r in remote],
            )
            fetched = {"files": len(remote), "bytes": sum(r.bytes_fetched for r in remote),
                       "requests": sum(r.requests for r in remote)}  # fmt: skip
        else:
            local = read_artifact_headers(
                path, limits=_limits(settings), first_window=settings.hub.first_window
            )
            headers, sizes, paths = (
                [h.header for h in local],
                [h.file_size for h in local],
                [h.path for h in local],
            )
        facts = derive_facts(headers, file_sizes=sizes)
    except (GGUFError, HubError) as exc:
        err, text = exc.to_dict(), str(exc)
    except Exception as exc:  # a parser bug on a hostile file must still not print a traceback
        text = f"{type(exc).__name__}: {exc}"
        err = {"code": "internal_error", "message": text, "field": None, "offset": None}
    else:
        findings, capabilities = _template_scan(path, headers[0])
        if args.json:
            # ASCII-only JSON: a model name or template in any script survives any terminal.
            doc = facts_json(facts, headers, tensors=args.tensors, paths=paths, template_findings=findings,
                             context=args.context, template_capabilities=capabilities)  # fmt: skip
            if fetched is not None:
                doc["fetched"] = fetched
            print(json.dumps(doc, indent=2))
        else:
            if isinstance(sys.stdout, io.TextIOWrapper):
                sys.stdout.reconfigure(errors="replace")  # a non-UTF-8 terminal gets "?"s, not a crash
            title = path if len(headers) == 1 else f"{path} (split model, {len(headers)} shards)"
            sys.stdout.write(facts_text(facts, headers, title=title, tensors=args.tensors, template_findings=findings,
                                        context=args.context, template_capabilities=capabilities))  # fmt: skip
            if fetched is not None:
                print(f"fetched {fetched['bytes']:,} bytes in {fetched['requests']} request(s) "
                      f"for {fetched['files']} file(s)")  # fmt: skip
        return EXIT_OK
    print(f"registry: inspect: {path}: {err['code']}: {text}", file=sys.stderr)
    if args.json:
        print(json.dumps({"error": err}))
    return EXIT_ERROR


_HUB_PATH = re.compile(r"^[\w.-]+/[\w.-]+/.+\.gguf$", re.IGNORECASE)


def _remote_url(path: str, revision: str, settings: Settings) -> str | None:
    """The URL to read for PATH: itself for http(s), a /resolve/ URL for a hub path that is
    not a local file, None for a local file."""
    if path.startswith(("http://", "https://")):
        return path
    if os.path.exists(path) or not _HUB_PATH.match(path):
        return None
    from registry.hub.http import resolve_url  # aiohttp: only for a file to fetch

    org, name, file = path.split("/", 2)
    return resolve_url(settings.hub.endpoint, f"{org}/{name}", revision, file)


def _read_remote(url: str, settings: Settings) -> list[RemoteHeader]:
    import asyncio

    from registry.hub.http import read_remote_artifact_headers

    return asyncio.run(read_remote_artifact_headers(url, settings.hub, limits=_limits(settings)))


def _template_scan(path: str, header: Any) -> tuple[list[dict[str, str]] | None, list[str] | None]:
    """Safety findings for the file's chat templates as JSON, worst first, and what the
    templates can do (CAPABILITIES order); (None, None): not scanned.

    The templates are rendered only in a sandbox child process (started for this call,
    and only when the file has a template); a sandbox that cannot start is a warning, not
    a failed inspect, and the findings then read "not scanned", never clean.
    """
    from registry.safety import findings_to_json, scan_header_report
    from registry.safety.capabilities import in_order
    from registry.safety.sandbox import SandboxUnavailable

    try:
        report = scan_header_report(header)
    except SandboxUnavailable as exc:
        print(f"registry: inspect: {path}: chat template not scanned: {exc}", file=sys.stderr)
        return None, None
    return findings_to_json(report.findings), in_order(report.capabilities)


def _catalog_call(name: str, work: Callable[[], Coroutine[Any, Any, int]]) -> int:
    """Run one async catalog command; user-caused failures become one line on stderr."""
    import asyncio

    from sqlalchemy.exc import SQLAlchemyError

    from registry.catalog.errors import CatalogError

    try:
        return asyncio.run(work())
    except CatalogError as exc:
        print(f"registry: {name}: {exc.code}: {exc.message}", file=sys.stderr)
        return EXIT_USAGE if exc.status == 400 else EXIT_ERROR
    except (SQLAlchemyError, OSError) as exc:
        print(
            f"registry: {name}: database error: {type(exc).__name__}: {exc}".splitlines()[0], file=sys.stderr
        )
        return EXIT_ERROR


def _add_db(sub: argparse._SubParsersAction) -> tuple[str, Handler]:
    p = sub.add_parser(
        "db",
        help="create, migrate or inspect the catalog database schema",
        description="Migrate the catalog database (database.url) with alembic and print its revision. "
        "upgrade also applies procrastinate's job queue schema when jobs.mode = distributed. copy --to URL "
        "copies the whole catalog, ids and all, into another database (migrated first, and empty): SQLite "
        "into PostgreSQL to scale out, or back.",
    )
    p.add_argument("action", choices=["upgrade", "downgrade", "current", "copy"])
    p.add_argument(
        "revision", nargs="?", help="target revision (upgrade: default head; downgrade: e.g. -1, base)"
    )
    p.add_argument("--to", metavar="URL", help="copy: the database to copy into, e.g. "
                   "postgresql+asyncpg://registry@db.internal/registry or sqlite+aiosqlite:///copy.db")  # fmt: skip
    return "db", _cmd_db


def _cmd_db(args: argparse.Namespace, settings: Settings) -> int:
    from registry.catalog import migrate
    from registry.catalog.db import Database

    if args.action == "downgrade" and not args.revision:
        print("registry: db downgrade: give a target revision (e.g. -1 or base)", file=sys.stderr)
        return EXIT_USAGE
    if (args.action == "copy") != (args.to is not None) or (args.action == "copy" and args.revision):
        print("registry: db: copy takes --to URL (and no revision); --to goes with copy only", file=sys.stderr)
        return EXIT_USAGE
    if args.action == "copy":
        return _copy_db(settings, args.to)

    from alembic.util import CommandError

    async def work() -> int:
        async with Database.from_settings(settings) as db:
            if args.action == "upgrade":
                await migrate.upgrade(db.engine, args.revision or "head")
                if db.dialect == "postgresql" and settings.jobs.mode == "distributed":
                    from workers.queue_procrastinate import apply_schema

                    # procrastinate's own tables, outside alembic (migrations/env.py skips them).
                    if await apply_schema(settings):
                        print("procrastinate job queue schema applied")
            elif args.action == "downgrade":
                await migrate.downgrade(db.engine, args.revision)
            current, head = await migrate.current_revision(db.engine), migrate.head_revision()
            print(f"{current or 'base (empty)'}{' (head)' if current == head else f' (head is {head})'}")
            return EXIT_OK

    try:
        return _catalog_call("db", work)
    except CommandError as exc:  # alembic's word for a revision it cannot find or reach
        print(f"registry: db: {exc}".splitlines()[0], file=sys.stderr)
        return EXIT_USAGE


def _copy_db(settings: Settings, url: str) -> int:
    from registry.catalog.copy import copy_catalog
    from registry.catalog.db import Database

    def done(table: str, rows: int) -> None:
        print(f"{table}: {rows:,} rows", file=sys.stderr)

    async def work() -> int:
        async with Database.from_settings(settings) as source, Database.from_url(url) as target:
            report = await copy_catalog(source, target, on_table=done)
        print(f"copied {sum(report.rows.values()):,} rows in {len(report.rows)} tables: {report.rows['repos']:,} "
              f"repos, {report.rows['artifacts']:,} artifacts")  # fmt: skip
        if report.unfinished_jobs:
            print(f"registry: db copy: {report.unfinished_jobs} embedded jobs were queued or running in the source; "
                  "they are copied as they were, and run where `registry serve` runs in embedded mode on the copy",
                  file=sys.stderr)  # fmt: skip
        return EXIT_OK

    return _catalog_call("db copy", work)


def _add_index(sub: argparse._SubParsersAction) -> tuple[str, Handler]:
    p = sub.add_parser(
        "index",
        help="add local GGUF files and folders to the catalog (no network)",
        description="Index GGUF files and folders (recursively) into the catalog. Hugging Face and LM Studio "
        "cache layouts keep their org/name; other folders become the pseudo-repo local/<folder>. "
        "Unreadable files are recorded with their error; a folder with a subfolder that cannot be listed "
        "marks nothing gone. Creates or migrates the database when needed. Exit status: 0 (bad files "
        "included: they are error rows), or 1 when a path is missing or not a .gguf file, a subfolder cannot be "
        "listed or a repo cannot be written.",
    )
    p.add_argument("paths", nargs="+", metavar="PATH", help="a .gguf file or a folder")
    p.add_argument("--json", action="store_true", help="print one JSON object per artifact")
    p.add_argument("--full", action="store_true",
                   help="write every artifact again, even unchanged ones (a repo an older release wrote is written again without it)")  # fmt: skip
    return "index", _cmd_index


def _cmd_index(args: argparse.Namespace, settings: Settings) -> int:
    import json

    from registry.catalog.db import Database
    from workers.index import index_paths

    async def work() -> int:
        async with Database.from_settings(settings) as db:
            report = await index_paths(
                db, args.paths, limits=_limits(settings), first_window=settings.hub.first_window, full=args.full
            )
        for a in report.artifacts:
            if args.json:
                print(json.dumps({"repo": a.repo, "path": a.path, "status": a.status, "error": a.error}))
            else:
                line = f"{a.status:<8} {a.repo}  {a.path}" + (f"  ({a.error})" if a.error else "")
                print(_shown(line))
        for path in report.skipped:
            why = "not a .gguf file" if os.path.lexists(path) else "no such file or folder"
            print(_shown(f"registry: index: {path}: {why}"), file=sys.stderr)
        for failed in report.failed:
            print(_shown(f"registry: index: {failed['repo']}: not written: {failed['error']}"), file=sys.stderr)
        for unread in report.unreadable:  # its folder was indexed as a partial snapshot: nothing gone
            print(_shown(f"registry: index: {unread['path']}: {unread['error']}"), file=sys.stderr)
        repos = len({a.repo for a in report.artifacts})
        rederived = sum(r.rederived for r in report.results)
        again = f"; {rederived} repo(s) an older release wrote, written again" if rederived else ""
        print(
            f"{len(report.artifacts)} artifact(s) in {repos} repo(s), {report.errors} with errors{again}",
            file=sys.stderr,
        )
        return EXIT_ERROR if report.skipped or report.failed or report.unreadable else EXIT_OK

    return _catalog_call("index", work)


def _shown(text: str) -> str:
    """File names for a terminal: a newline or an escape sequence in a name must not forge or
    erase lines, and a name that is not UTF-8 must not crash the print once the work is done."""
    from registry.gguf.summary import visible

    return visible(text.encode(errors="backslashreplace").decode())


def _limits(settings: Settings) -> Limits:
    from registry.gguf.limits import Limits

    s = settings.parser
    return Limits(
        max_kv_count=s.max_kv_count,
        max_tensor_count=s.max_tensor_count,
        max_string_length=s.max_string_length,
        max_array_length=s.max_array_length,
        max_header_bytes=settings.hub.max_header_bytes,
    )


def _param_count(text: str) -> int:
    """A parameter count as people write it (catalog.amounts): 7000000000, 7e9, 7B, 500M."""
    from registry.catalog import amounts

    try:
        return amounts.parameter_count(text.strip())
    except amounts.BadAmount as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _byte_size(text: str) -> int:
    """A size as people write it (catalog.amounts): 8000000000, 7.5e9, 8GB, 8G, 6GiB, 500 MB."""
    from registry.catalog import amounts

    try:
        return amounts.byte_size(text.replace(" ", ""))
    except amounts.BadAmount as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _add_search(sub: argparse._SubParsersAction) -> tuple[str, Handler]:
    p = sub.add_parser(
        "search", help="search the catalog",
        description="Search indexed GGUF artifacts. --architecture, --license, --file-type and --size-label "
        "match in any ASCII case; hits show these values in one spelling each (llama, apache-2.0, Q4_K_M, "
        "8x7B) and `registry inspect` a file's own.",
    )  # fmt: skip
    p.add_argument(
        "text", nargs="?", metavar="TEXT", help="words to find in repo id, names, tags, description"
    )
    p.add_argument("--architecture", metavar="A", help="general.architecture, e.g. llama")
    p.add_argument("--license", metavar="L", help="the file's license, else the repo card's, e.g. apache-2.0")
    p.add_argument("--file-type", metavar="T", help="file type label, e.g. Q4_K_M or q4_k_m")
    p.add_argument(
        "--tensor-type", metavar="T", help="has at least one tensor of this ggml type, e.g. IQ2_XS"
    )
    p.add_argument("--min-params", type=_param_count, metavar="N", help="at least N parameters, e.g. 7B, 1.5B, 500M, 7e9")
    p.add_argument("--max-params", type=_param_count, metavar="N", help="at most N parameters")
    p.add_argument("--min-size", type=_byte_size, metavar="S", help="at least S bytes, all shards together")
    p.add_argument("--max-size", type=_byte_size, metavar="S",
                   help="at most S bytes, all shards together, e.g. 8GB (10**9), 6GiB (2**30), 500MB, 7.5e9")  # fmt: skip
    p.add_argument("--size-label", metavar="L", help="e.g. 7B, 8x7B or 8x7b")
    p.add_argument("--min-context", type=_int_in(0, INT64_MAX), metavar="N", help="context length at least N")
    p.add_argument("--expert-count", type=_int_in(0, INT32_MAX), metavar="N",
                   help="exactly N experts (mixture-of-experts models)")  # fmt: skip
    p.add_argument("--max-memory", type=_byte_size, metavar="S",
                   help="needs at most S bytes to run: the file plus its f16 KV cache at --memory-context "
                   "tokens, e.g. 8GB or 6GiB; artifacts without a KV cache estimate never match")  # fmt: skip
    p.add_argument("--memory-context", type=_context_tokens, metavar="TOKENS",
                   help="the context --max-memory and the MEMORY column size the KV cache for, e.g. 8192 or "
                   "8K (default: 4K, or the model's own context length when shorter)")  # fmt: skip
    p.add_argument("--draft-for", type=_int_in(1, INT64_MAX), metavar="ID",
                   help="models that can draft for artifact ID in speculative decoding: the same vocabulary "
                   "key, at most 128 tokens more or fewer, fewer parameters; try --sort params:asc")  # fmt: skip
    p.add_argument("--verification", choices=["queued", "running", "passed", "failed", "skipped"],
                   help="status of the artifact's latest verification")  # fmt: skip
    p.add_argument("--author", metavar="NAME",
                   help="only repos this user or organisation owns (the repo id before the /), in any case; local "
                   "for the catalog's local folders")  # fmt: skip
    p.add_argument("--repo", metavar="ORG/NAME", help="only this repo's files (any case of its id)")
    p.add_argument("--descendant-of", metavar="REPO", help="only repos below REPO (any case) in the lineage graph")
    p.add_argument("--template-severity", metavar="S",
                   help="chat template has a safety finding at least this severe: info, low, medium, high "
                   "or critical")  # fmt: skip
    p.add_argument("--capability", metavar="C", action="append",
                   help="chat templates can do C: system, tools, tool_calls, thinking or parallel_tool_calls (seen in "
                   "probe renders); "
                   "repeat or comma-separate for all of several")  # fmt: skip
    p.add_argument("--kind", choices=["model", "mmproj", "lora", "imatrix", "vocab"],
                   help="what the file is: model leaves out projectors (mmproj), LoRA adapters, importance "
                   "matrices and vocabularies")  # fmt: skip
    p.add_argument("--with-projector", action="store_const", const=True, default=None,
                   help="only artifacts whose repo also holds a multimodal projector (mmproj: images or audio "
                   "in with llama.cpp's --mmproj); try with --kind model")  # fmt: skip
    p.add_argument("--modality", metavar="M", action="append",
                   help="only artifacts whose repo holds a projector that takes M: vision or audio; repeat or "
                   "comma-separate for all of several (--kind model --modality vision: models that see images)")  # fmt: skip
    p.add_argument("--status", default="indexed", choices=["indexed", "error", "gone", "all"],
                   help="artifact status; all for every one (default: indexed)")  # fmt: skip
    p.add_argument("--sort", default="downloads", metavar="KEY",
                   help="downloads, likes, last_modified (or modified), parameter_count (or params), file_size "
                   "(or size), name, or memory (at --memory-context; models without an estimate last); add :asc "
                   "or :desc (default: downloads, most first)")
    p.add_argument("--limit", type=int, default=20, metavar="N", help="results per page, 1 to 200 (default: 20)")  # fmt: skip
    p.add_argument("--cursor", metavar="C", help="the `next` cursor of the previous page")
    p.add_argument("--json", action="store_true", help='print {"items": [...], "next": cursor-or-null}')
    p.add_argument("--all", action="store_true",
                   help="every match, page after page (--limit per page, from --cursor if given), as JSON Lines: "
                   "one hit per line, as in --json's items")  # fmt: skip
    p.add_argument("--facets", nargs="?", const=_DEFAULT_FACETS, metavar="NAMES",
                   help="count the matches per value instead of listing them, as GET /v1/facets does: per "
                   f"{_DEFAULT_FACETS.replace(',', ', ')}, or the facets named (comma-separated), those and kind, "
                   "verification, capability; with --json: {\"facets\": {name: {value: count}}}")  # fmt: skip
    return "search", _cmd_search


_DEFAULT_FACETS = "architecture,license,file_type,size_bucket"  # catalog.search.FACETS (not imported at start-up)


def _cmd_search(args: argparse.Namespace, settings: Settings) -> int:
    import dataclasses
    import json

    from registry.catalog.db import Database
    from registry.catalog.search import SearchQuery, facets, search

    if args.facets is not None and (args.all or args.cursor):
        print("registry: search: --facets counts every match: it takes no --all or --cursor", file=sys.stderr)
        return EXIT_USAGE
    query = SearchQuery(
        text=args.text, author=args.author, repo=args.repo, architecture=args.architecture, license=args.license, file_type=args.file_type,
        tensor_type=args.tensor_type, min_params=args.min_params, max_params=args.max_params,
        min_size=args.min_size, max_size=args.max_size, size_label=args.size_label,
        min_context=args.min_context, expert_count=args.expert_count,
        verification=args.verification, descendant_of=args.descendant_of,
        template_severity=args.template_severity,
        capability=",".join(args.capability) if args.capability else None, kind=args.kind,
        with_projector=args.with_projector, modality=",".join(args.modality) if args.modality else None,
        max_memory=args.max_memory, memory_context=args.memory_context, draft_for=args.draft_for,
        status=args.status, sort=args.sort, limit=args.limit, cursor=args.cursor,
    )  # fmt: skip

    async def every_page(db: Database) -> int:
        """Each hit of each page as a JSON line, a page's session at a time."""
        q = query
        while True:
            async with db.sessions() as session:
                page = await search(session, q)
            for item in page.items:
                print(json.dumps(item.to_dict(), ensure_ascii=False))
            if not page.next_cursor:
                return EXIT_OK
            q = dataclasses.replace(q, cursor=page.next_cursor)

    async def counts(db: Database) -> int:
        names = [name.strip() for name in args.facets.split(",")]
        async with db.sessions() as session:
            found = await facets(session, query, names)
        if args.json:
            print(json.dumps({"facets": found}, ensure_ascii=False))
        else:
            sys.stdout.write(_facets_table(found))
        return EXIT_OK

    async def work() -> int:
        async with Database.from_settings(settings) as db:
            if not await _catalog_set_up(db, "search"):
                return EXIT_ERROR
            if args.facets is not None:
                return await counts(db)
            if args.all:
                return await every_page(db)
            async with db.sessions() as session:
                page = await search(session, query)
        if args.json:
            print(json.dumps(page.to_dict(), ensure_ascii=False))
        else:
            sys.stdout.write(_search_table(page.items))
            if page.next_cursor:
                print(f"more: --cursor {page.next_cursor}")
        return EXIT_OK

    return _catalog_call("search", work)


async def _catalog_set_up(db: Database, name: str) -> bool:
    """Whether the catalog's schema is at head; else says how to set it up, on stderr."""
    from registry.catalog import migrate

    if await migrate.current_revision(db.engine) == migrate.head_revision():
        return True
    print(f"registry: {name}: the catalog is not set up: run `registry db upgrade` or `registry index PATH`",
          file=sys.stderr)  # fmt: skip
    return False


def _file_size(n_bytes: int | None) -> str:
    """Bytes in the decimal units `--min-size` and `--max-size` read (1 GB = 10**9 B), three
    significant digits: 98.4 MB, 4.92 GB, 253 MB."""
    if n_bytes is None:
        return "-"
    for unit, scale in (("TB", 10**12), ("GB", 10**9), ("MB", 10**6), ("kB", 10**3)):
        if n_bytes >= scale:
            value = n_bytes / scale
            return f"{value:.{0 if value >= 100 else 1 if value >= 10 else 2}f} {unit}"
    return f"{n_bytes} B"


def _memory(memory: dict[str, int] | None) -> str:
    """What a hit needs to run and at how many tokens: `192.7 MB@4K`; `-` without an estimate."""
    if memory is None:
        return "-"
    tokens = memory["tokens"]
    at = f"{tokens >> 10}K" if tokens >= 1024 and tokens % 1024 == 0 else f"{tokens:,}"
    return f"{_file_size(memory['bytes']).replace(' ', '')}@{at}"


def _facets_table(counts: dict[str, dict[str, int]]) -> str:
    """Each facet's name, then its values with their counts, most first."""
    out = []
    for name, values in counts.items():
        out.append(name.upper())
        width = max((len(v) for v in values), default=0)
        out += [f"  {value.ljust(width)}  {n:>9,}" for value, n in values.items()] or ["  (none)"]
    return "\n".join(out) + "\n"


def _search_table(items: Sequence[SearchItem]) -> str:
    if not items:
        return "no matches\n"
    # ID first: what `registry download ID` and the API's /v1/artifacts/ID take.
    head = ("ID", "REPO", "PATH", "ARCH", "PARAMS", "LABEL", "TYPE", "FILESIZE", "MEMORY", "LICENSE", "SHARDS",
            "TEMPLATE", "STATUS")  # fmt: skip
    rows = [head] + [
        (str(i.id), i.repo, i.path, i.architecture or "-", f"{i.parameter_count:,}" if i.parameter_count else "-",
         i.size_label or "-", i.file_type or "-", _file_size(i.file_size), _memory(i.memory), i.license or "-",
         str(i.shards), i.chat_template_severity or "-",
         i.status if not i.error else f"{i.status}: {i.error_code}: {i.error}"[:120])
        for i in items
    ]  # fmt: skip
    widths = [min(60, max(len(r[c]) for r in rows)) for c in range(len(head) - 1)]
    return "".join(
        "  ".join(v[:w].ljust(w) for v, w in zip(r, widths, strict=False)) + "  " + r[-1] + "\n" for r in rows
    )


def _add_tree(sub: argparse._SubParsersAction) -> tuple[str, Handler]:
    p = sub.add_parser(
        "tree",
        help="show the model tree around a repo: what it was made from and what was made from it",
        description="Walk the lineage edges (from the files' general.base_model.* keys, the cards and the "
        "hub's tags) up to the repo's ancestors and down to its descendants, as the API's "
        "/v1/repos/{org}/{name}/lineage does. A repo id the hub has moved shows the repo it moved to.",
    )
    p.add_argument("repo", metavar="REPO", help="org/name, in any case of A-Z")
    p.add_argument("--direction", choices=["ancestors", "descendants", "both"], default="both",
                   help="which side of the tree (default: both)")  # fmt: skip
    p.add_argument("--depth", type=_int_in(1, MAX_DEPTH), default=3, metavar="N",
                   help=f"edges to follow, 1 to {MAX_DEPTH} (default: 3)")  # fmt: skip
    p.add_argument("--json", action="store_true",
                   help='print {"repo", "in_catalog", "moved_from" (ids the hub moved to it), "ancestors", '
                   '"descendants", "truncated"}')  # fmt: skip
    return "tree", _cmd_tree


def _cmd_tree(args: argparse.Namespace, settings: Settings) -> int:
    import json

    from registry.catalog import lineage
    from registry.catalog.db import Database

    async def work() -> int:
        async with Database.from_settings(settings) as db:
            if not await _catalog_set_up(db, "tree"):
                return EXIT_ERROR
            async with db.sessions() as session:
                repo, asked_for = args.repo, None
                if (target := await lineage.moved_to(session, repo)) is not None:
                    repo, asked_for = target, repo
                found = await lineage.catalog_repo(session, repo)
                spelled = None if found is None else found[1]
                moved_from = [] if found is None else await lineage.moved_from(session, found[0])
                walks = {}
                for side, down in (("ancestors", False), ("descendants", True)):
                    if args.direction in (side, "both"):
                        walks[side] = await (lineage.descendants if down else lineage.ancestors)(
                            session, spelled or repo, args.depth
                        )
        if spelled is not None:
            repo = spelled
        else:  # a parent the catalog has not indexed: spelled as its children's sources do
            if not any(w.edges for w in walks.values()):
                print(f"registry: tree: no repo {repo} in the catalog or its lineage", file=sys.stderr)
                return EXIT_ERROR
            repo = next((e.parent for e in walks.get("descendants", lineage.Walk([], False)).edges), repo)
        truncated = any(w.truncated for w in walks.values())
        if args.json:
            body: dict[str, Any] = {"repo": repo, "in_catalog": spelled is not None, "moved_from": moved_from}
            body.update({side: [e._asdict() for e in w.edges] for side, w in walks.items()})
            body["truncated"] = truncated
            print(json.dumps(body, ensure_ascii=False))
            return EXIT_OK
        if asked_for is not None:
            print(f"{asked_for}: the hub has moved it to {repo}")
        elif moved_from:
            print(f"{repo}: the hub has moved it from {', '.join(moved_from)}")
        for side, w in walks.items():
            title = "made from" if side == "ancestors" else "made from it"
            print(f"{title} ({side}, depth {args.depth}):")
            if w.edges:
                lines = lineage.tree_lines(repo, w.edges, side == "descendants")
                lines[0] += "" if spelled is not None else "  (not in catalog)"
                print("\n".join("  " + line for line in lines))
            else:
                print("  none known")
        if truncated:
            print(f"cut short at {lineage.MAX_EDGES} edges a side: ask for a smaller --depth, or page "
                  "through `registry search --descendant-of`")  # fmt: skip
        return EXIT_OK

    return _catalog_call("tree", work)


def _add_show(sub: argparse._SubParsersAction) -> tuple[str, Handler]:
    p = sub.add_parser(
        "show",
        help="show what the catalog knows of an artifact or a repo (no network)",
        description="Print an artifact's page from the catalog (facts, quant mix, what it needs to run, its "
        "files with their sha256 and download URLs, chat template findings, latest verification, the "
        "projectors beside it) or a repo's (its facts, lineage and artifacts): what the API answers at "
        "/v1/artifacts/ID and /v1/repos/ORG/NAME, with --json the same JSON. REPO:PATH and REPO:TAG name an "
        "artifact of a crawled repo as `registry download` does. Exit status: 0 shown, 1 not in the catalog.",
    )
    p.add_argument("target", metavar="ID | REPO[:PATH|:TAG]",
                   help="a catalog artifact id, a repo org/name (any case), or one of its files: org/name:file.gguf "
                   "(any shard) or org/name:Q4_K_M")  # fmt: skip
    p.add_argument("--context", type=_context_tokens, metavar="TOKENS",
                   help="size an artifact's memory and KV cache for this many tokens (e.g. 8192 or 8K; default: "
                   "4K, or the model's own context length when shorter)")  # fmt: skip
    p.add_argument("--json", action="store_true", help="print the page as the API answers it")
    return "show", _cmd_show


def _catalog_id(target: str) -> int | None:
    """A command's target as a catalog artifact id: ASCII digits (`١٢` is a repo name)."""
    return int(target) if target.isascii() and target.isdigit() else None


class _NotInCatalog(Exception):
    """What `registry show` was asked for is not in the catalog."""


def _cmd_show(args: argparse.Namespace, settings: Settings) -> int:
    import io
    import json

    from registry.api import pages, reads
    from registry.catalog import lineage
    from registry.catalog.db import Database
    from workers.verify import TargetError

    target: str = args.target
    endpoint = settings.hub.endpoint
    if isinstance(sys.stdout, io.TextIOWrapper):
        sys.stdout.reconfigure(errors="replace")  # a non-UTF-8 terminal gets "?"s, not a crash

    async def repo_row(session: Any, repo_id: str) -> Any:
        repo = await reads.get_repo(session, repo_id)
        if repo is None or repo.revision is None:  # an id the hub moved: the repo it moved to
            moved = await lineage.moved_to(session, repo_id)
            if moved is not None and (found := await reads.get_repo(session, moved)) is not None:
                print(_shown(f"registry: show: the hub has moved {repo_id} to {found.repo_id}"), file=sys.stderr)
                return found
        if repo is None:
            raise _NotInCatalog(f"no repo {repo_id} in the catalog")
        return repo

    async def work() -> int:
        async with Database.from_settings(settings) as db:
            if not await _catalog_set_up(db, "show"):
                return EXIT_ERROR
            async with db.sessions() as session:
                artifact_id: int | None = _catalog_id(target)
                repo = None
                if artifact_id is None:
                    repo_id, colon, name = target.partition(":")
                    repo = await repo_row(session, repo_id)
                    if not colon:
                        if args.context is not None:
                            print("registry: show: --context sizes an artifact: give ID or REPO:PATH",
                                  file=sys.stderr)  # fmt: skip
                            return EXIT_USAGE
                        body = await pages.repo_page(session, repo, endpoint=endpoint)
                        print(json.dumps(body, ensure_ascii=False) if args.json else _repo_text(body), end="\n")
                        return EXIT_OK
                    artifact_id = await _artifact_named(session, repo, name)
                page = await pages.artifact_page(session, artifact_id, endpoint=endpoint, context=args.context)
                named = None if page is None or args.json else await _tag_naming(session, page, repo)
        if page is None:
            raise _NotInCatalog(f"no artifact with id {artifact_id}")
        print(json.dumps(page, ensure_ascii=False) if args.json else _artifact_text(page, args.context, named),
              end="\n")  # fmt: skip
        return EXIT_OK

    try:
        return _catalog_call("show", work)
    except (_NotInCatalog, TargetError) as exc:
        print(_shown(f"registry: show: {target}: {exc}"), file=sys.stderr)
        return EXIT_ERROR


async def _artifact_named(session: Any, repo: Any, name: str) -> int:
    """The id of the artifact of `repo` that `name` names: a path of any of its shards, or a
    quantization tag as its file name carries it (`workers.verify.pick_artifact`'s rules)."""
    from registry.api import reads
    from workers.verify import TargetError, tagged_path

    if (found := await reads.artifact_of_file(session, repo.id, name)) is not None:
        return int(found)
    if name.lower().endswith(".gguf"):
        raise TargetError(f"{repo.repo_id} has no GGUF file {name!r} in the catalog")
    by_path = await reads.artifact_paths(session, repo.id)
    return by_path[tagged_path(repo.repo_id, sorted(by_path), name)]


async def _tag_naming(session: Any, page: dict[str, Any], repo: Any = None) -> str | None:
    """`REPO:TAG` when the quantization tag in the artifact's file name picks it and nothing
    else of its hub repo (`tagged_path`): the short name `registry download` and llama.cpp's
    `-hf` take. None for a local folder's file, a gone one, or a name without a tag of its own."""
    from registry.api import reads
    from registry.gguf.filename import quant_label_from_filename
    from workers.verify import TargetError, tagged_path

    label = quant_label_from_filename(page["path"])
    if repo is None:  # `repo`: the page's repo row, when the caller has read it already
        repo = await reads.get_repo(session, page["repo"])
    if label is None or repo is None or repo.source != "hub" or page["status"] == "gone":
        return None
    try:
        picked = tagged_path(repo.repo_id, sorted(await reads.artifact_paths(session, repo.id)), label)
    except TargetError:
        return None
    return f"{repo.repo_id}:{label}" if picked == page["path"] else None


def _artifact_text(page: dict[str, Any], context: int | None, named: str | None = None) -> str:
    """An artifact page for people: its facts as `registry inspect` shows them, then what
    the catalog adds (status, the `REPO:TAG` that names it, memory, popularity, verification,
    projectors) and its files."""
    from registry.gguf.summary import facts_from_json, facts_text, label_lines, table

    title = _shown(f"{page['id']}  {page['repo']}/{page['path']}")
    status = page["status"] + (f" at revision {page['revision']}" if page["revision"] else "")
    if page["error"]:
        status += f": {page['error']['code']}: {page['error']['message']}"
    catalog = [("status", status)]
    if named is not None:
        catalog.append(("pick with", f"{named} (registry download; llama.cpp -hf)"))
    if (memory := page["memory"]) is not None:
        catalog.append(("memory", f"{_file_size(memory['bytes'])} at {memory['tokens']:,} tokens (the file and its "
                        "f16 KV cache)"))  # fmt: skip
    when = f"; modified {page['last_modified'][:10]}" if page["last_modified"] else ""
    catalog.append(("popularity", f"{page['downloads']:,} downloads, {page['likes']:,} likes{when}"))
    v = page["latest_verification"]
    catalog.append(("verified", "never" if v is None else _verification_line(v)))
    for i, proj in enumerate(page["projectors"]):
        takes = ", ".join(proj["modalities"] or []) or "-"
        catalog.append(("projectors" if i == 0 else "",
                        f"{proj['path']} (id {proj['id']}, {_file_size(proj['file_size'])}, {takes})"))  # fmt: skip
    if page["facts"] is None:
        out = [title, *label_lines(catalog)]
    else:
        facts = facts_from_json(page["facts"], quant_mix=page["quant_mix"], chat_template=page.get("chat_template"),
                                chat_templates=page.get("chat_templates"))  # fmt: skip
        out = [facts_text(facts, [], title=title, template_findings=page["chat_template_findings"], context=context,
                          template_capabilities=page["chat_template_capabilities"], more=catalog).rstrip("\n")]  # fmt: skip
    if page["shards"]:
        rows = [(s["path"], f"{s['size']:,}" if s["size"] is not None else "-", s["sha256"] or "-")
                for s in page["shards"]]  # fmt: skip
        out += ["", "files", *table(("path", "bytes", "sha256"), rows, {1})]
        out += [_shown(f"  {s['url']}") for s in page["shards"] if s["url"]]
    return "\n".join(out)


def _verification_line(v: dict[str, Any]) -> str:
    when = (v["finished_at"] or v["started_at"] or v["queued_at"] or "")[:16].replace("T", " ")
    parts = [v["status"]] + ([when] if when else [])
    if v["tensors_checked"]:
        parts.append(f"{v['tensors_checked']:,} tensors")
    if v["perplexity"] is not None:
        parts.append(f"perplexity {v['perplexity']:.2f}")
    if v["reason"]:
        parts.append(str(v["reason"]))
    return ", ".join(parts) + f" (verification {v['id']})"


def _repo_text(page: dict[str, Any]) -> str:
    """A repo page for people: its facts, its direct lineage and its artifacts' table."""
    from registry.gguf.summary import label_lines, table

    r = page["repo"]
    title = _shown(r["repo_id"]) + (f"  ({r['source']}, revision {r['revision']})" if r["revision"] else f"  ({r['source']})")
    when = f"; modified {r['last_modified'][:10]}" if r["last_modified"] else ""
    lines = [("popularity", f"{r['downloads']:,} downloads, {r['likes']:,} likes{when}")]
    if r["gated"]:
        lines.append(("gated", str(r["gated"])))
    lines.append(("card license", r["card_license"] or ""))
    relation = f" ({r['card_base_model_relation']})" if r["card_base_model_relation"] else ""
    lines.append(("card base model", ", ".join(r["card_base_model"]) + relation if r["card_base_model"] else ""))
    lines.append(("tags", ", ".join(r["tags"])))
    lines.append(("moved from", ", ".join(page["moved_from"])))
    for label, side, key in (("made from", "parents", "parent"), ("made from it", "children", "child")):
        edges = page["lineage"][side]
        for i, e in enumerate(edges[:MAX_EDGES_SHOWN]):
            lines.append((label if i == 0 else "", f"{e[key]} ({e['relation']}, from {e['source']})"))
        if len(edges) > MAX_EDGES_SHOWN:
            lines.append(("", f"and {len(edges) - MAX_EDGES_SHOWN} more: `registry tree {r['repo_id']}`"))
    shown, count = len(page["artifacts"]), page["artifact_count"]
    head = f"artifacts ({count:,})" if shown == count else (
        f"artifacts (the first {shown:,} of {count:,} by path; all: `registry search --repo {r['repo_id']} --sort name`)")
    rows = [(str(a["id"]), a["path"], a["file_type"] or "-", a["size_label"] or "-", _file_size(a["file_size"]),
             _memory(a["memory"]), str(a["shard_count"] or "-"), a["verification_status"] or "-",
             a["status"] if not a["error"] else f"{a['status']}: {a['error']['code']}") for a in page["artifacts"]]  # fmt: skip
    cells = table(("ID", "PATH", "TYPE", "LABEL", "FILESIZE", "MEMORY", "SHARDS", "VERIFIED", "STATUS"), rows)
    return "\n".join([title, *label_lines(lines), "", _shown(head), *(cells if rows else ["  none"])])


# How many of a repo's parents and children `registry show REPO` lists.
MAX_EDGES_SHOWN = 10


def _add_verify(sub: argparse._SubParsersAction) -> tuple[str, Handler]:
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
    import json
    import re
    from pathlib import Path

    from registry.gguf.errors import GGUFError
    from registry.hub.errors import HubError
    from workers.verify import TargetError, verify_hub, verify_local

    target: str = args.target
    repo, _, path = target.partition(":")
    # org/name[:path] unless a file by that name exists or it looks like a file name
    hub = re.fullmatch(r"[\w][\w.-]*/[\w.-]+", repo) and not repo.lower().endswith(".gguf")
    progress = ProgressLine.for_args(args)
    try:
        if Path(target).exists() or not hub:
            result = asyncio.run(verify_local(Path(target), settings))
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
    if args.json:
        print(json.dumps(result.to_dict(tensors=args.tensors), indent=2))
    else:
        print(_verify_text(target, result.to_dict(tensors=False)))
    return {"passed": EXIT_OK, "skipped": 3}.get(result.status, EXIT_ERROR)


def _verify_text(target: str, r: dict[str, Any]) -> str:
    lines = [f"{r['status']}: {target}" + (f" ({r['reason']}: {r['message']})" if r["reason"] else "")]
    lines += [f"  sha256      {h}" for h in r["sha256"]]
    if r["tensors_checked"]:
        lines.append(
            f"  tensors     {r['tensors_checked']} dequantized, {r['nonfinite_values']} NaN/Inf values"
        )
    if r["perplexity"] is not None:
        lines.append(f"  perplexity  {r['perplexity']:.3f} over {r['text_tokens']} tokens")
    if r["generated_text"] is not None:
        lines.append(f"  generated   {r['prompt']!r} -> {r['generated_text']!r}")
    lines.append(f"  downloaded  {r['bytes_downloaded']} bytes; peak RSS {r['peak_rss_bytes'] or 0} bytes")
    if r.get("kept_matrices"):
        lines.append(f"  weights     {r['kept_matrices']} matrices kept quantized, dequantized at each use "
                     "(their float32 is above what verify.memory_cap_bytes leaves)")  # fmt: skip
    lines.append("  timings     " + ", ".join(f"{k} {v:.2f}s" for k, v in r["timings"].items()))
    return "\n".join(lines)


def _add_download(sub: argparse._SubParsersAction) -> tuple[str, Handler]:
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
    p.add_argument("--max-memory", type=_byte_size, metavar="S",
                   help="with REPO alone: the catalog's largest model file of the repo that needs at most S "
                   "bytes to run (the file plus its f16 KV cache at --memory-context tokens), e.g. 8GiB")  # fmt: skip
    p.add_argument("--memory-context", type=_context_tokens, metavar="TOKENS",
                   help="the context --max-memory sizes the KV cache for (default: 4K, or the model's own "
                   "context length when shorter)")  # fmt: skip
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
        text = f"{shard.name}  {_file_size(held)}"
        if total:
            text += f" of {_file_size(total)} ({held * 100 // total}%)"
        began, first = self._start
        if now > began and held > first:
            text += f"  {_file_size(int((held - first) / (now - began)))}/s"
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
    from workers.download import DownloadedFile, DownloadError, NothingFits, download_shards, largest_fitting
    from workers.verify import ShardSource, TargetError, artifact_shards, hub_artifact

    target: str = args.target
    if args.max_memory is None and args.memory_context is not None:
        print("registry: download: --memory-context goes with --max-memory", file=sys.stderr)
        return EXIT_USAGE
    if args.max_memory is not None and (_catalog_id(target) is not None or ":" in target):
        print("registry: download: --max-memory picks a file of a repo: give REPO alone", file=sys.stderr)
        return EXIT_USAGE
    if args.revision is not None and (_catalog_id(target) is not None or args.max_memory is not None):
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
            print(f"{f.path}  {_file_size(f.size)}  sha256 {f.sha256}  ({how})")

    async def work() -> int:
        shards: list[ShardSource]
        if _catalog_id(target) is not None or args.max_memory is not None:
            async with Database.from_settings(settings) as db:
                if not await _catalog_set_up(db, "download"):
                    return EXIT_ERROR
                artifact_id = _catalog_id(target)
                if artifact_id is None:
                    hit = await largest_fitting(db, target, args.max_memory, args.memory_context)
                    print(f"registry: download: {hit.repo}: picked {hit.path} (id {hit.id}, "
                          f"{_file_size(hit.file_size)}, needs {_memory(hit.memory)})", file=sys.stderr)  # fmt: skip
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
            needs = f"needs {_memory(s.memory)}" if s.memory else "has no memory estimate"
            print(f"registry: download: no model file of {s.repo} fits in {_file_size(exc.max_memory)}; the "
                  f"smallest, {s.path} (id {s.id}, {_file_size(s.file_size)}), {needs}", file=sys.stderr)  # fmt: skip
        else:
            print(f"registry: download: {target}: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except (TargetError, DownloadError, HubError, InvalidQuery, OSError) as exc:
        print(f"registry: download: {target}: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except Exception as exc:  # e.g. a repo id the hub client rejects: still one line, no traceback
        print(f"registry: download: {target}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_ERROR


def _add_identify(sub: argparse._SubParsersAction) -> tuple[str, Handler]:
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
    import json
    from pathlib import Path

    from registry.api import present, reads
    from registry.catalog.db import Database

    hashes = _file_hashes(settings)

    async def work() -> int:
        found_all = True
        out: list[dict[str, Any]] = []
        async with Database.from_settings(settings) as db:
            if not await _catalog_set_up(db, "identify"):
                return EXIT_ERROR
            for name in _gguf_files(args.paths):
                try:
                    sha = await hashes.sha256(Path(name), fresh=args.rehash)
                except OSError as exc:
                    print(_shown(f"registry: identify: {name}: {exc.strerror or exc}"), file=sys.stderr)
                    found_all = False
                    continue
                async with db.sessions() as session:
                    rows, count = await reads.files_with_sha256(session, sha)
                    namesakes = [] if count else await _namesakes(session, Path(name).name)
                found_all = found_all and count > 0
                files = [present.file_match(r, settings.hub.endpoint) for r in rows]
                out.append({"path": name, "sha256": sha, "count": count, "files": files, "same_name": namesakes})
                if not args.json:
                    print(_shown(f"{name}  sha256 {sha}" + ("" if count else ": not in the catalog")))
                    for f in files:
                        art = f["artifact"]
                        print(_shown(f"  {f['repo']}  {f['path']}  (artifact {art['id']}, {art['status']})"))
                    if count > len(files):
                        print(f"  and {count - len(files)} more")
                    for n in namesakes:
                        print(_shown(f"  same name: {n['repo']}  {n['path']}  (artifact {n['id']})"))
        if args.json:
            print(json.dumps(out, indent=2, ensure_ascii=False))
        return EXIT_OK if found_all else EXIT_ERROR

    try:
        return _catalog_call("identify", work)
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


async def _namesakes(session: Any, file_name: str) -> list[dict[str, Any]]:
    """Indexed artifacts whose file name is `file_name` (any case; a shard's name stands for
    its model's first shard): for bytes the catalog does not know, the files they may be
    another version of (an older download, a re-upload), most downloaded first."""
    from registry.catalog.errors import InvalidQuery
    from registry.catalog.search import MAX_LIMIT, SearchQuery, search
    from registry.gguf.filename import parse_shard

    shard = parse_shard(file_name)
    wanted = (f"{shard[0]}-00001-of-{shard[2]:05d}.gguf" if shard else file_name).lower()
    try:
        # The words match longer names too (`my-model.gguf` for `model.gguf`): a full page,
        # of which only the exact names are kept.
        page = await search(session, SearchQuery(text=wanted, limit=MAX_LIMIT))
    except InvalidQuery:  # a name the text search cannot take (too short, too long)
        return []
    hits = [i for i in page.items if i.path.rsplit("/", 1)[-1].lower() == wanted]
    return [{"repo": i.repo, "path": i.path, "id": i.id} for i in hits[:MAX_NAMESAKES]]


def _add_run(sub: argparse._SubParsersAction) -> tuple[str, Handler]:
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
            a.add_argument("-n", type=_int_in(0, INT64_MAX), default=16, metavar="N",
                           help="tokens to generate (default 16)")  # fmt: skip
        if name != "tokenize":
            a.add_argument("--float32-weights", type=_byte_size, metavar="SIZE",
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
        mf = open_model_file(args.path, _limits(settings))
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


def _add_crawl(sub: argparse._SubParsersAction) -> tuple[str, Handler]:
    p = sub.add_parser(
        "crawl",
        help="crawl a hub: index the headers of every changed GGUF repo",
        description="List GGUF repos on the hub (or take the REPO ids given), and for each one whose "
        "revision changed since the last crawl read every GGUF file's header by range requests and index it. "
        "One failing repo is recorded and the crawl goes on. Creates or migrates the database when needed. "
        "Exit status: 0 when the crawl finished, 1 when it failed (e.g. the listing could not be read) or was "
        "cancelled (--cancel, POST /v1/crawls/{id}/cancel).",
    )
    p.add_argument("repos", nargs="*", type=_repo_id, metavar="REPO",
                   help="org/name ids to look at instead of the hub's listing (each looked up, whatever its "
                   "revision: a repo the hub moved or deleted is recorded so)")  # fmt: skip
    p.add_argument("--endpoint", metavar="URL", help="hub to crawl for this run (default: hub.endpoint)")
    p.add_argument("--search", metavar="Q", help="only repos matching the hub's search term")
    p.add_argument("--author", metavar="A", help="only repos of this user or organization")
    p.add_argument("--limit", type=_int_in(1, INT64_MAX), metavar="N", help="look at most at N repos")
    p.add_argument("--full", action="store_true",
                   help="re-read repos whose revision did not change (those an older release wrote are re-read without it)")  # fmt: skip
    p.add_argument("--cancel", type=_int_in(1, INT64_MAX), metavar="ID",
                   help="cancel crawl ID instead, whoever runs it (registry serve, a worker, another registry "
                   "crawl): it reads no more repos, and what it wrote stays. Exit status 0 when it is cancelled, "
                   "1 when it had already ended or there is no such crawl")  # fmt: skip
    p.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    return "crawl", _cmd_crawl


def _cancel_crawl(args: argparse.Namespace, settings: Settings) -> int:
    import json

    from registry.catalog import crawls
    from registry.catalog.db import Database

    async def work() -> int:
        async with Database.from_settings(settings) as db, db.sessions() as session, session.begin():
            row = await crawls.cancel_crawl(session, args.cancel)
            if row is None:
                print(f"registry: crawl: no crawl with id {args.cancel}", file=sys.stderr)
                return EXIT_ERROR
            status, counters = row.status, dict(row.counters or {})
        if args.json:
            print(json.dumps({"crawl_id": args.cancel, "status": status, "counters": counters}))
        elif status == "cancelled":
            pending = counters.get("pending")
            print(f"crawl {args.cancel} cancelled" + (f" ({pending} repo jobs still to end)" if pending else ""))
        else:
            print(f"registry: crawl: crawl {args.cancel} has already ended: {status}", file=sys.stderr)
        return EXIT_OK if status == "cancelled" else EXIT_ERROR

    return _catalog_call("crawl", work)


def _cmd_crawl(args: argparse.Namespace, settings: Settings) -> int:
    import dataclasses
    import json

    from registry.catalog.db import Database
    from workers.crawl import CrawlParams, crawl_from_settings

    if args.cancel is not None:
        if args.repos or args.author or args.search or args.limit or args.full or args.endpoint:
            print("registry: crawl: --cancel ID takes no REPO ids and no other crawl options", file=sys.stderr)
            return EXIT_USAGE
        return _cancel_crawl(args, settings)
    hub = settings.hub
    other_hub = bool(args.endpoint) and args.endpoint.rstrip("/") != hub.endpoint.rstrip("/")
    if other_hub:
        # The configured token belongs to the configured hub: never hand it to another host.
        hub = dataclasses.replace(hub, endpoint=args.endpoint.rstrip("/"), token="")
    # Another hub's answers say nothing of the repos the catalog has from the configured one.
    if args.repos and (args.author or args.search):
        print("registry: crawl: name REPO ids or filter the listing (--author, --search), not both", file=sys.stderr)
        return EXIT_USAGE
    params = CrawlParams(repos=tuple(args.repos), author=args.author, search=args.search, limit=args.limit,
                         full=args.full, prune=not other_hub)  # fmt: skip
    progress = _CrawlProgress(sys.stderr)

    async def work() -> int:
        async with Database.from_settings(settings) as db:
            report = await crawl_from_settings(db, hub, params, limits=_limits(settings), progress=progress)
        progress.close()
        doc = {"crawl_id": report.crawl_id, "status": report.status, "endpoint": hub.endpoint,
               "counters": report.counters(), "errors": report.errors}  # fmt: skip
        if args.json:
            print(json.dumps(doc))
        else:
            print(_crawl_summary(doc))
        return EXIT_OK if report.status == "finished" else EXIT_ERROR

    return _catalog_call("crawl", work)


class _CrawlProgress:
    """A one-line live display on a terminal; on a pipe, a plain line at most every 10 s."""

    def __init__(self, stream: Any) -> None:
        import time

        self.stream = stream
        self.tty = bool(getattr(stream, "isatty", lambda: False)())
        self.clock = time.monotonic
        self.start = self.last = self.clock()
        self.shown = False

    def __call__(self, r: Any) -> None:
        now = self.clock()
        if now - self.last < (0.2 if self.tty else 10.0):
            return
        self.last = now
        rate = r.files / max(now - self.start, 1e-9)
        line = (f"repos {r.listed} seen, {r.indexed} indexed, {r.unchanged} unchanged, {r.failed} failed | "
                f"files {r.files} ({rate:.1f}/s) | {r.bytes_fetched / 1e6:.1f} MB in {r.requests} requests")  # fmt: skip
        if self.tty:
            self.stream.write("\r\x1b[K" + line[:200])
            self.shown = True
        else:
            self.stream.write(f"registry: crawl: {line}\n")
        self.stream.flush()

    def close(self) -> None:
        if self.shown:
            self.stream.write("\r\x1b[K")
            self.stream.flush()


def _crawl_summary(doc: dict[str, Any]) -> str:
    c = doc["counters"]
    lines = [
        f"crawl {doc['crawl_id']} {doc['status']} ({doc['endpoint']})",
        f"  repos:     {c['listed']} seen, {c['indexed']} indexed, "
        + (f"{c['rederived']} of them at the same revision (an older release wrote them), "
           if c.get("rederived") else "")
        + f"{c['unchanged']} unchanged, "
        + (f"{c['deleted']} deleted (the hub no longer has them), " if c.get("deleted") else "")
        + (f"{c['moved']} moved (the hub has them under another id), " if c.get("moved") else "")
        + (f"{c['not_gguf']} without a GGUF file (not catalogued), " if c.get("not_gguf") else "")
        + (f"{c['cancelled']} not read (the crawl was cancelled), " if c.get("cancelled") else "")
        + f"{c['failed']} failed",
        f"  artifacts: {c['artifacts']} read, {c['artifact_errors']} with errors; {c['files']} files",
        f"  transfer:  {c['bytes_fetched']:,} bytes in {c['requests']} requests",
    ]
    lines += [
        f"  error: {e['repo']}{'/' + e['path'] if e['path'] else ''}: {e['error']}" for e in doc["errors"]
    ]
    return "\n".join(lines)


def _add_serve(sub: argparse._SubParsersAction) -> tuple[str, Handler]:
    p = sub.add_parser(
        "serve",
        help="run the REST API (embedded mode: with the job pool and the crawl schedule)",
        description="Serve the catalog API until SIGINT/SIGTERM. With jobs.mode = embedded, crawls and "
        "verifications posted to the API run in this process's job pool and [schedule] crawl runs them "
        "periodically; with jobs.mode = distributed the API only queues them for `registry worker`. A SQLite "
        "database is created or migrated at start; PostgreSQL must already be at the current schema "
        "(`registry db upgrade`).",
    )
    p.add_argument("--host", help="address to listen on (default: api.host)")
    p.add_argument("--port", type=_int_in(0, 65535), help="TCP port (default: api.port; 0 picks a free one)")
    p.add_argument("--workers", type=_positive_int, default=1, metavar="N",
                   help="processes answering on the one port (SO_REUSEPORT), e.g. the number of cores; "
                   "background jobs run in the first only (default: 1)")  # fmt: skip
    # Internal: how the first process starts the other N-1 (see registry/api/serve.py).
    p.add_argument("--replica", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--shares", type=_shares, help=argparse.SUPPRESS)  # SLOT:FILE (registry.api.balance)
    return "serve", _cmd_serve


def _shares(text: str) -> tuple[str, int]:
    slot, sep, path = text.partition(":")
    if not sep or not slot.isdigit() or not path:
        raise argparse.ArgumentTypeError(f"expected SLOT:FILE, got {text!r}")
    return path, int(slot)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, got {text!r}")
    return value


def _repo_id(text: str) -> str:
    """An org/name hub repo id, as the API's crawl requests take them."""
    from registry.api.bodies import REPO_ID

    if not REPO_ID.fullmatch(text):
        raise argparse.ArgumentTypeError(f"not an org/name repo id: {text!r}")
    return text


def _int_in(lo: int, hi: int) -> Callable[[str], int]:
    """An argparse type: a whole number from lo to hi, refused with the range otherwise."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if not lo <= value <= hi:
            raise argparse.ArgumentTypeError(f"expected a whole number from {lo} to {hi}, got {text!r}")
        return value

    return parse


def _cmd_serve(args: argparse.Namespace, settings: Settings) -> int:
    import logging

    from registry.api.serve import serve
    from workers.runtime import JobsConfigError, check_mode, serve_jobs
    from workers.schedule import ScheduleError, parse_schedule

    try:
        parse_schedule(settings.schedule.crawl)
        check_mode(settings)
    except (ScheduleError, JobsConfigError) as exc:
        print(f"registry: serve: configuration error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx2").setLevel(logging.WARNING)  # one line per hub API call drowns the rest

    async def work() -> int:
        # Embedded: the job pool and the crawl schedule run in this process, jobs kept in the
        # catalog so a restart resumes them. Distributed: the API only enqueues.
        async with serve_jobs(settings) as jobs:
            await serve(settings, args.host, args.port, launcher=jobs.launcher, verifier=jobs.verifier,
                        job_queue=jobs.queue, background=jobs.background,
                        workers=args.workers, replica=args.replica, config=args.config,
                        shares=args.shares)  # fmt: skip
        return EXIT_OK

    return _catalog_call("serve", work)


def _add_worker(sub: argparse._SubParsersAction) -> tuple[str, Handler]:
    p = sub.add_parser(
        "worker",
        help="run distributed jobs (crawl, index, verify) from the PostgreSQL queue",
        description="Take jobs from procrastinate's PostgreSQL queue until SIGINT/SIGTERM: crawls, per-repo "
        "indexing and verifications, and the periodic crawl of [schedule] crawl. Needs jobs.mode = "
        "distributed and a PostgreSQL database.url; run `registry db upgrade` first.",
    )
    p.add_argument("--queues", metavar="Q,...", help="comma-separated queues (default: jobs.queues)")
    p.add_argument("--concurrency", type=_positive_int, metavar="N", help="jobs at once (default: jobs.concurrency)")
    return "worker", _cmd_worker


def _cmd_worker(args: argparse.Namespace, settings: Settings) -> int:
    import logging

    from workers.runtime import JobsConfigError, check_mode
    from workers.schedule import ScheduleError

    try:
        if check_mode(settings) != "distributed":
            raise JobsConfigError("`registry worker` needs jobs.mode = distributed (embedded jobs run in serve)")
        from workers.queue_procrastinate import build_app, run_worker

        build_app(settings)  # refuses a schedule procrastinate cannot run before anything starts
    except (ScheduleError, JobsConfigError, ValueError) as exc:
        print(f"registry: worker: configuration error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    queues = [q.strip() for q in (args.queues or settings.jobs.queues).split(",") if q.strip()]
    concurrency = args.concurrency or settings.jobs.concurrency

    async def work() -> int:
        await run_worker(settings, queues, concurrency)
        return EXIT_OK

    return _catalog_call("worker", work)


def _add_jobs(sub: argparse._SubParsersAction) -> tuple[str, Handler]:
    p = sub.add_parser("jobs", help="list jobs: queued, running, failed and done (either mode)",
                       description="List crawl, index_repo and verify jobs, newest first.")  # fmt: skip
    p.add_argument("--status", choices=["queued", "running", "failed", "done"], help="only jobs in this state")
    p.add_argument("--limit", type=_int_in(1, INT64_MAX), default=50, metavar="N",
                   help="list at most N jobs (default: 50)")  # fmt: skip
    p.add_argument("--json", action="store_true", help="print one JSON object per job")
    return "jobs", _cmd_jobs


def _cmd_jobs(args: argparse.Namespace, settings: Settings) -> int:
    import json

    from registry.catalog.db import Database
    from workers.runtime import JobsConfigError, open_queue
    from workers.schedule import ScheduleError

    async def work() -> int:
        async with Database.from_settings(settings) as db, open_queue(settings, db) as queue:
            jobs = await queue.list_jobs(status=args.status, limit=max(1, args.limit))
        for j in jobs:
            if args.json:
                print(json.dumps(j.to_dict()))
            else:
                target = ", ".join(f"{k}={v}" for k, v in j.args.items() if v is not None)
                print(f"{j.id:>8}  {j.status:<8} {j.kind:<10} {j.queue:<7} attempts {j.attempts}  {target}"
                      + (f"  ({j.error})" if j.error else ""))  # fmt: skip
        if not jobs and not args.json:
            print("no jobs", file=sys.stderr)
        return EXIT_OK

    try:
        return _catalog_call("jobs", work)
    except (JobsConfigError, ScheduleError) as exc:
        print(f"registry: jobs: configuration error: {exc}", file=sys.stderr)
        return EXIT_USAGE


_COMMANDS: list[Callable[[argparse._SubParsersAction], tuple[str, Handler]]] = [
    _add_inspect,
    _add_index,
    _add_search,
    _add_show,
    _add_tree,
    _add_db,
    _add_verify,
    _add_download,
    _add_identify,
    _add_run,
    _add_crawl,
    _add_serve,
    _add_worker,
    _add_jobs,
]


if __name__ == "__main__":
    raise SystemExit(main())
