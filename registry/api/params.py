"""A request's query checked against its route's parameter declarations
(`registry.responses.params`): unknown names, repeats, bad values and out-of-range numbers
are a 400 naming the parameter. The OpenAPI document lists the same declarations, and the
command line reads its options with the same parsers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from aiohttp import web

from registry.api.errors import InvalidParameter, UnknownParameter
from registry.responses.params import BadValue, Param, integer
from registry.responses.vocab import BIGINT_MAX


def parse_query(request: web.Request, params: Sequence[Param], *, blank_is_absent: bool = False) -> dict[str, Any]:
    """Validated values by parameter name; absent parameters get their default. With
    `blank_is_absent` (the web catalog's forms, which send every field, filled or not), an
    empty value counts as absent."""
    by_name = {p.name: p for p in params}
    query = request.query
    for name in query:
        if name not in by_name:
            raise UnknownParameter(name, f"unknown query parameter {name!r}", allowed=sorted(by_name))
    out: dict[str, Any] = {}
    for param in params:
        raws = query.getall(param.name, [])
        if blank_is_absent:
            raws = [raw for raw in raws if raw.strip()]
        if not raws:
            out[param.name] = param.default
            continue
        if len(raws) > 1:
            raise InvalidParameter(param.name, f"{param.name} may be given only once")
        try:
            out[param.name] = param.read(raws[0])
        except BadValue as exc:
            raise InvalidParameter(exc.name, exc.message, **exc.details) from None
    return out


def path_int(request: web.Request, name: str) -> int:
    """A numeric id from the path; ids are positive and fit in a database bigint."""
    try:
        value: int = integer(1, BIGINT_MAX)(name, request.match_info[name])
    except BadValue as exc:
        raise InvalidParameter(exc.name, exc.message, **exc.details) from None
    return value
