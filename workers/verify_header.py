"""A verification's word on how the crawl read an artifact's header.

A verification has the whole file, so it parses the header from it in full and compares the
facts with the ones the catalog stored: equal confirms the crawl's read (a sibling read in
particular, whose shared bytes were sampled rather than read); different is a failed check
that names the facts that differ.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from registry.catalog.models import Artifact
from registry.catalog.models import Facts as FactsRow
from registry.catalog.services import facts_row
from registry.gguf.errors import GGUFError
from registry.gguf.facts import derive_facts
from registry.gguf.facts_model import Facts
from registry.hub.local import read_header

log = logging.getLogger(__name__)
_SHOWN = 5  # differing facts named in the message


def header_facts(paths: Sequence[Path]) -> Facts | None:
    """The facts of the files' headers read in full; None when they do not parse (the checks
    report why)."""
    try:
        headers = [read_header(p).header for p in paths]
        return derive_facts(headers, file_sizes=[p.stat().st_size for p in paths])
    except (GGUFError, OSError) as exc:
        log.info("header facts not derived from %s: %s", paths[0] if paths else "-", exc)
        return None


def _normal(value: Any) -> Any:
    # Stored JSON comes back with lists for tuples and string keys: compare in that form.
    return json.loads(json.dumps(value, sort_keys=True, default=str))


async def confirm_header(session: AsyncSession, artifact: Artifact, facts: Facts) -> str | None:
    """Set `artifact.header_confirmed` from the full header's facts; the mismatch's message,
    or None when they equal the stored ones (or the artifact has none to compare)."""
    stored = await session.get(FactsRow, artifact.id)
    if artifact.header_read is None or stored is None:
        return None
    fresh = facts_row(artifact.id, facts)
    differ = [k for k, v in fresh.items() if _normal(v) != _normal(getattr(stored, k))]
    artifact.header_confirmed = not differ
    if not differ:
        return None
    shown = ", ".join(differ[:_SHOWN]) + (f" and {len(differ) - _SHOWN} more" if len(differ) > _SHOWN else "")
    how = f"from the bytes of {artifact.header_leader}" if artifact.header_read == "sibling" else "in full"
    return f"the file's header gives other facts than the catalog's, read {how}: {shown}"
