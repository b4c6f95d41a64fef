"""The `registry` command.

Each subcommand has an `_add_<name>` function that declares its arguments and a
`_cmd_<name>` handler that returns the exit code. Handlers stay thin: they load the
settings, call into the package that owns the work and print the result. Errors that a
user can cause (bad files, bad settings, bad arguments) print one line and exit non-zero;
no traceback reaches the terminal.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any

from registry.config import ConfigError, Settings, load_settings

if TYPE_CHECKING:
    from registry.catalog.search import SearchItem
    from registry.gguf.limits import Limits

Handler = Callable[[argparse.Namespace, Settings], int]

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2


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
        help="show the facts of a local GGUF file (all shards of a split model)",
        description="Parse the header of a GGUF file (no tensor data is read) and show its facts.",
    )
    p.add_argument("path", metavar="PATH", help="a .gguf file; for a split model any of its shards")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    p.add_argument("--tensors", action="store_true", help="also list every tensor")
    return "inspect", _cmd_inspect


def _cmd_inspect(args: argparse.Namespace, settings: Settings) -> int:
    # Imported here so that `registry --help` and other commands do not load numpy.
    import io
    import json

    from registry.gguf.errors import GGUFError
    from registry.gguf.facts import derive_facts
    from registry.gguf.summary import facts_json, facts_text
    from registry.hub.local import read_artifact_headers

    path: str = args.path
    if "://" in path:
        print(f"registry: inspect: {path}: only local files can be inspected for now", file=sys.stderr)
        return EXIT_ERROR
    try:
        local = read_artifact_headers(path, limits=_limits(settings), first_window=settings.hub.first_window)
        headers = [h.header for h in local]
        facts = derive_facts(headers, file_sizes=[h.file_size for h in local])
    except GGUFError as exc:
        err, text = exc.to_dict(), str(exc)
    except Exception as exc:  # a parser bug on a hostile file must still not print a traceback
        text = f"{type(exc).__name__}: {exc}"
        err = {"code": "internal_error", "message": text, "field": None, "offset": None}
    else:
        if args.json:
            # ASCII-only JSON: a model name or template in any script survives any terminal.
            doc = facts_json(facts, headers, tensors=args.tensors, paths=[h.path for h in local])
            print(json.dumps(doc, indent=2))
        else:
            if isinstance(sys.stdout, io.TextIOWrapper):
                sys.stdout.reconfigure(errors="replace")  # a non-UTF-8 terminal gets "?"s, not a crash
            title = path if len(local) == 1 else f"{path} (split model, {len(local)} shards)"
            sys.stdout.write(facts_text(facts, headers, title=title, tensors=args.tensors))
        return EXIT_OK
    print(f"registry: inspect: {path}: {err['code']}: {text}", file=sys.stderr)
    if args.json:
        print(json.dumps({"error": err}))
    return EXIT_ERROR


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
        print(f"registry: {name}: database error: {type(exc).__name__}: {exc}".splitlines()[0], file=sys.stderr)
        return EXIT_ERROR


def _add_db(sub: argparse._SubParsersAction) -> tuple[str, Handler]:
    p = sub.add_parser("db", help="create, migrate or inspect the catalog database schema")
    p.add_argument("action", choices=["upgrade", "downgrade", "current"])
    p.add_argument("revision", nargs="?", help="target revision (upgrade: default head; downgrade: e.g. -1, base)")
    return "db", _cmd_db


def _cmd_db(args: argparse.Namespace, settings: Settings) -> int:
    from registry.catalog import migrate
    from registry.catalog.db import Database

    if args.action == "downgrade" and not args.revision:
        print("registry: db downgrade: give a target revision (e.g. -1 or base)", file=sys.stderr)
        return EXIT_USAGE

    async def work() -> int:
        db = Database.from_settings(settings)
        try:
            if args.action == "upgrade":
                await migrate.upgrade(db.engine, args.revision or "head")
            elif args.action == "downgrade":
                await migrate.downgrade(db.engine, args.revision)
            current, head = await migrate.current_revision(db.engine), migrate.head_revision()
            print(f"{current or 'base (empty)'}{' (head)' if current == head else f' (head is {head})'}")
            return EXIT_OK
        finally:
            await db.dispose()

    return _catalog_call("db", work)


def _add_index(sub: argparse._SubParsersAction) -> tuple[str, Handler]:
    p = sub.add_parser(
        "index",
        help="add local GGUF files and folders to the catalog (no network)",
        description="Index GGUF files and folders (recursively) into the catalog. Hugging Face and LM Studio "
        "cache layouts keep their org/name; other folders become the pseudo-repo local/<folder>. "
        "Unreadable files are recorded with their error. Creates or migrates the database when needed.",
    )
    p.add_argument("paths", nargs="+", metavar="PATH")
    p.add_argument("--json", action="store_true", help="print one JSON object per artifact")
    return "index", _cmd_index


def _cmd_index(args: argparse.Namespace, settings: Settings) -> int:
    import json

    from registry.catalog.db import Database
    from workers.index import index_paths

    async def work() -> int:
        db = Database.from_settings(settings)
        try:
            report = await index_paths(db, args.paths, limits=_limits(settings), first_window=settings.hub.first_window)
        finally:
            await db.dispose()
        for a in report.artifacts:
            if args.json:
                print(json.dumps({"repo": a.repo, "path": a.path, "status": a.status, "error": a.error}))
            else:
                print(f"{a.status:<8} {a.repo}  {a.path}" + (f"  ({a.error})" if a.error else ""))
        for path in report.skipped:
            print(f"registry: index: {path}: no such file or folder", file=sys.stderr)
        repos = len({a.repo for a in report.artifacts})
        print(f"{len(report.artifacts)} artifact(s) in {repos} repo(s), {report.errors} with errors", file=sys.stderr)
        return EXIT_ERROR if report.skipped else EXIT_OK

    return _catalog_call("index", work)


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


def _add_search(sub: argparse._SubParsersAction) -> tuple[str, Handler]:
    p = sub.add_parser("search", help="search the catalog", description="Search indexed GGUF artifacts.")
    p.add_argument("text", nargs="?", metavar="TEXT", help="words to find in repo id, names, tags, description")
    p.add_argument("--architecture")
    p.add_argument("--license")
    p.add_argument("--file-type", metavar="T", help="file type label, e.g. Q4_K_M")
    p.add_argument("--tensor-type", metavar="T", help="has at least one tensor of this ggml type, e.g. IQ2_XS")
    p.add_argument("--min-params", type=int, metavar="N")
    p.add_argument("--max-params", type=int, metavar="N")
    p.add_argument("--size-label", metavar="L", help="e.g. 7B, 8x7B")
    p.add_argument("--min-context", type=int, metavar="N")
    p.add_argument("--descendant-of", metavar="REPO", help="only repos below REPO in the lineage graph")
    p.add_argument("--status", default="indexed", choices=["indexed", "error", "gone", "all"])
    p.add_argument("--sort", default="downloads", metavar="KEY",
                   help="downloads, likes, last_modified, parameter_count, file_size or name; add :asc or :desc")  # fmt: skip
    p.add_argument("--limit", type=int, default=20, metavar="N")
    p.add_argument("--cursor", metavar="C", help="the `next` cursor of the previous page")
    p.add_argument("--json", action="store_true", help='print {"items": [...], "next": cursor-or-null}')
    return "search", _cmd_search


def _cmd_search(args: argparse.Namespace, settings: Settings) -> int:
    import json

    from registry.catalog import migrate
    from registry.catalog.db import Database
    from registry.catalog.search import SearchQuery, search

    query = SearchQuery(
        text=args.text, architecture=args.architecture, license=args.license, file_type=args.file_type,
        tensor_type=args.tensor_type, min_params=args.min_params, max_params=args.max_params,
        size_label=args.size_label, min_context=args.min_context, descendant_of=args.descendant_of,
        status=args.status, sort=args.sort, limit=args.limit, cursor=args.cursor,
    )  # fmt: skip

    async def work() -> int:
        db = Database.from_settings(settings)
        try:
            if await migrate.current_revision(db.engine) != migrate.head_revision():
                print("registry: search: the catalog is not set up: run `registry db upgrade` "
                      "or `registry index PATH`", file=sys.stderr)  # fmt: skip
                return EXIT_ERROR
            async with db.sessions() as session:
                page = await search(session, query)
        finally:
            await db.dispose()
        if args.json:
            print(json.dumps(page.to_dict(), ensure_ascii=False))
        else:
            sys.stdout.write(_search_table(page.items))
            if page.next_cursor:
                print(f"more: --cursor {page.next_cursor}")
        return EXIT_OK

    return _catalog_call("search", work)


def _search_table(items: Sequence[SearchItem]) -> str:
    if not items:
        return "no matches\n"
    head = ("REPO", "PATH", "ARCH", "PARAMS", "TYPE", "SIZE", "LICENSE", "SHARDS", "STATUS")
    rows = [head] + [
        (i.repo, i.path, i.architecture or "-", f"{i.parameter_count:,}" if i.parameter_count else "-",
         i.file_type or "-", i.size_label or "-", i.license or "-", str(i.shards),
         i.status if not i.error else f"{i.status}: {i.error_code}: {i.error}"[:120])
        for i in items
    ]  # fmt: skip
    widths = [min(60, max(len(r[c]) for r in rows)) for c in range(len(head) - 1)]
    return "".join("  ".join(v[:w].ljust(w) for v, w in zip(r, widths, strict=False)) + "  " + r[-1] + "\n" for r in rows)


# Registered subcommands, in the order `registry --help` lists them.
_COMMANDS: list[Callable[[argparse._SubParsersAction], tuple[str, Handler]]] = [
    _add_inspect,
    _add_index,
    _add_search,
    _add_db,
]


if __name__ == "__main__":
    raise SystemExit(main())
