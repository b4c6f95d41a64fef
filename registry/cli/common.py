"""What the commands share: exit codes, argument types, the catalog call wrapper, output helpers."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from registry.config import Settings

if TYPE_CHECKING:
    from registry.catalog.db import Database
    from registry.gguf.limits import Limits


Handler = Callable[[argparse.Namespace, Settings], int]

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
INT64_MAX = 2**63 - 1  # the largest number a catalog column or query parameter holds


def context_tokens(text: str) -> int:
    """`8192`, `8k` or `8K` (times 1,024, as contexts are counted), `1M`."""
    t = text.strip().lower()
    scale = {"k": 1 << 10, "m": 1 << 20}.get(t[-1:], 1)
    digits = t[:-1] if scale > 1 else t
    if not digits.isdigit() or not 0 < int(digits) * scale <= 1 << 40:
        raise argparse.ArgumentTypeError(f"not a token count: {text!r} (e.g. 8192, 8K, 1M)")
    return int(digits) * scale


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


def memory_text(memory: dict[str, int] | None) -> str:
    """What a hit needs to run and at how many tokens: `192.7 MB@4K`; `-` without an estimate."""
    if memory is None:
        return "-"
    tokens = memory["tokens"]
    at = f"{tokens >> 10}K" if tokens >= 1024 and tokens % 1024 == 0 else f"{tokens:,}"
    return f"{file_size(memory['bytes']).replace(' ', '')}@{at}"


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
