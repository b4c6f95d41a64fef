"""`registry index`, `search`, `tree` and `db`: the catalog from the command line."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from registry.cli.common import (
    EXIT_ERROR,
    EXIT_OK,
    EXIT_USAGE,
    INT64_MAX,
    Handler,
    byte_size,
    catalog_call,
    catalog_set_up,
    context_tokens,
    file_size,
    int_in,
    memory_text,
    parser_limits,
    terminal_text,
)
from registry.config import Settings

if TYPE_CHECKING:
    from registry.catalog.db import Database
    from registry.catalog.search import SearchItem

INT32_MAX = 2**31 - 1  # the largest an integer (not bigint) column holds, e.g. expert_count
# catalog.lineage.MAX_DEPTH, the deepest tree walk (tests keep the two equal): importing the
# catalog to read it would load SQLAlchemy into every command, `inspect` and `--help` too
MAX_DEPTH = 10


def add_db(sub: argparse._SubParsersAction) -> tuple[str, Handler]:
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
        return catalog_call("db", work)
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

    return catalog_call("db copy", work)


def add_index(sub: argparse._SubParsersAction) -> tuple[str, Handler]:
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
                db, args.paths, limits=parser_limits(settings), first_window=settings.hub.first_window, full=args.full
            )
        for a in report.artifacts:
            if args.json:
                print(json.dumps({"repo": a.repo, "path": a.path, "status": a.status, "error": a.error}))
            else:
                line = f"{a.status:<8} {a.repo}  {a.path}" + (f"  ({a.error})" if a.error else "")
                print(terminal_text(line))
        for path in report.skipped:
            why = "not a .gguf file" if os.path.lexists(path) else "no such file or folder"
            print(terminal_text(f"registry: index: {path}: {why}"), file=sys.stderr)
        for failed in report.failed:
            print(terminal_text(f"registry: index: {failed['repo']}: not written: {failed['error']}"), file=sys.stderr)
        for unread in report.unreadable:  # its folder was indexed as a partial snapshot: nothing gone
            print(terminal_text(f"registry: index: {unread['path']}: {unread['error']}"), file=sys.stderr)
        repos = len({a.repo for a in report.artifacts})
        rederived = sum(r.rederived for r in report.results)
        again = f"; {rederived} repo(s) an older release wrote, written again" if rederived else ""
        print(
            f"{len(report.artifacts)} artifact(s) in {repos} repo(s), {report.errors} with errors{again}",
            file=sys.stderr,
        )
        return EXIT_ERROR if report.skipped or report.failed or report.unreadable else EXIT_OK

    return catalog_call("index", work)


def param_count(text: str) -> int:
    """A parameter count as people write it (catalog.amounts): 7000000000, 7e9, 7B, 500M."""
    from registry.catalog import amounts

    try:
        return amounts.parameter_count(text.strip())
    except amounts.BadAmount as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_search(sub: argparse._SubParsersAction) -> tuple[str, Handler]:
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
    p.add_argument("--min-params", type=param_count, metavar="N", help="at least N parameters, e.g. 7B, 1.5B, 500M, 7e9")
    p.add_argument("--max-params", type=param_count, metavar="N", help="at most N parameters")
    p.add_argument("--min-size", type=byte_size, metavar="S", help="at least S bytes, all shards together")
    p.add_argument("--max-size", type=byte_size, metavar="S",
                   help="at most S bytes, all shards together, e.g. 8GB (10**9), 6GiB (2**30), 500MB, 7.5e9")  # fmt: skip
    p.add_argument("--size-label", metavar="L", help="e.g. 7B, 8x7B or 8x7b")
    p.add_argument("--min-context", type=int_in(0, INT64_MAX), metavar="N", help="context length at least N")
    p.add_argument("--expert-count", type=int_in(0, INT32_MAX), metavar="N",
                   help="exactly N experts (mixture-of-experts models)")  # fmt: skip
    p.add_argument("--max-memory", type=byte_size, metavar="S",
                   help="needs at most S bytes to run: the file plus its f16 KV cache at --memory-context "
                   "tokens, e.g. 8GB or 6GiB; artifacts without a KV cache estimate never match")  # fmt: skip
    p.add_argument("--memory-context", type=context_tokens, metavar="TOKENS",
                   help="the context --max-memory and the MEMORY column size the KV cache for, e.g. 8192 or "
                   "8K (default: 4K, or the model's own context length when shorter)")  # fmt: skip
    p.add_argument("--draft-for", type=int_in(1, INT64_MAX), metavar="ID",
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
    p.add_argument("--facets", nargs="?", const=DEFAULT_FACETS, metavar="NAMES",
                   help="count the matches per value instead of listing them, as GET /v1/facets does: per "
                   f"{DEFAULT_FACETS.replace(',', ', ')}, or the facets named (comma-separated), those and kind, "
                   "verification, capability; with --json: {\"facets\": {name: {value: count}}}")  # fmt: skip
    return "search", _cmd_search


DEFAULT_FACETS = "architecture,license,file_type,size_bucket"  # catalog.search.FACETS (not imported at start-up)


def _cmd_search(args: argparse.Namespace, settings: Settings) -> int:
    import dataclasses
    import json

    from registry.catalog.db import Database
    from registry.catalog.facets import facets
    from registry.catalog.search import SearchQuery, search

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
            if not await catalog_set_up(db, "search"):
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

    return catalog_call("search", work)


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
         i.size_label or "-", i.file_type or "-", file_size(i.file_size), memory_text(i.memory), i.license or "-",
         str(i.shards), i.chat_template_severity or "-",
         i.status if not i.error else f"{i.status}: {i.error_code}: {i.error}"[:120])
        for i in items
    ]  # fmt: skip
    widths = [min(60, max(len(r[c]) for r in rows)) for c in range(len(head) - 1)]
    return "".join(
        "  ".join(v[:w].ljust(w) for v, w in zip(r, widths, strict=False)) + "  " + r[-1] + "\n" for r in rows
    )


def add_tree(sub: argparse._SubParsersAction) -> tuple[str, Handler]:
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
    p.add_argument("--depth", type=int_in(1, MAX_DEPTH), default=3, metavar="N",
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
            if not await catalog_set_up(db, "tree"):
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

    return catalog_call("tree", work)
