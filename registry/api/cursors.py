"""Opaque keyset cursors for the lists the API pages itself (crawls, jobs, verifications),
and one page of a table's rows, newest (highest id) first.

Artifact search cursors come from the catalog; this is only for id-ordered lists.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from sqlalchemy import ColumnElement, select

from registry.api.errors import InvalidParameter
from registry.catalog.readpath import ReadSession
from registry.responses.vocab import BIGINT_MAX


def encode_id_cursor(last_id: int) -> str:
    raw = json.dumps({"id": last_id}, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_id_cursor(cursor: str, name: str = "cursor") -> int:
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        data = json.loads(base64.urlsafe_b64decode(padded.encode("ascii")))
        value = data["id"]
        # Ids are database bigints: a larger one would fail the query instead of the cursor.
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= BIGINT_MAX:
            raise ValueError
    except (ValueError, KeyError, TypeError, UnicodeEncodeError, binascii.Error):
        raise InvalidParameter(name, f"{name} is not a cursor this server issued") from None
    return value


async def newest_first(
    session: ReadSession, model: Any, where: list[ColumnElement[bool]], *, limit: int, cursor: str | None
) -> tuple[list[Any], str | None]:
    """A page of `model`'s rows matching `where`, highest id first, after `cursor`; and the
    cursor of the next page (None on the last)."""
    query = select(model).where(*where).order_by(model.id.desc()).limit(limit + 1)
    if cursor is not None:
        query = query.where(model.id < decode_id_cursor(cursor))
    rows = list((await session.scalars(query)).all())
    return rows[:limit], encode_id_cursor(rows[limit - 1].id) if len(rows) > limit else None
