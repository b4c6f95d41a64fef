"""Lineage walks: depth-limited, cycle-safe, edges to repos outside the catalog kept."""

from __future__ import annotations

from typing import Any

from sqlalchemy import event

from registry.catalog import lineage
from registry.catalog.db import Database
from registry.catalog.services import upsert_repo_snapshot
from registry.catalog.snapshot import LineageRecord
from tests.catalog.factories import make_snapshot


async def link(
    db: Database, child: str, *parents: str, relation: str = "finetune", source: str = "card", revision: str = "rev1"
) -> None:
    snap = make_snapshot(child, revision, lineage=tuple(LineageRecord(p, relation, source) for p in parents))
    async with db.sessions() as session, session.begin():
        await upsert_repo_snapshot(session, snap)


async def test_chain_both_directions(db: Database) -> None:
    await link(db, "b/b", "a/a")
    await link(db, "c/c", "b/b", relation="quantized", source="tags")
    await link(db, "d/d", "c/c")
    async with db.sessions() as session:
        down = (await lineage.descendants(session, "a/a")).edges
        up = (await lineage.ancestors(session, "d/d")).edges
        shallow = (await lineage.descendants(session, "a/a", max_depth=2)).edges
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
        down = (await lineage.descendants(session, "x/x")).edges
        up = (await lineage.ancestors(session, "x/x")).edges
    assert {(e.child, e.parent) for e in down} == {("y/y", "x/x"), ("x/x", "y/y")}
    assert {(e.child, e.parent) for e in up} == {("x/x", "y/y"), ("y/y", "x/x")}


async def test_diamond_reports_each_edge_once(db: Database) -> None:
    await link(db, "l/left", "t/top")
    await link(db, "r/right", "t/top")
    await link(db, "m/merge", "l/left", "r/right", relation="merge")
    async with db.sessions() as session:
        down = (await lineage.descendants(session, "t/top")).edges
    assert len(down) == 4
    assert {e.depth for e in down if e.child == "m/merge"} == {2}


async def test_a_repo_is_one_node_whatever_the_case_of_its_id(db: Database) -> None:
    """The hub resolves repo ids regardless of case and lineage sources spell them as they
    please: every spelling is one node, shown as the catalog spells it."""
    await link(db, "meta-llama/Llama-3-8B")
    await link(db, "q/quant-GGUF", "Meta-Llama/Llama-3-8B", source="gguf")  # from organization + name
    await link(db, "f/finetune", "meta-llama/llama-3-8b")
    await link(db, "q2/quant-GGUF", "F/FineTune", relation="quantized")
    async with db.sessions() as session:
        down = (await lineage.descendants(session, "META-LLAMA/llama-3-8b")).edges
        up = (await lineage.ancestors(session, "Q2/QUANT-gguf")).edges
        parents, children = await lineage.neighbours(session, "meta-llama/LLAMA-3-8B")
        f_parents, f_children = await lineage.neighbours(session, "f/FINETUNE")
    assert [(e.child, e.parent, e.depth, e.parent_in_catalog) for e in down] == [
        ("f/finetune", "meta-llama/Llama-3-8B", 1, True),
        ("q/quant-GGUF", "meta-llama/Llama-3-8B", 1, True),
        ("q2/quant-GGUF", "f/finetune", 2, True),
    ]
    assert [(e.child, e.parent, e.depth) for e in up] == [
        ("q2/quant-GGUF", "f/finetune", 1),
        ("f/finetune", "meta-llama/Llama-3-8B", 2),
    ]
    assert parents == [] and [e.child for e in children] == ["f/finetune", "q/quant-GGUF"]
    assert [e.parent for e in f_parents] == ["meta-llama/Llama-3-8B"]
    assert [e.child for e in f_children] == ["q2/quant-GGUF"]


async def test_a_parent_outside_the_catalog_is_one_node_in_any_case(db: Database) -> None:
    await link(db, "u/one", "Nobody/Base")
    await link(db, "u/two", "nobody/base")
    async with db.sessions() as session:
        down = (await lineage.descendants(session, "NOBODY/BASE")).edges
    # Not in the catalog: each edge shows the parent as its source wrote it.
    assert [(e.child, e.parent, e.parent_in_catalog) for e in down] == [
        ("u/one", "Nobody/Base", False),
        ("u/two", "nobody/base", False),
    ]
    await link(db, "nobody/Base")  # indexed later: from now on spelled as the catalog has it
    async with db.sessions() as session:
        down = (await lineage.descendants(session, "nobody/base")).edges
    assert {(e.parent, e.parent_in_catalog) for e in down} == {("nobody/Base", True)}


async def test_a_key_with_two_catalog_rows_is_spelled_as_the_first_indexed(db: Database) -> None:
    """A hub repo and a local folder indexed under one id in another case are two rows of
    one node: walks at any depth, and a repo page, spell the parent as the row indexed
    first does."""
    await link(db, "org/Base")
    snap = make_snapshot("ORG/base", "rev1", source="local", lineage=())
    async with db.sessions() as session, session.begin():
        await upsert_repo_snapshot(session, snap)
    await link(db, "q/quant", "org/BASE")
    await link(db, "m/mid", "t/top")
    await link(db, "org/base-ft", "m/mid")  # not the same key: its own row
    await link(db, "z/deep", "ORG/BASE", "org/base-ft")
    async with db.sessions() as session:
        down = (await lineage.descendants(session, "t/top")).edges
        base_down = (await lineage.descendants(session, "org/base")).edges
        up = (await lineage.ancestors(session, "z/deep")).edges
        _, children = await lineage.neighbours(session, "ORG/BASE")
    assert [(e.child, e.parent, e.depth) for e in down] == [
        ("m/mid", "t/top", 1), ("org/base-ft", "m/mid", 2), ("z/deep", "org/base-ft", 3),
    ]  # fmt: skip
    assert [(e.child, e.parent, e.parent_in_catalog) for e in base_down] == [
        ("q/quant", "org/Base", True), ("z/deep", "org/Base", True),
    ]  # fmt: skip
    assert [(e.child, e.parent, e.depth) for e in up] == [
        ("z/deep", "org/Base", 1), ("z/deep", "org/base-ft", 1), ("org/base-ft", "m/mid", 2), ("m/mid", "t/top", 3),
    ]  # fmt: skip
    assert [(e.child, e.parent) for e in children] == [("q/quant", "org/Base"), ("z/deep", "org/Base")]


async def test_two_spellings_of_a_parent_from_one_source_are_one_edge(db: Database) -> None:
    await link(db, "c/c", "A/B", "a/b")
    await link(db, "d/d", "A/B")
    await link(db, "d/d", "a/b", revision="rev2")  # the edge stays, spelled as its source now does
    async with db.sessions() as session:
        c = (await lineage.ancestors(session, "c/c")).edges
        d = (await lineage.ancestors(session, "d/d")).edges
    assert [(e.parent, e.source) for e in c] == [("A/B", "card")]  # the first spelling
    assert [(e.parent, e.source) for e in d] == [("a/b", "card")]


def test_a_repo_naming_itself_in_another_case_has_no_edge() -> None:
    snap = make_snapshot("org/Model-GGUF", card_base_model=("Org/model-gguf", "base/model"), tags=())
    assert [e.parent_repo_id for e in lineage.derive_edges(snap)] == ["base/model"]


def test_edges_from_tags() -> None:
    edges = lineage.edges_from_tags(
        ["base_model:a/b", "base_model:adapter:c/d", "base_model:weird:e/f", "x", "base_model:bad"]
    )
    assert [(e.parent_repo_id, e.relation) for e in edges] == [
        ("a/b", "unknown"),
        ("c/d", "adapter"),
        ("e/f", "unknown"),
    ]


async def _dense(db: Database, n: int) -> list[str]:
    """n repos that each name every other one as a base model: n * (n - 1) edges."""
    ids = [f"o/r{i:02d}" for i in range(n)]
    for repo in ids:
        await link(db, repo, *(p for p in ids if p != repo))
    return ids


async def test_a_dense_family_is_walked_to_a_bounded_number_of_edges(db: Database) -> None:
    ids = await _dense(db, 40)  # 1,560 edges, every one within depth 2 of every repo
    statements: list[tuple[str, Any]] = []

    def record(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, many: bool) -> None:
        statements.append((statement, parameters))

    event.listen(db.engine.sync_engine, "before_cursor_execute", record)
    try:
        async with db.sessions() as session:
            down = await lineage.descendants(session, ids[0], lineage.MAX_DEPTH, max_edges=50)
            up = await lineage.ancestors(session, ids[0], lineage.MAX_DEPTH, max_edges=50)
            whole = await lineage.descendants(session, ids[0], 1, max_edges=39)
    finally:
        event.remove(db.engine.sync_engine, "before_cursor_execute", record)
    # Shallowest first, then by name: the same edges on every database.
    assert down.truncated and len(down.edges) == 50
    assert [(e.child, e.parent, e.depth) for e in down.edges] == [
        *((ids[i], ids[0], 1) for i in range(1, 40)),
        *((ids[0], ids[j], 2) for j in range(1, 12)),
    ]
    assert up.truncated and [(e.child, e.parent, e.depth) for e in up.edges] == [
        *((ids[0], ids[i], 1) for i in range(1, 40)),
        *((ids[1], ids[0], 2), *((ids[1], ids[j], 2) for j in range(2, 12))),
    ]
    # Exactly max_edges within the depth is not a cut.
    assert not whole.truncated and len(whole.edges) == 39
    # The database stopped at the cap: a depth-1 and a depth-2 query for each walk, none
    # going on to depth 10, each asking for one edge more than there was room for.
    walks = [s for s in statements if "lineage_edges" in s[0]]
    assert len(walks) == 5
    assert all("LIMIT" in s.upper() for s, _ in walks)


async def test_each_repo_of_a_cycle_is_expanded_once(db: Database) -> None:
    await link(db, "x/x", "y/y")
    await link(db, "y/y", "x/x")
    async with db.sessions() as session:
        walk = await lineage.descendants(session, "x/x")
    assert not walk.truncated
    assert [(e.child, e.parent, e.depth) for e in walk.edges] == [("y/y", "x/x", 1), ("x/x", "y/y", 2)]
