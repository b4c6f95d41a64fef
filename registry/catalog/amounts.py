"""Parameter counts and byte sizes as people write them, for the search filters.

`registry search --min-params 7B --max-size 6GiB` and `GET /v1/artifacts?min_params=7B&
max_size=6GiB` read their amounts here, so the command and the API take the same
spellings:

- a count: a plain integer (`7000000000`), a decimal number with an exponent (`7e9`,
  `1.5E9`), or either followed by K, M, B or T (thousand, million, billion, trillion; any
  case): `7B`, `1.5b`, `500M`;
- a size in bytes: the same numbers, followed by nothing or `B` (bytes), K/M/G/T or
  KB/MB/GB/TB (powers of 1000), or KiB/MiB/GiB/TiB (powers of 1024); any case: `8GB`,
  `8g`, `6GiB`, `512kib`.

Numbers are ASCII digits, read exactly (`Decimal`, no float rounding of long integers);
the amount is rounded to the nearest integer (halves to even). An amount beyond the
largest database integer (2**63 - 1) counts as that: a filter of at least 1e30
parameters truthfully matches nothing, one of at most 1e30 everything.
`PARAMS_PATTERN` and `SIZE_PATTERN` say the same in JSON Schema (ECMA) syntax, for the
API's document.
"""

from __future__ import annotations

import re
from decimal import Decimal

LARGEST = 2**63 - 1  # a database bigint

_NUMBER = r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]{1,3})?"
PARAMS_PATTERN = rf"^{_NUMBER}[kKmMbBtT]?$"
SIZE_PATTERN = rf"^{_NUMBER}(?:[kKmMgGtT](?:[iI]?[bB])?|[bB])?$"
MAX_LENGTH = 40  # longer values are mistakes or abuse

_COUNT_UNITS = {"": 1, "K": 10**3, "M": 10**6, "B": 10**9, "T": 10**12}
_POWERS = "KMGT"
_SIZE_UNITS = {
    "": 1,
    "B": 1,
    **{p: 1000**i for i, p in enumerate(_POWERS, 1)},
    **{f"{p}B": 1000**i for i, p in enumerate(_POWERS, 1)},
    **{f"{p}IB": 1024**i for i, p in enumerate(_POWERS, 1)},
}
_PARAMS = re.compile(rf"({_NUMBER})([kKmMbBtT]?)")
_SIZE = re.compile(rf"({_NUMBER})((?:[kKmMgGtT](?:[iI]?[bB])?|[bB])?)")


class BadAmount(ValueError):
    """The text is not an amount of the kind asked for; the message says what is."""


def _amount(number: str, unit: int) -> int:
    value = (Decimal(number) * unit).to_integral_value()
    return min(int(value), LARGEST)


def parameter_count(text: str) -> int:
    """A parameter count: `7000000000`, `7e9`, `7B`, `1.5b`, `500M`."""
    match = _PARAMS.fullmatch(text) if len(text) <= MAX_LENGTH else None
    if match is None:
        raise BadAmount(f"not a parameter count: {text!r} (e.g. 7B, 1.5B, 500M, 7e9)")
    return _amount(match[1], _COUNT_UNITS[match[2].upper()])


def byte_size(text: str) -> int:
    """A size in bytes: `8000000000`, `7.5e9`, `8GB` or `8G` (10**9), `6GiB` (2**30)."""
    match = _SIZE.fullmatch(text) if len(text) <= MAX_LENGTH else None
    if match is None:
        raise BadAmount(f"not a size: {text!r} (e.g. 8GB, 6GiB, 500MB, 7.5e9)")
    return _amount(match[1], _SIZE_UNITS[match[2].upper()])
