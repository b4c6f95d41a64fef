"""The `registry` command.

One module per group of subcommands (`inspecting`, `catalog`, `show`, `models`,
`services`), with what they share in `common`. Each subcommand has an `add_<name>`
function that declares its arguments and returns its handler, which returns the exit
code. Handlers stay thin: they load the settings, call into the package that owns the work
and print the result. Errors that a user can cause (bad files, bad settings, bad
arguments) print one line and exit non-zero; no traceback reaches the terminal.

Building the parser imports only the standard library and the settings: each handler
imports what its work needs (SQLAlchemy, aiohttp, numpy) when it runs, so `--help` and a
local `inspect` start fast.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from registry.cli.catalog import add_db, add_index, add_search, add_tree
from registry.cli.common import EXIT_ERROR, EXIT_OK, EXIT_USAGE, Handler, Subcommands
from registry.cli.inspecting import add_inspect
from registry.cli.models import add_download, add_identify, add_run, add_verify
from registry.cli.services import add_crawl, add_jobs, add_serve, add_worker
from registry.cli.show import add_show
from registry.config import ConfigError, load_settings


def build_parser(
    parser_class: type[argparse.ArgumentParser] = argparse.ArgumentParser,
) -> tuple[argparse.ArgumentParser, dict[str, Handler]]:
    """The parser and each command's handler. Every parser below it, subcommands' included,
    is a `parser_class` (the docs generator passes one that records them)."""
    parser = parser_class(
        prog="registry",
        description="A catalog of GGUF models built from their header bytes.",
    )
    parser.add_argument("--config", metavar="FILE", help="settings file (default: config/registry.toml)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True, parser_class=parser_class)
    handlers: dict[str, Handler] = {}
    for add in _COMMANDS:
        name, handler = add(sub)
        handlers[name] = handler
    return parser, handlers


def main(argv: Sequence[str] | None = None) -> int:
    parser, handlers = build_parser()
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


_COMMANDS: list[Callable[[Subcommands], tuple[str, Handler]]] = [
    add_inspect,
    add_index,
    add_search,
    add_show,
    add_tree,
    add_db,
    add_verify,
    add_download,
    add_identify,
    add_run,
    add_crawl,
    add_serve,
    add_worker,
    add_jobs,
]


__all__ = ["EXIT_ERROR", "EXIT_OK", "EXIT_USAGE", "build_parser", "main"]
