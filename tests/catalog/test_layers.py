"""The model tree in bounded layers (`catalog.layers`): widths, counts, paging of a layer's
rest, cycles, parents outside the catalog; on both databases, through SQLAlchemy's session
and the read path alike."""

from __future__ import annotations

import dataclasses

from registry.catalog import layers
from registry.catalog.db import Database
from registry.catalog.readpath import ReadSession
from registry.catalog.services import upsert_repo_snapshot
from registry.catalog.snapshot import LineageRecord
from tests.catalog.factories import make_snapshot
from tests.catalog.test_lineage import link


async def family(db: Database) -> None:
    """Base/Model (never indexed) <- org/ft (finetune) <- 30 quantized repos, the first three
    with adapters beneath; org/ft also a merge of two repos with org/other."""
    await link(db, "org/other")
    edges = (LineageRecord("Base/Model", "finetune", "gguf"), LineageRecord("Base/Model", "merge", "card"),
             LineageRecord("org/other", "merge", "card"))  # fmt: skip
    async with db.sessions() as session, session.begin():
        await upsert_repo_snapshot(session, make_snapshot("org/ft", "rev1", lineage=edges))
    for i in range(30):
        await link(db, f"q/ft-{i:02d}-GGUF", "ORG/FT", relation="quantized", source="tags")
    for i in range(3):
        await link(db, f"a/adapter-{i}", f"q/ft-{i:02d}-GGUF", relation="adapter", source="tags")
    await link(db, "x/loop", "a/adapter-0", "org/ft")  # a cycle back into the family


async def test_layers_are_bounded_counted_and_paged(db: Database) -> None:
    await family(db)
    lean = ReadSession(db.reads)
    before = dataclasses.replace(db.reads.counts)
    try:
        down = await layers.walk(lean, "org/ft", True, depth=3, width=8)
        up = await layers.walk(lean, "org/ft", False, depth=3, width=8)
        page1, after1 = await layers.rest(lean, "org/ft", True, 1, 8, down[0].repos[-1].key, limit=10)
        page2, after2 = await layers.rest(lean, "org/ft", True, 1, 8, after1 or "", limit=10)
        page3, after3 = await layers.rest(lean, "org/ft", True, 1, 8, after2 or "", limit=10)
    finally:
        await lean.close()
    assert db.reads.counts.session == before.session  # every statement on the read path

    first = down[0]
    assert [r.repo_id for r in first.repos] == [f"q/ft-{i:02d}-GGUF" for i in range(8)]
    # 30 quantized repos and x/loop, 8 drawn
    assert first.more == 31 - 8
    assert {(e.child, e.parent, e.relation, e.source) for e in first.edges} == {
        (f"q/ft-{i:02d}-gguf", "org/ft", "quantized", "tags") for i in range(8)
    }
    # layer 2 follows the drawn repos only
    assert [r.repo_id for r in down[1].repos] == ["a/adapter-0", "a/adapter-1", "a/adapter-2"]
    assert down[1].more == 0
    # x/loop is a child of org/ft beyond the 8 drawn, so layer 3 draws it under its other parent
    assert [(r.repo_id, [e.parent for e in down[2].edges]) for r in down[2].repos] == [
        ("x/loop", ["a/adapter-0"])
    ]

    rest = [r.repo_id for r in page1 + page2 + page3]
    assert rest == [f"q/ft-{i:02d}-GGUF" for i in range(8, 30)] + ["x/loop"]
    assert after3 is None and after1 == "q/ft-17-gguf"

    assert [(r.repo_id, r.in_catalog) for r in up[0].repos] == [("Base/Model", False), ("org/other", True)]
    assert sorted((e.parent, e.relation, e.source) for e in up[0].edges) == [
        ("base/model", "finetune", "gguf"), ("base/model", "merge", "card"), ("org/other", "merge", "card")]  # fmt: skip
    assert len(up) == 1


async def test_both_sessions_agree(db: Database) -> None:
    await family(db)
    async with db.sessions() as session:
        expected = await layers.walk(session, "ORG/ft", True, depth=3, width=5)
    lean = ReadSession(db.reads)
    try:
        got = await layers.walk(lean, "ORG/ft", True, depth=3, width=5)
    finally:
        await lean.close()
    assert got == expected and expected[0].more == 26


async def test_a_repo_without_edges_has_no_layers(db: Database) -> None:
    await link(db, "lone/repo")
    async with db.sessions() as session:
        assert await layers.walk(session, "lone/repo", True, depth=3, width=8) == []
        assert await layers.rest(session, "lone/repo", True, 2, 8, "") == ([], None)
