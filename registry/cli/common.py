"""What the commands share: exit codes, argument types, the catalog call wrapper, output helpers."""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, Protocol

from registry.config import Settings
from registry.responses.params import BadValue, Param, boolean, tokens

if TYPE_CHECKING:
    from registry.catalog.db import Database
    from registry.gguf.limits import Limits


Handler = Callable[[argparse.Namespace, Settings], int]


class Subcommands(Protocol):
    """What a command's `add_<name>` uses of `ArgumentParser.add_subparsers()`'s result
    (argparse's class for it is private)."""

    def add_parser(self, name: str, **kwargs: Any) -> argparse.ArgumentParser: ...

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
INT64_MAX = 2**63 - 1  # the largest number a catalog column or query parameter holds


def option(name: str) -> str:
    """The command line's option for a query parameter: `memory_context` -> `--memory-context`."""
    return "--" + name.replace("_", "-")


def value_of(param: Param) -> Callable[[str], Any]:
    """An argparse type reading `param` as the API reads it; its refusal is argparse's error."""

    def read(raw: str) -> Any:
        try:
            return param.read(raw)
        except BadValue as exc:
            # argparse names the option before the message: leave out the parameter's name.
            raise argparse.ArgumentTypeError(exc.message.removeprefix(f"{param.name}: ")) from None

    read.__name__ = param.name  # argparse's "invalid <name> value" when a type fails otherwise
    return read


_NAMED = re.compile(r"`([a-z_]+)`")


def help_text(param: Param, names: set[str]) -> str:
    """A parameter's description for `--help`: the other parameters it names in backticks
    as their options (`memory_context` -> --memory-context), and % as argparse wants it."""
    text = _NAMED.sub(lambda m: option(m[1]) if m[1] in names else m[0], param.description)
    return text.replace("%", "%%")


MAX_SHOWN_CHOICES = 8  # a choice of more values is named by its metavar; its description lists them


def add_param(
    parser: argparse.ArgumentParser, param: Param, names: set[str], *, positional: bool = False, **kw: Any
) -> None:
    """An option (or with `positional`, an optional positional argument) reading `param`:
    the same parser, description and default as the API's query parameter. A boolean is
    --name / --no-name; `names` are the parameters this command has (for the help's
    cross-references)."""
    kw.setdefault("help", help_text(param, names))
    if param.parse is boolean:
        parser.add_argument(option(param.name), action=argparse.BooleanOptionalAction, default=param.default, **kw)
        return
    allowed = param.schema.get("enum")
    shown = "{" + ",".join(allowed) + "}" if allowed and len(allowed) <= MAX_SHOWN_CHOICES else None
    kw.setdefault("metavar", param.metavar or shown or param.name.upper())
    kw.setdefault("default", param.default)
    if positional:
        parser.add_argument(param.name, nargs="?", type=value_of(param), **kw)
    else:
        parser.add_argument(option(param.name), dest=param.name, type=value_of(param), **kw)


def context_tokens(text: str) -> int:
    """`8192`, `8k` or `8K` (times 1,024, as contexts are counted), `1M`: the API's `tokens`."""
    try:
        return tokens("context", text)
    except BadValue as exc:
        raise argparse.ArgumentTypeError(exc.message.removeprefix("context: ")) from None


def catalog_call(name: str, work: Callable[[], Coroutine[Any, Any, int]]) -> int:
    """Run one async catalog command; user-caused failures become one line on stderr."""
    import asyncio

    from sqlalchemy.exc import SQLAlchemyError

    from registry.catalog.errors import CatalogError

    try:
        return asyncio.run(work())
    except CatalogError as exc:
        print(f"registry: {name}: {exc.code}: {exc.message}", file=sys.stderr)
        return EXIT_USAGE if exc.status == 400 else EXIT_ERROR
    except BrokenPipeError:
        raise  # the reader of the output went away (`| head`): `main` ends quietly
    except (SQLAlchemyError, OSError) as exc:
        print(
            f"registry: {name}: database error: {type(exc).__name__}: {exc}".splitlines()[0], file=sys.stderr
        )
        return EXIT_ERROR


def terminal_text(text: str) -> str:
    """File names for a terminal: a newline or an escape sequence in a name must not forge or
    erase lines, and a name that is not UTF-8 must not crash the print once the work is done."""
    from registry.gguf.summary import visible

    return visible(text.encode(errors="backslashreplace").decode())


def parser_limits(settings: Settings) -> Limits:
    from registry.gguf.limits import Limits

    s = settings.parser
    return Limits(
        max_kv_count=s.max_kv_count,
        max_tensor_count=s.max_tensor_count,
        max_string_length=s.max_string_length,
        max_array_length=s.max_array_length,
        max_header_bytes=settings.hub.max_header_bytes,
    )


def byte_size(text: str) -> int:
    """A size as people write it (catalog.amounts): 8000000000, 7.5e9, 8GB, 8G, 6GiB, 500 MB."""
    from registry.catalog import amounts

    try:
        return amounts.byte_size(text.replace(" ", ""))
    except amounts.BadAmount as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


async def catalog_set_up(db: Database, name: str) -> bool:
    """Whether the catalog's schema is at head; else says how to set it up, on stderr."""
    from registry.catalog import migrate

    if await migrate.current_revision(db.engine) == migrate.head_revision():
        return True
    print(f"registry: {name}: the catalog is not set up: run `registry db upgrade` or `registry index PATH`",
          file=sys.stderr)  # fmt: skip
    return False


def file_size(n_bytes: int | None) -> str:
    """Bytes in the decimal units `--min-size` and `--max-size` read (1 GB = 10**9 B), three
    significant digits: 98.4 MB, 4.92 GB, 253 MB."""
    if n_bytes is None:
        return "-"
    for unit, scale in (("TB", 10**12), ("GB", 10**9), ("MB", 10**6), ("kB", 10**3)):
        if n_bytes >= scale:
            value = n_bytes / scale
            return f"{value:.{0 if value >= 100 else 1 if value >= 10 else 2}f} {unit}"
    return f"{n_bytes} B"


def memory_text(memory: Any) -> str:
    """What a hit needs to run and at how many tokens (a `responses.Memory`, or the catalog's
    `{"tokens", "bytes"}`): `192.7 MB@4K`; `-` without an estimate."""
    if memory is None:
        return "-"
    tokens, size = (memory["tokens"], memory["bytes"]) if isinstance(memory, dict) else (memory.tokens, memory.bytes)
    at = f"{tokens >> 10}K" if tokens >= 1024 and tokens % 1024 == 0 else f"{tokens:,}"
    return f"{file_size(size).replace(' ', '')}@{at}"


def catalog_id(target: str) -> int | None:
    """A command's target as a catalog artifact id: ASCII digits (`١٢` is a repo name)."""
    return int(target) if target.isascii() and target.isdigit() else None


def int_in(lo: int, hi: int) -> Callable[[str], int]:
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
