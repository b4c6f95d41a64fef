"""The catalog's memory at a context is the llama.cpp estimate (registry/gguf/memory.py):
the SQL that filters and sorts (`memory_needed`, the computed `memory_at_default`), each
hit's exact `memory` and the estimate itself agree, for every family of the memory
benchmark, on SQLite and PostgreSQL."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from registry.catalog.db import Database
from registry.catalog.models import Artifact
from registry.catalog.search import MEMORY_CONTEXT
from registry.catalog.search.memory import BASIS, hit_memory, memory_needed
from registry.catalog.services import upsert_repo_snapshot
from registry.gguf.facts import derive_facts
from registry.gguf.memory import MemorySettings, estimate
from registry.hub.local import read_header
from tests.catalog.factories import artifact, make_snapshot
from tests.memory import families
from tests.memory.conftest import FamilyFiles

CONTEXTS = (512, 4096, 5000, 32768, 131072, 1 << 30)


@pytest.fixture(scope="module")
def family_files(tmp_path_factory: pytest.TempPathFactory) -> FamilyFiles:
    return FamilyFiles(tmp_path_factory.mktemp("families"))


async def test_the_catalog_sizes_every_family_as_the_estimate(db: Database, family_files: FamilyFiles) -> None:
    records, profiles = [], {}
    for family in families.catalog():
        path = family_files.path(family.name)
        read = read_header(path)
        facts = derive_facts([read.header], file_sizes=[path.stat().st_size])
        assert facts.memory_profile is not None, family.name
        profiles[f"{family.name}.gguf"] = facts.memory_profile
        records.append(artifact(f"{family.name}.gguf", facts, size=path.stat().st_size))
    async with db.sessions() as session, session.begin():
        await upsert_repo_snapshot(session, make_snapshot(artifacts=tuple(records)))
    async with db.sessions() as session:
        for tokens in CONTEXTS:
            rows = (await session.execute(select(Artifact, memory_needed(tokens).label("needed")))).all()
            assert len(rows) == len(profiles)
            for row in rows:
                a = row[0]
                profile = profiles[a.path]
                own = profile.context_length
                at = min(tokens, own) if own else tokens
                expected = estimate(profile, MemorySettings(context=at)).total
                assert row.needed == expected, (a.path, tokens)  # the SQL, in doubles, exact here
                assert hit_memory(a, tokens) == {"tokens": at, "bytes": expected, "basis": BASIS}, (a.path, tokens)
                if tokens == MEMORY_CONTEXT:
                    assert a.memory_at_default == expected, a.path


async def test_hostile_coefficients_size_without_failing_the_query(db: Database) -> None:
    """Coefficients at the edge of a signed 64-bit integer (the profile caps real ones far
    below) are summed in doubles: the filter's query answers instead of overflowing."""
    from sqlalchemy import update

    from registry.catalog.memory_sql import LINE_COLUMNS
    from tests.catalog.factories import make_facts

    async with db.sessions() as session, session.begin():
        await upsert_repo_snapshot(session, make_snapshot(artifacts=(artifact("edge.gguf", make_facts()),)))
        await session.execute(update(Artifact).values(
            {**dict.fromkeys(LINE_COLUMNS, 2**63 - 1), "memory_swa_cells": 0, "context_length": -5}
        ))  # fmt: skip
    async with db.sessions() as session:
        for tokens in (1, MEMORY_CONTEXT, 1 << 40):
            needed, at_default = (await session.execute(
                select(memory_needed(tokens), Artifact.memory_at_default)
            )).one()  # fmt: skip
            assert needed > 2.0**63, tokens
            assert at_default > 2.0**63
