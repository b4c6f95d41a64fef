"""The one spelling search stores and matches for architectures, licenses, file types and
size labels, whatever their ASCII case.

Files write one value several ways (`apache-2.0`, `Apache-2.0`; `7B`, `7b`) and users type
them as they please; like the hub's, these filters ignore case. The artifacts row keeps
its search copy of the four values folded, and a query's value is folded the same way
before it is compared, so each filter stays `column = value` on the plain column: its own
index, the covering facet indexes and the plans that choose between them serve it as they
serve an exact match, and the facets count case variants of one value together. The
`facts` table keeps each file's own spelling.

Folding is done here, in Python, and changes A-Z and a-z only, so both databases store and
compare the same bytes: their own lower() differ (PostgreSQL's follows the database's
locale and folds every script, SQLite's only ASCII). Each column folds to the spelling its
values conventionally have: architectures (`llama`) and licenses (`apache-2.0`) lower
case, file types (`Q4_K_M`) upper case, size labels (`7B`, `135M`, `30B-A3B`) upper case
but for the `x` between an expert count and a size (`8x7B`). Two values fold alike
exactly when they are equal ignoring ASCII case.
"""

from __future__ import annotations

import re
import string
from collections.abc import Callable, Mapping
from typing import Any

_TO_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)
_TO_UPPER = str.maketrans(string.ascii_lowercase, string.ascii_uppercase)
# The `x` of "8x7B": between the expert count and the size, digits on both sides.
_EXPERTS_TIMES = re.compile(r"(?<=[0-9])X(?=[0-9])")


def ascii_lower(value: str) -> str:
    return value.translate(_TO_LOWER)


def ascii_upper(value: str) -> str:
    return value.translate(_TO_UPPER)


def fold_size_label(value: str) -> str:
    """`8x7b` -> `8x7B`, `135m` -> `135M`, `30b-a3b` -> `30B-A3B`."""
    return _EXPERTS_TIMES.sub("x", ascii_upper(value))


# Artifact column -> its folding.
FOLDS: Mapping[str, Callable[[str], str]] = {
    "architecture": ascii_lower,
    "license": ascii_lower,
    "file_type": ascii_upper,
    "size_label": fold_size_label,
}


def fold(column: str, value: str | None) -> str | None:
    """The value as the artifacts row stores it and search matches it (None stays None)."""
    return None if value is None else FOLDS[column](value)


def folded(values: Mapping[str, Any]) -> dict[str, Any]:
    """The values with those of the folded columns folded; other keys as they are."""
    return {k: fold(k, v) if k in FOLDS and isinstance(v, str) else v for k, v in values.items()}


__all__ = ["FOLDS", "ascii_lower", "ascii_upper", "fold", "fold_size_label", "folded"]
