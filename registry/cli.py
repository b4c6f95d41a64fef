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
from collections.abc import Callable, Sequence

from registry.config import ConfigError, Settings, load_settings

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


# Registered subcommands, in the order `registry --help` lists them.
_COMMANDS: list[Callable[[argparse._SubParsersAction], tuple[str, Handler]]] = []


if __name__ == "__main__":
    raise SystemExit(main())
