"""Query-parameter validation from one declaration per parameter.

Each route lists its `Param`s; `parse_query` checks a request against them (unknown
names, repeats, bad values, out-of-range numbers -> 400 naming the parameter) and the
OpenAPI document is generated from the same declarations, so the docs cannot drift from
what the server accepts.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from registry.api.errors import InvalidParameter, UnknownParameter
from registry.catalog import amounts

Parser = Callable[[str, str], Any]  # (name, raw) -> value, raising InvalidParameter

MAX_TEXT = 200  # longest free-text or name value; longer ones are mistakes or abuse
# Values are compared with database columns: anything wider than the column type would be
# a database error (PostgreSQL refuses out-of-range binds), so the API refuses it first.
BIGINT_MAX = 2**63 - 1
INT_MAX = 2**31 - 1
# JSON Schema pattern: at least one character that is not a space or NUL. Python's
# str.strip(), which the server checks with, also strips \x1c-\x1f and \x85, which the
# schema's (ECMA) `\s` does not cover: without them a client could send a "valid" value the
# server refuses. NUL counts as blank since the catalog drops it from what it compares.
NOT_BLANK = r"[^\s\x00\x1c-\x1f\x85]"


@dataclass(frozen=True)
class Param:
    name: str
    parse: Parser
    schema: Mapping[str, Any]
    description: str
    default: Any = None  # the parsed value when the parameter is absent
    default_doc: Any = None  # how the default reads in the docs, when it differs from `default`

    def openapi(self, location: str = "query") -> dict[str, Any]:
        schema: dict[str, Any] = dict(self.schema)
        shown = self.default if self.default_doc is None else self.default_doc
        if shown is not None:
            schema["default"] = shown
        return {
            "name": self.name,
            "in": location,
            "required": location == "path",
            "description": self.description,
            "schema": schema,
        }


def text(max_length: int = MAX_TEXT) -> Parser:
    def parse(name: str, raw: str) -> str:
        if len(raw) > max_length:
            raise InvalidParameter(name, f"{name} is longer than {max_length} characters")
        value = raw.strip()
        if not value.replace("\x00", "").strip():  # the catalog drops NUL: "\x00" would filter nothing
            raise InvalidParameter(name, f"{name} must not be empty")
        return value

    return parse


def integer(minimum: int | None = None, maximum: int | None = None) -> Parser:
    def parse(name: str, raw: str) -> int:
        try:
            # int() alone would accept "1_000", " 12 " and other scripts' digits ("\uff11");
            # the API promises plain ASCII digits.
            if not raw.isascii() or not raw.lstrip("-").isdigit() or len(raw) > 20:
                raise ValueError
            value = int(raw)
        except ValueError:
            raise InvalidParameter(name, f"{name} must be an integer, got {raw!r}") from None
        if minimum is not None and value < minimum:
            raise InvalidParameter(name, f"{name} must be at least {minimum}", minimum=minimum)
        if maximum is not None and value > maximum:
            raise InvalidParameter(name, f"{name} must be at most {maximum}", maximum=maximum)
        return value

    return parse


def amount(read: Callable[[str], int]) -> Parser:
    """A parameter count or byte size (`catalog.amounts`): digits, `7e9`, `7B`, `6GiB`."""

    def parse(name: str, raw: str) -> int:
        try:
            return read(raw)
        except amounts.BadAmount as exc:
            raise InvalidParameter(name, f"{name}: {exc}") from None

    return parse


def choice(values: Sequence[str]) -> Parser:
    allowed = tuple(values)

    def parse(name: str, raw: str) -> str:
        if raw not in allowed:
            raise InvalidParameter(name, f"{name} must be one of {', '.join(allowed)}", allowed=list(allowed))
        return raw

    return parse


_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}
BOOLEAN_WORDS = sorted(_TRUE | _FALSE)  # what `boolean` reads (in any case)


def boolean(name: str, raw: str) -> bool:
    lowered = raw.lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise InvalidParameter(name, f"{name} must be a boolean (1/0, true/false)")


def text_param(name: str, description: str, *, max_length: int = MAX_TEXT) -> Param:
    schema = {"type": "string", "minLength": 1, "maxLength": max_length, "pattern": NOT_BLANK}
    return Param(name, text(max_length), schema, description)


def int_param(
    name: str, description: str, *, minimum: int = 0, maximum: int = BIGINT_MAX, default: int | None = None
) -> Param:
    schema = {"type": "integer", "minimum": minimum, "maximum": maximum}
    return Param(name, integer(minimum, maximum), schema, description, default=default)


def count_param(name: str, description: str) -> Param:
    """A parameter-count filter: `7000000000`, `7e9`, `7B`, `1.5B`, `500M`."""
    schema = {"type": "string", "pattern": amounts.PARAMS_PATTERN, "maxLength": amounts.MAX_LENGTH,
              "examples": ["7000000000", "7B", "1.5B", "500M", "7e9"]}  # fmt: skip
    return Param(name, amount(amounts.parameter_count), schema, description + _AMOUNT_NOTE)


def size_param(name: str, description: str) -> Param:
    """A byte-size filter: `8000000000`, `8GB`, `8G`, `6GiB`, `500MB`, `7.5e9`."""
    schema = {"type": "string", "pattern": amounts.SIZE_PATTERN, "maxLength": amounts.MAX_LENGTH,
              "examples": ["8000000000", "8GB", "6GiB", "500MB", "7.5e9"]}  # fmt: skip
    return Param(name, amount(amounts.byte_size), schema, description + _AMOUNT_NOTE)


_AMOUNT_NOTE = (
    " An integer, or a decimal number with an optional exponent, optionally followed by a unit"
    " (any case); amounts above 2**63 - 1 count as that."
)


def choice_param(name: str, description: str, values: Sequence[str], *, default: str | None = None) -> Param:
    schema = {"type": "string", "enum": list(values)}
    return Param(name, choice(values), schema, description, default=default)


def bool_param(name: str, description: str, *, default: bool = False) -> Param:
    schema = {"type": "string", "enum": BOOLEAN_WORDS}
    return Param(name, boolean, schema, description, default=default, default_doc="1" if default else "0")


def parse_query(request: web.Request, params: Sequence[Param]) -> dict[str, Any]:
    """Validated values by parameter name; absent parameters get their default."""
    by_name = {p.name: p for p in params}
    query = request.query
    for name in query:
        if name not in by_name:
            raise UnknownParameter(
                name, f"unknown query parameter {name!r}", allowed=sorted(by_name)
            )
    out: dict[str, Any] = {}
    for param in params:
        raws = query.getall(param.name, [])
        if not raws:
            out[param.name] = param.default
            continue
        if len(raws) > 1:
            raise InvalidParameter(param.name, f"{param.name} may be given only once")
        out[param.name] = param.parse(param.name, raws[0])
    return out


def path_int(request: web.Request, name: str) -> int:
    """A numeric id from the path; ids are positive and fit in a database bigint."""
    return integer(1, BIGINT_MAX)(name, request.match_info[name])
