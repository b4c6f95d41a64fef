"""The llama.cpp finding the catalog derives across artifacts: L022, a chat template that
renders the standard conversation differently from the base model's.

Each artifact stores its render's digest (`chat_template_render_sha256`); the base model is
the repos its repo names as parents in the lineage graph. Compared when read, so that the
finding holds whichever of the two was indexed first.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import bindparam, select

from registry.catalog.models import Artifact, LineageEdge, Repo
from registry.catalog.readpath import CatalogSession
from registry.gguf.compat import CompatFinding, base_model_finding

MAX_BASE_RENDERS = 50
_A, _R, _E = Artifact.__table__, Repo.__table__, LineageEdge.__table__
_BASE_RENDERS = (
    select(_A.c.chat_template_render_sha256)
    .join(_R, _R.c.id == _A.c.repo_pk)
    .where(_R.c.repo_key.in_(select(_E.c.parent_key).where(_E.c.child_pk == bindparam("repo_pk"))),
           _A.c.status == "indexed", _A.c.chat_template_render_sha256.is_not(None))
    .distinct()
    .limit(MAX_BASE_RENDERS)
)  # fmt: skip


async def base_model_findings(session: CatalogSession, row: Any) -> list[CompatFinding]:
    """[L022] when the artifact (a row with `repo_pk` and `chat_template_render_sha256`)
    renders unlike every file of its base models that rendered; [] otherwise."""
    if row.chat_template_render_sha256 is None:
        return []
    conn = await session.connection()
    renders = [r[0] for r in await conn.execute(_BASE_RENDERS, {"repo_pk": row.repo_pk})]
    differs = base_model_finding(row.chat_template_render_sha256, renders)
    return [] if differs is None else [differs]
