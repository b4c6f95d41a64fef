"""`registry index`, `search`, `tree` and `db`: the catalog from the command line."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

from registry.cli.common import (
    EXIT_ERROR,
    EXIT_OK,
    EXIT_USAGE,
    Handler,
    Subcommands,
    add_param,
    catalog_call,
    catalog_set_up,
    file_size,
    help_text,
    memory_text,
    parser_limits,
    terminal_text,
)
from registry.config import Settings

if TYPE_CHECKING:
    from registry.catalog.db import Database
    from registry.responses import ArtifactSummary



def add_db(sub: Subcommands) -> tuple[str, Handler]:
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


def add_index(sub: Subcommands) -> tuple[str, Handler]:
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
    p.add_argument("--json", action="store_true", help="print one JSON object per artifact: repo, path, status "
                   "(indexed, unchanged or error) and error")  # fmt: skip
    p.add_argument("--full", action="store_true",
                   help="write every artifact again, even unchanged ones (a repo an older release wrote is written again without it)")  # fmt: skip
    return "index", _cmd_index


def _cmd_index(args: argparse.Namespace, settings: Settings) -> int:
    from registry.catalog.db import Database
    from registry.responses import encode_text
    from registry.responses.commands import IndexedFile
    from workers.hashes import FileHashes
    from workers.index import index_paths

    async def work() -> int:
        hashes = FileHashes(settings.data_dir / "hashes.sqlite")  # what `identify` and `download` keep too
        try:
            async with Database.from_settings(settings) as db:
                report = await index_paths(db, args.paths, limits=parser_limits(settings),
                                           first_window=settings.hub.first_window, full=args.full, hashes=hashes)  # fmt: skip
        finally:
            hashes.close()
        for a in report.artifacts:
            if args.json:
                print(encode_text(IndexedFile(repo=a.repo, path=a.path, status=a.status, error=a.error)))
            else:
                line = f"{a.status:<9} {a.repo}  {a.path}" + (f"  ({a.error})" if a.error else "")
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
        unchanged = sum(a.status == "unchanged" for a in report.artifacts)
        same = f"{unchanged} unchanged, " if unchanged else ""
        print(f"{len(report.artifacts)} artifact(s) in {repos} repo(s), {same}{report.errors} with errors{again}",
              file=sys.stderr)  # fmt: skip
        return EXIT_ERROR if report.skipped or report.failed or report.unreadable else EXIT_OK

    return catalog_call("index", work)


def add_search(sub: Subcommands) -> tuple[str, Handler]:
    from registry.responses.params import FACETS_PARAM, search_params

    p = sub.add_parser(
        "search", help="search the catalog",
        description="Search indexed GGUF artifacts, as GET /v1/artifacts does: each option is the API's query "
        "parameter of the same name, read the same way. --architecture, --license, --file-type and --size-label "
        "match in any ASCII case; hits show these values in one spelling each (llama, apache-2.0, Q4_K_M, 8x7B) "
        "and `registry inspect` a file's own.",
    )  # fmt: skip
    params = search_params()
    names = {param.name for param in params} | {FACETS_PARAM.name}
    for param in params:
        if param.name == "q":
            add_param(p, param, names, positional=True, metavar="TEXT")
        elif param.name in REPEATABLE:
            add_param(p, param, names, action="append",
                      help=help_text(param, names) + " Repeat the option for all of several too.")  # fmt: skip
        else:
            add_param(p, param, names)
    p.add_argument("--json", action="store_true", help='print the page as the API answers it: {"items": [...], '
                   '"next": cursor-or-null, "limit": N}')  # fmt: skip
    p.add_argument("--all", action="store_true",
                   help="every match, page after page (--limit per page, from --cursor if given), as JSON Lines: "
                   "one hit per line, as in --json's items")  # fmt: skip
    add_param(p, FACETS_PARAM, names, nargs="?", const=FACETS_PARAM.default, default=None,
              help="count the matches per value instead of listing them, as GET /v1/facets does: "
              + help_text(FACETS_PARAM, names) + ' With --json: the API\'s {"facets": ..., "filters": ...}.')  # fmt: skip
    return "search", _cmd_search


# Options given once per name as well as comma-separated: the values of each are joined.
REPEATABLE = ("capability", "modality", "finding")


def search_values(args: argparse.Namespace) -> dict[str, Any]:
    """The parsed options by parameter name, as the API's `parse_query` gives them."""
    from registry.responses.params import search_params

    values = {param.name: getattr(args, param.name) for param in search_params()}
    for name in REPEATABLE:
        if values[name] is not None:
            values[name] = tuple(dict.fromkeys(n for given in values[name] for n in given))
    return values


def _cmd_search(args: argparse.Namespace, settings: Settings) -> int:
    from registry.api import pages
    from registry.catalog.db import Database
    from registry.responses import encode_text

    if args.facets is not None and (args.all or args.cursor):
        print("registry: search: --facets counts every match: it takes no --all or --cursor", file=sys.stderr)
        return EXIT_USAGE
    values = search_values(args)

    async def every_page(db: Database) -> int:
        """Each hit of each page as a JSON line, a page's session at a time."""
        cursor = values["cursor"]
        while True:
            async with db.sessions() as session:
                page = await pages.search_page(session, {**values, "cursor": cursor})
            for hit in page.items:
                print(encode_text(hit))
            if not page.next:
                return EXIT_OK
            cursor = page.next

    async def work() -> int:
        async with Database.from_settings(settings) as db:
            if not await catalog_set_up(db, "search"):
                return EXIT_ERROR
            if args.facets is not None:
                async with db.sessions() as session:
                    counts = await pages.facets_page(session, {**values, "facets": args.facets})
                if args.json:
                    print(encode_text(counts))
                else:
                    sys.stdout.write(_facets_table(counts.facets))
                return EXIT_OK
            if args.all:
                return await every_page(db)
            async with db.sessions() as session:
                page = await pages.search_page(session, values)
                states = None if args.json else await _template_states(session, [hit.id for hit in page.items])
        if args.json:
            print(encode_text(page))
        else:
            sys.stdout.write(_search_table(page.items, states or {}))
            if page.next:
                print(f"more: --cursor {page.next}")
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


async def _template_states(session: Any, ids: Sequence[int]) -> dict[int, str]:
    """What the TEMPLATE column says of each artifact without a finding: `none` (the file has
    no chat template), `clean` (scanned, nothing found) or `unscanned` (not scanned: error
    rows, the sandbox unavailable, rows indexed before scanning existed). Search hits do not
    carry whether a file has a template, so it is read here, for the page's rows only."""
    from sqlalchemy import select

    from registry.catalog.models import Artifact, Facts

    if not ids:
        return {}
    stmt = (
        select(Artifact.id, Facts.artifact_id.is_not(None), Facts.chat_template_sha256.is_not(None),
               Artifact.chat_template_findings.is_(None))
        .outerjoin(Facts, Facts.artifact_id == Artifact.id)
        .where(Artifact.id.in_(ids))
    )  # fmt: skip
    rows = await session.execute(stmt)
    # Without facts (an error row) whether there is a template is not known: "-".
    return {id_: "-" if not read else "none" if not templated else "unscanned" if unscanned else "clean"
            for id_, read, templated, unscanned in rows}  # fmt: skip


def _search_table(items: Sequence[ArtifactSummary], templates: dict[int, str]) -> str:
    if not items:
        return "no matches\n"
    # ID first: what `registry download ID` and the API's /v1/artifacts/ID take.
    head = ("ID", "REPO", "PATH", "ARCH", "PARAMS", "LABEL", "TYPE", "FILESIZE", "MEMORY", "LICENSE", "SHARDS",
            "TEMPLATE", "STATUS")  # fmt: skip
    rows = [head] + [
        (str(i.id), i.repo, i.path, i.architecture or "-", f"{i.parameter_count:,}" if i.parameter_count else "-",
         i.size_label or "-", i.file_type or "-", file_size(i.file_size), memory_text(i.memory), i.license or "-",
         str(i.shard_count), i.chat_template_severity or templates.get(i.id, "-"),
         i.status if i.error is None else f"{i.status}: {i.error.code}: {i.error.message}"[:120])
        for i in items
    ]  # fmt: skip
    widths = [min(60, max(len(r[c]) for r in rows)) for c in range(len(head) - 1)]
    return "".join(
        "  ".join(v[:w].ljust(w) for v, w in zip(r, widths, strict=False)) + "  " + r[-1] + "\n" for r in rows
    )


def add_tree(sub: Subcommands) -> tuple[str, Handler]:
    from registry.responses.params import LINEAGE_PARAMS

    p = sub.add_parser(
        "tree",
        help="show the model tree around a repo: what it was made from and what was made from it",
        description="Walk the lineage edges (from the files' general.base_model.* keys, the cards and the "
        "hub's tags) up to the repo's ancestors and down to its descendants, as the API's "
        "/v1/repos/{org}/{name}/lineage does. A repo id the hub has moved shows the repo it moved to.",
    )
    p.add_argument("repo", metavar="REPO", help="org/name, in any case of A-Z")
    for param in LINEAGE_PARAMS:
        add_param(p, param, {q.name for q in LINEAGE_PARAMS})
    p.add_argument("--json", action="store_true", help="print the tree as the API answers it")
    return "tree", _cmd_tree


def _cmd_tree(args: argparse.Namespace, settings: Settings) -> int:
    from registry.api import pages, reads
    from registry.catalog import lineage
    from registry.catalog.db import Database
    from registry.responses import encode_text

    async def work() -> int:
        async with Database.from_settings(settings) as db:
            if not await catalog_set_up(db, "tree"):
                return EXIT_ERROR
            async with db.sessions() as session:
                repo_id, asked_for = args.repo, None
                if (target := await lineage.moved_to(session, repo_id)) is not None:
                    repo_id, asked_for = target, repo_id
                repo = await reads.get_repo(session, repo_id)
                if repo is None and not await reads.is_lineage_node(session, repo_id):
                    print(f"registry: tree: no repo {repo_id} in the catalog or its lineage", file=sys.stderr)
                    return EXIT_ERROR
                tree = await pages.tree_page(session, repo_id, repo, args.direction, args.depth)
        if args.json:
            print(encode_text(tree))
            return EXIT_OK
        if asked_for is not None:
            print(f"{asked_for}: the hub has moved it to {tree.repo}")
        elif tree.moved_from:
            print(f"{tree.repo}: the hub has moved it from {', '.join(tree.moved_from)}")
        for side, edges in (("ancestors", tree.ancestors), ("descendants", tree.descendants)):
            if isinstance(edges, list):
                title = "made from" if side == "ancestors" else "made from it"
                print(f"{title} ({side}, depth {tree.depth}):")
                if edges:
                    lines = lineage.tree_lines(tree.repo, cast(Any, edges), side == "descendants")
                    lines[0] += "" if tree.in_catalog else "  (not in catalog)"
                    print("\n".join("  " + line for line in lines))
                else:
                    print("  none known")
        if tree.truncated:
            print(f"cut short at {tree.max_edges} edges a side: ask for a smaller --depth, or page "
                  "through `registry search --descendant-of`")  # fmt: skip
        return EXIT_OK

    return catalog_call("tree", work)
