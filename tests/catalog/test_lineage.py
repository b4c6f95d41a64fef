"""Lineage walks: depth-limited, cycle-safe, edges to repos outside the catalog kept."""

from __future__ import annotations

from registry.catalog import lineage
from registry.catalog.db import Database
from registry.catalog.services import upsert_repo_snapshot
from registry.catalog.snapshot import LineageRecord
from tests.catalog.factories import make_snapshot


async def link(
    db: Database, child: str, *parents: str, relation: str = "finetune", source: str = "card"
) -> None:
    snap = make_snapshot(child, lineage=tuple(LineageRecord(p, relation, source) for p in parents))
    async with db.sessions() as session, session.begin():
        await upsert_repo_snapshot(session, snap)


async def test_chain_both_directions(db: Database) -> None:
    await link(db, "b/b", "a/a")
    await link(db, "c/c", "b/b", relation="quantized", source="tags")
    await link(db, "d/d", "c/c")
    async with db.sessions() as session:
        down = await lineage.descendants(session, "a/a")
        up = await lineage.ancestors(session, "d/d")
        shallow = await lineage.descendants(session, "a/a", max_depth=2)
    assert [(e.child, e.parent, e.depth) for e in down] == [
        ("b/b", "a/a", 1),
        ("c/c", "b/b", 2),
        ("d/d", "c/c", 3),
    ]
    assert [(e.child, e.parent, e.depth) for e in up] == [
        ("d/d", "c/c", 1),
        ("c/c", "b/b", 2),
        ("b/b", "a/a", 3),
    ]
    assert (down[1].relation, down[1].source) == ("quantized", "tags")
    assert [e.child for e in shallow] == ["b/b", "c/c"]
    # a/a was never indexed: its edges are kept and say so.
    assert down[0].parent_in_catalog is False and down[0].child_in_catalog is True


async def test_cycles_terminate(db: Database) -> None:
    await link(db, "x/x", "y/y")
    await link(db, "y/y", "x/x")
    await link(db, "z/z", "z/z")  # self edges are dropped when derived, kept when given explicitly
    async with db.sessions() as session:
        down = await lineage.descendants(session, "x/x")
        up = await lineage.ancestors(session, "x/x")
    assert {(e.child, e.parent) for e in down} == {("y/y", "x/x"), ("x/x", "y/y")}
    assert {(e.child, e.parent) for e in up} == {("x/x", "y/y"), ("y/y", "x/x")}


async def test_diamond_reports_each_edge_once(db: Database) -> None:
    await link(db, "l/left", "t/top")
    await link(db, "r/right", "t/top")
    await link(db, "m/merge", "l/left", "r/right", relation="merge")
    async with db.sessions() as session:
        down = await lineage.descendants(session, "t/top")
    assert len(down) == 4
    assert {e.depth for e in down if e.child == "m/merge"} == {2}


def test_edges_from_tags() -> None:
    edges = lineage.edges_from_tags(
        ["base_model:a/b", "base_model:adapter:c/d", "base_model:weird:e/f", "x", "base_model:bad"]
    )
    assert [(e.parent_repo_id, e.relation) for e in edges] == [
        ("a/b", "unknown"),
        ("c/d", "adapter"),
        ("e/f", "unknown"),
    ]
